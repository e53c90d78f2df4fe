import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.core.batch import run_batches
from testbed.core.commands import CommandRunner, in_parallel, which
from testbed.core.errors import CommandError, CommandTimeout, MissingFeatureError
from testbed.core.recording import RecordingRunner
from testbed.core.transcript import in_namespace


@dataclass
class FakeHost:
    name: str = "h1"
    pid: int = 4242


def test_in_namespace_prefixes_mnexec():
    assert in_namespace(["ip", "addr"], None) == ["ip", "addr"]
    assert in_namespace(["ip", "addr"], FakeHost()) == ["mnexec", "-a", "4242", "ip", "addr"]


def test_run_captures_output_and_records_transcript():
    r = CommandRunner()
    res = r.run([sys.executable, "-c", "print('hi')"])
    assert res.stdout.strip() == "hi"
    assert res.returncode == 0
    [entry] = r.transcript.entries
    assert entry.argv[-1] == "print('hi')"
    assert entry.returncode == 0
    line = json.loads(r.transcript.to_jsonl())
    assert line["where"] == "root"


def test_failure_raises_typed_error_with_stderr_tail():
    r = CommandRunner()
    with pytest.raises(CommandError) as exc:
        r.run([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"])
    assert exc.value.returncode == 3
    assert "boom" in exc.value.stderr
    assert "exit 3" in str(exc.value)
    assert r.run([sys.executable, "-c", "raise SystemExit(4)"], check=False).returncode == 4


def test_timeout_raises():
    r = CommandRunner()
    t0 = time.time()
    with pytest.raises(CommandTimeout):
        r.run([sys.executable, "-c", "import time; time.sleep(10)"], timeout=0.3)
    assert time.time() - t0 < 5


def test_missing_program_is_missing_feature():
    with pytest.raises(MissingFeatureError, match="not installed"):
        CommandRunner().run(["definitely-not-a-program-xyz"])
    assert CommandRunner().ok(["definitely-not-a-program-xyz"]) is False


def test_spawn_and_stop_only_own_process(tmp_path):
    r = CommandRunner()
    log = tmp_path / "p.log"
    p = r.spawn([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(30)"],
                log=log)
    assert p.running()
    assert r.running() == [p]
    deadline = time.time() + 5
    while "up" not in log.read_text() and time.time() < deadline:
        time.sleep(0.05)
    p.stop(timeout=2)
    assert not p.running()
    assert r.running() == []
    kinds = [e.kind for e in r.transcript.entries]
    assert kinds == ["spawn", "stop"]


def test_a_recording_runner_records_without_running(tmp_path):
    r = RecordingRunner(lambda argv, where, input: "v" if argv[0] == "sysctl" else "")
    marker = tmp_path / "x"
    assert r.run(["touch", str(marker)], host=FakeHost()).stdout == ""
    assert r.run(["sysctl", "-n", "a.b"]).stdout == "v"
    p = r.spawn(["sleep", str(marker)], host=FakeHost())
    assert p.running() and r.running() == [p]
    sh = r.batch_shell("tc", FakeHost())
    sh.run([["tc", "qdisc", "show"], ["tc", "class", "show"]])
    assert p.wait() == 0 and not p.running()
    p.stop()
    sh.stop()
    assert not marker.exists() and r.running() == []
    got = [(e.kind, e.argv[3:]) for e in r.transcript.entries]
    assert got == [("run", ["touch", str(marker)]), ("run", []),
                   ("spawn", ["sleep", str(marker)]),
                   ("batch", ["tc", "-force", "-batch", "-"]),
                   ("run", ["tc", "qdisc", "show"]), ("run", ["tc", "class", "show"]),
                   ("stop", ["sleep", str(marker)]), ("stop", ["tc", "-force", "-batch", "-"])]
    assert "mnexec -a 4242 touch" in r.transcript.as_shell()


def test_call_streams_and_returns_code():
    r = CommandRunner()
    assert r.call([sys.executable, "-c", "raise SystemExit(7)"]) == 7


@pytest.mark.skipif(which("tc") is None or which("ip") is None, reason="iproute2 missing")
def test_batch_shell_runs_reports_failures_per_command_and_stops() -> None:
    runner = CommandRunner()
    tc = runner.batch_shell("tc")
    show = ["tc", "qdisc", "show", "dev", "lo"]
    tc.run([show, show])
    with pytest.raises(CommandError, match="nosuch0"):
        tc.run([show, ["tc", "qdisc", "show", "dev", "nosuch0"], show])
    tc.run([show])  # still usable after a failure
    ip = runner.batch_shell("ip")
    ip.run([["ip", "link", "show", "dev", "lo"]])
    with pytest.raises(ValueError):
        ip.run([show])  # a tc command given to the ip shell
    entries = [(e.kind, e.argv[-1], e.returncode) for e in runner.transcript.entries]
    assert entries == [("batch", "-", None), ("run", "lo", 0), ("run", "lo", 0),
                       ("run", "lo", 0), ("run", "nosuch0", 1), ("run", "lo", 0),
                       ("run", "lo", 0), ("batch", "-", None), ("run", "lo", 0)]
    assert "-batch" not in runner.transcript.as_shell()
    assert len(runner.running()) == 2
    tc.stop()
    ip.stop()
    assert runner.running() == [] and not tc.running()


@pytest.mark.skipif(which("tc") is None or which("ip") is None, reason="iproute2 missing")
def test_run_batches_writes_every_shell_before_reading_and_reads_them_all() -> None:
    runner = CommandRunner()
    tc, ip = runner.batch_shell("tc"), runner.batch_shell("ip")
    try:
        show_tc = ["tc", "qdisc", "show", "dev", "lo"]
        show_ip = ["ip", "link", "show", "dev", "lo"]
        assert run_batches([(tc, [show_tc]), (ip, [show_ip, show_ip])]) > 0
        with pytest.raises(CommandError, match="nosuch0"):  # the first job fails ...
            run_batches([(tc, [["tc", "qdisc", "show", "dev", "nosuch0"]]), (ip, [show_ip])])
        # ... and the second was still read to its end: both shells stay in step
        run_batches([(tc, [show_tc]), (ip, [show_ip])])
        with pytest.raises(ValueError, match="one job per batch shell"):
            run_batches([(tc, [show_tc]), (tc, [show_tc])])
        runs = [(e.argv[0], e.argv[-1], e.returncode) for e in runner.transcript.entries
                if e.kind == "run"]
        assert runs == [("tc", "lo", 0), ("ip", "lo", 0), ("ip", "lo", 0),
                        ("tc", "nosuch0", 1), ("ip", "lo", 0), ("tc", "lo", 0), ("ip", "lo", 0)]
    finally:
        tc.stop()
        ip.stop()


def test_call_relay_interrupt_stops_the_whole_process_tree(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 60 & echo $! > {pidfile}; wait"
    # a shell's background job inherits SIGINT ignored: make it raise here regardless
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            CommandRunner().call(["sh", "-c", script], relay=True)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    pid = int(pidfile.read_text())

    def gone() -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        return state in ("Z", "X")

    deadline = time.time() + 5
    while not gone() and time.time() < deadline:
        time.sleep(0.05)
    assert gone(), "the child's own child outlived the interrupt"


@pytest.mark.skipif(which("tc") is None or which("ip") is None, reason="iproute2 missing")
def test_run_batches_checks_every_job_before_running_any() -> None:
    runner = CommandRunner()
    tc, ip = runner.batch_shell("tc"), runner.batch_shell("ip")
    try:
        with pytest.raises(ValueError, match="ip batch shell given"):
            run_batches([(tc, [["tc", "qdisc", "show", "dev", "lo"]]),
                         (ip, [["tc", "qdisc", "show", "dev", "lo"]])])
        assert [e for e in runner.transcript.entries if e.kind == "run"] == []  # none ran
        run_batches([(tc, [["tc", "qdisc", "show", "dev", "lo"]])])  # still in step
    finally:
        tc.stop()
        ip.stop()


def test_as_shell_shows_input_as_a_here_document() -> None:
    from testbed.core.transcript import Transcript, TranscriptEntry

    t = Transcript()
    t.add(TranscriptEntry(0.0, ["nft", "-f", "-"], "root", 0, 0.0, input="table x\nEOF\n"))
    t.add(TranscriptEntry(0.0, ["mnexec", "-a", "7", "tc", "-force", "-batch", "-"], "h1",
                          0, 0.0, input="qdisc show\n", at=2.5))
    assert t.as_shell().splitlines()[2:] == [
        "nft -f - <<'EOF_'", "table x", "EOF", "EOF_",
        "# at t = 2.5s on the run's clock (after its start):",
        "# in h1: mnexec -a 7 tc -force -batch - <<'EOF'", "# qdisc show", "# EOF"]


def test_an_argument_with_a_newline_cannot_end_a_comment(tmp_path) -> None:
    """A command in a host is a comment in commands.sh: an argument holding a newline
    (a crafted spec's value) used to end that comment and leave its rest as a command."""
    import subprocess

    from testbed.core.transcript import Transcript, TranscriptEntry

    t = Transcript()
    evil = "net.ipv4.tcp_sack=1\necho INJECTED #"
    t.add(TranscriptEntry(0.0, ["mnexec", "-a", "7", "sysctl", "-w", evil], "client", 0, 0.0))
    t.add(TranscriptEntry(0.0, ["mnexec", "-a", "7", "nft", "-f", "-"], "client", 0, 0.0,
                          input="table x\necho INPUT\n"))
    t.add(TranscriptEntry(0.0, ["echo", "x\necho ROOT"], "root", 0, 0.0))
    script = tmp_path / "commands.sh"
    script.write_text(t.as_shell())
    lines = script.read_text().splitlines()
    assert [line for line in lines if not line.startswith("#")] == ["echo 'x", "echo ROOT'"]
    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True)
    assert out.stdout == "x\necho ROOT\n"  # the root command's argument, printed whole


def test_run_records_its_input(tmp_path) -> None:
    runner = CommandRunner()
    runner.run(["cat"], input="hello\n")
    assert runner.transcript.entries[-1].input == "hello\n"
    assert "cat <<'EOF'\nhello\nEOF" in runner.transcript.as_shell()


def test_in_parallel_keeps_the_order_and_raises_the_first_error():
    assert in_parallel(lambda x: x * 2, list(range(10)), workers=3) == list(range(0, 20, 2))
    assert in_parallel(str, []) == [] and in_parallel(str, [7]) == ["7"]

    def boom(x: int) -> int:
        if x == 3:
            raise ValueError("host 3")
        return x

    with pytest.raises(ValueError, match="host 3"):
        in_parallel(boom, list(range(6)))
