"""An assignment: ``experiments/assignments/<name>/`` with its specs, questions.md and
rubric.toml, loaded and validated (`load_assignment`).

rubric.toml::

    title = "P2: cubic vs reno over three paths"

    [[spec]]                      # a spec the student runs (a file of the folder)
    file = "cc.toml"
    fixed = ["topology", "duration"]   # dotted keys a run's spec.toml must keep as given

    [[check]]
    name = "cubic-goodput"        # letters, digits, - and _
    sql = "SELECT ... "           # DuckDB over the bundle views; one number
    expected = 13.6               # with tolerance (+ relative = true: a fraction of it)
    tolerance = 0.15
    relative = true
    # or a range instead of expected/tolerance: min = 100, max = 1000 (either may be left out)
    points = 2
    pass = "feedback when it passes"
    fail = "feedback when it fails"
    hidden = false                # true: `testbed check` does not show expected/tolerance

Problems are reported one per line (``<file>: <key path>: <what>``), as a spec's are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from testbed.core.errors import InputError
from testbed.spec.experiment import Experiment
from testbed.spec.load import load_spec, read_toml
from testbed.spec.problems import validation_problems

ASSIGNMENTS = Path(__file__).resolve().parents[2] / "experiments" / "assignments"
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class AssignmentError(InputError):
    """A malformed assignment folder or rubric.toml."""


class _Model(BaseModel):
    # strict: ``points = "1"`` or ``hidden = "off"`` is refused, not converted (a hidden
    # check read as shown would give its expected value away); no inf or nan anywhere
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True,
                              strict=True, allow_inf_nan=False)


class SpecPart(_Model):
    """A spec of the assignment and the keys a student's runs of it must not change."""

    file: str = Field(pattern=r"^[A-Za-z0-9_-]+\.toml$")
    fixed: list[str] = Field(default_factory=list)


class Check(_Model):
    """One named check: a SQL query giving one number, what it must be, points, feedback."""

    name: str = Field(pattern=NAME_RE)
    sql: str = Field(min_length=1)
    expected: float | None = None
    tolerance: float = Field(default=0.0, ge=0)
    relative: bool = False
    min: float | None = None
    max: float | None = None
    points: float = Field(gt=0)
    pass_: str = Field(alias="pass", min_length=1)
    fail: str = Field(min_length=1)
    hidden: bool = False

    @field_validator("sql")
    @classmethod
    def _one_select(cls, sql: str) -> str:
        from testbed.results.query import one_statement

        try:
            return one_statement(sql, "sql", select_only=True)
        except InputError as exc:
            raise ValueError(str(exc).removeprefix("sql: ")) from None

    @model_validator(mode="after")
    def _one_kind(self) -> Check:
        has_range = self.min is not None or self.max is not None
        if (self.expected is None) == (not has_range):
            raise ValueError("give either expected (with tolerance) or min/max, not both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}")
        if has_range and (self.relative or self.tolerance):
            raise ValueError("tolerance and relative go with expected, not with min/max")
        return self

    def bounds(self) -> tuple[float, float]:
        """The closed interval a measured value must fall in to pass."""
        if self.expected is not None:
            tol = abs(self.expected) * self.tolerance if self.relative else self.tolerance
            return self.expected - tol, self.expected + tol
        lo = self.min if self.min is not None else float("-inf")
        hi = self.max if self.max is not None else float("inf")
        return lo, hi

    def passes(self, value: float | None) -> bool:
        """Whether a measured value passes (None or NaN never does)."""
        if value is None or value != value:
            return False
        lo, hi = self.bounds()
        return lo <= value <= hi

    def expected_text(self, reveal: bool = True) -> str:
        """What the check expects, as the gradebook and the pages show it ("hidden" for a
        hidden check unless reveal)."""
        if self.hidden and not reveal:
            return "hidden"
        if self.expected is not None:
            tol = f"{self.tolerance * 100:g} %" if self.relative else f"{self.tolerance:g}"
            return f"{self.expected:g} ± {tol}"
        if self.max is None:
            return f">= {self.min:g}"
        if self.min is None:
            return f"<= {self.max:g}"
        return f"[{self.min:g}, {self.max:g}]"


class Rubric(_Model):
    """rubric.toml."""

    title: str = Field(min_length=1)
    spec: list[SpecPart] = Field(min_length=1)
    check: list[Check] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Rubric:
        names = [c.name for c in self.check]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"check names must be unique: {', '.join(dup)} repeated")
        return self


@dataclass(frozen=True)
class Assignment:
    """A loaded assignment: its folder, rubric and specs (file name -> spec)."""

    name: str
    folder: Path
    rubric: Rubric
    specs: dict[str, Experiment]

    @property
    def max_points(self) -> float:
        return float(sum(c.points for c in self.rubric.check))

    def spec_named(self, run_name: str) -> tuple[SpecPart, Experiment] | None:
        """The assignment spec whose ``name`` a run carries, with its fixed keys."""
        for part in self.rubric.spec:
            if self.specs[part.file].name == run_name:
                return part, self.specs[part.file]
        return None


def assignment_folder(name: str) -> Path:
    """The folder of an assignment given by name (experiments/assignments/<name>) or path."""
    given = Path(name)
    if given.is_dir():
        return given
    if re.match(NAME_RE, name) and (ASSIGNMENTS / name).is_dir():
        return ASSIGNMENTS / name
    names = sorted(p.parent.name for p in ASSIGNMENTS.glob("*/rubric.toml"))
    raise AssignmentError(f"--assignment {name}: no such assignment; give a folder with a "
                          f"rubric.toml or one of: {', '.join(names) or 'none'}")


def load_assignment(name: str) -> Assignment:
    """Load and validate an assignment (a name under experiments/assignments or a folder).

    Raises `AssignmentError` with one line per problem of rubric.toml, or the spec's own
    `SpecError` lines for a spec of the assignment that does not load.
    """
    folder = assignment_folder(name)
    path = folder / "rubric.toml"
    if not path.exists() and not path.is_symlink():
        raise AssignmentError(f"{folder}: no rubric.toml; an assignment folder holds its "
                              "specs, questions.md and rubric.toml (docs/assignments.md)")
    if not path.is_file():  # it was reported as missing
        raise AssignmentError(f"{path}: not a regular file (a folder, FIFO, device or a "
                              "dangling link); write the rubric as a TOML file")
    data = read_toml(path)
    try:
        rubric = Rubric.model_validate(data)
    except ValidationError as exc:
        raise AssignmentError("\n".join(f"{path}: {p}" for p in _problems(exc, data))) \
            from None
    if not (folder / "questions.md").is_file():
        raise AssignmentError(f"{folder}: no questions.md (or not a regular file); write "
                              "the questions students answer there")
    specs = {}
    for part in rubric.spec:
        spec_path = folder / part.file
        if not spec_path.is_file():
            raise AssignmentError(f"{path}: spec file {part.file} is not in {folder}")
        specs[part.file] = load_spec(spec_path)
        data_keys = _spec_data(specs[part.file])
        for key in part.fixed:
            if lookup(data_keys, key) is _MISSING:
                raise AssignmentError(f"{path}: spec {part.file}: fixed key {key!r} is not "
                                      "in the spec; name a dotted key it sets, e.g. "
                                      "'topology' or 'transport.protocol'")
    return Assignment(folder.name, folder, rubric, specs)


def _problems(exc: ValidationError, data: Any) -> list[str]:
    """One line per validation problem (`testbed.spec.problems` for key paths)."""
    return validation_problems(exc, data) or [str(exc).splitlines()[0]]


_MISSING = object()


def _spec_data(exp: Experiment) -> dict[str, Any]:
    from testbed.spec.load import spec_to_data

    return spec_to_data(exp)


def lookup(data: Any, dotted: str) -> Any:
    """The value at a dotted key (``transport.protocol``, ``workload.0.via``) of spec data,
    or the module's missing marker."""
    node = data
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def fixed_differences(assignment_spec: Experiment, run_spec: Experiment,
                      fixed: list[str]) -> list[str]:
    """The fixed keys whose value in a run's spec differs from the assignment's spec."""
    want, got = _spec_data(assignment_spec), _spec_data(run_spec)
    return [key for key in fixed if lookup(want, key) != lookup(got, key)]
