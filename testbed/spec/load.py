"""Loading a spec: TOML text -> validated `Experiment` -> TOML text again.

`read_toml` reads a file into a dict; `validate_spec` turns a dict into a frozen
`Experiment` or raises `SpecError` with one line per problem, all at once, each naming
the file (or ``--set KEY``), the key path and a hint::

    spec.toml: topology.paths[0].bw: "10 mbps" is not a rate; did you mean "10Mbit"?
    spec.toml: workload[0].dst: no host named 'sever'; did you mean 'server'?

A ``[[schedule]]`` entry naming a ``trace`` file becomes one event per row of the file
before the spec validates (`testbed.spec.trace.expand_traces`), so the `Experiment` holds
plain events; the file's problems are reported with the spec's others.
`spec_to_data` / `spec_to_toml` write a spec back with its unit strings, exactly.
Sweeps, overrides, seeds and run ids live in `testbed.spec.sweep`.
"""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from testbed.core.compat import tomllib
from testbed.core.errors import SpecError
from testbed.spec.experiment import Experiment
from testbed.spec.problems import data_path, show_parts, validation_problems
from testbed.spec.quantities import USER_TEXT
from testbed.spec.trace import TraceFolder, expand_traces

MAX_SPEC_BYTES = 1 << 20  # 1 MiB: a spec is a few KiB, and every bundle keeps a copy


def read_toml(path: Path) -> dict[str, Any]:
    """Read a TOML file into a dict; a missing file or bad syntax raises `SpecError`.

    path: the spec file.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path):
            raise SpecError(f"{path}: not a regular file (a device, FIFO or socket); give "
                            "the spec's .toml file")
        with open(path, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except FileNotFoundError:
        raise SpecError(f"{path}: no such spec file") from None
    except IsADirectoryError:
        raise SpecError(f"{path}: a folder, not a spec file (give the .toml file)") from None
    except PermissionError:
        raise SpecError(f"{path}: not readable by this user (permission denied)") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES >> 10} KiB; a spec is a few "
                        "KiB (long schedules belong in a trace file, docs/spec.md)")
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0  # as some editors write: not TOML
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text (byte {exc.start + bom}); save the spec "
                        "as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: not valid TOML: nested too deeply") from None


def validate_spec(data: dict[str, Any], source: str = "spec",
                  labels: dict[str, str] | None = None,
                  traces: TraceFolder | None = None) -> Experiment:
    """Validate a spec dict into an `Experiment`; raise a `SpecError` naming every problem.

    data: the parsed TOML; source: the file name that prefixes each problem's line;
    labels: key path as shown (``topology.paths[0].bw``) -> what to name instead of the
    file for problems at or under that key (``--set topology.paths.0.bw``); traces: the
    spec's folder, where ``[[schedule]]`` entries with ``trace`` read their files (None:
    such an entry is a problem).
    The error's message has one line per problem: ``<source>: <key path>: <what, hint>``.
    """
    expanded = expand_traces(data, traces)
    data = expanded.data
    problems = list(expanded.problems)
    try:
        exp = Experiment.model_validate(data, context=USER_TEXT)
    except ValidationError as exc:
        found = validation_problems(exc, data)
        found += [p for p in _cross_problems(exc, data) if p not in found]
        problems += expanded.as_written(found)
    except SpecError as exc:
        problems += expanded.as_written(str(exc).splitlines())
    else:
        if not problems:
            return exp
    raise SpecError("\n".join(_labelled(p, source, labels or {}) for p in problems)) \
        from None


def _labelled(problem: str, source: str, labels: dict[str, str]) -> str:
    """Prefix a ``key: text`` problem with the file, or with ``--set KEY`` when it set that key."""
    key, _, text = problem.partition(": ")
    for shown, label in labels.items():
        if key == shown:
            return f"{label}: {text}"
        if key.startswith((shown + ".", shown + "[")):
            return f"{label}: {problem}"
        if shown.startswith((key + ".", key + "[")) and text.startswith("unknown key"):
            return f"{label}: {problem}"  # a table only --set made (``transprot.cc``)
    return f"{source}: {problem}"


def _cross_problems(exc: ValidationError, data: dict[str, Any]) -> list[str]:
    """The cross-key problems of the spec once the keys with field errors are left out.

    Keys with errors are removed (unknown keys too) and the rest validated again, so that
    a wrong host name is reported along with a wrong unit. Nothing is added when a removed
    key was required, and problems under a table that lost a key are dropped (they could
    come from the removal itself).
    """
    pruned = copy.deepcopy(data)
    shadowed: set[str] = set()
    for err in exc.errors(include_url=False):
        parts = data_path(err["loc"], data)
        if err["type"] == "missing" or not parts or isinstance(parts[-1], int):
            return []
        node: Any = pruned
        for part in parts[:-1]:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return []
        if not isinstance(node, dict) or parts[-1] not in node:
            return []
        del node[parts[-1]]
        if err["type"] != "extra_forbidden":
            shadowed.add(show_parts(parts[:-1]))
    try:
        Experiment.model_validate(pruned, context=USER_TEXT)
    except SpecError as cross:
        return [p for p in str(cross).splitlines()
                if not any(s and (p.startswith((s + ".", s + "[", s + ":"))) for s in shadowed)]
    except ValidationError:
        return []
    return []


def load_spec(path: Path) -> Experiment:
    """Read and validate a spec file without sweeping (the sweep table is kept as data)."""
    return validate_spec(read_toml(path), str(path), traces=TraceFolder(Path(path).parent))



def spec_to_data(exp: Experiment) -> dict[str, Any]:
    """The spec as plain TOML-ready data with unit strings; None values and defaults kept."""
    return _drop_none(exp.model_dump(mode="json"))


def _drop_none(value: Any) -> Any:
    """Drop None values and empty tables/lists; put ``kind`` first in every table."""
    if isinstance(value, dict):
        out = {k: v for k, v in ((k, _drop_none(v)) for k, v in value.items())
               if v is not None and v != {} and v != []}
        if "kind" in out:
            out = {"kind": out.pop("kind"), **out}
        return out
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def spec_to_toml(exp: Experiment, header: str = "") -> str:
    """The spec as TOML text (loads back into an equal `Experiment`).

    header: comment lines to put first (without the leading '#').
    """
    import tomli_w

    data = spec_to_data(exp)
    lines = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
    return lines + tomli_w.dumps(data)
