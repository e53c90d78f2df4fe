"""Study reports built from real bundles show the paper's figures redrawn, verdicts in
words and no raw dictionaries (`analysis.study_report`, `analysis.study_figures`).

Bundles: the two analysed P0 ``paths`` runs of tests/realruns.py (an MPTCP and a TCP run)
and the P2 ``loss`` run of tests/data/analysis/p2-loss (100 pings under 10 % loss); each
is placed in a study output folder as ``testbed study`` lays it out, the study's other
specs left without runs.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
from realruns import analysed_copy
from studyreports import is_blank, parse, problems

from analysis.bundle import analyze_bundle
from analysis.claims import Claim
from analysis.evidence import difference, level
from analysis.study_report import write_study_report
from analysis.study_text import ratio_text, verdict_sentence

ROOT = Path(__file__).resolve().parents[3]
P2_LOSS = ROOT / "tests" / "data" / "analysis" / "p2-loss" / "p2-loss-quick-1e7a2784f0-r1"


@pytest.fixture(scope="module")
def p0_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("study") / "p0_wifi_3g-quick"
    analysed_copy(out / "paths")
    return write_study_report(ROOT / "experiments" / "p0_wifi_3g", out)


@pytest.fixture(scope="module")
def p2_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("study") / "p2_three_paths-quick"
    run = out / "loss" / P2_LOSS.name
    shutil.copytree(P2_LOSS, run)
    for gz in run.glob("pcap/*.pcap.gz"):
        gz.with_suffix("").write_bytes(gzip.decompress(gz.read_bytes()))
        gz.unlink()
    analyze_bundle(run)
    return write_study_report(ROOT / "experiments" / "p2_three_paths", out)


def test_p0_report_has_its_figures_drawn_and_no_json(p0_report: Path) -> None:
    page = parse(p0_report)
    assert page.images == [f"report-figures/p0-{n}.png" for n in
                           ("fig2-paths", "fig3-heavy-load", "fig4-subflows", "fig5-outage",
                            "fig6-7-cc", "cc-goals", "cc-windows")]
    assert problems(p0_report) == []
    text = p0_report.read_text()
    assert "<th>ours / paper</th>" in text and "paper shows curves only" in text
    # the claim's verdict in words, its measured values as phrases, not a dictionary
    assert "one run, so no interval" in text
    assert "best mptcp mbit = " in text and '"best_mptcp_mbit"' not in text
    # the run bundles got nothing new: figures live in the study folder only
    assert not list((p0_report.parent / "paths").glob("*/report-figures"))


def test_p2_report_lays_the_ping_table_out_as_the_paper(p2_report: Path) -> None:
    assert problems(p2_report) == []
    page = parse(p2_report)
    assert {"report-figures/p2-loss-throughput.png", "report-figures/p2-cc-cwnd.png"} \
        <= set(page.images)
    cells = page.cells
    header = cells.index("paper, cubic")
    assert cells[header:header + 4] == ["paper, cubic", "paper, reno", "ours, cubic",
                                        "ours, reno"]
    row = cells.index("packets transmitted")
    assert cells[row + 1:row + 5] == ["100", "100", "100", "not run"]
    loss = cells.index("packet loss rate (%)")
    ours = float(cells[loss + 3])
    assert 5 < ours < 30 and cells[loss + 1] == "16"
    # the paper's cubic loss next to ours, with the ratio
    assert f"x{ours / 16:.3g}" in cells


def test_the_checks_find_blank_figures_missing_files_and_json(tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    (tmp_path / "f").mkdir()
    mpimg.imsave(tmp_path / "f" / "blank.png", np.ones((20, 20, 3)))
    drawn = np.ones((20, 20, 3))
    drawn[5, 5] = 0
    mpimg.imsave(tmp_path / "f" / "drawn.png", drawn)
    assert is_blank(tmp_path / "f" / "blank.png")
    assert not is_blank(tmp_path / "f" / "drawn.png")
    report = tmp_path / "report.html"
    report.write_text('<img src="f/blank.png"><img src="f/drawn.png"><img src="f/none.png">'
                      '<img src="../x.png"><table><tr><td>{"a": 1}</td><td> [1, 2]</td>'
                      "<td>a = 1</td></tr></table>")
    found = problems(report)
    assert len(found) == 5, found
    assert any("blank.png is blank" in p for p in found)
    assert any("none.png does not exist" in p for p in found)
    assert any("'../x.png' is not a file inside" in p for p in found)
    assert sum("cell holds JSON" in p for p in found) == 2


def test_verdicts_in_words() -> None:
    holds = Claim("Fig. 4", "two beat one",
                  [difference("two - one, KB/s", [100, 110, 105], [170, 180, 175])])
    assert verdict_sentence(holds).startswith("Holds: two - one, KB/s is 70, and its 95 % "
                                              "interval [")
    assert "lies wholly on the claimed side of 0 (n = 3 / 3)." in verdict_sentence(holds)
    one = Claim("Table 2", "below the ideal",
                [level("utilisation, %", [76.0], 80.0, above=False)])
    # the distance from the line says its side in words: "(+5%)" read as 5 % above it
    assert verdict_sentence(one) == ("Inconclusive: utilisation, % is 76 (5% below the line "
                                     "80): one run, so no interval; it is less than 10 % "
                                     "away, too close to tell of 80 (n = 1).")
    far = Claim("Table 2", "below the ideal",
                [level("utilisation, %", [30.86], 80.0, above=False)])
    assert "is 30.86 (61% below the line 80): one run" in verdict_sentence(far)
    diff = Claim("Fig. 5", "mptcp beats tcp", [difference("mptcp - tcp", [91.2], [52.3])])
    assert "mptcp - tcp is -38.9 (-43% of the second term's mean): one run" in \
        verdict_sentence(diff)
    none = Claim("Fig. 5", "keeps delivering", [difference("mptcp - tcp", [], [])])
    assert verdict_sentence(none) == "No data: mptcp - tcp: no runs to measure it."
    assert ratio_text(60.0, 45.0) == "x0.75" and ratio_text(None, 1.0) == "—"
    assert ratio_text(0.0, 1.0) == "—"


def test_a_difference_from_zero_shows_no_infinite_share() -> None:
    claim = Claim("random", "spray reorders", [difference("spray - single", [0.0], [38.0])])
    assert verdict_sentence(claim) == ("Holds: spray - single is 38: one run, so no "
                                       "interval; it is at least 10 % away, on the claimed "
                                       "side of 0 (n = 1 / 1).")


def test_a_linked_figures_folder_is_refused_and_nothing_written_through_it(tmp_path):
    """A study output folder from elsewhere may hold ``report-figures`` as a link: the
    study report writes nothing through it (one line naming it)."""
    from analysis.study_figures import FIGURES_DIR, write_figures
    from testbed.core.errors import InputError

    out, elsewhere = tmp_path / "study-out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / FIGURES_DIR).symlink_to(elsewhere)
    with pytest.raises(InputError, match=r"report-figures: a symbolic link \(not followed\); "
                                         r"the study report writes its figures only"):
        write_figures([], out)
    assert list(elsewhere.iterdir()) == []
    (out / FIGURES_DIR).unlink()
    (out / FIGURES_DIR).write_text("")
    with pytest.raises(InputError, match="not a directory"):
        write_figures([], out)
    (out / FIGURES_DIR).unlink()
    assert write_figures([], out) == [] and (out / FIGURES_DIR).is_dir()


def test_figures_an_earlier_render_left_are_removed_and_nothing_else(tmp_path):
    """A render that draws fewer figures than the last one leaves only its own PNGs in
    ``report-figures``; a link named like a figure goes as a link (its target stays), and
    files that are not PNGs stay."""
    from analysis.study_figures import FIGURES_DIR, StudyFigure, axes, write_figures

    out = tmp_path / "study-out"
    folder = out / FIGURES_DIR
    folder.mkdir(parents=True)
    (folder / "old-figure.png").write_bytes(b"stale")
    (folder / "notes.txt").write_text("mine")
    target = tmp_path / "precious.png"
    target.write_bytes(b"keep")
    (folder / "linked.png").symlink_to(target)
    fig, _ax = axes("kept", "x", "y")
    written = write_figures([StudyFigure("kept", "Kept", "a caption", fig)], out)
    assert [href for _f, href in written] == [f"{FIGURES_DIR}/kept.png"]
    assert sorted(p.name for p in folder.iterdir()) == ["kept.png", "notes.txt"]
    assert target.read_bytes() == b"keep"
