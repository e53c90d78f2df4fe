"""Sweeps on a Ray cluster, without a cluster: the bundle on the wire (packed safely,
installed atomically, refused when partial or unsafe), who a failure is blamed on, the
`--executor` options, and the executor seam of `run_sweep` (issue 22)."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.core.errors import (
    InputError,
    MissingFeatureError,
    NodeError,
    RunError,
    UnsupportedError,
)
from testbed.core.safefiles import UnsafeFileError
from testbed.results.bundle import COMPLETE, FAILED, Bundle
from testbed.run.cluster.node import DONE, NODE, SPEC, failure_kind, node_facts
from testbed.run.cluster.transfer import (
    TransferError,
    install_bundle,
    pack_bundle,
    unpack_bundle,
)
from testbed.run.diskspace import DiskSpaceError
from testbed.run.sweep import Executor, NoProgress, RunOutcome, run_sweep


def _bundle(root: Path, run_id: str = "r1", status: str = COMPLETE) -> Bundle:
    """A finished bundle as a run leaves it (files, manifest, metadata)."""
    b = Bundle(root / run_id)
    b.create()
    b.spec_path.write_text("name = 'x'\n")
    b.transcript_path.write_text("{}\n")
    (b.pcap_dir / "a.pcap").write_bytes(b"\xd4\xc3\xb2\xa1" + b"x" * 100)
    b.metrics_dir.mkdir(exist_ok=True)
    for t in ("flows", "timeseries", "cwnd", "ping", "events"):
        (b.metrics_dir / f"{t}.parquet").write_bytes(b"PAR1")
    n = b.write_sha256_manifest()
    b.write_metadata({"run_id": run_id, "status": status, "files": b.manifest(),
                      "sha256_manifest": {"file": "manifest.sha256", "files": n}})
    return b


def test_a_bundle_travels_whole(tmp_path: Path) -> None:
    src = _bundle(tmp_path / "node")
    out = tmp_path / "out"
    out.mkdir()
    got = install_bundle(pack_bundle(src.root), out, "r1")
    assert got.root == out / "r1" and got.is_complete()
    assert sorted(p.name for p in out.iterdir()) == ["r1"]  # no staging folder left
    assert (got.root / "pcap" / "a.pcap").read_bytes() == (src.root / "pcap" / "a.pcap"
                                                           ).read_bytes()
    assert got.check_sha256_manifest() == []


def test_a_failed_bundle_is_installed_and_an_unfinished_one_moved_aside(tmp_path: Path
                                                                       ) -> None:
    out = tmp_path / "out"
    out.mkdir()
    old = Bundle(out / "r1")
    old.create()
    old.write_metadata({"run_id": "r1", "status": "running"})
    install_bundle(pack_bundle(_bundle(tmp_path / "node", status=FAILED).root), out, "r1")
    assert Bundle(out / "r1").status() == FAILED
    assert (out / "_attempts" / "r1" / "1-running").is_dir()


@pytest.mark.parametrize("status", ["running", "interrupted"])
def test_a_partial_bundle_never_reaches_out(tmp_path: Path, status: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    data = pack_bundle(_bundle(tmp_path / "node", status=status).root)
    with pytest.raises(TransferError, match="not finished"):
        install_bundle(data, out, "r1")
    assert list(out.iterdir()) == []


def test_a_damaged_or_foreign_bundle_is_refused(tmp_path: Path) -> None:
    src = _bundle(tmp_path / "node")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TransferError, match="not this run's"):
        install_bundle(pack_bundle(src.root), out, "r2")
    (src.root / "pcap" / "a.pcap").write_bytes(b"\xd4\xc3\xb2\xa1" + b"y" * 100)  # same size
    with pytest.raises(TransferError, match="damaged"):
        install_bundle(pack_bundle(src.root), out, "r1")
    assert list(out.iterdir()) == []


def test_a_bundle_with_a_link_is_not_sent(tmp_path: Path) -> None:
    src = _bundle(tmp_path / "node")
    os.symlink("/etc/passwd", src.root / "logs" / "x.txt")
    with pytest.raises(UnsafeFileError, match="symbolic link"):
        pack_bundle(src.root)


def _tar(*members: tuple[str, bytes | None, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind is not None:
                info.type = kind
                info.linkname = "/etc/passwd"
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("members, match", [
    ((("../evil", None, b"x"),), "plain relative path"),
    ((("/etc/evil", None, b"x"),), "plain relative path"),
    ((("a/../../evil", None, b"x"),), "plain relative path"),
    ((("a\nfake line", None, b"x"),), "plain relative path"),
    ((("a\x1b[2Jb", None, b"x"),), "plain relative path"),
    ((("link", tarfile.SYMTYPE, b""),), "not a regular file"),
    ((("hard", tarfile.LNKTYPE, b""),), "not a regular file"),
    ((("fifo", tarfile.FIFOTYPE, b""),), "not a regular file"),
])
def test_unpacking_refuses_what_could_escape(tmp_path: Path, members: Any, match: str
                                             ) -> None:
    with pytest.raises(TransferError, match=match):
        unpack_bundle(_tar(*members), tmp_path / "dest")
    assert not (tmp_path / "evil").exists()


def test_unpacking_never_writes_twice_or_past_its_limit(tmp_path: Path) -> None:
    with pytest.raises(TransferError, match="twice"):
        unpack_bundle(_tar(("a", None, b"1"), ("a", None, b"2")), tmp_path / "d1")
    with pytest.raises(TransferError, match="larger"):
        unpack_bundle(_tar(("a", None, b"x" * 100)), tmp_path / "d2", limit=10)


@pytest.mark.parametrize("exc, kind", [
    (NodeError("interfaces s1-eth1 already exist"), NODE),
    (MissingFeatureError("no netem"), NODE),
    (UnsupportedError("no olia here"), NODE),
    (DiskSpaceError("too little space"), NODE),
    (OSError("read-only file system"), NODE),
    (InputError("spec.toml: topology.paths: ..."), SPEC),
    (RunError("1 of 1 flows did not finish"), DONE),
    (ValueError("a bug"), DONE),
])
def test_failures_are_blamed_on_node_spec_or_run(exc: BaseException, kind: str) -> None:
    assert failure_kind(exc) == kind


def test_node_facts_say_where_a_run_ran() -> None:
    facts = node_facts("native")
    assert facts["executor"] == "ray" and facts["mode"] == "native"
    assert facts["hostname"] and facts["kernel"]
    assert facts["ray_node_id"] is None  # outside a Ray task


def test_executor_options() -> None:
    from testbed.cli.run import make_executor

    assert make_executor("local", None, 2) is None
    with pytest.raises(InputError, match="use one of local, ray"):
        make_executor("dask", None, 2)
    with pytest.raises(InputError, match="--executor ray"):
        make_executor("local", "10.0.0.1:6379", 2)
    with pytest.raises(InputError, match="--retries"):
        make_executor("ray", None, -1)


def test_without_ray_the_error_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from testbed.cli.run import make_executor

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(MissingFeatureError, match=r"pip install '\.\[cluster\]'"):
        make_executor("ray", None, 2)


def test_cli_without_ray_is_one_line_and_exit_2(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from testbed.cli.app import app

    monkeypatch.setitem(sys.modules, "ray", None)
    spec = Path(__file__).resolve().parents[2] / "experiments/p2_three_paths/quick/cc.toml"
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o"),
                                   "--executor", "ray"])
    assert res.exit_code == 2
    assert "error:" in res.output and "[cluster]" in res.output
    assert "Traceback" not in res.output


class _Plan:
    def __init__(self, run_id: str):
        self.run_id, self.index, self.repetition, self.seed = run_id, 0, 0, 1
        self.params: dict[str, Any] = {}

    def resolved_toml(self) -> str:
        return ""


class _Remote(Executor):
    """An executor whose 'nodes' hand finished bundles back (the seam, not Ray)."""

    def __init__(self, src: Path):
        self.src = src
        self.seen: list[str] = []

    def runs(self, todo: list[Any], out: Path, progress: Any,
             extra_meta: dict[str, Any]) -> Iterator[tuple[Any, RunOutcome]]:
        for plan in todo:
            self.seen.append(plan.run_id)
            data = pack_bundle(_bundle(self.src, plan.run_id).root)
            install_bundle(data, out, plan.run_id)
            yield plan, RunOutcome(COMPLETE, None, 0.1, node="lab1/abcd")


def test_an_executor_shares_the_sweeps_bookkeeping(tmp_path: Path) -> None:
    out = tmp_path / "out"
    plans = [_Plan("a"), _Plan("b")]
    ex = _Remote(tmp_path / "node")
    report = run_sweep(plans, out, ex, progress=NoProgress())
    assert report.complete == 2 and ex.seen == ["a", "b"]
    assert (out / "summary.parquet").is_file()
    again = _Remote(tmp_path / "node2")
    report = run_sweep(plans, out, again, progress=NoProgress())
    assert report.skipped == 2 and again.seen == []  # resume: nothing run twice
    assert json.loads((out / "a" / "metadata.json").read_text())["status"] == COMPLETE


class _SpecError(Executor):
    def runs(self, todo: list[Any], out: Path, progress: Any,
             extra_meta: dict[str, Any]) -> Iterator[tuple[Any, RunOutcome]]:
        raise InputError("spec.toml: workload.0.size: expected a size")
        yield  # a generator


def test_a_spec_error_stops_the_sweep(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="expected a size"):
        run_sweep([_Plan("a")], tmp_path / "out", _SpecError(), progress=NoProgress())
    assert (tmp_path / "out" / "summary.parquet").is_file()


def test_a_file_time_out_of_range_is_clamped(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("a")
        info.size, info.mtime = 1, 10**20
        tar.addfile(info, io.BytesIO(b"x"))
    unpack_bundle(buf.getvalue(), tmp_path / "d")
    assert (tmp_path / "d" / "a").read_bytes() == b"x"
    assert (tmp_path / "d" / "a").stat().st_mtime <= 2**33


@pytest.mark.parametrize("data", [b"", b"not a tar at all" * 100,
                                  b"\0" * 511 + b"\1" + b"garbage" * 200])
def test_unreadable_bytes_are_the_nodes_failure(tmp_path: Path, data: bytes) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TransferError, match="r1"):
        install_bundle(data, out, "r1")
    assert list(out.iterdir()) == []


def test_a_bundle_damaged_on_the_way_is_refused(tmp_path: Path) -> None:
    import hashlib

    data = pack_bundle(_bundle(tmp_path / "node").root)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TransferError, match="damaged"):
        install_bundle(data, out, "r1", hashlib.sha256(data + b"x").hexdigest())
    assert list(out.iterdir()) == []
    install_bundle(data, out, "r1", hashlib.sha256(data).hexdigest())
    assert Bundle(out / "r1").status() == COMPLETE


def test_a_planted_scratch_folder_is_refused(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from testbed.run.cluster.node import SCRATCH_ENV, scratch_root

    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    monkeypatch.setenv(SCRATCH_ENV, str(open_dir))
    with pytest.raises(NodeError, match="writable by no one else"):
        scratch_root()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "link"))
    with pytest.raises(NodeError, match="scratch folder"):
        scratch_root()
    monkeypatch.setenv(SCRATCH_ENV, str(tmp_path / "new" / "scratch"))
    root = scratch_root()
    assert root.is_dir() and (root.stat().st_mode & 0o777) == 0o700


class _Att:
    def __init__(self, run_id: str, tries: int = 1):
        import time

        self.plan, self.tries, self.t_start = _Plan(run_id), tries, time.time()


class _Notes(NoProgress):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, line: str) -> None:
        self.notes.append(line)


def _done(data: bytes | None, **kw: Any) -> dict[str, Any]:
    return {"kind": DONE, "status": COMPLETE, "error": None, "wall_s": 12.5,
            "node_info": {"hostname": "lab1", "ray_node_id": "abcdef0123"}, "bundle": data,
            **kw}


def test_the_head_installs_a_run_once_and_reports_its_own_time(tmp_path: Path) -> None:
    from testbed.run.cluster.executor import RayExecutor

    ex, out = RayExecutor(retries=2), tmp_path / "out"
    out.mkdir()
    data = pack_bundle(_bundle(tmp_path / "node").root)
    res = ex._settle(_Att("r1"), _done(data), out, _Notes())  # type: ignore[arg-type]
    assert res is not None and res.status == COMPLETE and res.bundle
    assert res.wall_s == 12.5 and res.node == "lab1/abcdef01"
    assert ex.done_by_node == {"lab1/abcdef01": 1}


def test_a_bad_bundle_is_sent_again_then_given_up(tmp_path: Path) -> None:
    from testbed.run.cluster.executor import RayExecutor

    ex, out, notes = RayExecutor(retries=1), tmp_path / "out", _Notes()
    out.mkdir()
    again = ex._settle(_Att("r1"), _done(b"garbage" * 100), out, notes)  # type: ignore[arg-type]
    assert again is None and "sending it again (try 2 of 2)" in notes.notes[-1]
    given_up = ex._settle(_Att("r1", tries=2), _done(b"garbage"), out, notes)  # type: ignore[arg-type]
    assert given_up is not None and given_up.status == FAILED
    assert not given_up.bundle and "gave up after 2 tries" in (given_up.error or "")
    assert list(out.iterdir()) == []


def test_the_heads_own_write_error_stops_the_sweep(tmp_path: Path) -> None:
    from testbed.run.cluster.executor import RayExecutor

    out = tmp_path / "out"
    out.write_text("a file, not a folder")
    data = pack_bundle(_bundle(tmp_path / "node").root)
    with pytest.raises(RunError, match="could not install its bundle"):
        RayExecutor()._settle(_Att("r1"), _done(data), out, _Notes())  # type: ignore[arg-type]


def test_a_spec_error_from_a_node_stops_the_sweep(tmp_path: Path) -> None:
    from testbed.run.cluster.executor import RayExecutor

    res = {"kind": SPEC, "error": "spec.toml: transport.cc: 'cubicc' is unknown",
           "wall_s": 0.0, "node_info": {}, "bundle": None}
    with pytest.raises(InputError, match="cubicc"):
        RayExecutor()._settle(_Att("r1"), res, tmp_path, _Notes())  # type: ignore[arg-type]


class _Nodes:
    """What `RayExecutor._nowhere` asks of Ray: the live nodes and their resources."""

    def __init__(self, *ids: str):
        self.ids = ids

    def nodes(self) -> list[dict[str, Any]]:
        return [{"NodeID": i, "Alive": True, "Resources": {"testbed": 1.0}} for i in self.ids]


def test_a_control_no_node_has_stops_the_sweep_once_every_node_said_so() -> None:
    from testbed.run.cluster.executor import RayExecutor, _Attempt

    att = _Attempt(_Plan("r1"))
    res = {"kind": NODE, "error": "node lab2: transport.cc 'cubicc': this kernel offers "
           "reno cubic", "unsupported": True}
    att.unsupported.add("a")
    RayExecutor._nowhere(_Nodes("a", "b"), att, res)  # type: ignore[arg-type]  # b may have it
    att.unsupported.add("b")
    with pytest.raises(InputError, match=r"cubicc.*every node of the cluster, 2"):
        RayExecutor._nowhere(_Nodes("a", "b"), att, res)  # type: ignore[arg-type]


def test_the_last_node_to_lack_a_control_stops_the_sweep_before_a_retry_is_announced(
        ) -> None:
    from testbed.run.cluster.executor import RayExecutor, _Attempt

    att = _Attempt(_Plan("r1"))
    lacks = {"kind": NODE, "error": "node lab2: transport.cc 'cubicc': this kernel offers "
             "reno cubic", "unsupported": True}
    nodes = _Nodes("a", "b")
    RayExecutor._count_unsupported(nodes, att, {**lacks, "node_info": {"ray_node_id": "a"}})
    assert att.unsupported == {"a"}  # b may have it: sent again
    RayExecutor._count_unsupported(nodes, att, {"kind": NODE, "error": "disk full",
                                                "node_info": {"ray_node_id": "b"}})
    assert att.unsupported == {"a"}
    with pytest.raises(InputError, match="every node of the cluster, 2"):
        RayExecutor._count_unsupported(nodes, att, {**lacks, "node_info": {"ray_node_id": "b"}})


def test_an_address_where_nothing_listens_is_one_line(tmp_path: Path) -> None:
    """Ray would keep trying such an address for minutes; the CLI refuses it at once,
    before any folder is made."""
    pytest.importorskip("ray", reason="Ray is not installed (scripts/install --cluster)")
    import socket

    from typer.testing import CliRunner

    from testbed.cli.app import app

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    spec = Path(__file__).resolve().parents[2] / "experiments/p2_three_paths/quick/cc.toml"
    res = CliRunner().invoke(app, ["run", str(spec), "--out", str(tmp_path / "o"),
                                   "--executor", "ray", "--address", f"127.0.0.1:{port}"])
    assert res.exit_code == 2, res.output
    assert f"--address 127.0.0.1:{port}: no Ray cluster answers there" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "o").exists()


def test_no_address_and_no_cluster_here_is_one_line_and_makes_no_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (scripts/install --cluster)")
    from typer.testing import CliRunner

    from testbed.cli.app import app

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "no-ray-here"))  # no local cluster
    repo = Path(__file__).resolve().parents[2]
    study = repo / "experiments" / "p2_three_paths"
    spec = study / "quick" / "cc.toml"
    for cmd in (["run", str(spec)], ["study", str(study), "--variant", "quick"]):
        res = CliRunner().invoke(app, [*cmd, "--out", str(tmp_path / "o"), "--executor", "ray"])
        assert res.exit_code == 2, res.output
        assert "no --address given, and this machine: no Ray cluster to join" in res.output
        assert "Traceback" not in res.output and not (tmp_path / "o").exists()


class _Ref:
    def __init__(self, result: dict[str, Any]):
        self.result = result


class _FakeTask:
    def __init__(self, ray: _FakeRay, prefer: str | None = None):
        self.ray, self.prefer = ray, prefer

    def options(self, scheduling_strategy: Any = None, **_kw: Any) -> _FakeTask:
        return _FakeTask(self.ray, getattr(scheduling_strategy, "node_id", self.prefer))

    def remote(self, plan: Any, _extra: dict[str, Any]) -> _Ref:
        self.ray.sent.append((plan.run_id, self.prefer))
        return _Ref(self.ray.answers.pop(0))


A, B = "a" * 56, "b" * 56  # Ray node ids (hex)


class _FakeRay:
    """Ray as `RayExecutor.runs` uses it, on a cluster of nodes A and B: each task sent
    gets the next of answers (what `run_on_node` returned); sent records (run id, the
    node preferred)."""

    def __init__(self, answers: list[dict[str, Any]]):
        self.answers, self.sent = list(answers), []  # type: ignore[var-annotated]

    def is_initialized(self) -> bool:
        return True

    def cluster_resources(self) -> dict[str, float]:
        return {"testbed": 2.0}

    def nodes(self) -> list[dict[str, Any]]:
        return [{"NodeID": n, "Alive": True, "Resources": {"testbed": 1.0}} for n in (A, B)]

    def remote(self, _fn: Any) -> _FakeTask:
        return _FakeTask(self)

    def wait(self, refs: list[Any], num_returns: int = 1, timeout: float | None = None
             ) -> tuple[list[Any], list[Any]]:
        return refs[:1], refs[1:]

    def get(self, ref: _Ref) -> dict[str, Any]:
        return ref.result

    def cancel(self, ref: Any, force: bool = False) -> None:
        pass


def _sweep_on(fake: _FakeRay, out: Path, monkeypatch: pytest.MonkeyPatch
              ) -> tuple[list[Any], list[str]]:
    pytest.importorskip("ray", reason="Ray is not installed (scripts/install --cluster)")
    from testbed.run.cluster import executor

    monkeypatch.setattr(executor, "import_ray", lambda: fake)
    notes = _Notes()
    ex = executor.RayExecutor(retries=2)
    got = list(ex.runs([_Plan("r1")], out, notes, {}))
    return got, notes.notes


def test_a_damaged_bundle_is_sent_again_to_another_node(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    out.mkdir()
    good = pack_bundle(_bundle(tmp_path / "node").root)
    fake = _FakeRay([_done(b"garbage" * 100, node_info={"hostname": "lab1", "ray_node_id": A}),
                     _done(good, node_info={"hostname": "lab2", "ray_node_id": B})])
    got, notes = _sweep_on(fake, out, monkeypatch)
    assert fake.sent == [("r1", None), ("r1", B)]  # the second try avoids node A
    assert [o.status for _plan, o in got] == [COMPLETE] and (out / "r1").is_dir()
    assert len([n for n in notes if "sending it again (try 2 of 3)" in n]) == 1


def test_a_spec_no_node_can_run_stops_before_a_retry_is_announced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lacks = {"kind": NODE, "error": "transport.cc 'cubicc': this kernel offers reno cubic",
             "unsupported": True, "wall_s": 0.0, "bundle": None}
    fake = _FakeRay([{**lacks, "node_info": {"hostname": "lab1", "ray_node_id": A}},
                     {**lacks, "node_info": {"hostname": "lab2", "ray_node_id": B}}])
    with pytest.raises(InputError, match="every node of the cluster, 2"):
        _sweep_on(fake, tmp_path, monkeypatch)
    assert fake.sent == [("r1", None), ("r1", B)]


def test_a_task_whose_node_is_gone_stops_waiting_for_the_emulation_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In CI a worker whose raylet had died waited on for the lock, then ran its run in a
    VM of its own after the sweep had finished (the head had sent it to another node)."""
    import fcntl
    import os
    import subprocess
    import threading

    from testbed.core.errors import NodeError
    from testbed.run.cluster import node

    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(node.SCRATCH_ENV, str(tmp_path / "scratch"))
    monkeypatch.setattr(node, "LOCK_POLL_S", 0.05)
    (tmp_path / "state").mkdir(mode=0o700)
    holder = os.open(tmp_path / "state" / node.LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another run holds the machine
    dead = subprocess.Popen(["true"])
    dead.wait()
    monkeypatch.setenv("RAY_RAYLET_PID", str(dead.pid))
    with pytest.raises(NodeError, match=rf"raylet \(pid {dead.pid}\) is gone"), \
            node.emulation_lock():
        pass
    # a live raylet, but the cluster has declared the node dead (late heartbeats)
    import sys
    import types

    fake = types.SimpleNamespace(
        is_initialized=lambda: True,
        get_runtime_context=lambda: types.SimpleNamespace(get_node_id=lambda: "abcdef0123"),
        nodes=lambda: [{"NodeID": "abcdef0123", "Alive": False}])
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setenv("RAY_RAYLET_PID", str(os.getpid()))
    with pytest.raises(NodeError, match=r"declared this node \(abcdef01\) dead"), \
            node.emulation_lock():
        pass
    fake.nodes = lambda: [{"NodeID": "abcdef0123", "Alive": True}]
    # a live raylet: the task waits, and runs once the other run lets go
    monkeypatch.setenv("RAY_RAYLET_PID", str(os.getpid()))
    threading.Timer(0.3, lambda: fcntl.flock(holder, fcntl.LOCK_UN)).start()
    with node.emulation_lock() as (current, _fd):
        assert current.parent == tmp_path / "state"
    os.close(holder)
