"""The dry run is the real path: ``testbed run --dry-run`` lists the commands a real run
of the same spec executes (`testbed.run.dryrun`).

A small multi-path MPTCP run with a bulk transfer, a ping, an ``ss`` sampler, captures
and a link schedule (a rate change and a link taken down) runs for real; its
``transcript.jsonl`` must hold exactly the commands the dry run records for it, each as
often, with the same namespace, stdin and schedule time.  Process ids (``mnexec -a``),
the warm-up veth's pid-based name, the flow tool's start- and listen-signal file names and the
network's tag (`testbed.net.tags`, also in the names of its ``ip netns`` handles, with
the shells' pids they are made from) are the only things set aside.  The run builds and
stops its own network (``--fresh-networks``): a network kept for the next run puts
back, at the end of a run, what the run changed in its hosts (routes, MPTCP limits and
endpoints) after reading their state, and those restoring commands depend on the
kernel's answers, which a dry run does not have.

    testbed vm -- .venv/bin/pytest -m integration tests/integration/test_dry_run_real.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="a run needs root"),
              pytest.mark.needs_kernel("netem", "ovs", "mptcp")]

REPO = Path(__file__).resolve().parents[2]
SPEC = """
name = "dryreal"
duration = "4s"
seed = 5

[topology]
kind = "multipath"
paths = [
  { name = "wifi", bw = "8Mbit", delay = "5ms", queue = 50 },
  { name = "cell", bw = "4Mbit", delay = "10ms", queue = 50 },
]

[transport]
protocol = "mptcp"
cc = "cubic"

[[workload]]
kind = "bulk"
src = "server"
dst = "client"
size = "150KB"

[[workload]]
kind = "ping"
src = "client"
dst = "server"
interval = "200ms"
count = 5

[[schedule]]
at = "1.5s"
link = "cell"
bw = "2Mbit"

[[schedule]]
at = "3s"
link = "cell"
down = true

[sampler]
interval = "500ms"
"""

PID = re.compile(r"^\d+$")
NAMES = [(re.compile(r"tbw\d+"), "tbwPID"),                       # warm-up veth (pid)
         (re.compile(r"testbed-go-[^/]+/(go|listen)"), r"testbed-go-ID/\1"),  # signal files
         (re.compile(r"testbed-net=[0-9a-f]+"), "testbed-net=TAG"),  # each network's tag
         (re.compile(r"(netns attach tb-)[0-9a-f]+(-\w+) \d+"), r"\1TAG\2 PID"),  # handles
         (re.compile(r"tb-[0-9a-f]+-"), "tb-TAG-")]


def normal(entry: dict) -> tuple:
    """A transcript entry without what differs between two runs of one spec."""
    argv = list(entry["argv"])
    if argv[:2] == ["mnexec", "-a"] and PID.match(argv[2]):
        argv[2] = "PID"
    text, stdin = json.dumps(argv), entry.get("input")
    for pattern, repl in NAMES:
        text = pattern.sub(repl, text)
        stdin = pattern.sub(repl, stdin) if stdin else stdin
    return (entry["kind"], entry["where"], text, stdin, entry.get("at"))


def test_a_dry_run_lists_the_commands_of_the_real_run(tmp_path: Path) -> None:
    from testbed.run.dryrun import dry_run_commands
    from testbed.spec.sweep import plan_runs

    spec = tmp_path / "dryreal.toml"
    spec.write_text(SPEC)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(spec), "--out",
                          str(out), "--fresh-networks"], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr
    run = plan_runs(spec)[0]
    real = [json.loads(line) for line in
            (out / run.run_id / "transcript.jsonl").read_text().splitlines()]
    dry = dry_run_commands(run, out / run.run_id, keep=False).transcript.entries
    dry_entries = [{"kind": e.kind, "where": e.where, "argv": e.argv, "input": e.input,
                    "at": e.at} for e in dry]
    got, want = Counter(map(normal, dry_entries)), Counter(map(normal, real))
    only_dry, only_real = got - want, want - got
    assert not only_dry and not only_real, (
        "only in the dry run:\n" + "\n".join(map(str, only_dry.elements())) +
        "\nonly in the real run:\n" + "\n".join(map(str, only_real.elements())))
    assert len(real) > 60  # set-up, transport, captures, flows, schedule, teardown
    scheduled = sorted({e["at"] for e in real if e.get("at") is not None})
    assert scheduled == [1.5, 3.0]  # the link schedule's commands carry their times
    print(f"FIGURES dry run = real run: {len(real)} commands, "
          f"{len(want)} distinct (modulo pids)")
