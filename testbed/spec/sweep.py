"""Sweeps, ``--set`` overrides, repetition seeds and run ids.

A spec's ``[sweep]`` table maps dotted key paths to lists of values; the runs are the
grid (cartesian product, first key varying slowest) times the repetitions, ordered
repetition by repetition (all points of repetition 1, then repetition 2, ...), so that a
sweep interrupted part-way has seen every point at least once.

Key paths: ``transport.cc``, ``topology.paths.1.bw`` or ``topology.paths[1].bw``
(list indices count from 0). ``--set KEY=VALUE`` applies before the sweep; VALUE is read
as a TOML value (``10``, ``true``, ``"4Mbit"``, ``["a", "b"]``) and, failing that, as a
bare string (``--set transport.cc=reno``). Setting a key that the sweep varies replaces
that sweep axis with the single value.

Seeds: repetition ``r`` (from 1) of a spec with base ``seed = s`` gets
``int.from_bytes(sha256(f"{s}/{r}".encode()).digest()[:4], "big")`` — reproducible in any
language, the same for every sweep point (common random numbers across the grid), and
never Python's per-process salted ``hash()``. `derive_seed` computes it; workloads derive
theirs the same way from the run seed (`workload_seed`).

Run ids: ``<name>-<first 10 hex of sha256(canonical JSON)>-r<r>``, where the canonical
JSON is the resolved spec without ``description``, ``sweep``, ``repetitions`` and
``repetition``, keys at their default values left out, sorted keys, plus the repetition
number. The same resolved parameters and repetition always give the same id; ``"4Mbit"``
and ``"4000kbit"`` resolve alike.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.core.compat import tomllib
from testbed.core.errors import SpecError
from testbed.spec.experiment import Experiment
from testbed.spec.load import read_toml, spec_to_toml, validate_spec
from testbed.spec.quantities import show_value
from testbed.spec.trace import TraceFolder

KeyPath = list[str | int]

_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[[0-9]+\])*)$")
_NOT_SWEPT = ("name", "sweep", "repetitions", "repetition")
MAX_RUNS = 10_000  # sweep grid points x repetitions; more is a mistake, not an experiment
MAX_REPETITIONS = 1000  # as `Experiment.repetitions` allows


def value_name(value: Any) -> str:
    """A swept value as a person reads it: a table or a list of tables with ``name``
    fields by those names (``tcp-wifi``, ``mptcp+video``), anything else as JSON text."""
    items = value if isinstance(value, list) else [value]
    names = [str(d["name"]) for d in items if isinstance(d, dict) and "name" in d]
    if items and names and len(names) == len(items):
        return "+".join(names)
    return value if isinstance(value, str) else json.dumps(value)


def point_text(params: dict[str, Any]) -> str:
    """A sweep point in one line for messages: ``transport.cc = "lia", capture.interfaces
    = ["client-eth7"]`` (a list or table by its names or as JSON, cut at 60 characters)."""
    def one(value: Any) -> str:
        if value is None or isinstance(value, (str, bool, int, float)):
            return show_value(value)
        text = value_name(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return ", ".join(f"{k} = {one(v)}" for k, v in params.items())


def parse_key_path(text: str, where: str) -> KeyPath:
    """Split ``"topology.paths.1.bw"`` / ``"topology.paths[1].bw"`` into keys and indices.

    text: the key path; where: what to name in the error (e.g. ``--set``).
    """
    parts: KeyPath = []
    for seg in str(text).strip().split("."):
        if seg.isdigit():
            parts.append(int(seg))
            continue
        m = _SEGMENT.match(seg)
        if not m:
            raise SpecError(f"{where}: {text!r} is not a key path; use e.g. "
                            "'transport.cc' or 'topology.paths.1.bw'")
        parts.append(m.group(1))
        parts.extend(int(i) for i in re.findall(r"\[([0-9]+)\]", m.group(2)))
    if not parts or isinstance(parts[0], int):
        raise SpecError(f"{where}: {text!r} is not a key path; use e.g. 'transport.cc'")
    return parts


def format_key_path(path: KeyPath) -> str:
    """The canonical dotted form: ``topology.paths.1.bw``."""
    return ".".join(str(p) for p in path)


def _show_path(path: KeyPath) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
    return out


def set_key(data: dict[str, Any], path: KeyPath, value: Any, where: str) -> None:
    """Set data[path] = value in place; missing tables are created, list indices must exist.

    data: the spec dict; path: parsed key path; value: the new value; where: error prefix.
    """
    node: Any = data
    for n, part in enumerate(path):
        last = n == len(path) - 1
        here = _show_path(path[:n]) or "(top level)"
        if isinstance(part, int):
            if not isinstance(node, list):
                raise SpecError(f"{where}: {here} is not a list, so [{part}] does not apply")
            if part >= len(node):
                raise SpecError(f"{where}: {here} has {len(node)} entr"
                                f"{'y' if len(node) == 1 else 'ies'}, so there is no "
                                f"[{part}] (indices count from 0)")
        elif not isinstance(node, dict):
            raise SpecError(f"{where}: {here} is not a table, so .{part} does not apply")
        if last:
            node[part] = value
            return
        if isinstance(part, str) and part not in node:
            if isinstance(path[n + 1], int):
                raise SpecError(f"{where}: {_show_path(path[:n + 1])} is not in the spec, "
                                "so it has no entries to index")
            node[part] = {}
        node = node[part]


def parse_value(text: str) -> Any:
    """Read an override value as TOML (``10``, ``true``, ``"4Mbit"``), else a bare string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text.strip()


def parse_override(text: str) -> tuple[KeyPath, Any]:
    """Split ``KEY=VALUE`` from ``--set`` into a key path and a value."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise SpecError(f"--set {text}: expected KEY=VALUE, e.g. --set transport.cc=reno")
    path = parse_key_path(key.strip(), f"--set {key.strip()}")
    if path[0] == "sweep":
        raise SpecError(f"--set {key.strip()}: the sweep cannot be set from the command line; "
                        "set the swept key itself to fix it to one value")
    return path, parse_value(value)


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of data with each ``KEY=VALUE`` applied; a set key leaves the sweep."""
    out = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        set_key(out, path, value, f"--set {format_key_path(path)}")
        sweep = out.get("sweep")
        if isinstance(sweep, dict):
            for key in list(sweep):
                try:
                    same = parse_key_path(key, "sweep") == path
                except SpecError:
                    continue
                if same:
                    del sweep[key]
    return out


def derive_seed(base: int, repetition: int) -> int:
    """The seed of repetition r: first 4 bytes of sha256("<base>/<r>") as an unsigned int."""
    digest = hashlib.sha256(f"{base}/{repetition}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def workload_seed(run_seed: int, index: int) -> int:
    """The seed of workload i in a run: first 4 bytes of sha256("<run_seed>/workload/<i>")."""
    digest = hashlib.sha256(f"{run_seed}/workload/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def canonical_json(exp: Experiment, repetition: int) -> str:
    """The text a run id hashes: resolved parameters (no defaults) plus the repetition.

    A default that the model keeps as None and resolves later counts as left out when it
    is written out with its value (a path's ``queue = 1000``, a workload named as it would
    be anyway), so writing out a default does not change the id: a re-run of the same
    spec then skips its complete runs.  ``controller.kind`` is the exception: written out,
    it counts (P1's sweeps name the fat-tree's default, ecmp, and their bundles keep the
    ids they were made with)."""
    data = exp.model_dump(mode="json", exclude_defaults=True,
                          exclude={"description", "sweep", "repetitions", "repetition"})
    _drop_resolved_defaults(exp, data)
    data["repetition"] = repetition
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _drop_resolved_defaults(exp: Experiment, data: dict[str, Any]) -> None:
    """Remove from data (`canonical_json`'s dump of exp) the values equal to what their
    None default resolves to."""
    from testbed.spec.linkshape import DEFAULT_QUEUE_PKTS
    from testbed.spec.model import MultipathTopology

    topo = data.get("topology")
    if isinstance(exp.topology, MultipathTopology) and isinstance(topo, dict):
        for path in topo.get("paths") or []:
            if isinstance(path, dict) and path.get("queue") == DEFAULT_QUEUE_PKTS:
                del path["queue"]
    for i, wl in enumerate(data.get("workload") or []):
        if isinstance(wl, dict) and wl.get("name") == f"{exp.workload[i].kind}{i}":
            del wl["name"]


def run_id(exp: Experiment, repetition: int) -> str:
    """``<name>-<sha256[:10]>-r<repetition>``: stable for the same parameters and repetition."""
    digest = hashlib.sha256(canonical_json(exp, repetition).encode()).hexdigest()[:10]
    return f"{exp.name}-{digest}-r{repetition}"


@dataclass(frozen=True)
class RunPlan:
    """One run of a sweep: its id, resolved spec, repetition, seed and swept values."""

    index: int
    run_id: str
    repetition: int
    seed: int
    spec: Experiment
    params: dict[str, Any] = field(default_factory=dict)

    def resolved_toml(self) -> str:
        """The spec.toml written into the bundle (re-running it gives this very run)."""
        fixed = self.spec.model_copy(update={"repetitions": 1, "repetition": self.repetition,
                                             "sweep": {}})
        header = (f"run {self.run_id}: repetition {self.repetition}, seed {self.seed}"
                  + ("".join(f"\nswept {k} = {json.dumps(v)}" for k, v in self.params.items())))
        return spec_to_toml(fixed, header=header)


def _sweep_axes(data: dict[str, Any], source: str) -> list[tuple[str, KeyPath, list[Any]]]:
    sweep = data.get("sweep", {})
    if not isinstance(sweep, dict):
        raise SpecError(f"{source}: sweep: {show_value(sweep)} is not a table; write "
                        "[sweep] with \"key.path\" = [values, ...]")
    axes = []
    seen: dict[str, str] = {}
    for key, values in sweep.items():
        where = f"{source}: sweep.\"{key}\""
        path = parse_key_path(key, where)
        canon = format_key_path(path)
        if path[0] in _NOT_SWEPT:
            raise SpecError(f"{where}: {path[0]} cannot be swept"
                            + ("; use repetitions for more runs" if path[0] != "name" else ""))
        if canon in seen:
            raise SpecError(f"{where}: the same key as sweep.\"{seen[canon]}\"")
        seen[canon] = key
        if isinstance(values, dict):  # `transport.cc = [...]` unquoted: TOML nests it
            inner = next(iter(values), "KEY")
            raise SpecError(f"{where}: a table, not a list: a dotted key in [sweep] must be "
                            f"quoted, e.g. \"{key}.{inner}\" = [...]")
        if not isinstance(values, list) or not values:
            raise SpecError(f"{where}: expected a non-empty list of values, e.g. "
                            "[\"reno\", \"cubic\"]")
        axes.append((canon, path, values))
    return axes


def _check_grid_size(axes: list[tuple[str, KeyPath, list[Any]]], data: dict[str, Any],
                     source: str, reps_from: str | None = None) -> None:
    """Refuse a grid (x repetitions) above `MAX_RUNS` before any point is built."""
    points = 1
    for _, _, values in axes:
        points *= len(values)
    reps = data.get("repetitions", 1)
    reps = reps if isinstance(reps, int) and not isinstance(reps, bool) and reps > 0 else 1
    if reps > MAX_REPETITIONS:  # the spec's own bound, named before the grid's
        where = reps_from or f"{source}: repetitions"
        raise SpecError(f"{where}: {reps} is more than {MAX_REPETITIONS}; "
                        f"use 1 .. {MAX_REPETITIONS}")
    if data.get("repetition") is not None:
        reps = 1
    if points * reps > MAX_RUNS:
        shape = " x ".join(str(len(v)) for _, _, v in axes) or "1"
        raise SpecError(f"{source}: sweep: the grid has {points} points ({shape})"
                        + (f" x {reps} repetitions = {points * reps} runs" if reps > 1
                           else "")
                        + f"; the most allowed is {MAX_RUNS} runs; split the sweep")


def _own_set_problem(line: str, params: dict[str, Any]) -> bool:
    """Whether an error line is about a ``--set`` value of a key the sweep does not
    change: every point has the same problem, and naming one would mislead."""
    if not line.startswith("--set "):
        return False
    key = line[len("--set "):].split(":", 1)[0].strip()
    return key not in params


def expand(data: dict[str, Any], source: str = "spec",
           labels: dict[str, str] | None = None,
           traces: TraceFolder | None = None) -> list[RunPlan]:
    """All runs of a spec dict (overrides already applied), each validated.

    data: the parsed spec; source: file name for messages; labels: shown key path ->
    ``--set KEY`` for keys set from the command line (see `override_labels`); traces:
    the spec's folder, for ``[[schedule]]`` entries that name a trace file. Raises
    `SpecError` for the first invalid point (every problem of it, one line each), naming
    the swept values that produced it.
    """
    axes = _sweep_axes(data, source)
    reps_from = (labels or {}).get("repetitions")  # a --set repetitions=N is named as such
    _check_grid_size(axes, data, source, reps_from)
    base = {k: v for k, v in data.items() if k != "sweep"}
    points: list[tuple[dict[str, Any], Experiment]] = []
    for combo in itertools.product(*(values for _, _, values in axes)):
        point = copy.deepcopy(base)
        params: dict[str, Any] = {}
        for (canon, path, _), value in zip(axes, combo, strict=True):
            set_key(point, path, copy.deepcopy(value), f"{source}: sweep.\"{canon}\"")
            params[canon] = value
        try:
            exp = validate_spec(point, source, labels, traces)
        except SpecError as exc:
            if not params:
                raise
            where = point_text(params)
            raise SpecError("\n".join(
                line if _own_set_problem(line, params) else f"{line} (in the sweep point {where})"
                for line in str(exc).splitlines())) from None
        points.append((params, exp))
    if not points:  # an axis with no values was refused above; keep the type checker calm
        raise SpecError(f"{source}: the sweep has no points")
    reps = points[0][1].repetition_numbers()
    plans: list[RunPlan] = []
    ids: dict[str, dict[str, Any]] = {}
    for rep in reps:
        for params, exp in points:
            rid = run_id(exp, rep)
            if rid in ids:
                raise SpecError(f"{source}: sweep points {ids[rid]} and {params} resolve to "
                                "the same parameters; remove one of the values")
            ids[rid] = params
            plans.append(RunPlan(index=len(plans), run_id=rid, repetition=rep,
                                 seed=derive_seed(exp.seed, rep), spec=exp, params=params))
    return plans


def plan_runs(spec_path: Path, overrides: list[str] | None = None) -> list[RunPlan]:
    """Read a spec file, apply ``--set`` overrides and expand the sweep into runs.

    spec_path: the TOML file; overrides: ``KEY=VALUE`` strings.
    """
    data = read_toml(spec_path)
    data = apply_overrides(data, overrides or [])
    return expand(data, str(spec_path), override_labels(overrides or []),
                  TraceFolder(Path(spec_path).parent))


def override_labels(overrides: list[str]) -> dict[str, str]:
    """Key path as problems show it (``topology.paths[0].bw``) -> ``--set KEY`` as typed.

    overrides: the ``KEY=VALUE`` strings (already checked by `apply_overrides`).
    """
    out: dict[str, str] = {}
    for text in overrides:
        path, _ = parse_override(text)
        out[_show_path(path)] = f"--set {text.partition('=')[0].strip()}"
    return out
