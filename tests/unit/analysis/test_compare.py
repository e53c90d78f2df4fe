"""`testbed compare` on bundles built from real captures (tests/data/analysis/p0-paths).

The two runs there (an MPTCP connection over `wifi` and `cell`; one TCP flow on `wifi`)
are analysed once; each then gets a second repetition, a copy whose headline numbers are
scaled (so that run rows have a spread and an interval), and every run gets a headline
and a fidelity verdict in its metadata.json, as a finished run has.  Folders: ``tcp``
(the TCP run twice), ``mptcp`` (the MPTCP run twice) and ``both`` (all four).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from realruns import MPTCP_RUN, TCP_RUN, analysed_copy

from analysis import compare as C
from analysis.bundle import headline
from analysis.compare_report import build, render, table_header, table_rows, write_page
from analysis.evidence import difference
from testbed.core.errors import InputError

SCALE = 1.25  # the second repetition's headline numbers, relative to the first


def _finish(run: Path, verdict: str = "ok") -> None:
    """Give an analysed run the headline and verdict a finished run records."""
    meta = json.loads((run / "metadata.json").read_text())
    meta["headline"] = headline(pd.read_parquet(run / "metrics" / "flows.parquet"))
    meta["fidelity"] = {"verdict": verdict, "reasons": [] if verdict == "ok" else
                        [f"{verdict}: made up for the test"]}
    (run / "metadata.json").write_text(json.dumps(meta))


def _second(run: Path, into: Path) -> Path:
    """A copy of run as repetition 2, its headline numbers scaled by SCALE."""
    rid = run.name[:-1] + "2"
    copy = into / rid
    shutil.copytree(run, copy)
    meta = json.loads((copy / "metadata.json").read_text())
    meta.update(run_id=rid, repetition=2)
    meta["headline"] = {k: v * SCALE if isinstance(v, float) else v
                        for k, v in meta["headline"].items()}
    (copy / "metadata.json").write_text(json.dumps(meta))
    return copy


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("compare")
    src = analysed_copy(base / "src")
    for run in (MPTCP_RUN, TCP_RUN):
        _finish(src / run)
    for name, run in (("tcp", TCP_RUN), ("mptcp", MPTCP_RUN)):
        (base / name).mkdir()
        shutil.copytree(src / run, base / name / run)
        _second(src / run, base / name)
    (base / "both").mkdir()
    for name in ("tcp", "mptcp"):
        for run in (base / name).iterdir():
            shutil.copytree(run, base / "both" / run.name)
    return base


def _row(rows: list[C.Row], label: str) -> C.Row:
    (row,) = [r for r in rows if r.metric.label == label]
    return row


def _top(folder: Path, col: str) -> list[float]:
    out = []
    for f in sorted(folder.glob("*/metrics/flows.parquet")):
        fl = pd.read_parquet(f)
        out += list(fl.loc[fl["kind"] != "subflow", col].dropna())
    return out


def test_folder_against_folder(root):
    cmp = build([root / "tcp", root / "mptcp"])
    assert [s.label for s in cmp.sides] == ["tcp", "mptcp"]
    (i, rows), = cmp.pairs
    assert i == 1
    # run rows: two runs a side, the mean shown, Welch's interval of B - A
    thr = _row(rows, "run: throughput, mean of flows")
    tcp = [m["headline"]["throughput_bps_mean"] / 1e6 for m in
           (json.loads(p.read_text()) for p in sorted((root / "tcp").glob("*/metadata.json")))]
    mptcp = [m["headline"]["throughput_bps_mean"] / 1e6 for m in
             (json.loads(p.read_text()) for p in
              sorted((root / "mptcp").glob("*/metadata.json")))]
    assert thr.n == (2, 2)
    assert thr.a == pytest.approx(sum(tcp) / 2) and thr.b == pytest.approx(sum(mptcp) / 2)
    want = difference("", tcp, mptcp)
    assert (thr.estimate.low, thr.estimate.high) == pytest.approx((want.low, want.high))
    assert thr.estimate.low < thr.delta < thr.estimate.high
    # flow rows: the top-level flows of every run (the MPTCP connection, not its subflows)
    flow = _row(rows, "flow: throughput, mean")
    a, b = _top(root / "tcp", "throughput_bps"), _top(root / "mptcp", "throughput_bps")
    assert flow.n == (len(a), len(b)) == (2, 2)
    assert flow.a == pytest.approx(sum(a) / 2e6) and flow.b == pytest.approx(sum(b) / 2e6)
    # these transfers ran until the run's end, without a size: no completion time to compare
    assert _top(root / "tcp", "fct_s") == _top(root / "mptcp", "fct_s") == []
    for label in ("flow: FCT, mean", "flow: FCT, median", "run: FCT, median of flows"):
        assert _row(rows, label).n == (0, 0), label
    rtt = _row(rows, "RTT sample: median")
    assert rtt.n[0] > 100 and rtt.n[1] > 100 and math.isfinite(rtt.a)


def test_readings_follow_the_interval(root):
    cmp = build([root / "tcp", root / "mptcp"])
    for r in cmp.pairs[0][1]:
        e = r.estimate
        if e is None or e.low is None:
            continue
        want = "B higher" if e.low > 0 else "B lower" if e.high < 0 else \
            "inconclusive (holds 0)"
        assert r.reading == want, r


def test_one_run_a_side_has_no_interval(root):
    cmp = build([root / "tcp" / TCP_RUN, root / "mptcp" / MPTCP_RUN])
    rows = cmp.pairs[0][1]
    thr = _row(rows, "run: throughput, mean of flows")
    assert thr.n == (1, 1) and thr.estimate.low is None
    assert thr.reading == "no interval: 1 run on a side"
    assert thr.cells()[4] == "-" and math.isfinite(thr.delta)


def test_one_folder_by_a_swept_key(root):
    """--by pools the folder's runs and makes a side per value; a table is named by its
    name field, and listed values give the order (A first)."""
    cmp = build([root / "both"], by="workload.0=tcp-wifi,mptcp-cubic")
    assert [s.label for s in cmp.sides] == ["tcp-wifi", "mptcp-cubic"]
    assert sorted(cmp.sides[0].runs["run_id"]) == sorted(p.name for p in (root / "tcp")
                                                        .iterdir())
    assert not cmp.warnings
    every = build([root / "both"], by="workload.0")
    assert [s.label for s in every.sides] == ["mptcp-cubic", "tcp-wifi"]  # sorted
    assert "sides by workload.0" in every.title(1)


def test_where_picks_runs_and_a_pooled_side_is_warned_about(root):
    mixed = build([root / "both", root / "tcp"])
    assert any("side both pools runs with different workload.0 (mptcp-cubic, tcp-wifi)"
               in w for w in mixed.warnings), mixed.warnings
    picked = build([root / "both", root / "tcp"], where=["workload.0=tcp-wifi"])
    assert not picked.warnings
    assert [len(s.runs) for s in picked.sides] == [2, 2]
    assert [s.label for s in build([root / "both", root / "tcp"], labels=["x", "y"]).sides
            ] == ["x", "y"]


def test_a_run_whose_fidelity_is_not_ok_is_marked(root, tmp_path):
    warn = tmp_path / "warned"
    shutil.copytree(root / "mptcp", warn)
    _finish(warn / MPTCP_RUN, "warn")
    cmp = build([root / "tcp", warn])
    text = table_rows(cmp, 1, cmp.pairs[0][1])
    assert text[0][:3] == ["fidelity verdicts (runs)", "2 ok", "1 ok, 1 warn"]
    flow = next(r for r in text if r[0] == "flow: throughput, mean (Mbit/s)")
    assert not flow[1].endswith("!") and flow[2].endswith("!")


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_page_and_untouched_inputs(root, tmp_path):
    before = {n: _digest(root / n) for n in ("tcp", "mptcp")}
    cmp = build([root / "tcp", root / "mptcp"])
    page = write_page(cmp, tmp_path / "out", [root / "tcp", root / "mptcp"])
    assert {n: _digest(root / n) for n in ("tcp", "mptcp")} == before
    html = page.read_text()
    # per-flow and total series and the RTT CDF; no FCT CDF: no transfer had a size
    assert page.name == "compare.html" and html.count("data:image/png;base64,") == 3
    for text in ("A: tcp", "B: mptcp", "95 % interval of B - A", "(Mbit/s)", "(ms)",
                 "n (A / B)", "A is the reference"):
        assert text in html, text
    assert table_header(cmp, 1)[1:3] == ["A: tcp", "B: mptcp"]
    assert render(cmp).startswith("<!DOCTYPE html>")


def test_the_page_is_never_written_into_an_input(root):
    cmp = build([root / "tcp", root / "mptcp"])
    with pytest.raises(InputError, match="never writes into what it compares"):
        write_page(cmp, root / "tcp" / "cmp", [root / "tcp", root / "mptcp"])
    assert not (root / "tcp" / "cmp").exists()


def test_a_newer_bundle_format_is_refused(root, tmp_path):
    newer = tmp_path / "newer"
    shutil.copytree(root / "tcp", newer)
    meta_path = newer / TCP_RUN / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "format_version": "99.0"}))
    with pytest.raises(InputError, match=r"bundle format 99\.0 is newer"):
        build([newer, root / "mptcp"])


def test_a_run_with_invalid_metadata_is_left_out_as_broken(root, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(root / "tcp", bad)
    (bad / TCP_RUN / "metadata.json").write_text("{not json")
    cmp = build([bad, root / "mptcp"])
    left = [w for w in cmp.warnings if "left out" in w]
    assert len(left) == 1 and "1 broken (not valid JSON" in left[0], cmp.warnings


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"by": "transport.cc"}, "--by transport.cc: no such parameter"),
    ({"by": "workload.0=tcp-wifi,udp"}, "no run has workload.0=udp"),
    ({"by": "workload.0=tcp-wifi"}, "a comparison needs two or more"),
    ({"where": ["workload.0"]}, "expected KEY=VALUE"),
    ({"where": ["workload.0=udp"]}, "no run has it"),
])
def test_bad_selections(root, kwargs, message):
    with pytest.raises(InputError, match=message):
        build([root / "both", root / "tcp"], **kwargs)


def test_one_folder_needs_by(root):
    with pytest.raises(InputError, match="two or more result folders"):
        build([root / "both"])
    with pytest.raises(InputError, match="one label per side"):
        build([root / "tcp", root / "mptcp"], labels=["only-one"])


def test_by_a_key_some_folders_do_not_set_is_refused(root, tmp_path):
    """Runs without the --by key would make a side with no value (and, sorted first, the
    reference): one line naming the folder instead."""
    other = tmp_path / "unswept"
    shutil.copytree(root / "tcp", other)
    for meta_file in other.glob("*/metadata.json"):
        meta = json.loads(meta_file.read_text())
        meta["params"] = {k: v for k, v in (meta.get("params") or {}).items()
                          if k != "workload.0"}
        meta_file.write_text(json.dumps(meta))
    assert all("workload.0" not in json.loads(m.read_text()).get("params", {})
               for m in other.glob("*/metadata.json"))
    with pytest.raises(InputError, match=f"runs of {other} do not set workload.0") as exc:
        build([root / "mptcp", other], by="workload.0")
    assert len(str(exc.value).splitlines()) == 1


def test_a_bundle_older_than_a_column_is_compared(root, tmp_path):
    """Sides are read as the contract types them: a bundle written before a column existed
    (here the flows table without ``ooo_ratio``, the timeseries without ``bin_s``) was
    read without it, and the comparison failed on the missing column.  It now reads the
    column, null, as `testbed query` and the API do."""
    import pyarrow.parquet as pq

    old = tmp_path / "old"
    shutil.copytree(root / "mptcp", old)
    for table, col in (("flows", "ooo_ratio"), ("timeseries", "bin_s")):
        for f in old.glob(f"*/metrics/{table}.parquet"):
            pq.write_table(pq.read_table(f).drop_columns([col]), f)
    cmp = build([root / "tcp", old])
    (_i, rows), = cmp.pairs
    assert _row(rows, "flow: throughput, mean").n == (2, 2)
    side = cmp.sides[1]
    assert side.tables["flows"]["ooo_ratio"].isna().all()
    assert side.tables["timeseries"]["bin_s"].isna().all()


def test_a_run_report_and_a_sweep_report_name_a_broken_run(root, tmp_path):
    """A run that lost a metrics table was reported as "status complete", "Fidelity: ok",
    "Warnings: none", its throughput figures silently missing; the sweep's fidelity line
    counted it as ok."""
    from analysis import report

    folder = tmp_path / "tcp"
    shutil.copytree(root / "tcp", folder)
    run = sorted(p for p in folder.iterdir() if (p / "metadata.json").exists())[0]
    (run / "metrics" / "timeseries.parquet").unlink()
    warnings: list[str] = []
    page = report.write_report(run, out=tmp_path / "run.html", warnings=warnings).read_text()
    assert any(w.startswith("the run is broken: metrics/timeseries.parquet is missing")
               for w in warnings), warnings
    assert "the run is broken: metrics/timeseries.parquet is missing" in page
    from testbed.results.summary import write_summary

    write_summary(folder)
    sweep = report.write_report(folder, out=tmp_path / "sweep.html").read_text()
    assert "Fidelity: 1 ok, 1 unknown" in sweep or "Fidelity: 1 unknown, 1 ok" in sweep
    assert "the run is broken (testbed query DIR names why)" in sweep
