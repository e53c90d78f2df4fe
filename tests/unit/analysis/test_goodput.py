"""Goodput: the bytes a segment carries that no earlier segment did, so a series' goodput
adds up to its flows row's ``bytes`` (issue 25: the docs' 2 % promise, for every row).

Two real captures from quick-study runs in the testbed VM, kept gzipped under tests/data:

* ``p1-random/S6-S6-eth0.pcap.gz``: host S6's capture of a run of
  experiments/p1_fattree_spray/quick/random.toml (packet spraying on a fat tree).  Its
  2 MB flow to 10.3.1.2 has hundreds of retransmissions, and some first transmissions never
  reached the wire at S6's interface (dropped before the capture point), so their bytes are
  first seen there in a segment flagged as a retransmission.
* ``p2-loss/p2-loss-quick-1e7a2784f0-r1``: a whole run of
  experiments/p2_three_paths/quick/loss.toml (MPTCP over three paths with 10 % loss), its
  captures whole, metadata.json reduced to what the analysis reads.  MPTCP reinjects data
  on other subflows there: the subflows carry about 24 % more payload than the connection's
  data-sequence span.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.bundle import analyze_bundle
from analysis.capture import CaptureAnalysis
from analysis.sequence import first_seen_bytes

DATA = Path(__file__).resolve().parents[2] / "data" / "analysis"
P1_CAPTURE = DATA / "p1-random" / "S6-S6-eth0.pcap.gz"
P1_FLOW = "tcp:10.1.1.2:48212>10.3.1.2:5002"
P2_RUN = "p2-loss-quick-1e7a2784f0-r1"


def _brute_force(group, start, end) -> list[int]:
    seen: dict[int, set[int]] = {}
    out = []
    for g, a, b in zip(group, start, end, strict=True):
        s = seen.setdefault(int(g), set())
        mine = set(range(int(a), int(b)))
        out.append(len(mine - s))
        s |= mine
    return out


@pytest.mark.parametrize(("start", "end", "want"), [
    ([0, 10, 20], [10, 20, 30], [10, 10, 10]),            # in order
    ([0, 10, 0, 10], [10, 20, 10, 20], [10, 10, 0, 0]),     # sent again
    ([0, 20, 10, 30], [10, 30, 20, 40], [10, 10, 10, 10]),  # a hole filled later
    ([10, 0, 5], [20, 10, 15], [10, 10, 0]),                # below the first segment
    ([0, 5, 20, 8], [10, 15, 30, 25], [10, 5, 10, 5]),      # partly old, partly new
])
def test_first_seen_bytes_of_one_group(start, end, want):
    g = np.zeros(len(start), np.int64)
    assert first_seen_bytes(g, np.array(start), np.array(end)).tolist() == want


def test_first_seen_bytes_agrees_with_counting_every_byte():
    rng = np.random.default_rng(7)
    for _ in range(500):
        n = int(rng.integers(1, 40))
        g = np.sort(rng.integers(0, 4, n))
        start = rng.integers(-30, 80, n)
        end = start + rng.integers(0, 20, n)
        got = first_seen_bytes(g, start, end)
        assert got.tolist() == _brute_force(g, start, end)
        for k in np.unique(g):  # a group's counts add up to the bytes of its union
            assert got[g == k].sum() == len(set().union(
                *(range(a, b) for a, b in zip(start[g == k], end[g == k], strict=True))))


@pytest.fixture(scope="module")
def p1(tmp_path_factory) -> CaptureAnalysis:
    path = tmp_path_factory.mktemp("p1") / P1_CAPTURE.stem
    path.write_bytes(gzip.decompress(P1_CAPTURE.read_bytes()))
    return CaptureAnalysis.of(path)


def test_goodput_of_every_flow_adds_up_to_its_bytes(p1):
    good = p1.goodput_bytes()
    rows, flow, _ = p1.data_bytes_per_packet()
    per_flow = np.bincount(flow, good[rows], len(p1.flow_rows)).astype(np.int64)
    tcp = (p1.flow_rows["proto"] == "tcp").to_numpy()
    assert tcp.sum() >= 2
    assert per_flow[tcp].tolist() == p1.flow_rows["bytes"].to_numpy()[tcp].tolist()


def test_first_transmissions_missed_by_the_capture_count_when_first_seen(p1):
    # what makes the test above able to fail: leaving out every retransmitted segment,
    # as goodput once did, loses the bytes whose first transmission S6 never saw
    fi = int(np.flatnonzero(p1.flow_rows["flow_id"].to_numpy() == P1_FLOW)[0])
    seg = p1.segments
    mine = seg[(seg["flow"] == fi) & (seg["payload"] > 0)
               & (seg["dir"] == p1.flow_rows["data_dir"].iat[fi])]
    good = p1.goodput_bytes()[mine["row"].to_numpy()]
    retrans = mine["retrans"].to_numpy()
    assert p1.flow_rows["bytes"].iat[fi] == 2_000_000
    assert mine["payload"][~retrans].sum() < 0.98 * 2_000_000
    assert good[retrans].sum() > 0.02 * 2_000_000
    assert good.sum() == 2_000_000
    assert (good <= mine["payload"].to_numpy()).all()


@pytest.fixture(scope="module")
def p2(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("p2") / P2_RUN
    shutil.copytree(DATA / "p2-loss" / P2_RUN, run)
    for gz in run.glob("pcap/*.pcap.gz"):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    analyze_bundle(run)
    return run


def _goodput_sums(run: Path) -> tuple[pd.DataFrame, pd.Series]:
    flows = pd.read_parquet(run / "metrics" / "flows.parquet")
    ts = pd.read_parquet(run / "metrics" / "timeseries.parquet")
    good = (ts["goodput_bps"] * ts["bin_s"] / 8).groupby([ts["kind"], ts["key"]]).sum()
    return flows, good


def test_connection_goodput_counts_reinjected_data_once(p2):
    flows, good = _goodput_sums(p2)
    conn = flows[flows["kind"] == "connection"].iloc[0]
    subs = flows[flows["kind"] == "subflow"]
    assert len(subs) == 3
    # reinjections: the subflows carry more than the connection's data-sequence span ...
    assert subs["bytes"].sum() > 1.2 * conn["bytes"]
    # ... and the connection's goodput is that span, its subflows' their own spans
    assert round(good["connection", conn["flow_id"]]) == conn["bytes"]
    for r in subs.itertuples(index=False):
        assert round(good["subflow", r.flow_id]) == r.bytes, r.flow_id


def test_connection_rate_is_every_payload_byte_arriving_at_the_receiver(p2):
    flows = pd.read_parquet(p2 / "metrics" / "flows.parquet")
    ts = pd.read_parquet(p2 / "metrics" / "timeseries.parquet")
    conn = flows[flows["kind"] == "connection"].iloc[0]
    subs = set(flows[flows["kind"] == "subflow"]["flow_id"])
    here = ts[(ts["kind"] == "connection") & (ts["key"] == conn["flow_id"])]
    # counted where the connection row is: the data receiver's capture
    assert set(here["capture"]) == {conn["capture_receiver"]} == {"server-server-eth0"}
    arrived = 0
    for cap in conn["capture_receiver"].split(","):
        c = CaptureAnalysis.of(p2 / "pcap" / f"{cap}.pcap")
        _rows, flow, payload = c.data_bytes_per_packet()
        of_conn = np.isin(c.flow_rows["flow_id"].to_numpy()[flow], list(subs))
        arrived += int(payload[of_conn].sum())
    assert round((here["rate_bps"] * here["bin_s"] / 8).sum()) == arrived
    # 10 % loss: less than the subflows sent (their rows: the sender's captures)
    sent = (ts["rate_bps"] * ts["bin_s"] / 8).groupby([ts["kind"], ts["key"]]).sum()
    assert arrived < sum(sent["subflow", s] for s in subs)


def test_a_join_subflows_capture_takes_the_connections_data_origin(p2):
    # client-eth1 and client-eth2 hold join subflows only: without the key captured at
    # client-eth0 their DSNs would count from the first one each saw
    caps = [CaptureAnalysis.of(p) for p in sorted((p2 / "pcap").glob("client-*.pcap"))]
    alone = {c.name: int(c.dsn["dsn"].iat[0]) for c in caps}  # the first DSN each saw
    origins: dict[str, int] = {}
    for c in caps:
        origins.update(c.dsn_origins())
    assert len(origins) == 1
    for c in caps:
        c.align_dsn(origins)
    aligned = {c.name: int(c.dsn["dsn"].iat[0]) for c in caps}
    assert alone["client-client-eth0"] == aligned["client-client-eth0"] == 0
    for join in ("client-client-eth1", "client-client-eth2"):
        assert alone[join] == 0 < aligned[join]
    d = pd.concat([c.dsn for c in caps]).sort_values("ts", kind="stable")
    flows = pd.read_parquet(p2 / "metrics" / "flows.parquet")
    conn = flows[flows["kind"] == "connection"].iloc[0]
    assert int(d["end"].max() - d["dsn"].min()) == conn["bytes"]
