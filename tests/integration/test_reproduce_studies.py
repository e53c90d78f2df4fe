"""Reproduction tests: each study's quick variant runs end to end and shows the paper's
qualitative claim where our setup should show it (issue 8).

All five quick studies run once, through the real command line (``testbed study <five
folders> --variant quick``): natively where `testbed doctor` allows, otherwise the runs
happen in one boot of `testbed vm` and the reports are written on this machine afterwards
(plotting under software emulation took minutes per study).  Each test then checks its
study: every run completed, the reports exist, and the study's claims
(``experiments/<study>/study.py``) hold.  A claim listed in `DOCUMENTED` is one our testbed
does not show; the test then only records the measured values, and the study README must
discuss it (checked here too).  Each study report references only figures that exist and
are not blank, holds no JSON in a table cell, and loads in headless Chromium with every
image decoded (where Chromium is installed).  Results, reports and the measured values of
every claim stay in ``results/ci-reproduction/`` for the closing notes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from studyreports import CHROMIUM, chromium_images, chromium_svgs, is_blank, parse, problems

from analysis.evidence import HOLDS, INCONCLUSIVE
from analysis.study_report import evaluate

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "results" / "ci-reproduction"

# long (all five quick studies); runs on this machine and boots the VM itself if needed
pytestmark = [pytest.mark.integration, pytest.mark.reproduction]

# study folder -> (figure, claim text prefix) that must hold on the quick variant; the
# figure ("" = any) tells apart the same claim made for two scenarios
REQUIRED: dict[str, list[tuple[str, str]]] = {
    "p0_wifi_3g": [("", "MPTCP over WiFi + 3G beats the best single path")],
    "p1_fattree_spray": [("", "spraying delivers some short-flow packets out of order")],
    "p2_three_paths": [("", "10 % loss per direction shows as ping loss")],
    # issue 18's timing (TCP/mm waits for its backed-off timer, the schemes do not) is
    # asserted on the captures by test_p3_handover_schemes
    "p3_handover": [],
    "p4_rbuf_blocking": [("", "a 64 KiB receive buffer lowers the aggregate")],
}
# claims our testbed does not show reliably: evaluated, their values recorded, not
# asserted; the study README says so ("does not reproduce") and why
DOCUMENTED: dict[str, list[tuple[str, str]]] = {
    # the coupled controls on one 8 s run each: normal load, all four within 5 %; heavy
    # load, BALIA last (its WiFi subflow's window cut to 2-3, the 3G subflow starved by
    # the 6.1 scheduler's queue on it; README "which orderings hold")
    "p0_wifi_3g": [("Fig. 6", "at normal load LIA has the best throughput"),
                   ("Fig. 7", "under heavy load BALIA has the best throughput"),
                   ("Fig. 7", "under heavy load wVegas does better than LIA and OLIA")],
    "p2_three_paths": [], "p4_rbuf_blocking": [],
    # one run per point: static spray's short flow was -4 % to +2 % of single-path's in
    # four CI-VM runs and 27 % slower in a fifth; random: 3 % faster to 2.2x slower
    "p1_fattree_spray": [("static", "spraying's short-flow FCT is not worse"),
                         ("random", "spraying's short-flow FCT is not worse")],
    # Linux usually recovers far faster than ns-2 NewReno: what the receiver got was 72-86 %
    # of the ideal in six of seven runs (the line is 80 %) and 36 % in one, the paper 30.5 %
    "p3_handover": [("case1_wlan_to_imt",
                     "right after a 20 Mbit/s -> 384 kbit/s handover TCP stays well below"),
                    # issue 18, one run per point: Linux's TCP/mm leaves Bandwidth-Aware
                    # little to gain (91 % on Table 3's case); the README's "The paper's
                    # schemes" gives the ratios and why
                    ("case1_wlan_to_imt", "Bandwidth-Aware gets more of the ideal"),
                    ("case1_imt_to_wired", "Bandwidth-Aware gets more of the ideal"),
                    ("case2_long_outage", "Bandwidth-Aware gets more of the ideal"),
                    # Table 4's window holds 1.5 s of the 384 kbit/s link (72 KB), and one
                    # cumulative ACK of data the receiver held is up to 75 KB: per-run
                    # shares 3.5-104.7 % for TCP/mm, 63-77 % for the schemes (README)
                    ("case2_long_outage", "Immediate Expiration gets more of the ideal")],
}


def _verdicts(study_out: Path) -> dict[str, tuple[str, str]]:
    """run id -> (fidelity verdict, reasons) over every spec folder of a study."""
    out = {}
    for summary in sorted(study_out.glob("*/summary.parquet")):
        df = pd.read_parquet(summary)
        reasons = df["fidelity_reasons"] if "fidelity_reasons" in df else [None] * len(df)
        verdicts = df["fidelity"] if "fidelity" in df else ["unknown"] * len(df)
        out.update({f"{summary.parent.name}/{r}": (v, x) for r, v, x in
                    zip(df["run_id"], verdicts, reasons, strict=True)})
    return out


def _statuses(study_out: Path) -> dict[str, str]:
    """run id -> status over every spec folder of a study."""
    out = {}
    for summary in sorted(study_out.glob("*/summary.parquet")):
        df = pd.read_parquet(summary)
        out.update({f"{summary.parent.name}/{r}": s
                    for r, s in zip(df["run_id"], df["status"], strict=True)})
    return out


def _matches(figure: str, text: str, wanted: list[tuple[str, str]]) -> bool:
    return any(figure.startswith(f) and text.startswith(p) for f, p in wanted)


@pytest.mark.parametrize("study", sorted(REQUIRED))
def test_quick_study(study: str, studies_out: Path) -> None:
    folder = ROOT / "experiments" / study
    out = studies_out / f"{study}-quick"
    assert (out / "report.html").exists(), f"no study report in {out}"
    res = evaluate(folder, out)
    statuses = _statuses(out)
    failed = {r: s for r, s in statuses.items() if s != "complete"}
    verdicts = _verdicts(out)
    record = {"runs": len(statuses), "failed": failed, "missing": res.missing,
              "fidelity": verdicts,
              "claims": [c.record() for c in res.claims],
              "comparisons": [c.__dict__ for c in res.comparisons]}
    (RECORD / f"{study}.json").write_text(json.dumps(record, indent=1, default=str))
    specs = sorted(p.stem for p in (folder / "quick").glob("*.toml"))
    assert sorted(p.parent.name for p in out.glob("*/summary.parquet")) == specs
    print(f"\nFIDELITY {study}: " + ", ".join(f"{r} {v}" for r, (v, _x) in verdicts.items()))
    assert statuses and not failed, f"runs not complete: {failed}"
    assert all(v in ("ok", "warn", "fail") for v, _x in verdicts.values()), verdicts
    # issue 16: a normal quick run, well within what the CI VM emulates, is judged ok
    # (P4's simple scenario: 0.2 / 1 Mbit/s; its busiest CPU read 64-65 % in run F)
    if study == "p4_rbuf_blocking":
        simple = {r: v for r, v in verdicts.items() if r.startswith("simple/")}
        assert simple and all(v == "ok" for v, _x in simple.values()), simple
    for spec in specs:
        assert (out / spec / "report.html").exists(), f"no report for {spec}"
    for fig, prefix in REQUIRED[study] + DOCUMENTED[study]:
        assert any(_matches(c.figure, c.text, [(fig, prefix)]) for c in res.claims), \
            f"claim not evaluated: {fig} {prefix}"
    # issue 25: every claim says how many runs each part rests on; a part with two or
    # more runs per side has its 95 % interval, and an interval that holds the line (0
    # for a difference) makes the part inconclusive, never "holds"
    for c in res.claims:
        for e in c.evidence:
            assert e.n and all(k >= 0 for k in e.n), (c.text, e.record())
            if e.value != e.value:  # no data
                continue
            if min(e.n) >= 2:
                assert e.low is not None and e.high is not None, (c.text, e.record())
            if e.low is not None and e.high is not None:
                line = e.line if e.line is not None else 0.0
                if e.low <= line <= e.high:
                    assert e.verdict == INCONCLUSIVE, (c.text, e.record())
    # every claim names the spec folders it is read from, and they hold its runs, each
    # counted by its fidelity verdict (claims.json, the report's last column)
    for c in res.claims:
        assert c.specs and c.runs is not None and not c.runs.absent, (c.text, c.specs)
        assert c.runs.runs == sum(1 for r in statuses if r.split("/")[0] in c.specs), \
            (c.text, c.runs.record())
        assert c.runs.runs >= max((max(e.n) for e in c.evidence if e.n), default=1), \
            (c.text, c.runs.record())
    if study == "p0_wifi_3g":  # its Fig. 2 and Fig. 4 rest on 3 runs per side
        assert sum(e.low is not None for c in res.claims for e in c.evidence) >= 2, \
            [c.record() for c in res.claims]
    readme = (folder / "README.md").read_text()
    for c in res.claims:
        if _matches(c.figure, c.text, DOCUMENTED[study]):
            assert "not show" in readme or "does not reproduce" in readme, c.text
            print(f"\nDOCUMENTED {study} {c.figure}: {c.text}: {c.verdict} "
                  f"{[e.record() for e in c.evidence]}")
            continue
        if _matches(c.figure, c.text, REQUIRED[study]):
            assert c.verdict == HOLDS, \
                f"{c.figure}: {c.text}: {c.verdict} {[e.record() for e in c.evidence]}"


@pytest.mark.parametrize("study", sorted(REQUIRED))
def test_quick_study_report_figures(study: str, studies_out: Path) -> None:
    """The report's figures exist inside the study folder and are drawn; no JSON cells."""
    report = studies_out / f"{study}-quick" / "report.html"
    assert parse(report).images, f"{report}: no figures"
    assert problems(report) == []


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                    "(apt-get install chromium)")
@pytest.mark.parametrize("study", sorted(REQUIRED))
def test_quick_study_report_loads_in_chromium(study: str, studies_out: Path,
                                              tmp_path: Path) -> None:
    """The report opens in headless Chromium and every image in it decodes."""
    report = studies_out / f"{study}-quick" / "report.html"
    images, broken = chromium_images(report, tmp_path)
    assert images == len(parse(report).images) > 0
    assert broken == 0, f"{broken} images did not decode"


@pytest.mark.parametrize("spec", ["p0_wifi_3g-quick/paths", "p1_fattree_spray-quick/static"])
def test_a_sweep_report_is_drawn_and_loads_in_chromium(spec: str, studies_out: Path,
                                                        tmp_path: Path) -> None:
    """A spec folder's sweep report (issue 21): its figures (inline SVG, each also kept as
    figures/*.png and *.svg) are there and drawn, no table cell holds JSON, and headless
    Chromium draws every figure at a size, with something in it."""
    report = studies_out / spec / "report.html"
    text = report.read_text(encoding="utf-8")
    figures = text.count("<svg")
    pngs = sorted((report.parent / "figures").glob("*.png"))
    assert figures > 0 and pngs, f"{report}: no figures"
    assert not [p.name for p in pngs if is_blank(p)]
    assert problems(report) == []
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    drawn, empty = chromium_svgs(report, tmp_path)
    assert drawn == figures and empty == 0, (drawn, figures, empty)
    print(f"\nFIGURES {spec} sweep report in Chromium: {drawn} figures drawn")


def test_p0_runs_share_networks_and_each_finds_it_as_configured(studies_out: Path) -> None:
    """Network reuse on a real study (`testbed.run.reuse`): P0's heavy-load, outage and
    paths specs (MPTCP and TCP runs, cubic and reno, a schedule that takes the WiFi down)
    run on the one network their first run built, and the subflows spec (alias addresses,
    each with a policy rule sharing its interface's priority) on one of its own.  Every
    run leaves its hosts as the network found them, so the network is kept for the next;
    each run starts with every link up at its configured shape and, for MPTCP, its path
    manager configured again."""
    metas = sorted((json.loads(p.read_text()) for p in
                    (studies_out / "p0_wifi_3g-quick").glob("*/*/metadata.json")),
                   key=lambda m: m["t_started"])
    spec_of = {m["run_id"]: m["run_id"].split("-quick-")[0] for m in metas}
    assert {m["network_cleanup"].get("kept_for_next_run") for m in metas} == {True}, \
        [(m["run_id"], m["network_cleanup"]) for m in metas
         if not m["network_cleanup"].get("kept_for_next_run")]
    built = {}
    for m in metas:
        built.setdefault(spec_of[m["run_id"]], set()).add(m["network"]["built_by"])
    assert built["p0-subflows"] and len(built["p0-subflows"]) == 1, built
    shared = (built["p0-heavy"] | built["p0-outage"] | built["p0-paths"]
              | built["p0-cc-normal"] | built["p0-cc-heavy"])
    assert len(shared) == 1 and shared != built["p0-subflows"], built
    # the coupled-CC specs with topologies of their own: one network each
    own = [built["p0-cc-fairness"], built["p0-cc-disjoint"]]
    assert all(len(b) == 1 for b in own), built
    builders = shared | built["p0-subflows"] | own[0] | own[1]  # who built each network
    assert [m["network"]["reused"] for m in metas] == \
        [m["run_id"] not in builders for m in metas]
    first = {}
    reconfigured = 0
    for m in metas:
        links = {k: (v["shape"], v["up"]) for k, v in m["links"].items()}
        first.setdefault(m["network"]["built_by"], links)
        assert links == first[m["network"]["built_by"]], (m["run_id"], links)
        assert all(up for _shape, up in links.values()), m["run_id"]
        client = m["transport"]["client"]
        if client["protocol"] == "mptcp":  # its path manager configured again, as planned
            added = [c[4] for c in client["commands"] if c[:4] == ["ip", "mptcp", "endpoint",
                                                                    "add"]]
            assert client["limits"], (m["run_id"], client)
            assert [e["addr"] for e in client["endpoints"]] == added, (m["run_id"], client)
            reconfigured += bool(added and m["network"]["reused"])
    assert {m["transport"]["client"]["protocol"] for m in metas} == {"mptcp", "tcp"}
    assert reconfigured >= 5  # MPTCP runs that set up endpoints on a network a run used
    # ... and those endpoints work: every two-subflow run of the subflows spec has two
    for run in sorted((studies_out / "p0_wifi_3g-quick" / "subflows").glob("*/metadata.json")):
        m = json.loads(run.read_text())
        want = m["params"]["transport.subflows_per_path"]
        flows = pd.read_parquet(run.parent / "metrics" / "flows.parquet")
        assert (flows["kind"] == "subflow").sum() == want, (m["run_id"], want,
                                                              m["network"])
    outage = [i for i, m in enumerate(metas) if spec_of[m["run_id"]] == "p0-outage"]
    assert outage and outage[-1] + 1 < len(metas)  # a run followed the schedule's outage
    print(f"\nFIGURES P0 reuse: {len(metas)} runs on {len(builders)} "
          f"networks; set-up s {[m['timing']['set-up'] for m in metas]}")


def test_p1_runs_share_one_fat_tree_each_with_its_own_controller(studies_out: Path) -> None:
    """P1's five runs (random and static mixes; single path, ECMP and spraying) run on
    the fat tree the first one built: each says so in its metadata, finishes its flows,
    starts its own controller and flushes the hosts' TCP metrics cache, leaves the network
    fit for the next run, and the study's end stopped it without an error."""
    out = studies_out / "p1_fattree_spray-quick"
    runs = sorted(((json.loads(p.read_text()), p.parent) for p in
                   out.glob("*/*/metadata.json")), key=lambda x: x[0]["t_started"])
    metas = [m for m, _d in runs]
    assert len(metas) == 5 and {m["status"] for m in metas} == {"complete"}
    assert [m["network"]["reused"] for m in metas] == [False] + [True] * 4
    assert {m["network"]["built_by"] for m in metas} == {metas[0]["run_id"]}
    assert all(m["network_cleanup"] == {"kept_for_next_run": True} for m in metas)
    assert len({m["controller"]["kind"] for m in metas}) == 3, [m["controller"] for m in metas]
    for i, (m, run) in enumerate(runs):
        assert m["flows"]["count"] > 0 and m["flows"]["failed"] == 0, m["flows"]
        transcript = (run / "transcript.jsonl").read_text()
        assert "controllers" in transcript, m["run_id"]  # its own controller started
        if i:
            assert "tcp_metrics" in transcript, m["run_id"]
    teardown = json.loads((out / "_network-teardown.json").read_text())
    assert "errors" not in teardown, teardown
    assert not (out / "_kept-network.json").exists()
    print(f"\nFIGURES P1 reuse set-up s: {[m['timing']['set-up'] for m in metas]}")


def test_every_study_run_matches_the_sha256_manifest_it_wrote(studies_out: Path) -> None:
    """Each run wrote manifest.sha256 when it ended (inside the VM); after the analysis and
    the reports here, every file still matches it -- by `Bundle.check_sha256_manifest` for
    every run, and by coreutils' ``sha256sum -c`` for one run per study."""
    from testbed.results.bundle import SHA256_MANIFEST, Bundle

    runs = sorted(p.parent for p in studies_out.glob("*-quick/*/*/metadata.json"))
    assert len(runs) > 40
    bad = {r.name: Bundle(r).check_sha256_manifest() for r in runs}
    assert not {k: v for k, v in bad.items() if v}
    checked = 0
    for study in sorted(studies_out.glob("*-quick")):
        run = next(iter(sorted(study.glob(f"*/*/{SHA256_MANIFEST}")))).parent
        res = subprocess.run(["sha256sum", "--quiet", "-c", SHA256_MANIFEST], cwd=run,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        checked += 1
    files = sum(len((r / SHA256_MANIFEST).read_text().splitlines()) for r in runs)
    print(f"\nFIGURES sha256 manifests: {len(runs)} runs, {files} files match; "
          f"sha256sum -c on {checked} runs")


def test_every_study_table_holds_only_values_its_definitions_allow(studies_out: Path) -> None:
    """Every metrics table of every quick-study run, and every summary, within the ranges
    docs/bundle.md gives its columns (a negative count or a fraction above 1 is a defect
    of the analysis, whatever the emulation did), each column stored with its declared
    type."""
    import pandas as pd
    import pyarrow.parquet as pq

    from testbed.results.query import VIEWS
    from testbed.results.ranges import out_of_range
    from testbed.results.typed import mistyped

    bad, tables = [], 0
    for metrics in sorted(studies_out.glob("*-quick/*/*/metrics")):
        for view in VIEWS:
            f = metrics / f"{view}.parquet"
            if f.is_file():
                tables += 1
                bad += [f"{metrics.parent.name}: {line}"
                        for line in out_of_range(view, pd.read_parquet(f))]
                bad += [f"{metrics.parent.name}/{view}: {line}"
                        for line in mistyped(view, pq.read_schema(f))]
    summaries = sorted(studies_out.glob("*-quick/*/summary.parquet"))
    for f in summaries:
        bad += [f"{f.parent.name}: {line}" for line in out_of_range("runs", pd.read_parquet(f))]
        bad += [f"{f.parent.name}/summary: {line}"
                for line in mistyped("runs", pq.read_schema(f))]
    assert tables > 200 and len(summaries) > 15
    assert not bad, "\n".join(bad)
    print(f"\nFIGURES ranges: {tables} metrics tables and {len(summaries)} summaries in range "
          "and typed as declared")


def test_p0_coupled_congestion_control(studies_out: Path) -> None:
    """Issue 17 on P0's quick runs (the testbed's BPF controls on the VM's 6.1 kernel): at
    a shared 10 Mbit/s bottleneck (30 s, 3 runs each) a 2-subflow MPTCP connection with
    LIA or OLIA takes at most 58 % next to one TCP reno flow, and with uncoupled reno
    subflows more than with either; over two disjoint 5 Mbit/s paths every coupled
    control reaches 85 % of their sum; every decision the programs logged equals the
    reference model's on the same inputs (testbed.host.coupled.reference).

    Not asserted: issue 17's line for uncoupled reno (at least 62 %).  Measured means
    were 60.3 % and 57.7 % over 3 runs (single runs 52.7-66.4 %): upstream MPTCP's
    scheduler keeps one of the two subflows less busy than a TCP flow (docs/coupled_cc.md);
    the figure is printed and the study report's RFC 6356 claim gives its verdict."""
    from experiments.p0_wifi_3g.cc import disjoint_use, fairness_shares
    from testbed.host.coupled.reference import check_trace

    out = studies_out / "p0_wifi_3g-quick"
    shares, use = fairness_shares(out), disjoint_use(out)
    mean = {cc: sum(v) / len(v) for cc, v in shares.items()}
    print("\nFIGURES coupled CC shared bottleneck, MPTCP share %: " + ", ".join(
        f"{cc} {100 * mean[cc]:.1f} ({' '.join(f'{100 * x:.1f}' for x in v)})"
        for cc, v in shares.items()))
    print("FIGURES coupled CC disjoint paths, % of 10 Mbit/s: " + ", ".join(
        f"{cc} {' '.join(f'{100 * x:.1f}' for x in v)}" for cc, v in use.items()))
    assert {cc: len(v) for cc, v in shares.items()} == {"lia": 3, "olia": 3, "reno": 3}
    assert mean["lia"] <= 0.58 and mean["olia"] <= 0.58, mean
    assert mean["reno"] > max(mean["lia"], mean["olia"]), mean
    assert set(use) == {"lia", "olia", "balia", "wvegas"}, use
    assert all(x >= 0.85 for v in use.values() for x in v), use
    checked = {}
    for trace in sorted(out.glob("cc_*/*/samples/cc-trace-*.jsonl")):
        recs = [json.loads(x) for x in trace.read_text().splitlines()]
        res = check_trace(recs)
        cc = trace.stem.removeprefix("cc-trace-")
        old = checked.get(cc, (0, 0))
        checked[cc] = (old[0] + res.equal, old[1] + res.compared)
        assert res.compared and res.share_equal >= 0.99, (trace, res.mismatches[:3])
    print("FIGURES coupled CC decisions equal to the model: " + ", ".join(
        f"{cc} {e}/{n}" for cc, (e, n) in checked.items()))
    assert set(checked) == {"lia", "olia", "balia", "wvegas"}, checked


def test_p3_handover_schemes(studies_out: Path) -> None:
    """Issue 18 on P3's quick runs (the testbed's BPF NewReno variants on the VM's 6.1
    kernel; docs/handover.md).  After the 20 Mbit/s -> 384 kbit/s hand-off with its 0.5 s
    outage: with Immediate Expiration the sender's first retransmission after the link is
    back (its capture) comes within 50 ms + one RTT of the new path, its program logged
    the restart and its cwnd samples show the restart (slow start: the first window after
    it below the ssthresh it left, growing); with Bandwidth-Aware the logged ssthresh
    is max(2, acked x RTT / (lag x MSS)) of its logged inputs, its RTT no shorter than the
    path's propagation delay, and lies within a factor 2 of the new path's
    bandwidth-delay product.  TCP/mm's wait is printed (it waits for its backed-off
    timer)."""
    from experiments.p3_handover.handover import (
        cwnd_after,
        first_delivery,
        first_retransmission,
        first_signal,
        handoff_time,
        new_path_rtt_bdp,
        restarts,
        scheme_runs,
        second_restarts,
    )

    by = scheme_runs(studies_out / "p3_handover-quick" / "case1_wlan_to_imt")
    assert set(by) == {"none", "immediate-expiration", "bandwidth-aware"}, by
    # the router keeps its neighbours over the outage as the hosts do (else the first
    # packet towards the client waits for its ARP: docs/fidelity.md, section 2b)
    for runs in by.values():
        for run in runs:
            meta = json.loads((run / "metadata.json").read_text())
            assert set(meta["neighbours"]["router"].values()) == {0}, run.name
    waits: dict[str, list[float | None]] = {}
    for scheme, runs in by.items():
        for run in runs:
            t_up = handoff_time(run)
            first = first_retransmission(run, t_up)
            waits.setdefault(scheme, []).append(None if first is None else first - t_up)
    print("\nFIGURES P3 hand-over, first retransmission after the link is back (s): " +
          ", ".join(f"{k} {' '.join('-' if w is None else f'{w:.3f}' for w in v)}"
                    for k, v in waits.items()))
    for run in by["immediate-expiration"]:
        t_up = handoff_time(run)
        rtt, _bdp = new_path_rtt_bdp(run)
        first = first_retransmission(run, t_up)
        assert first is not None and first - t_up <= 0.050 + rtt, (run.name, first, t_up)
        # the program logged the restart (its `path`, printed, tells how it saw it; a
        # timer that fires between the ICMP's retransmission and its ACK shows as "timer")
        (rec,) = [r for r in restarts(run) if r["gen"] == 1]
        # restarted in slow start: the restart leaves cwnd 1 (docs/handover.md); the first
        # window sampled after it lies at or below the ssthresh the restart left (Reno's
        # slow start stops there: a window from before the outage lies above it), and the
        # windows up to the next loss event (a sample below the one before it) grew from
        # that 1 segment.  (Not "below ssthresh": slow start from 1 can reach it before
        # the first sample, and a CI run of 2026-11-28 read 25, 25, 25, 26 with ssthresh
        # 25.  Not "at most 4 segments": a
        # cumulative ACK that fills a hole acknowledges what the receiver held beyond it,
        # and slow start adds every segment it acknowledges: in a CI run of 2026-11-27
        # the first sample, 0.37 s after the restart, read 12 of 26.  Nor "grows between
        # two samples": the sampler reads every 0.25-0.3 s under software emulation, and
        # in a later CI run the samples read 18, 18, then 1, a timeout 0.5 s after the
        # restart, with ssthresh 25.)
        seen = cwnd_after(run, first, first + 1.5)
        print(f"FIGURES P3 immediate-expiration {run.name}: path {rec['path']}, ssthresh "
              f"{rec['ssthresh']}, cwnd samples after the restart {seen}")
        assert seen, run.name
        ramp = seen[:next((i for i in range(1, len(seen)) if seen[i] < seen[i - 1]),
                          len(seen))]
        assert ramp[0] <= rec["ssthresh"] and max(ramp) > 1, (run.name, seen, rec)
    # Linux undoing a restart (a restart in loss recovery, the receiver's ACKs of the
    # outage lost: docs/handover.md) is answered by a second ICMP, and the sender
    # retransmits again within 50 ms + one RTT of it (else it stalled until a probe:
    # 1.1 s in the P3 README's Table 4 runs)
    undone = 0
    for case in ("case1_wlan_to_imt", "case2_long_outage"):
        for scheme, runs in scheme_runs(studies_out / "p3_handover-quick" / case).items():
            for run in runs if scheme != "none" else []:
                resent = second_restarts(run)
                for rec in restarts(run):
                    if not rec.get("undone"):
                        continue
                    undone += 1
                    mine = [r for r in resent if r["gen"] == rec["gen"] and
                            r["undone"]["sport"] == rec["sport"]]
                    sent = [r["t"] for rs in (mine[0]["sent"] if mine else {}).values()
                            for r in rs]
                    assert sent, (run.name, rec, resent)
                    rtt, _bdp = new_path_rtt_bdp(run)
                    # the kernel may act on the ICMP before the agent reads its clock
                    again = first_retransmission(run, min(sent) - 0.010, rec["sport"])
                    assert again is not None and again - min(sent) <= 0.050 + rtt, \
                        (run.name, again, mine[0])
    print(f"FIGURES P3 restarts Linux undid (each restarted again): {undone}")
    # and so, after the 3.5 s outage, the receiver gets new data within 0.5 s of the
    # hand-over signal with either scheme: the restart (50 ms + one RTT of the new path),
    # an undo's second ICMP one RTT later, its segment half an RTT after that, and one
    # 0.1 s bin.  Before the second ICMP it waited 1.4-1.6 s in three of four runs.
    # Timed from the signal, not the link's return: the paper's host learns of the change
    # as the link returns, and the time our notifier takes to tell it is the emulation's
    # own delay, printed here (0.04-0.08 s in most CI runs; 0.37 s in one on a loaded
    # machine, whose delivery came 0.55 s after the return and 0.18 s after the signal).
    late, told = {}, {}
    for scheme, runs in scheme_runs(studies_out / "p3_handover-quick" /
                                    "case2_long_outage").items():
        for run in runs if scheme != "none" else []:
            t_up, t_signal = handoff_time(run), first_signal(run)
            assert t_signal is not None and t_signal >= t_up, (run.name, t_up, t_signal)
            told[run.name] = round(t_signal - t_up, 3)
            got = first_delivery(run, t_signal)
            late[run.name] = None if got is None else round(got - t_signal, 3)
    print(f"FIGURES P3 Table 4, the signal after the link's return (s): {told}; new data "
          f"at the receiver after the signal (s): {late}")
    assert late and all(v is not None and v <= 0.5 for v in late.values()), late
    for run in by["bandwidth-aware"]:
        rtt, bdp = new_path_rtt_bdp(run)
        (rec,) = [r for r in restarts(run) if r["gen"] == 1]
        t_up, t_signal = handoff_time(run), first_signal(run)
        # what a failure needs to be told apart, first (a dict's repr is cut short in
        # pytest's summary line): how the restart came, what the estimate read, and how
        # late the signal and the restart's first ACK were
        why = (f"{run.name}: path {rec['path']}, ca_state {rec['ca_state']}, rtt_us "
               f"{rec['rtt_us']}, lag_us {rec['lag_us']}, acked {rec['acked']}, mss "
               f"{rec['mss']}, ssthresh {rec['ssthresh']}, undone {rec['undone']}, signal "
               f"{'-' if t_signal is None else f'{t_signal - t_up:.3f}'} s after the "
               f"return, restart {rec['t_restart'] - t_up:.3f} s, first ACK "
               f"{rec['t_seen'] - rec['t_restart']:.3f} s after it")
        assert rec["lag_us"], why
        # no round trip is shorter than the path's propagation delay
        assert rec["rtt_us"] >= rtt * 1e6, why
        assert rec["ssthresh"] == max(2, rec["acked"] * rec["rtt_us"]
                                      // (rec["lag_us"] * rec["mss"])), why
        bdp_segments = bdp / rec["mss"]
        print(f"FIGURES P3 bandwidth-aware {run.name}: ssthresh {rec['ssthresh']} segments, "
              f"BDP {bdp_segments:.2f} segments, rtt {rec['rtt_us'] / 1e3:.1f} ms, lag "
              f"{rec['lag_us'] / 1e3:.1f} ms, bw {rec['bw_bps'] / 1e3:.0f} kbit/s; {why}")
        assert bdp_segments / 2 <= rec["ssthresh"] <= 2 * bdp_segments, \
            f"BDP {bdp_segments:.2f} segments; {why}"


def test_no_bpf_control_is_left_in_the_kernel(studies_out: Path) -> None:
    """Issue 18: after the quick studies (their P0 coupled and P3 hand-over runs), the
    kernel they ran on holds no struct_ops, program or map of the testbed's BPF controls
    that was not there before them (`python -m testbed.host.coupled.leftovers`:
    scripts/vm_stage records it, with a snapshot before the studies, in the VM boot that
    ran them; on a machine that runs them natively it is asked here, without a snapshot,
    so only the hand-over controls count)."""
    import sys

    path = RECORD / "bpf-leftovers.json"
    if path.exists():  # scripts/vm_stage removes it before the studies' runs
        text = path.read_text()
    elif subprocess.run([str(ROOT / ".venv" / "bin" / "testbed"), "doctor"],
                        capture_output=True, check=False).returncode == 0:
        text = subprocess.run([sys.executable, "-m", "testbed.host.coupled.leftovers",
                               "--wait", "120"], capture_output=True, text=True,
                              check=False).stdout
    else:
        pytest.skip("the studies ran in a VM boot of their own (a -k run), which is gone")
    left = json.loads(text.strip().splitlines()[-1])
    print(f"\nFIGURES BPF controls left after the studies: {left}")
    assert "error" not in left, left
    if "before" not in left:
        # natively there is no snapshot from before the studies, and the integration
        # tests' SIGKILL test may have left a coupled control in memory (docs/coupled_cc.md):
        # only the hand-over controls, which no test kills, are judged then
        left = {k: [e for e in left[k] if str(e["name"]).startswith(("reno_", "ho_"))]
                for k in ("struct_ops", "programs", "maps")}
    assert left["struct_ops"] == [] and left["programs"] == [] and left["maps"] == [], left
