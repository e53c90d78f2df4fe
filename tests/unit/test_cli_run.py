"""``testbed run`` end to end with a fake runner, dry runs, and the VM hand-off."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
import tomli_w
from test_results import FakeRunner
from typer.testing import CliRunner

from testbed.cli import run as runcli
from testbed.cli.app import app

SPEC = {
    "name": "cli", "duration": "5s", "repetitions": 2,
    "topology": {"kind": "multipath", "paths": [{"name": "a", "bw": "10Mbit"},
                                                 {"name": "b", "bw": "10Mbit"}]},
    "workload": [{"kind": "bulk", "src": "client", "dst": "server", "size": "1MB"}],
    "sweep": {"transport.cc": ["reno", "cubic"]},
}


@pytest.fixture
def spec(tmp_path) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(copy.deepcopy(SPEC)))
    return path


@pytest.fixture
def native(monkeypatch):
    """Pretend doctor says native runs work, and run a fake experiment."""
    fake = FakeRunner()
    monkeypatch.setattr(runcli, "_native_ok", lambda passive=False: True)
    monkeypatch.setattr("testbed.run.execute.execute_run", fake)
    monkeypatch.setattr("testbed.run.preflight.check_kernel_support",
                        lambda plans, **kw: None)
    return fake


def test_an_unavailable_cc_stops_before_the_first_run(spec, tmp_path, native, monkeypatch):
    from testbed.core.errors import UnsupportedError

    def refuse(plans, **kw):
        assert len(plans) == 4  # every run's CC is checked before any runs
        raise UnsupportedError("transport.cc: congestion control 'nosuchcc' is not "
                               "available on this kernel; available: reno cubic")

    monkeypatch.setattr("testbed.run.preflight.check_kernel_support", refuse)
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "error: transport.cc: congestion control 'nosuchcc' is not available on this "
        "kernel; available: reno cubic"]
    assert native.calls == []


def test_dry_run_lists_runs_and_commands(spec, tmp_path):
    res = CliRunner().invoke(app, ["run", str(spec), "--dry-run", "--out", str(tmp_path / "o"),
                                   "--set", "duration=6s"])
    assert res.exit_code == 0, res.stderr
    assert "4 run(s)" in res.stdout and "transport.cc" in res.stdout
    assert "tcpdump -i client-eth0" in res.stdout
    assert not (tmp_path / "o").exists()


def test_run_writes_bundles_and_summary(spec, tmp_path, native):
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    assert len(native.calls) == 4
    assert "4 complete, 0 failed, 0 already complete" in res.stderr
    assert len(pd.read_parquet(out / "summary.parquet")) == 4
    meta = json.loads(next(out.glob("*/metadata.json")).read_text())
    assert meta["command"].startswith("testbed run ")
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(out)])
    assert res.exit_code == 0 and len(native.calls) == 4
    assert "4 of 4 runs already complete" in res.stderr
    # one keeper for the whole sweep, offering reuse
    assert len({id(k) for k in native.keepers}) == 1 and native.keepers[0].keep


def test_fresh_networks_turns_reuse_off(spec, tmp_path, native):
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o"),
                                   "--fresh-networks"])
    assert res.exit_code == 0, res.stderr
    assert [k.keep for k in native.keepers] == [False] * 4


def test_a_failed_run_gives_exit_1_and_is_listed(spec, tmp_path, monkeypatch):
    fake = FakeRunner(fail={2})
    monkeypatch.setattr(runcli, "_native_ok", lambda passive=False: True)
    monkeypatch.setattr("testbed.run.execute.execute_run", fake)
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1
    assert "3 complete, 1 failed" in res.stderr and "controller died" in res.stderr
    assert len(fake.calls) == 4


def test_fail_fast(spec, tmp_path, monkeypatch):
    fake = FakeRunner(fail={0})
    monkeypatch.setattr(runcli, "_native_ok", lambda passive=False: True)
    monkeypatch.setattr("testbed.run.execute.execute_run", fake)
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o"),
                                   "--fail-fast"])
    assert res.exit_code == 1 and len(fake.calls) == 1
    assert "finished runs are kept" in res.stderr


def test_interrupt_exits_130_and_says_how_to_resume(spec, tmp_path, monkeypatch):
    fake = FakeRunner(interrupt={1})
    monkeypatch.setattr(runcli, "_native_ok", lambda passive=False: True)
    monkeypatch.setattr("testbed.run.execute.execute_run", fake)
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o")])
    assert res.exit_code == 130
    assert "run the same command again to resume" in res.stderr


def test_reexecutes_in_the_vm_when_native_runs_are_impossible(spec, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runcli, "_native_ok", lambda passive=False: False)
    _vm_kernel(monkeypatch, "reno", "cubic")
    outs = []
    monkeypatch.setattr("testbed.machine.vm.run_in_vm",
                        lambda argv, outputs: calls.append(argv) or outs.append(outputs) or 0)
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o"),
                                   "--set", "duration=6s", "--fail-fast", "--fresh-networks"])
    assert res.exit_code == 0, res.stderr
    assert outs == [[tmp_path / "o"]]  # the VM shares the results folder, wherever it is
    assert len(res.stderr.strip().splitlines()) == 1
    assert "re-running inside `testbed vm`" in res.stderr
    argv = calls[0]
    assert argv[argv.index("run"):] == [
        "run", str(spec.resolve()), "--out", str((tmp_path / "o").resolve()), "--no-vm",
        "--set", "duration=6s", "--fail-fast", "--fresh-networks"]


def _vm_kernel(monkeypatch, *ccs: str) -> None:
    """The VM kernel's record offers ccs (none given: there is no record)."""
    from testbed.machine.kernel import KernelFacts
    from testbed.run.preflight import KernelTarget

    facts = KernelFacts("6.1.0-56-amd64", tuple(ccs)) if ccs else None
    monkeypatch.setattr("testbed.run.preflight.kernel_target",
                        lambda in_vm: KernelTarget(facts, "kernel check: test"))


@pytest.mark.parametrize("command", ["run", "study"])
def test_a_cc_the_vm_kernel_lacks_is_refused_before_it_boots(spec, tmp_path, monkeypatch,
                                                             command):
    """`--set transport.cc=cubc` used to boot the VM (a minute or more under emulation)
    and fail inside it; the VM kernel's record now refuses it here, and no record means
    the VM checks as before."""
    from testbed.run import study as st

    booted = []
    monkeypatch.setattr(runcli, "_native_ok", lambda passive=False: False)
    monkeypatch.setattr(st, "native_ok", lambda passive=False: False)
    monkeypatch.setattr("testbed.machine.vm.run_in_vm",
                        lambda argv, **kw: booted.append(argv) or 0)
    _vm_kernel(monkeypatch, "reno", "cubic")
    what = [str(spec)] if command == "run" else ["experiments/p2_three_paths"]
    argv = [command, *what, "--out", str(tmp_path / "o"), "--set", "transport.cc=cubc"]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == "error: --set transport.cc: congestion control 'cubc' " \
        "is not available on kernel 6.1.0-56-amd64; it offers: reno cubic", res.stderr
    assert booted == []
    _vm_kernel(monkeypatch)  # no record: the VM boots and checks its kernel itself
    res = CliRunner().invoke(app, argv)
    assert len(booted) == 1, res.output


def test_no_vm_never_asks_doctor(spec, tmp_path, monkeypatch):
    fake = FakeRunner()
    monkeypatch.setattr(runcli, "_native_ok",
                        lambda passive=False: pytest.fail("doctor was asked"))
    monkeypatch.setattr("testbed.run.execute.execute_run", fake)
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o"), "--no-vm"])
    assert res.exit_code == 0 and len(fake.calls) == 4


def test_default_out_dir_is_results_name(spec, tmp_path, monkeypatch, native):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["run", str(spec), "--set", "repetitions=1",
                                   "--set", "transport.cc=reno"])
    assert res.exit_code == 0, res.stderr
    assert len(list((tmp_path / "results" / "cli").glob("cli-*-r1"))) == 1


def test_every_sweep_point_is_planned_before_the_first_run(tmp_path, native):
    """A later sweep point naming a link or interface its topology lacks used to pass
    the dry run and fail only when its run came, after the runs before it; now the
    whole sweep is refused first, naming the file, the key and the point."""
    data = copy.deepcopy(SPEC)
    data["capture"] = {"interfaces": ["client-eth0"]}
    data["sweep"] = {"capture.interfaces": [["client-eth0"], ["client-eth7"]]}
    path = tmp_path / "points.toml"
    path.write_text(tomli_w.dumps(data))
    want = [f"error: {path}: capture.interfaces: 'client-eth7' is not an interface of the "
            "captured hosts (client, server) (in the sweep point capture.interfaces = "
            '["client-eth7"])']
    for extra in (["--dry-run"], []):
        res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "o"), *extra])
        assert res.exit_code == 2, res.output
        assert res.stderr.strip().splitlines() == want
    assert native.calls == []  # no run started


def test_a_dry_run_refuses_what_a_run_refuses(spec, tmp_path):
    """Executor options and an --out that is a file were accepted by a dry run (and by a
    study's); a real run refuses them, so the dry run says so too."""
    afile = tmp_path / "afile"
    afile.write_text("")
    cases = [
        (["run", str(spec), "--dry-run", "--executor", "dask"],
         "error: --executor 'dask': use one of local, ray"),
        (["run", str(spec), "--dry-run", "--executor", "ray", "--retries", "-1"],
         "error: --retries -1: use 0 or more"),
        (["study", "experiments/p2_three_paths", "--dry-run", "--executor", "dask"],
         "error: --executor 'dask': use one of local, ray"),
        (["run", str(spec), "--dry-run", "--out", str(afile)],
         f"error: --out {afile}: a file, not a folder; give a folder (new or one a sweep "
         "of this spec wrote)"),
        (["study", "experiments/p2_three_paths", "--dry-run", "--out", str(afile)],
         f"error: --out {afile}: a file, not a folder; give a folder"),
    ]
    for argv, line in cases:
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 2, (argv, res.output)
        assert res.stderr.strip().splitlines()[-1] == line, (argv, res.stderr)


def test_a_dry_run_never_imports_a_custom_topology(tmp_path, monkeypatch):
    """Planning every sweep point's network before the runs must leave a custom topology
    (code) to the real run that builds it: a dry run promises not to import it."""
    mod = tmp_path / "evilmod_tb.py"
    marker = tmp_path / "imported"
    mod.write_text(f"open({str(marker)!r}, 'w').write('x')\n"
                   "from mininet.topo import Topo\nclass T(Topo):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    data = {"name": "c", "duration": "5s", "topology": {"kind": "evilmod_tb:T"},
            "workload": [{"kind": "ping", "src": "h1", "dst": "h2"}]}
    path = tmp_path / "custom.toml"
    path.write_text(tomli_w.dumps(data))
    res = CliRunner().invoke(app, ["run", str(path), "--dry-run"])
    assert not marker.exists(), res.output


def test_a_network_problem_from_a_set_value_names_the_set_key(spec, tmp_path):
    """The network check named the spec file for a problem a --set value caused."""
    res = CliRunner().invoke(app, ["run", str(spec), "--dry-run", "--set",
                                   'capture.interfaces=["client-eth9"]'])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        "error: --set capture.interfaces: 'client-eth9' is not an interface of the captured "
        "hosts (client, server) (in the sweep point transport.cc = \"reno\")"], res.stderr


def test_a_bad_set_value_of_an_unswept_key_names_no_sweep_point(spec):
    """Every point has the problem of a bad --set value the sweep does not change: the
    line named the first sweep point, as if that point were the cause."""
    res = CliRunner().invoke(app, ["run", str(spec), "--dry-run", "--set", "duration=abc"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        "error: --set duration: 'abc' is not a duration; use e.g. '10ms'"], res.stderr
