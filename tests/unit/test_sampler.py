"""parse_ss / cwnd_rows on `ss` output captured in the VM (tests/data/transport/)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbed.core.commands import CommandRunner, Result
from testbed.host.sampler import (
    Sampler,
    cwnd_rows,
    loop_argv,
    parse_info,
    parse_rate,
    parse_ss,
    sample_time,
    split_endpoint,
    split_samples,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "transport"


def test_small_parsers() -> None:
    assert parse_rate("5549871bps") == 5549871
    assert parse_rate("5.5Mbps") == 5.5e6
    assert parse_rate("fast") is None
    assert split_endpoint("10.0.1.1:5001") == ("10.0.1.1", 5001)
    assert split_endpoint("[::ffff:10.0.0.1]:22") == ("::ffff:10.0.0.1", 22)
    assert split_endpoint("*:*") == ("*", None)
    info = parse_info("ts sack bbr wscale:7,7 rtt:1.5/0.75 send 10Mbps "
                      "bbr:(bw:9.5Mbps,mrtt:10,pacing_gain:1,cwnd_gain:2) app_limited")
    assert info["cc"] == "bbr" and info["send"] == "10Mbps" and info["rtt"] == "1.5/0.75"
    assert "app_limited" in info["_flags"]


def test_plain_tcp_reno() -> None:
    entries = parse_ss((DATA / "ss_tinM_client_tcp_reno.txt").read_text())
    assert len(entries) == 2
    bulk = entries[0]
    assert (bulk["netid"], bulk["state"], bulk["src_addr"], bulk["sport"], bulk["dst_addr"],
            bulk["dport"]) == ("tcp", "ESTAB", "10.0.1.1", 54148, "10.0.1.2", 5202)
    assert (bulk["cc"], bulk["cwnd"], bulk["ssthresh"]) == ("reno", 1377, None)
    assert (bulk["srtt_ms"], bulk["rttvar_ms"]) == (2874.15, 48.054)
    assert bulk["delivery_rate_bps"] == 2747504 and bulk["bytes_acked"] == 1989590
    assert bulk["retrans"] == 3 and bulk["send_q"] == 4301904
    assert bulk["mptcp_token"] is None
    ctrl = entries[1]
    assert (ctrl["cc"], ctrl["cwnd"], ctrl["ssthresh"], ctrl["lost"]) == ("cubic", 1, 7, 1)


def test_fallback_subflows_map_to_their_mptcp_socket() -> None:
    entries = parse_ss((DATA / "ss_tinM_client_fallback.txt").read_text())
    assert [e["netid"] for e in entries] == ["tcp", "tcp", "mptcp", "mptcp"]
    sub = entries[1]
    assert sub["mptcp_token"] == "134c5e69" and sub["mptcp_remote_token"] == "0"
    assert sub["mptcp_flags"] == "mc" and sub["mptcp_subflow_id"] == 0
    msk = entries[3]
    assert msk["mptcp_token"] == "134c5e69" and msk["mptcp_fallback"] is True
    assert msk["cc"] is None and msk["cwnd"] is None
    rows = cwnd_rows(entries, 10.0, "client")
    assert len(rows) == 2
    assert rows[1]["protocol"] == "mptcp" and rows[1]["mptcp_fallback"] is True
    assert rows[1]["cwnd"] == 157 and rows[1]["t"] == 10.0 and rows[1]["host"] == "client"


MPTCP_FILES = sorted(DATA.glob("ss_tinM_client_mptcp*.txt"))


@pytest.mark.parametrize("path", MPTCP_FILES, ids=lambda p: p.name)
def test_mptcp_subflows_share_the_connection_token(path: Path) -> None:
    entries = parse_ss(path.read_text())
    msks = [e for e in entries if e["netid"] == "mptcp" and e["subflows"]]
    assert msks, "no MPTCP connection with subflows in the capture"
    for msk in msks:
        subs = [e for e in entries if e["netid"] == "tcp"
                and e["mptcp_token"] == msk["mptcp_token"]]
        assert len(subs) == msk["subflows"] + 1
        assert not msk["mptcp_fallback"]
        # joined subflows name the peer's token; the initial one shows 0 even when the
        # connection did not fall back (the MPTCP socket's flag tells fallback)
        assert all(s["mptcp_remote_token"] not in (None, "0") for s in subs
                   if s["mptcp_subflow_id"] != 0)
        assert len({s["src_addr"] for s in subs}) == len(subs)


def test_rows_filter_by_port() -> None:
    entries = parse_ss((DATA / "ss_tinM_client_tcp_reno.txt").read_text())
    assert len(cwnd_rows(entries, 0.0, "h", ports={5202})) == 2
    assert cwnd_rows(entries, 0.0, "h", ports={80}) == []
    assert parse_ss("") == []


def test_ss_mptcp_only_output_has_no_netid_column() -> None:
    """``ss -Mai`` lists only MPTCP sockets and prints no Netid column (iproute2 6.1)."""
    entries = parse_ss((DATA / "ss_Mai_loopback.txt").read_text(), netid="mptcp")
    assert [(e["netid"], e["state"], e["mptcp_token"]) for e in entries] == [
        ("mptcp", "ESTAB", "4f0d0e1c"), ("mptcp", "ESTAB", "222c9c47"),
        ("mptcp", "LISTEN", None)]
    assert (entries[0]["sport"], entries[0]["dport"]) == (53872, 50237)


@dataclass
class Host:
    name: str = "client"
    pid: int = 1


@dataclass
class FakeSs:
    text: str
    calls: list[tuple[list[str], bool]] = field(default_factory=list)

    def run(self, argv, host=None, record=True, **_kw) -> Result:
        self.calls.append((list(argv), record))
        return Result(list(argv), 0, self.text, "", 0.0)


def test_sampler_writes_raw_and_rows(tmp_path: Path) -> None:
    fake = FakeSs((DATA / "ss_tinM_client_tcp_reno.txt").read_text())
    s = Sampler(fake, Host(), tmp_path, interval=0.01, ports={5202}, mode="spawn")
    s.sample_once()
    s.sample_once()
    assert fake.calls[0] == (["ss", "-tinHM"], True) and fake.calls[1][1] is False
    raw = (tmp_path / "ss-client.txt").read_text()
    assert raw.count("# t=") == 2 and raw.count("# t_end=") == 2
    row = json.loads((tmp_path / "cwnd.jsonl").read_text().splitlines()[0])
    assert row["sample_s"] >= 0
    assert len((tmp_path / "cwnd.jsonl").read_text().splitlines()) == 4
    s.start()
    stats = s.stop()
    assert stats["samples"] >= 3 and stats["errors"] == 0


def test_split_samples_of_a_file_without_end_lines_drops_a_torn_tail() -> None:
    text = "# t=1.5\nA\nB\n# t=2.5\n# t=3.5\nC"
    assert split_samples(text) == [(1.5, None, "A\nB\n"), (2.5, None, "")]
    assert split_samples(text + "\n") == [(1.5, None, "A\nB\n"), (2.5, None, ""),
                                          (3.5, None, "C\n")]
    assert loop_argv(0.05)[:2] == ["bash", "-c"] and loop_argv(0.05)[-1] == "0.05"


def test_split_samples_keeps_each_runs_end_and_drops_a_sample_without_one() -> None:
    text = ("# t=1.5\nA\nB\n# t_end=1.75\n# t=2.5\n# t_end=2.5\n"
            "# t=3.5\nC\n")                       # ss killed while it printed
    assert split_samples(text) == [(1.5, 1.75, "A\nB\n"), (2.5, 2.5, "")]
    assert sample_time(1.5, 1.75) == (1.625, 0.25)
    assert sample_time(1.5, None) == (1.5, None)
    assert sample_time(1.5, 1.4) == (1.5, 0.0)      # the clock stepped back


def test_the_loop_stamps_each_ss_run_before_and_after(tmp_path: Path) -> None:
    """The real loop script (bash, with a stand-in `ss` that takes 0.2 s to start and
    prints one socket), parsed as the sampler parses it: each row's t is the middle of
    its run, sample_s the run's length."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    socket = (DATA / "ss_tinM_client_tcp_reno.txt").read_text()
    (bin_dir / "ss").write_text(f"#!/bin/bash\nsleep 0.2\ncat <<'EOF'\n{socket}EOF\n")
    (bin_dir / "ss").chmod(0o755)
    proc = subprocess.Popen(loop_argv(0.05), stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    time.sleep(1.0)
    proc.terminate()
    text, _ = proc.communicate(timeout=10)
    samples = split_samples(text)
    assert len(samples) >= 2
    for start, end, chunk in samples:
        assert end is not None and end - start >= 0.2
        t, length = sample_time(start, end)
        rows = cwnd_rows(parse_ss(chunk), t, "client", sample_s=length)
        assert rows and all(r["t"] == t and r["sample_s"] == round(length, 6) for r in rows)
        assert start + 0.1 <= t <= end - 0.1


class LocalRunner(CommandRunner):
    """Runs host commands in this namespace (no root needed)."""

    def spawn(self, argv, *, host=None, **kw):
        return super().spawn(argv, **kw)


def test_loop_mode_runs_one_process_and_parses_at_stop(tmp_path: Path) -> None:
    runner = LocalRunner()
    s = Sampler(runner, Host(), tmp_path, interval=0.05)
    s.start()
    time.sleep(0.6)
    stats = s.stop()
    assert stats["mode"] == "loop" and stats["samples"] >= 2, stats
    assert (tmp_path / "ss-client.txt").read_text().count("# t=") >= stats["samples"]
    assert not (tmp_path / "ss-client.part").exists()
    assert [e.kind for e in runner.transcript.entries].count("spawn") == 1
