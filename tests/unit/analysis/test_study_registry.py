"""Studies are found by folder (`analysis.study_registry`): the project's five, a new one in
a throwaway root, and never code from a folder a user names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis.study_registry import StudyRegistry, project_root
from analysis.study_report import evaluate, write_study_report
from testbed.core.errors import InputError
from testbed.run.study import plan_study, study_specs

ROOT = Path(__file__).resolve().parents[3]
SPEC = (ROOT / "experiments" / "examples" / "minimal.toml").read_text()

STUDY_MODULE = '''
from analysis.claims import Claim, Comparison, measured
from analysis.evidence import difference
from analysis.study_tables import top_flows


def evaluate(paper, out, res):
    flows = top_flows(out / "demo")
    res.comparisons.append(Comparison("Fig. 1", "flows", 1.0, float(len(flows)), ""))
    res.claims.append(Claim("Fig. 1", "the demo study is evaluated",
                            [difference("b - a", [1.0, 1.1, 0.9], [2.0, 2.1, 1.9])],
                            measured({"runs": 0.0})))
'''


def _study(root: Path, name: str, study_id: str, module: str = STUDY_MODULE) -> Path:
    """A study folder: paper.toml, one quick and one full spec, a README and study.py."""
    folder = root / name
    for variant in ("quick", "full"):
        (folder / variant).mkdir(parents=True)
        (folder / variant / "demo.toml").write_text(SPEC.replace('"minimal"', f'"{variant}"'))
    (folder / "paper.toml").write_text(f'[paper]\nid = "{study_id}"\ntitle = "A demo"\n'
                                       '[figures.fig1]\ntitle = "one"\nsource = "Fig. 1"\n')
    (folder / "README.md").write_text("# demo\n")
    (folder / "study.py").write_text(module)
    return folder


def test_the_project_studies_are_its_experiment_folders() -> None:
    studies = StudyRegistry().studies()
    assert [s.study_id for s in studies] == ["P0", "P1", "P2", "P3", "P4"]
    assert [s.folder.name for s in studies] == ["p0_wifi_3g", "p1_fattree_spray",
                                                "p2_three_paths", "p3_handover",
                                                "p4_rbuf_blocking"]
    assert project_root() == ROOT / "experiments"
    assert StudyRegistry().evaluator("P9") is None


def test_a_new_study_folder_is_found_through_the_registry(tmp_path: Path) -> None:
    root = tmp_path / "studies"
    folder = _study(root, "p9_demo", "P9")
    (root / "examples").mkdir()  # specs only, no study.py: not a study
    _study(root, "Not-A-Package", "P8")  # not a Python package name: not a study
    registry = StudyRegistry(root)
    assert registry.ids() == ["P9"]
    assert [p.name for p in study_specs(folder, "quick")] == ["demo.toml"]
    assert len(plan_study(folder, "full")[folder / "full" / "demo.toml"]) == 1
    out = tmp_path / "out"
    (out / "demo").mkdir(parents=True)
    res = evaluate(folder, out, registry)
    assert (res.study, res.title) == ("P9", "A demo")
    assert [c.text for c in res.claims] == ["the demo study is evaluated"]
    report = write_study_report(folder, out, registry)
    assert "the demo study is evaluated" in report.read_text()
    claim = json.loads((out / "claims.json").read_text())[0]
    assert claim["verdict"] == "holds" and claim["evidence"][0]["n"] == [3, 3]
    assert "Welch t, df 4.0: holds" in report.read_text()
    # the project's registry does not know it
    with pytest.raises(InputError, match=r"paper\.id .P9. is not one of P0, P1, P2, P3, P4"):
        evaluate(folder, out)


def test_code_in_a_folder_the_user_names_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    folder = _study(tmp_path, "p4_copy", "P4",
                    module=f"from pathlib import Path\nPath({str(marker)!r}).touch()\n")
    res = evaluate(folder, tmp_path / "none")  # the project's P4 evaluates it
    assert res.study == "P4" and res.claims == []
    write_study_report(folder, tmp_path / "empty")
    assert not marker.exists()


def test_linked_study_modules_and_duplicate_ids_are_refused(tmp_path: Path) -> None:
    real = _study(tmp_path / "elsewhere", "p7_real", "P7")
    root = tmp_path / "studies"
    linked = _study(root, "p7_linked", "P7")
    (linked / "study.py").unlink()
    (linked / "study.py").symlink_to(real / "study.py")
    (root / "p7_folder").symlink_to(real)
    assert StudyRegistry(root).ids() == []
    _study(root, "p6_one", "P6")
    _study(root, "p6_two", "p6")
    with pytest.raises(InputError, match=r"p6_two/paper\.toml: paper\.id .P6. is also the id"):
        StudyRegistry(root).studies()


def test_a_study_without_evaluate_is_an_error(tmp_path: Path) -> None:
    _study(tmp_path, "p5_empty", "P5", module="")
    with pytest.raises(InputError, match=r"p5_empty/study\.py: defines no evaluate"):
        StudyRegistry(tmp_path).evaluator("P5")


FIGURES_MODULE = '''
from analysis.study_figures import StudyFigure, axes, no_data


def figures(paper, out):
    fig, (ax,) = axes("demo", "t (s)", "rate")
    no_data(ax, "nothing to draw")
    return [StudyFigure("demo-fig", "The demo figure", "says what is missing", fig)]
'''


def test_a_study_figures_module_is_found_and_its_figures_embedded(tmp_path: Path) -> None:
    root = tmp_path / "studies"
    folder = _study(root, "p9_demo", "P9")
    registry = StudyRegistry(root)
    assert registry.figure_maker("P9") is None  # study.py draws none, no figures.py
    (folder / "figures.py").write_text(FIGURES_MODULE)
    out = tmp_path / "out"
    (out / "demo").mkdir(parents=True)
    page = write_study_report(folder, out, registry).read_text()
    assert '<img src="report-figures/demo-fig.png" alt="The demo figure">' in page
    assert (out / "report-figures" / "demo-fig.png").stat().st_size > 1000
    # a linked figures.py is not code of the study: never imported
    (folder / "figures.py").unlink()
    (folder / "figures.py").symlink_to(tmp_path / "elsewhere.py")
    (tmp_path / "elsewhere.py").write_text(FIGURES_MODULE)
    assert StudyRegistry(root).figure_maker("P9") is None
