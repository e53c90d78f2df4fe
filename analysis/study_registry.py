"""Which studies exist: one folder each under ``experiments/``, found by looking there.

A study is a folder ``<root>/<name>/`` holding ``paper.toml`` (the paper's numbers; its
``[paper] id``, e.g. ``"P3"``, names the study), ``quick/*.toml`` and ``full/*.toml``
specs, a README, and ``study.py``, whose ``evaluate(paper, out, res)`` fills a
`StudyResult` from what ``testbed study`` wrote into ``out`` and whose optional
``figures(paper, out)`` (there or in a sibling ``figures.py``) redraws the paper's
figures (`analysis.study_figures`).
`StudyRegistry` finds every such folder, so adding a study is adding a folder: no shared
file changes.

What is imported, and from where: only the ``study.py`` of a folder directly under the
registry's root -- by default the project's own ``experiments`` package (each study is
imported by name, ``experiments.<name>.study``); another root (a test's throwaway folder)
is passed explicitly and its modules are loaded from their files.  The folder a user names
(``testbed study DIR``) is only read: its paper id selects one of the registry's studies,
and no code from it ever runs.  A folder or ``study.py`` that is a symbolic link is not a
study.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from analysis.claims import StudyResult, load_paper, paper_id
from analysis.study_figures import StudyFigure
from testbed.core.errors import InputError

STUDY_MODULE = "study.py"
FIGURES_MODULE = "figures.py"  # optional: the study's figures when study.py has none
PACKAGE = "experiments"  # the project's studies: a package, each study folder a subpackage
_FOLDER_NAME = re.compile(r"[a-z][a-z0-9_]*")  # a Python package name


class Evaluator(Protocol):
    """A study's ``evaluate``: fills res from the paper's numbers and the results in out."""

    def __call__(self, paper: dict[str, Any], out: Path, res: StudyResult) -> None: ...


class FigureMaker(Protocol):
    """A study's optional ``figures``: the paper's figures redrawn from the results in out."""

    def __call__(self, paper: dict[str, Any], out: Path) -> list[StudyFigure]: ...


@dataclass(frozen=True)
class StudyEntry:
    """One study found. study_id: its paper.toml's ``[paper] id``; folder: the study folder."""

    study_id: str
    folder: Path


def project_root() -> Path:
    """The folder of the project's ``experiments`` package (where the studies live)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise InputError(f"the {PACKAGE!r} package (the studies) is not importable; "
                         "install the project (scripts/install) or run from its checkout")
    return Path(locations[0])


class StudyRegistry:
    """The studies of one root folder (default: the project's ``experiments/``).

    root: a folder of study folders, for tests; None: the project's ``experiments``
    package, whose study modules are imported by their package names.
    """

    def __init__(self, root: Path | None = None):
        self.root = Path(root) if root is not None else None

    def folder(self) -> Path:
        """The folder whose subfolders are the studies."""
        return self.root if self.root is not None else project_root()

    def studies(self) -> list[StudyEntry]:
        """Every study of the root, in folder name order (paper.toml read, nothing imported).

        Raises `InputError` for a study without a readable paper.toml or two studies with
        one id.
        """
        found: dict[str, StudyEntry] = {}
        for folder in sorted(self.folder().iterdir()):
            module = folder / STUDY_MODULE
            if not (_FOLDER_NAME.fullmatch(folder.name) and folder.is_dir()
                    and not folder.is_symlink() and module.is_file()
                    and not module.is_symlink()):
                continue
            sid = paper_id(load_paper(folder))
            if sid in found:
                raise InputError(f"{folder}/paper.toml: paper.id {sid!r} is also the id of "
                                 f"{found[sid].folder}; give each study its own id")
            found[sid] = StudyEntry(sid, folder)
        return list(found.values())

    def ids(self) -> list[str]:
        """The study ids, in folder name order."""
        return [s.study_id for s in self.studies()]

    def evaluator(self, study_id: str) -> Evaluator | None:
        """The ``evaluate`` function of the study with this id; None when there is none."""
        entry = next((s for s in self.studies() if s.study_id == study_id), None)
        if entry is None:
            return None
        module = self._load(entry)
        fn = getattr(module, "evaluate", None)
        if not callable(fn):
            raise InputError(f"{entry.folder / STUDY_MODULE}: defines no "
                             "evaluate(paper, out, res)")
        return fn

    def figure_maker(self, study_id: str) -> FigureMaker | None:
        """The ``figures`` function of the study with this id (its redrawn figures); None
        when there is no such study or it draws none."""
        entry = next((s for s in self.studies() if s.study_id == study_id), None)
        if entry is None:
            return None
        fn = getattr(self._load(entry), "figures", None)
        if not callable(fn) and (entry.folder / FIGURES_MODULE).is_file() \
                and not (entry.folder / FIGURES_MODULE).is_symlink():
            fn = getattr(self._load(entry, FIGURES_MODULE), "figures", None)
        return fn if callable(fn) else None

    def _load(self, entry: StudyEntry, filename: str = STUDY_MODULE) -> ModuleType:
        """Import one module of the study (study.py, figures.py): by package name for the
        project's own studies, else from the file under the explicitly given root."""
        stem = filename.removesuffix(".py")
        if self.root is None:
            return importlib.import_module(f"{PACKAGE}.{entry.folder.name}.{stem}")
        path = entry.folder / filename
        spec = importlib.util.spec_from_file_location(f"_{stem}_{entry.folder.name}", path)
        if spec is None or spec.loader is None:
            raise InputError(f"{path}: cannot be loaded as a Python module")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
