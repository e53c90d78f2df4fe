"""The coupled controls' spec rules, registration bookkeeping and crash release, with a
scripted bpftool (no kernel needed); the real kernel: tests/integration/test_coupled_cc.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from testbed.core.commands import Result
from testbed.core.errors import MissingFeatureError, SpecError, UnsupportedError
from testbed.host.coupled import build, loader
from testbed.host.coupled.loader import CoupledControls, release_stale
from testbed.spec.load import load_spec

SPEC = """
name = "c"
duration = "5s"
[topology]
kind = "multipath"
paths = [{{ name = "a", bw = "5Mbit", delay = "10ms" }}]
[transport]
protocol = "{protocol}"
cc = "{cc}"
[[workload]]
kind = "bulk"
src = "client"
dst = "server"
{extra}
"""


def write(tmp: Path, protocol: str, cc: str, extra: str = "") -> Path:
    p = tmp / "s.toml"
    p.write_text(SPEC.format(protocol=protocol, cc=cc, extra=extra))
    return p


def test_coupled_cc_needs_mptcp(tmp_path: Path) -> None:
    assert load_spec(write(tmp_path, "mptcp", "balia")).transport.cc == "balia"
    with pytest.raises(SpecError) as err:
        load_spec(write(tmp_path, "tcp", "lia"))
    assert "transport.cc: 'lia' couples the subflows of an MPTCP connection" in str(err.value)
    with pytest.raises(SpecError, match=r"workload\[0\].cc: 'wvegas'"):
        load_spec(write(tmp_path, "mptcp", "cubic", 'protocol = "tcp"\ncc = "wvegas"'))


class FakeBpftool:
    """A runner standing in for bpftool: registers, shows and unregisters struct_ops."""

    def __init__(self) -> None:
        self.maps: dict[int, str] = {}
        self.next_id = 40
        self.calls: list[list[str]] = []

    def run(self, argv, check=True, record=True, timeout=None, **_kw) -> Result:
        argv = [str(a) for a in argv]
        self.calls.append(argv)
        out, rc = "", 0
        if argv[:3] == ["bpftool", "struct_ops", "register"]:
            name = Path(argv[3]).name.split(".")[0]
            self.maps[self.next_id] = name
            out = f"Registered tcp_congestion_ops {name} id {self.next_id}\n"
            self.next_id += 1
        elif argv[:5] == ["bpftool", "-j", "struct_ops", "show", "id"]:
            name = self.maps.get(int(argv[5]))
            rc, out = (0, json.dumps({"id": int(argv[5]), "name": name})) if name else (255, "")
        elif argv[:4] == ["bpftool", "struct_ops", "unregister", "id"]:
            self.maps.pop(int(argv[4]), None)
        elif argv[:4] == ["bpftool", "-j", "prog", "show"]:
            out = "[]"
        elif argv[0] == "clang":
            out = "clang version 14\n"
        return Result(argv, rc, out, "", 0.0)


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeBpftool:
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "state").mkdir(mode=0o700)
    monkeypatch.setattr(loader, "objects", lambda runner, names: {
        n: tmp_path / f"{n}.bpf.o" for n in names})
    monkeypatch.setattr(loader, "_available", lambda: [])
    return FakeBpftool()


def test_registered_for_the_block_then_unregistered(fake: FakeBpftool) -> None:
    with CoupledControls(fake, ["olia", "lia", "lia"]) as cc:
        assert cc.ids == {"lia": 40, "olia": 41} and fake.maps == {40: "lia", 41: "olia"}
        (record,) = loader.registry_dir().glob("*.json")
        assert json.loads(record.read_text())["controls"] == {"lia": 40, "olia": 41}
    assert fake.maps == {} and not list(loader.registry_dir().glob("*.json"))


def test_nothing_named_nothing_done(fake: FakeBpftool) -> None:
    with CoupledControls(fake, []) as cc:
        assert cc.ids == {}
    assert fake.calls == []


def test_a_dead_runs_registrations_are_released_by_id_and_name(fake: FakeBpftool) -> None:
    fake.maps = {7: "lia", 8: "somebody-else"}
    dead = loader.registry_dir() / "1-1.json"
    dead.write_text(json.dumps({"pid": 999_999_999, "start": 1,
                                "controls": {"lia": 7, "olia": 8}}))
    mine = loader.registry_dir() / "me.json"
    from testbed.core.statedir import process_start_time

    mine.write_text(json.dumps({"pid": os.getpid(), "start": process_start_time(os.getpid()),
                                "controls": {"balia": 9}}))
    assert release_stale(fake) == ["lia (id 7)"]     # id 8 now names something else
    assert fake.maps == {8: "somebody-else"}
    assert not dead.exists() and mine.exists()        # a live owner's record stays


def test_a_control_somebody_else_registered_is_refused(fake: FakeBpftool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loader, "_available", lambda: ["reno", "cubic", "lia"])
    with (pytest.raises(UnsupportedError, match="'lia' is already registered by something"),
          CoupledControls(fake, ["lia"])):
        pass
    assert fake.maps == {}


def test_build_refuses_without_the_toolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "coupled_problems", lambda: ["no kernel BTF"])
    with pytest.raises(MissingFeatureError, match="BPF congestion controls: no kernel BTF"):
        build.objects(FakeBpftool(), ["lia"])


def test_build_key_follows_sources_compiler_and_kernel() -> None:
    k = build.build_key("clang 14", "6.1.0-56-amd64")
    assert k == build.build_key("clang 14", "6.1.0-56-amd64") and len(k) == 16
    assert k != build.build_key("clang 15", "6.1.0-56-amd64")
    assert k != build.build_key("clang 14", "6.12.0-1-amd64")
    names = [p.name for p in build.source_files()]
    assert names == sorted(["balia.bpf.c", "coupled.h", "lia.bpf.c", "olia.bpf.c",
                            "wvegas.bpf.c", "handover.h", "reno_ie.bpf.c", "reno_bwa.bpf.c"])


def test_kernel_records_decide_coupled_controls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dry run checks a coupled control against the recorded kernel: release and BTF
    from the record, the toolchain from this machine (the VM shares it)."""
    import testbed.machine.bpf_support as bs
    from testbed.machine.kernel import KernelFacts
    from testbed.run.preflight import Wanted, problems

    monkeypatch.setattr(bs, "_which", lambda name, root: True)
    monkeypatch.setattr(bs, "HEADER", "bin/sh")    # a file that exists: "the headers"
    want = [Wanted('sweep."transport.cc"', "cc", "lia")]
    ok = KernelFacts(release="6.1.0-56-amd64", congestion_controls=("reno", "cubic"))
    assert problems(want, ok) == []                  # BTF not recorded: not refused
    def facts(release: str, btf: bool) -> KernelFacts:
        return KernelFacts(release=release, congestion_controls=(), btf=btf)

    assert problems(want, facts("6.1.0-56-amd64", True)) == []
    (line,) = problems(want, facts("6.1.0-56-amd64", False))
    assert line.startswith('sweep."transport.cc": BPF congestion control \'lia\' '
                           "cannot run on kernel 6.1.0-56-amd64: no kernel BTF")
    (line,) = problems(want, facts("5.10.0-28-amd64", True))
    assert "older than 5.19" in line
