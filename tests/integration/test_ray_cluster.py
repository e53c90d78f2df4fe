"""A sweep on a Ray cluster of a head and two worker nodes on this machine (issue 22).

Each worker offers ``testbed: 1``.  The nodes run here, outside any VM; each run happens
as ``testbed run`` would on the node: natively when this kernel has netem, OVS and MPTCP,
else inside a ``testbed vm`` boot of its own, with the analysis done on the node
afterwards.  Either way one at a time on the machine (`testbed.run.cluster.node` takes the
machine's emulation lock).  One worker node dies (its raylet and everything under it,
SIGKILL, by pid) while the sweep is under way.  Then: every run's bundle is complete in
``--out``, each run exactly once (no ``_attempts``, no staging folder left), with the
same run ids and the same files per bundle as the same sweep run locally, and a summary
of the same shape; each bundle's metadata names the node it ran on.

The local sweep comes first, and is also the check of ``testbed run --out /tmp/...``
from this machine: where the kernel lacks features, `testbed run` re-runs itself inside
`testbed vm`, whose /tmp is a private overlay; the results folder is shared into the VM
so the bundles reach this machine, and the last line names where they are.  (Where
native runs are possible the same command runs here, and the same must hold.)  That part
runs without Ray too.

CI runs it with the host integration tests (scripts/test), not inside the VM: a Ray
cluster does not come up under the VM's software emulation (docs/cluster.md).

    .venv/bin/pytest -v -s -m integration tests/integration/test_ray_cluster.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from testbed.results.ranges import out_of_range

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="a run needs root")]

SPEC = """
name = "itray"
duration = "20s"
seed = 11
stop_when_done = true

[topology]
kind = "multipath"
paths = [
  { name = "wifi", bw = "8Mbit", delay = "5ms", queue = 100 },
  { name = "cell", bw = "4Mbit", delay = "15ms", queue = 100 },
]

[transport]
protocol = "mptcp"

[[workload]]
name = "down"
kind = "bulk"
src = "server"
dst = "client"
size = "200KB"

[[workload]]
kind = "ping"
src = "client"
dst = "server"
interval = "200ms"
count = 5

[sampler]
interval = "500ms"

[sweep]
"transport.cc" = ["reno", "cubic"]
"""

TESTBED = [sys.executable, "-m", "testbed.cli"]
REPO = Path(__file__).resolve().parents[2]
# an ss sample only catches a socket when one is open at that moment: a short flow in a
# busy software-emulated VM may finish between two samples (tests/integration/
# test_sweep_resume.py), so this file may be there in one sweep and not the other
BY_CHANCE = {"samples/cwnd.jsonl"}


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **extra}


def _files(bundle: Path) -> set[str]:
    return {p.relative_to(bundle).as_posix() for p in bundle.rglob("*") if p.is_file()} \
        - BY_CHANCE


def _statuses(out: Path) -> dict[str, str]:
    found = {}
    for meta in out.glob("*/metadata.json"):
        try:
            found[meta.parent.name] = json.loads(meta.read_text())["status"]
        except (OSError, ValueError, KeyError):
            found[meta.parent.name] = "?"
    return found


@pytest.fixture
def tmp_out():
    """A folder under /tmp whatever pytest's --basetemp (the VM's /tmp is its own: the
    module docstring), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="testbed-out-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_ray_sweep_survives_a_dead_worker(tmp_path, tmp_out):
    from testbed.run.cluster.node import node_mode

    mode, lacks = node_mode()
    assert mode is not None, f"runs possible neither natively nor in the VM here: {lacks}"

    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    remote = tmp_path / "ray"
    local = tmp_out / "local"
    # under /var/tmp, as the nodes' default scratch folder is: the VM's init mounts a
    # fresh tmpfs there, so a run's folder must be shared with the VM explicitly
    scratch = Path(tempfile.mkdtemp(prefix="tbscratch", dir="/var/tmp")) / "scratch"

    t = time.time()
    res = subprocess.run([*TESTBED, "run", str(spec), "--out", str(local)],
                         capture_output=True, text=True, env=_env(), cwd=REPO, timeout=1800)
    assert res.returncode == 0, res.stderr[-3000:]
    t_local = time.time() - t
    # --out under /tmp: the bundles reached this machine, and the last line says where
    assert _statuses(local) == {k: "complete" for k in _statuses(local)}, _statuses(local)
    assert len(_statuses(local)) == 2 and (local / "summary.parquet").is_file()
    last = res.stderr.strip().splitlines()[-1]
    assert f"results in {local}" in last or f"results in {local.resolve()}" in last, last
    assert "private to the VM" not in res.stderr

    pytest.importorskip("ray", reason="Ray is not installed (scripts/install --cluster)")
    from testbed.run.cluster.localcluster import LocalCluster

    # a short private folder: Ray's Unix socket paths must stay under 108 bytes
    ray_tmp = Path(tempfile.mkdtemp(prefix="tbray", dir="/tmp"))
    cluster = LocalCluster(ray_tmp / "r", workers=2,
                           env=_env(TESTBED_CLUSTER_SCRATCH=str(scratch)))
    log = tmp_path / "ray-sweep.log"
    try:
        t = time.time()
        cluster.start(timeout=900)
        t_up = time.time() - t
        t = time.time()
        with open(log, "w") as f:
            proc = subprocess.Popen([*TESTBED, "run", str(spec), "--out", str(remote),
                                     "--executor", "ray", "--address", cluster.address],
                                    stdout=f, stderr=subprocess.STDOUT, env=_env(), cwd=REPO)
            # mid-sweep: one of the two runs finished and the other under way (each boots
            # a VM: two runs are enough, and each one more costs CI about a minute); then
            # a worker dies
            deadline = time.time() + 1500
            while time.time() < deadline and proc.poll() is None \
                    and "complete" not in _statuses(remote).values():
                time.sleep(0.5)
            assert proc.poll() is None, log.read_text()[-3000:]
            # a worker that holds a run now (running it, or waiting for the machine's
            # emulation lock): the one that just finished may not have its next yet
            busy = None
            while time.time() < deadline and proc.poll() is None and busy is None:
                busy = cluster.busy_worker()
                time.sleep(0.2)
            assert busy is not None, log.read_text()[-3000:]
            killed = cluster.kill_worker(busy)
            rc = proc.wait(timeout=1800)
        t_ray = time.time() - t
    finally:
        cluster.stop()
    text = log.read_text()
    print(f"\nlocal sweep {t_local:.0f}s; cluster up in {t_up:.0f}s; ray sweep {t_ray:.0f}s "
          f"(raylet {killed} killed mid-sweep)\n{text[-2000:]}")
    assert rc == 0, text[-3000:]
    # the killed node held a run: it was sent again, and finished once
    assert "sending it again (try 2 of" in text, text[-3000:]

    # every run once, complete, nothing partial or staged left in --out
    st = _statuses(remote)
    assert st == _statuses(local) == {k: "complete" for k in st}, (st, _statuses(local))
    assert len(st) == 2
    assert not (remote / "_attempts").exists()
    assert not [p.name for p in remote.iterdir() if p.name.startswith(".incoming-")]
    assert not scratch.exists() or not list(scratch.iterdir())
    shutil.rmtree(scratch.parent, ignore_errors=True)
    shutil.rmtree(ray_tmp, ignore_errors=True)
    for run in st:
        assert _files(remote / run) == _files(local / run), run
        b = remote / run
        meta = json.loads((b / "metadata.json").read_text())
        assert meta["flows"]["failed"] == 0, meta["flows"]
        node = meta["node"]
        assert node["executor"] == "ray" and node["mode"] == mode
        assert node["hostname"] and node["ray_node_id"] and node["kernel"]
        assert not subprocess.run(["sha256sum", "-c", "--quiet", "manifest.sha256"],
                                  cwd=b, capture_output=True).returncode

    # the summary: the same shape as the local sweep's
    a, b = pd.read_parquet(local / "summary.parquet"), pd.read_parquet(remote / "summary.parquet")
    # and every value within its column's range (docs/bundle.md), on both sides
    assert out_of_range("runs", a) == out_of_range("runs", b) == []
    for run in st:
        for side in (local, remote):
            assert out_of_range("flows", pd.read_parquet(side / run / "metrics/flows.parquet")) \
                == [], (side.name, run)
    assert list(a.columns) == list(b.columns)
    assert dict(a.dtypes.astype(str)) == dict(b.dtypes.astype(str))
    assert sorted(a["run_id"]) == sorted(b["run_id"]) and len(b) == 2
