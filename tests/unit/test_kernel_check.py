"""Kernel facts, their records, and what dry and real runs check against them (fake
kernels: no real one needed)."""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from testbed.cli import run as runcli
from testbed.cli.app import app
from testbed.core.commands import CommandRunner
from testbed.core.errors import InputError, UnsupportedError
from testbed.machine import doctor, vm
from testbed.machine.kernel import (
    KernelFacts,
    has_module,
    load_record,
    read_kernel_facts,
    record_facts,
    records_dir,
)
from testbed.run import preflight
from testbed.run.dryrun import SystemAnswers
from testbed.spec.sweep import expand, override_labels

VM = "6.1.0-56-amd64"
DEP = ("kernel/net/ipv4/tcp_bbr.ko.xz: \nkernel/net/ipv4/tcp_vegas.ko: \n"
       "kernel/net/ipv4/tcp_diag.ko: kernel/net/core/inet_diag.ko\n"
       "kernel/net/sched/sch_netem.ko.zst:\n")
DEBIAN_61 = KernelFacts(VM, ("reno", "cubic"), ("bbr", "vegas"), True, None, None,
                        "2025-01-01T00:00:00+00:00")
NEW = KernelFacts("6.12.0", ("reno", "cubic"), (), True, "default", ("default", "burst"))
SPEC = {
    "name": "k", "duration": "5s",
    "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"},
                                                 {"name": "b", "bw": "10Mbit"}]},
    "transport": {"protocol": "mptcp", "cc": "cubic"},
    "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"},
                 {"kind": "bulk", "src": "client", "dst": "server", "size": "1MB",
                  "cc": "reno"}],
}


def fake_kernel(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def plans(overrides: list[str] | None = None, **changes: object) -> list:
    data = copy.deepcopy(SPEC)
    data.update(changes)
    from testbed.spec.sweep import apply_overrides

    data = apply_overrides(data, overrides or [])
    return expand(data, "k.toml", override_labels(overrides or []))


def test_facts_are_read_from_files_only(tmp_path):
    root = fake_kernel(tmp_path, {
        "proc/sys/kernel/osrelease": VM,
        "proc/sys/net/ipv4/tcp_available_congestion_control": "reno cubic bbr\n",
        f"lib/modules/{VM}/modules.dep": DEP,
        "proc/sys/net/mptcp/enabled": "1\n"})
    facts = read_kernel_facts(root)
    assert facts.release == VM and facts.congestion_controls == ("reno", "cubic", "bbr")
    assert facts.loadable_congestion_controls == ("vegas",)  # bbr loaded; tcp_diag no CC
    assert facts.mptcp_enabled is True and facts.mptcp_scheduler is None
    assert facts.offered_schedulers() == ["default"]  # 6.1: the built-in one only
    assert has_module("sch_netem", root) and not has_module("openvswitch", root)
    newer = read_kernel_facts(fake_kernel(tmp_path / "n", {
        "proc/sys/net/mptcp/scheduler": "default\n",
        "proc/sys/net/mptcp/available_schedulers": "default burst\n"}), release="6.12.0")
    assert newer.offered_schedulers() == ["default", "burst"] and newer.mptcp_enabled is None


def test_record_round_trip(tmp_path):
    path = record_facts(DEBIAN_61, tmp_path / "kernels")
    assert path == tmp_path / "kernels" / f"{VM}.json"
    assert json.loads(path.read_text())["version"] == 1
    assert load_record(VM, tmp_path / "kernels") == DEBIAN_61
    assert load_record("6.1.0-1-amd64", tmp_path / "kernels") is None
    with pytest.raises(InputError, match="not a kernel release"):
        load_record("../../etc/passwd", tmp_path / "kernels")
    path.write_text('{"version": 1, "release": "6.1", "congestion_controls": "reno"}')
    with pytest.raises(InputError, match="unreadable kernel record"):
        load_record(VM, tmp_path / "kernels")


def test_records_dir_default_and_override(tmp_path):
    assert records_dir({"XDG_CACHE_HOME": str(tmp_path)}) == \
        tmp_path / "multipath-testbed" / "kernels"
    assert records_dir({"TESTBED_KERNEL_RECORDS": str(tmp_path / "r"),
                        "XDG_CACHE_HOME": "/x"}) == tmp_path / "r"


def test_a_symlinked_record_or_folder_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    record_facts(DEBIAN_61, tmp_path)  # a real record, to point at
    (tmp_path / f"{VM}.json").rename(elsewhere)
    where = tmp_path / "kernels"
    where.mkdir()
    (where / f"{VM}.json").symlink_to(elsewhere)
    with pytest.raises(InputError, match="symbolic link"):
        load_record(VM, where)
    with pytest.raises(InputError, match="symbolic link"):
        record_facts(DEBIAN_61, where)
    assert (where / f"{VM}.json").is_symlink()  # left alone
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "linked").symlink_to(real)
    with pytest.raises(InputError, match="symbolic link"):
        record_facts(DEBIAN_61, tmp_path / "linked")
    assert not list(real.iterdir())
    # a linked folder is named as the folder: "remove it" of the record would be wrong
    record_facts(DEBIAN_61, real)
    with pytest.raises(InputError, match=r"linked: the kernel records folder is a symbolic "
                                         r"link"):
        load_record(VM, tmp_path / "linked")


def test_unknown_cc_names_the_key_and_what_the_kernel_offers():
    with pytest.raises(UnsupportedError) as exc:
        preflight.check_plans(plans(["transport.cc=cubc"]), DEBIAN_61,
                              override_labels(["transport.cc=cubc"]))
    assert str(exc.value) == (
        f"--set transport.cc: congestion control 'cubc' is not available on kernel {VM}; "
        "it offers: reno cubic; loadable: bbr vegas")
    spec = plans(workload=[SPEC["workload"][0], {**SPEC["workload"][1], "cc": "dctcp"}])
    with pytest.raises(UnsupportedError, match=r"^workload\[1\]\.cc: congestion control "
                                               "'dctcp'"):
        preflight.check_plans(spec, DEBIAN_61)
    preflight.check_plans(plans(["transport.cc=vegas"]), DEBIAN_61)  # loadable: fine


def test_unknown_scheduler_on_61_and_on_a_listing_kernel():
    with pytest.raises(UnsupportedError) as exc:
        preflight.check_plans(plans(["transport.scheduler=redundant"]), DEBIAN_61,
                              override_labels(["transport.scheduler=redundant"]))
    assert str(exc.value).startswith(
        f"--set transport.scheduler: MPTCP scheduler 'redundant' is not available on kernel "
        f"{VM}; it offers: only the built-in default")
    preflight.check_plans(plans(["transport.scheduler=default"]), DEBIAN_61)
    preflight.check_plans(plans(["transport.scheduler=burst"]), NEW)
    with pytest.raises(UnsupportedError, match=r"^transport\.scheduler: .*offers: default "
                                               r"burst$"):
        preflight.check_plans(plans(transport={"protocol": "mptcp", "scheduler": "rr"}), NEW)
    # plain TCP ignores the scheduler (docs/spec.md), so nothing to refuse
    preflight.check_plans(plans(transport={"protocol": "tcp", "scheduler": "rr"}), DEBIAN_61)


def test_a_swept_value_says_so():
    swept = plans(sweep={"transport.cc": ["reno", "nope"]})
    with pytest.raises(UnsupportedError, match=r'^sweep\."transport\.cc": congestion control '
                                               r"'nope'"):
        preflight.check_plans(swept, DEBIAN_61)


def test_native_target_reads_the_live_kernel():
    target = preflight.kernel_target(False, live=lambda: NEW,
                                     vm_release=lambda: pytest.fail("VM asked"))
    assert target.facts == NEW
    assert target.line == ("kernel check: this machine's kernel 6.12.0 (the runs would "
                           "execute here)")


def test_vm_target_reads_the_record_or_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_KERNEL_RECORDS", str(tmp_path))
    live = lambda: pytest.fail("the live kernel is not the VM's")  # noqa: E731
    none = preflight.kernel_target(True, live=live, vm_release=lambda: VM)
    assert none.facts is None
    assert none.line == (f"kernel check: not done: no record of the VM kernel {VM} in "
                         f"{tmp_path}; record it with `testbed vm -- testbed doctor`")
    record_facts(DEBIAN_61)
    got = preflight.kernel_target(True, live=live, vm_release=lambda: VM)
    assert got.facts == DEBIAN_61
    assert got.line == (f"kernel check: the VM kernel {VM}, recorded "
                        f"2025-01-01T00:00:00+00:00 in {tmp_path / (VM + '.json')} (the "
                        "runs would go to `testbed vm`)")


@pytest.fixture
def spec_file(tmp_path) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(copy.deepcopy(SPEC)))
    return path


def test_dry_run_checks_the_vm_kernel_record(spec_file, tmp_path, monkeypatch):
    monkeypatch.setattr(runcli, "_native_ok", lambda passive=False: not passive and
                        pytest.fail("a dry run asks doctor passively"))
    monkeypatch.setattr(vm, "kernel_release", lambda kernel=None: VM)
    monkeypatch.setattr("testbed.run.preflight.read_kernel_facts",
                        lambda: pytest.fail("the host kernel is not the target"))
    out = ["--out", str(tmp_path / "o")]
    res = CliRunner().invoke(app, ["run", str(spec_file), "--dry-run", *out,
                                   "--set", "transport.scheduler=redundant"])
    assert res.exit_code == 0, res.stderr  # no record: said, not an error
    assert res.stderr.startswith("kernel check: not done: no record of the VM kernel")
    record_facts(DEBIAN_61)
    res = CliRunner().invoke(app, ["run", str(spec_file), "--dry-run", *out,
                                   "--set", "transport.scheduler=redundant"])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith(f"kernel check: the VM kernel {VM}, recorded")
    assert lines[1:] == [
        f"error: --set transport.scheduler: MPTCP scheduler 'redundant' is not available "
        f"on kernel {VM}; it offers: only the built-in default (no net.mptcp.scheduler "
        "before Linux 6.6): remove transport.scheduler or use \"default\""]
    res = CliRunner().invoke(app, ["run", str(spec_file), "--dry-run", *out,
                                   "--set", "transport.cc=vegas"])
    assert res.exit_code == 0, res.stderr  # loadable in the VM, though not here
    assert "modprobe -q tcp_vegas" in res.stdout


def test_dry_run_with_no_vm_checks_the_live_kernel(spec_file, tmp_path, monkeypatch):
    monkeypatch.setattr(runcli, "_native_ok", lambda passive=False: pytest.fail("asked"))
    monkeypatch.setattr("testbed.run.preflight.read_kernel_facts", lambda: NEW)
    res = CliRunner().invoke(app, ["run", str(spec_file), "--dry-run", "--no-vm",
                                   "--out", str(tmp_path / "o"),
                                   "--set", "transport.cc=cubc"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "kernel check: this machine's kernel 6.12.0 (the runs would execute here)",
        "error: --set transport.cc: congestion control 'cubc' is not available on kernel "
        "6.12.0; it offers: reno cubic"]


class NoCommands(CommandRunner):
    def run(self, argv, **kw):  # type: ignore[override]
        raise AssertionError(f"ran {argv}")


def test_a_real_run_refuses_a_scheduler_before_any_command_and_records(monkeypatch):
    with pytest.raises(UnsupportedError, match=r"^transport\.scheduler: MPTCP scheduler 'rr'"):
        preflight.check_kernel_support(
            plans(transport={"protocol": "mptcp", "scheduler": "rr"}), NoCommands(),
            facts=DEBIAN_61)
    monkeypatch.setattr(preflight, "read_kernel_facts", lambda: DEBIAN_61)
    assert load_record(VM) is None
    with pytest.raises(UnsupportedError, match=r"^--set transport\.scheduler: "):
        preflight.check_kernel_support(plans(["transport.scheduler=burst"]), NoCommands(),
                                       labels=override_labels(["transport.scheduler=b"]))
    assert load_record(VM) == DEBIAN_61  # recorded at the run's start


def test_dry_run_answers_follow_the_target_kernel():
    answers = SystemAnswers([], DEBIAN_61)
    key = "net.ipv4.tcp_available_congestion_control"
    assert answers(["sysctl", "-n", key], "", None) == "reno cubic\n"
    answers(["modprobe", "-q", "tcp_vegas"], "", None)
    answers(["modprobe", "-q", "tcp_nope"], "", None)
    assert answers(["sysctl", "-n", key], "", None) == "reno cubic vegas\n"
    sched = answers(["sysctl", "-n", "net.mptcp.scheduler",
                     "net.mptcp.available_schedulers"], "h1", None)
    assert sched == "\n\n"  # 6.1: no scheduler sysctl
    unknown = SystemAnswers([])  # no record: nothing is refused
    unknown(["modprobe", "-q", "tcp_nope"], "", None)
    assert "nope" in unknown(["sysctl", "-n", key], "", None).split()


def test_the_vm_guest_gets_the_hosts_records_folder(tmp_path):
    line = vm.guest_command(["testbed", "doctor"], env={"XDG_CACHE_HOME": str(tmp_path)})
    assert f"TESTBED_KERNEL_RECORDS={tmp_path}/multipath-testbed/kernels" in line
    assert vm.record_trees(Path("/var/lib/nowhere/k"), []) == []  # on the shared root
    assert vm.record_trees(Path("/tmp/a b"), []) == []  # qemu cannot name it
    private = Path(tempfile.mkdtemp(dir="/tmp"))  # what the VM overlays
    try:
        assert vm.record_trees(private / "k", [str(private)]) == []  # already shared
        assert vm.record_trees(private / "k", []) == [("tb_records", str(private / "k"))]
        assert (private / "k").is_dir()
        assert "mount -t 9p" in vm.record_mounts([("tb_records", str(private / "k"))])
    finally:
        shutil.rmtree(private)


def test_passive_doctor_loads_and_starts_nothing(tmp_path):
    root = fake_kernel(tmp_path, {"proc/sys/kernel/osrelease": VM,
                                  f"lib/modules/{VM}/modules.dep":
                                      DEP + "kernel/net/openvswitch/openvswitch.ko.xz:\n"})
    p = doctor.Probe(NoCommands(), root=root, passive=True)
    assert doctor.check_openvswitch_module(p).ok
    netem = [c for c in doctor.check_netns_veth(p) if c.name == "sch_netem"]
    assert netem[0].ok
    assert not doctor.check_openvswitch_module(
        doctor.Probe(NoCommands(), root=tmp_path / "none", passive=True)).ok
