"""testbed.api: the query views as pandas on two real runs' bundles, figures, and
run/study with a progress callback (the experiment itself faked, as in test_results)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure
from realruns import MPTCP_RUN, TCP_RUN, analysed_copy
from test_results import FakeRunner

from testbed import api
from testbed.core.errors import InputError
from testbed.results.bundle import BundleFormatError
from testbed.results.query import VIEWS, run_query

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real runs of P0's paths spec, analysed here from their captures
    (as tests/unit/analysis/test_real_bundle.py does)."""
    return analysed_copy(tmp_path_factory.mktemp("p0-paths"))


def test_the_tables_are_the_query_views(out: Path) -> None:
    res = api.load(out)
    assert sorted(res.runs["run_id"]) == sorted([MPTCP_RUN, TCP_RUN])
    assert set(res.runs["status"]) == {"complete"}
    for view in ("runs", *VIEWS):
        got = res.table(view)
        want = run_query(out, f"SELECT * FROM {view}")
        assert list(got.columns) == list(want.columns), view
        assert len(got) == len(want), view
        if view != "runs":
            assert list(got.columns[:1]) == ["run_id"], view
    assert len(res.flows) and len(res.timeseries) and len(res.rtt)
    flows = res.flows.set_index(["run_id", "flow_id"]).sort_index()
    mine = pd.read_parquet(out / MPTCP_RUN / "metrics" / "flows.parquet")
    assert set(mine["kind"]) == {"connection", "subflow"}
    for r in mine.itertuples(index=False):
        assert flows.loc[(MPTCP_RUN, r.flow_id), "throughput_bps"] == r.throughput_bps


def test_one_bundle_a_study_folder_and_several_folders(out: Path, tmp_path: Path) -> None:
    one = api.load(out / TCP_RUN)
    assert list(one.runs["run_id"]) == [TCP_RUN]
    assert set(one.flows["run_id"]) == {TCP_RUN} and len(one.flows)
    study = tmp_path / "p0_wifi_3g-quick"
    shutil.copytree(out, study / "paths")
    assert sorted(api.load(study).runs["run_id"]) == sorted([MPTCP_RUN, TCP_RUN])
    both = api.load(out / TCP_RUN, out / MPTCP_RUN)
    assert len(both.runs) == 2 and set(both.flows["run_id"]) == {TCP_RUN, MPTCP_RUN}
    with pytest.raises(InputError, match=f"run {MPTCP_RUN} is in .* and .*; load them "):
        api.load(out, study)


def test_bad_folders_are_one_line_errors(out: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such results folder"):
        api.load(tmp_path / "absent")
    with pytest.raises(InputError, match="no result bundles here"):
        api.load(tmp_path)
    with pytest.raises(InputError, match="name at least one"):
        api.load()
    newer = tmp_path / "newer"
    shutil.copytree(out, newer)
    meta_file = newer / TCP_RUN / "metadata.json"
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()),
                                     "format_version": "2.0"}))
    with pytest.raises(BundleFormatError, match=f"{meta_file}: bundle format 2.0 is newer"):
        api.load(newer)
    with pytest.raises(BundleFormatError):
        api.load(newer / TCP_RUN)


def test_select_and_table(out: Path) -> None:
    res = api.load(out)
    tcp = res.select(TCP_RUN)
    assert list(tcp.runs["run_id"]) == [TCP_RUN]
    assert set(tcp.flows["run_id"]) == set(tcp.timeseries["run_id"]) == {TCP_RUN}
    assert len(tcp.flows) < len(res.flows)
    with pytest.raises(InputError, match="run 'nope' is not loaded"):
        res.select("nope")
    with pytest.raises(InputError, match="table 'flowz'"):
        res.table("flowz")


def test_empty_tables_have_the_documented_columns(out: Path) -> None:
    from testbed.results.columns import names

    res = api.load(out)
    assert len(res.ping) == 0 and len(res.events) == 0  # the runs had no ping, no schedule
    for view in ("ping", "events"):
        assert list(res.table(view).columns) == ["run_id", *(n for n in names(view)
                                                             if n != "run_id")]


def test_figures(out: Path) -> None:
    res = api.load(out)
    with pytest.raises(InputError, match="shows one run and 2 are loaded"):
        api.throughput_figure(res)
    fig = api.throughput_figure(res.select(MPTCP_RUN), kind="subflow")
    assert isinstance(fig, Figure)
    assert len(fig.axes[0].patches) == 2  # a line (stairs) per subflow
    assert MPTCP_RUN in fig.axes[0].get_title()
    with pytest.raises(InputError, match="kind 'paths': use one of path, subflow"):
        api.throughput_figure(res.select(MPTCP_RUN), kind="paths")  # a typo: no empty axes
    samples = pd.DataFrame({"run_id": TCP_RUN, "host": "client", "src_addr": "10.0.0.1",
                            "sport": 5201, "t_rel": [0.1, 0.2], "cwnd": [10, 20]})
    fig = api.cwnd_figure(dataclasses.replace(res.select(TCP_RUN), cwnd=samples))
    assert len(fig.axes[0].lines) == 1  # a line per socket
    # these two runs' transfers had no size: no completion time (see below); with some
    sized = res.flows.assign(fct_s=[0.5 + i for i in range(len(res.flows))])
    cdf = api.fct_cdf_figure(dataclasses.replace(res, flows=sized))
    assert len(cdf.axes[0].lines) == 2  # the step line and its points
    with pytest.raises(InputError, match="'nope' is not a column of the runs table"):
        api.sweep_figure(res, "nope", "flows")
    with pytest.raises(InputError, match=r"'status' holds no number .*'complete'"):
        api.sweep_figure(res, "name", "status")  # a text column: no empty figure


def test_a_figure_with_nothing_to_draw_says_so(out: Path) -> None:
    """A TCP run's subflow figure, a run without cwnd samples and flows without a
    completion time drew empty axes and said nothing.  Each is one line naming what is
    missing (and, for a series, the kinds the run has)."""
    res = api.load(out)
    tcp = res.select(TCP_RUN)
    with pytest.raises(InputError, match=rf"run {TCP_RUN} has no 'subflow' series.*it has: "):
        api.throughput_figure(tcp, kind="subflow")
    assert not len(tcp.cwnd)  # these two runs were made without the cwnd sampler
    with pytest.raises(InputError, match=rf"run {TCP_RUN} has no cwnd samples"):
        api.cwnd_figure(tcp)
    with pytest.raises(InputError, match=r"no loaded flow has a completion time.*without a "
                                         "size"):
        api.fct_cdf_figure(res)


def _fake(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    """No network: the runs are FakeRunner's; the kernel is not asked."""
    import testbed.run.execute as execute
    import testbed.run.preflight as preflight

    fake = FakeRunner(fail={1})
    monkeypatch.setattr(execute, "execute_run",
                        lambda plan, bundle, meta, phase, keeper=None, analyze=True:
                        fake(plan, bundle, meta, phase, keeper))
    monkeypatch.setattr(preflight, "check_kernel_support", lambda plans, labels=None: None)
    return fake


def test_run_reports_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake(monkeypatch)
    seen: list[api.RunProgress] = []
    spec = ROOT / "experiments" / "p2_three_paths" / "quick" / "cc.toml"
    report = api.run(spec, out=tmp_path / "cc", progress=seen.append)
    assert len(fake.calls) == 2 and report.complete == 1
    assert [(r, e.split(":")[0]) for r, e in report.failed] == [(fake.calls[1], "controller died")]
    ends = [p for p in seen if p.event == "end"]
    assert [(p.run_id, p.index, p.total, p.text) for p in ends] == [
        (fake.calls[0], 1, 2, "complete"), (fake.calls[1], 2, 2, "failed")]
    assert ends[1].error == "controller died"
    assert [p.event for p in seen if p.run_id == fake.calls[0]] == ["begin", "phase", "end"]
    assert [p.text for p in seen if p.event == "phase"] == ["set-up", "set-up"]
    res = api.load(tmp_path / "cc")
    assert sorted(res.runs["status"]) == ["complete", "failed"]
    fig = api.sweep_figure(res, "transport.cc", "goodput_bps")
    assert fig.axes[0].get_xlabel() == "transport.cc"
    again = api.run(spec, out=tmp_path / "cc")  # resumed: only the failed run is redone
    assert again.skipped == 1 and len(fake.calls) == 3


def test_study_reports_every_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake(monkeypatch)
    seen: list[api.RunProgress] = []
    outcome = api.study(ROOT / "experiments" / "p2_three_paths", out=tmp_path / "p2",
                        only=["cc"], progress=seen.append, reports=False)
    assert list(outcome.specs) == ["cc"]
    assert outcome.failed == {"cc": f"{fake.calls[1]}: controller died"}
    assert [p.run_id for p in seen if p.event == "begin"] == fake.calls
    assert [p.text for p in seen if p.event == "end"] == ["complete", "failed"]
    assert len(api.load(tmp_path / "p2").runs) == 2


def test_one_bundle_follows_the_folders_rules(out: Path, tmp_path: Path) -> None:
    """api.load(RUN) types columns and names a broken run as api.load(DIR) does."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    d = tmp_path / "d"
    shutil.copytree(out / TCP_RUN, d / TCP_RUN)
    ts = d / TCP_RUN / "metrics" / "timeseries.parquet"
    t = pq.read_table(ts)  # as an older writer stored it
    pq.write_table(t.set_column(t.schema.get_field_index("bytes"), "bytes",
                                t.column("bytes").cast(pa.float64())), ts)
    from testbed.results.bundle import Bundle

    b = Bundle(d / TCP_RUN)
    meta = b.read_metadata()
    meta["files"] = b.manifest()
    b.write_metadata(meta)
    assert str(api.load(d / TCP_RUN).timeseries["bytes"].dtype) == \
        str(api.load(d).timeseries["bytes"].dtype) == "int64"
    flows = d / TCP_RUN / "metrics" / "flows.parquet"
    flows.write_bytes(flows.read_bytes()[:100])
    assert api.load(d / TCP_RUN).warnings == api.load(d).warnings != ()


def test_a_list_where_arguments_are_expected_is_one_line(out: Path) -> None:
    """``load([a, b])`` and ``select([id])`` raised a bare TypeError."""
    with pytest.raises(InputError, match=r"load: give each folder as its own argument"):
        api.load([out])
    with pytest.raises(InputError, match=r"select: give each run id as its own argument"):
        api.load(out).select([MPTCP_RUN])
