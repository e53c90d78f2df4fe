"""Every `testbed` command and SQL query in README.md, docs/ and the experiment READMEs
runs, against bundles made by real runs (issue 25).

The bundles are the quick studies' (the session fixture ``studies_out``: every study's
quick specs run for real through ``testbed study``, shared with the reproduction tests),
so no result here comes from a fixture written by hand.  What each documented command
(`docexamples`) is run as:

* ``run`` and ``study``: with ``--dry-run`` (the real code path with a recording runner,
  docs/architecture.md): the spec loads, its sweep expands, its network and commands are
  planned.  Building the network for every documented spec, full variants included, is
  what the studies and the kernel-feature tests do for the quick ones; the full ones need
  hours.  The folder each dry run says it writes (``N run(s) into results/...``) is
  collected: a documented query or report may name only such a folder.
* ``query``: run against the bundles the studies wrote for the spec whose default folder
  it names (``results/p0-paths-quick`` is what ``testbed run .../quick/paths.toml``
  writes, so it runs on the study's ``paths`` folder); ``DIR`` stands for P0 quick's
  heavy-load folder (MPTCP beside pinned TCP flows).  It must exit 0 and print at least
  one row.
* ``report``: on a copy of the folder it names (``DIR``/``RUN``: as for query), with
  ``--out`` into a temporary folder when given.
* ``compare``: on the real folders it names (as for query), with ``--out`` into a
  temporary folder: it must exit 0, write ``compare.html``, and leave every file of its
  inputs as it was (same names, sizes and modification times).
* ``check`` and ``verify`` (docs/assignments.md): on the real folder their last word names
  (as for query): the quick studies' bundles are the assignments' reference solutions, so
  both must exit 0 (every check passes; the stored metrics match the recomputed ones) and
  leave every file of their input as it was.
* ``doctor``: run; exit 0 or 1 (natively possible or not) with one line per check.
* ``vm -- CMD``: the VM itself is not booted again (the kernel-feature tests and the
  studies boot it); the command inside must exist and accept its documented arguments
  (a Python script is run with them and ``--help``, whose output must name every
  ``--option`` given).
* a synopsis or a mention (``testbed doctor [--json]``, ``testbed run SPEC``): its
  subcommand and every ``--option`` it names exist (``testbed <sub> --help``).

The ```python blocks of docs/api.md run too (`test_api_examples_run`), in a folder where
``results/`` is the studies' output, so ``results/p2_three_paths-quick/cc`` is the folder
``testbed study`` wrote.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from docexamples import (
    DocCommand,
    commands_in,
    doc_files,
    documented_commands,
    python_blocks,
    stray_queries,
    unknown_options,
)

from testbed.core.commands import in_parallel

pytestmark = [pytest.mark.integration, pytest.mark.reproduction]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ("p0_wifi_3g-quick", "heavy_load")  # what DIR stands for
WORKERS = 3  # documented commands run at a time (each mostly a Python process starting)
_INTO = re.compile(r"^\d+ run\(s\) into (\S+)", re.M)
_STUDY_HEAD = re.compile(r"^== (\S+) \((\w+)\): (\S+)$", re.M)


def cli_argv() -> list[str]:
    exe = Path(sys.prefix) / "bin" / "testbed"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "testbed.cli"]


def _files(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under folder: relative name -> (size, modification time in ns)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


@dataclass
class Checker:
    """Runs documented commands; ``problems`` collects one line per failure."""

    runs: Path                     # the studies' output (``<study>-quick/<spec>``)
    tmp: Path
    problems: list[str] = field(default_factory=list)
    written: dict[str, Path] = field(default_factory=dict)  # default folder -> bundles
    _help: dict[str, str] = field(default_factory=dict)
    executed: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _names: int = 0

    def ran(self) -> None:
        """Count one more command executed (commands run in parallel: `_each`)."""
        with self._lock:
            self.executed += 1

    def fresh(self, stem: str) -> Path:
        """A temporary path no other command uses."""
        with self._lock:
            self._names += 1
            return self.tmp / f"{stem}-{self._names}"

    def fail(self, cmd: DocCommand, why: str) -> None:
        self.problems.append(f"{cmd.where}: `{cmd.text[:120]}`: {why}")

    def testbed(self, args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([*cli_argv(), *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout)

    def help_text(self, sub: str) -> str | None:
        if sub not in self._help:
            res = self.testbed([sub, "--help"], timeout=60)
            self._help[sub] = res.stdout if res.returncode == 0 else ""
        return self._help[sub] or None

    # -- what each kind of command is run as --

    def check_usage(self, cmd: DocCommand) -> None:
        text = self.help_text(cmd.sub)
        if text is None:
            self.fail(cmd, f"`testbed {cmd.sub}` is not a command")
            return
        for opt in cmd.options():
            if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text):
                self.fail(cmd, f"`testbed {cmd.sub}` has no option {opt}")

    def dry_run(self, cmd: DocCommand) -> None:
        args = list(cmd.argv[1:])
        if "--dry-run" not in args:
            args.append("--dry-run")
        res = self.testbed(args)
        self.ran()
        if res.returncode != 0:
            self.fail(cmd, f"dry run exit {res.returncode}: "
                      f"{(res.stderr or res.stdout).strip()[-300:]}")
            return
        heads = _STUDY_HEAD.findall(res.stdout)
        intos = _INTO.findall(res.stdout)
        if cmd.sub == "run":
            spec = Path(args[1])
            study, variant = spec.parts[-3], spec.parts[-2]
            for into in intos:
                self.written[into] = self.runs / f"{study}-{variant}" / spec.stem
        else:
            for (study, variant, spec), into in zip(heads, intos, strict=True):
                self.written[into] = self.runs / f"{study}-{variant}" / spec
                self.written[str(Path(into).parent)] = self.runs / f"{study}-{variant}"

    def folder(self, cmd: DocCommand, word: str) -> Path | None:
        """The real folder a documented results folder (or DIR / RUN) stands for."""
        if word == "DIR":
            return self.runs.joinpath(*DEFAULT_DIR)
        if word == "RUN":
            runs = sorted(p.parent for p in self.runs.joinpath(*DEFAULT_DIR)
                          .glob("*/metadata.json"))
            return runs[0] if runs else None
        key = word.rstrip("/")
        if key not in self.written:
            self.fail(cmd, f"names {word}, which no documented `testbed run`/`study` "
                      f"writes (they write: {', '.join(sorted(self.written)) or 'nothing'})")
            return None
        return self.written[key]

    def query(self, cmd: DocCommand) -> None:
        if len(cmd.argv) < 4:
            self.fail(cmd, "a query needs a folder and SQL")
            return
        where = self.folder(cmd, cmd.argv[2])
        if where is None:
            return
        res = self.testbed(["query", str(where), *cmd.argv[3:], "--csv"], timeout=120)
        self.ran()
        rows = [r for r in res.stdout.splitlines() if r.strip()]
        if res.returncode != 0:
            self.fail(cmd, f"exit {res.returncode}: {res.stderr.strip()[-300:]}")
        elif len(rows) < 2:
            self.fail(cmd, f"printed no rows on {where.relative_to(self.runs)}")

    def report(self, cmd: DocCommand) -> None:
        where = self.folder(cmd, cmd.argv[2]) if len(cmd.argv) > 2 else None
        if where is None:
            return
        copy = self.fresh("report")
        shutil.copytree(where, copy, symlinks=True)
        args = ["report", str(copy)]
        out = None
        if "--out" in cmd.argv:
            out = copy.with_suffix(".html")
            args += ["--out", str(out)]
        res = self.testbed(args, timeout=600)
        self.ran()
        made = out if out else copy / "report.html"
        if res.returncode != 0 or not made.is_file() or made.stat().st_size == 0:
            self.fail(cmd, f"exit {res.returncode}, {made.name} "
                      f"{'written' if made.is_file() else 'missing'}: "
                      f"{res.stderr.strip()[-300:]}")

    def take_folder(self, cmd: DocCommand, word: str, args: list[str],
                    inputs: list[Path]) -> bool:
        """Add the real folder word stands for to args and inputs; False (the failure
        noted) when it stands for none."""
        where = self.folder(cmd, word)
        if where is None:
            return False
        args.append(str(where))
        inputs.append(where)
        return True

    def same_inputs(self, cmd: DocCommand, inputs: list[Path],
                    before: list[dict[str, tuple[int, int]]]) -> None:
        changed = [str(f) for f, b in zip(inputs, before, strict=True) if _files(f) != b]
        if changed:
            self.fail(cmd, f"changed its inputs: {', '.join(changed)}")

    def compare(self, cmd: DocCommand) -> None:
        args, inputs, words = ["compare"], [], list(cmd.argv[2:])
        while words:
            word = words.pop(0)
            if word.startswith("--"):
                opt, eq, value = word.partition("=")
                if not eq and words:
                    value = words.pop(0)
                if opt != "--out":
                    args += [opt, value]
                continue
            if not self.take_folder(cmd, word, args, inputs):
                return
        out = self.fresh("compare")
        before = [_files(f) for f in inputs]
        res = self.testbed([*args, "--out", str(out)], timeout=300)
        self.ran()
        page = out / "compare.html"
        if res.returncode != 0 or not page.is_file() or page.stat().st_size == 0:
            self.fail(cmd, f"exit {res.returncode}, compare.html "
                      f"{'written' if page.is_file() else 'missing'}: "
                      f"{res.stderr.strip()[-300:]}")
        self.same_inputs(cmd, inputs, before)

    def on_folder(self, cmd: DocCommand) -> None:
        """check / verify: every word that is neither an option nor an option's value is a
        folder; exit 0, the inputs unchanged."""
        args, inputs, words = [cmd.argv[1]], [], list(cmd.argv[2:])
        while words:
            word = words.pop(0)
            if word.startswith("-"):
                args.append(word)
                if word in ("--assignment", "-a") and words:
                    args.append(words.pop(0))
                continue
            if not self.take_folder(cmd, word, args, inputs):
                return
        before = [_files(f) for f in inputs]
        res = self.testbed(args, timeout=900)
        self.ran()
        if res.returncode != 0:
            self.fail(cmd, f"exit {res.returncode}: "
                      f"{(res.stderr or res.stdout).strip()[-400:]}")
        self.same_inputs(cmd, inputs, before)

    def doctor(self, cmd: DocCommand) -> None:
        res = self.testbed(list(cmd.argv[1:]), timeout=120)
        self.ran()
        if res.returncode not in (0, 1) or not res.stdout.strip():
            self.fail(cmd, f"exit {res.returncode}: {res.stderr.strip()[-300:]}")

    def vm(self, cmd: DocCommand) -> None:
        inner = list(cmd.argv[cmd.argv.index("--") + 1:])
        prog = ROOT / inner[0]
        if not (prog.exists() or shutil.which(inner[0])):
            self.fail(cmd, f"{inner[0]} does not exist")
            return
        if Path(inner[0]).name.startswith("python") and len(inner) > 1:
            res = subprocess.run([sys.executable, *inner[1:], "--help"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=60)
            self.ran()
            if res.returncode != 0:
                self.fail(cmd, f"{' '.join(inner[1:])} --help: exit {res.returncode}: "
                          f"{res.stderr.strip()[-300:]}")
            elif unknown := unknown_options(inner[2:], res.stdout):
                self.fail(cmd, f"{inner[1]} --help names no {unknown[0]}")

    def check(self, cmds: list[DocCommand]) -> None:
        """Dry runs first (they say which folders the commands write), then the rest.

        Each group runs a few commands at a time (each is a process of its own, mostly
        Python starting): none of them changes a folder another reads (reports run on
        copies; check, verify and compare must leave their inputs as they were)."""
        concrete = [c for c in cmds if c.runnable]
        for cmd in cmds:
            if not cmd.runnable:
                self.check_usage(cmd)
        self._each(self.dry_run, [c for c in concrete if c.sub in ("run", "study")])
        actions = {"query": self.query, "report": self.report, "compare": self.compare,
                   "doctor": self.doctor, "vm": self.vm,
                   "check": self.on_folder, "verify": self.on_folder}
        rest = [c for c in concrete if c.sub not in ("run", "study")]
        for cmd in rest:
            if cmd.sub not in actions:
                self.fail(cmd, f"no rule to run `testbed {cmd.sub}` (add one here)")
        self._each(lambda c: actions[c.sub](c), [c for c in rest if c.sub in actions])

    def _each(self, action: Callable[[DocCommand], None], cmds: list[DocCommand]) -> None:
        """action on every command, WORKERS at a time."""
        in_parallel(action, cmds, workers=WORKERS)


@pytest.fixture(scope="module")
def checked(studies_out: Path, tmp_path_factory: pytest.TempPathFactory) -> Checker:
    checker = Checker(studies_out, tmp_path_factory.mktemp("docs"))
    checker.check(documented_commands(ROOT))
    return checker


def test_every_documented_command_runs(checked: Checker) -> None:
    print(f"\nFIGURES documented commands: {len(documented_commands(ROOT))} found, "
          f"{checked.executed} executed, {len(checked.problems)} problems")
    assert not checked.problems, "\n".join(checked.problems)


def test_no_query_outside_a_command() -> None:
    stray = [line for f in doc_files(ROOT)
             for line in stray_queries(f.read_text(encoding="utf-8"),
                                       str(f.relative_to(ROOT)))]
    assert not stray, "SQL no test runs (write it as `testbed query DIR \"...\"`):\n" + \
        "\n".join(stray)


def test_a_broken_readme_query_fails(checked: Checker, tmp_path: Path) -> None:
    """The check is not a formality: a README query broken on purpose is reported, with
    its file and line."""
    name = "experiments/p0_wifi_3g/README.md"
    text = (ROOT / name).read_text(encoding="utf-8")
    queries = [c for c in commands_in(text, name, ROOT) if c.sub == "query"]
    assert queries, f"{name} shows no query"
    broken_text = text.replace("FROM flows", "FROM flowz")
    assert broken_text != text
    checker = Checker(checked.runs, tmp_path, written=dict(checked.written))
    checker.check([c for c in commands_in(broken_text, name, ROOT) if c.sub == "query"])
    assert checker.problems and all(name in p for p in checker.problems), checker.problems
    assert any("flowz" in p for p in checker.problems), checker.problems


def _readme_query(name: str, must: str) -> DocCommand:
    text = (ROOT / name).read_text(encoding="utf-8")
    found = [c for c in commands_in(text, name, ROOT) if c.sub == "query" and must in c.argv[3]]
    assert len(found) == 1, f"{name}: expected one query with {must!r}, found {len(found)}"
    return found[0]


def _csv_rows(where: Path, sql: str) -> list[dict[str, str]]:
    import csv
    import io

    res = subprocess.run([*cli_argv(), "query", str(where), sql, "--csv"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return list(csv.DictReader(io.StringIO(res.stdout)))


def test_p0_readme_queries_on_mptcp_beside_pinned_tcp(studies_out: Path, tmp_path: Path
                                                      ) -> None:
    """P0 heavy load's MPTCP run (an MPTCP transfer and pinned TCP flows on the WiFi):
    the README's per-workload query gives one row per workload, the MPTCP connection's
    goodput and the TCP flows', equal to what the flows table's definitions give; the
    per-path query names each subflow's path."""
    import pandas as pd

    name = "experiments/p0_wifi_3g/README.md"
    per_workload = _readme_query(name, "GROUP BY workload ORDER BY")
    per_path = _readme_query(name, "GROUP BY workload, path")
    runs = [m.parent for m in (studies_out / "p0_wifi_3g-quick" / "heavy_load")
            .glob("*/metadata.json")]
    flows = {r: pd.read_parquet(r / "metrics" / "flows.parquet") for r in runs}
    mptcp = sorted(r for r, f in flows.items() if (f["kind"] == "connection").any())
    assert mptcp, "expected an MPTCP run in heavy_load, found none"
    run = mptcp[0]  # one of its repetitions
    one = tmp_path / "one"
    shutil.copytree(run, one / run.name, symlinks=True)  # the query on this run alone
    f = flows[run]

    def rate(rows: pd.DataFrame) -> float:  # the definition: bytes * 8 / (end - start),
        # or for a flow cut off (no FCT; so too a transfer without a size, whose row holds
        # that same rate) the acknowledged rate, which the row holds
        done = rows["bytes"] * 8 / (rows["end"] - rows["start"])
        return float(done.where(rows["fct_s"].notna(), rows["throughput_bps"]).mean()) / 1e6

    got = {r["workload"]: float(r["mbit_s"]) for r in _csv_rows(one, per_workload.argv[3])}
    conn = f[f["kind"] == "connection"]
    pinned = f[(f["kind"] == "flow") & (f["protocol"] == "tcp")]
    assert len(conn) == 1 and len(pinned) >= 1
    want = {conn["workload"].iloc[0]: rate(conn)}
    want.update({w: rate(g) for w, g in pinned.groupby("workload")})
    assert sorted(got) == sorted(want) == ["mptcp-cubic", "video"], (got, want)
    for w, v in want.items():
        assert got[w] == pytest.approx(v, rel=1e-6), (w, got[w], v)
    paths = _csv_rows(one, per_path.argv[3])
    subflows = f[f["kind"] == "subflow"]
    assert {r["path"] for r in paths} == set(subflows["path"]) == {"wifi", "cell"}, paths
    for r in paths:
        on_path = subflows[subflows["path"] == r["path"]]
        assert int(r["n"]) == len(on_path)
        assert float(r["mbit_s"]) == pytest.approx(rate(on_path), rel=1e-6), r
    print(f"\nFIGURES P0 heavy-load MPTCP run: per workload {got}; per path "
          f"{[(r['path'], round(float(r['mbit_s']), 2)) for r in paths]}")


def test_timeseries_on_the_runs_clock_in_every_study(studies_out: Path) -> None:
    """docs/bundle.md's promises on every quick study's bundles: no time series bin before
    the run's clock (t_rel >= 0); each flows row's series, over its active interval
    [start, end], carries its throughput_bps within 2 %; and a transfer run without a size
    has the rate its receiver's series (``delivered``, a connection's ``connection``) shows
    while it sent, within 3 % ("One FCT")."""
    import json

    import pandas as pd

    from analysis import samples
    from analysis.rows import unsized_transfers

    bad, checked, in_run = [], 0, 0
    for meta in sorted(studies_out.glob("*/*/*/metadata.json")):
        run = meta.parent
        ts = pd.read_parquet(run / "metrics" / "timeseries.parquet")
        flows = pd.read_parquet(run / "metrics" / "flows.parquet")
        name = run.relative_to(studies_out)
        if len(ts) and ts["t_rel"].min() < 0:
            bad.append(f"{name}: timeseries t_rel {ts['t_rel'].min():.3f} s < 0")
        m = json.loads(meta.read_text())
        app = samples.read_jsonl(run / "samples" / "flows.jsonl", samples.APPFLOW_COLUMNS)
        unsized, duration = unsized_transfers(flows, app)
        for r, no_size, dur in zip(flows.itertuples(index=False), unsized, duration,
                                   strict=True):
            if not (r.throughput_bps > 0) or r.proto != "tcp":
                continue  # UDP
            if no_size and r.kind != "subflow" and m.get("t_traffic_end"):
                stop = min(m["t_traffic_end"], r.start + dur) if dur == dur \
                    else m["t_traffic_end"]
                kind = "delivered" if r.kind == "flow" else "connection"
                s = ts[(ts["kind"] == kind) & (ts["key"] == r.flow_id)]
                if not len(s):
                    continue  # no receiver capture: the row keeps its whole-span rate
                s = s[s["t"] + s["bin_s"] <= stop + 1e-6]
                sent = float((s["goodput_bps"] * s["bin_s"]).sum() / (stop - r.start))
                in_run += 1
                if abs(sent / r.throughput_bps - 1) > 0.03:
                    bad.append(f"{name} {r.flow_id} ({r.kind}, without a size): series "
                               f"{sent / 1e6:.3f} while it sent vs flows "
                               f"{r.throughput_bps / 1e6:.3f} Mbit/s")
                continue
            if abs(r.throughput_bps * (r.end - r.start) - r.bytes * 8) > 1e-6 * r.bytes * 8:
                continue  # cut off: the row counts what was acknowledged (fct_s null, as
                #           for a transfer without a size, which this check keeps)
            s = ts[(ts["kind"] == r.kind) & (ts["key"] == r.flow_id)]
            inside = s[(s["t"] + s["bin_s"] > r.start) & (s["t"] < r.end)]
            mean = float((inside["goodput_bps"] * inside["bin_s"]).sum() / (r.end - r.start))
            checked += 1
            if abs(mean / r.throughput_bps - 1) > 0.02:
                bad.append(f"{name} {r.flow_id} ({r.kind}): series {mean / 1e6:.3f} vs "
                           f"flows {r.throughput_bps / 1e6:.3f} Mbit/s")
    print(f"\nFIGURES timeseries vs flows: {checked} rows checked over their span and "
          f"{in_run} transfers without a size while they sent, {len(bad)} off")
    assert checked and in_run and not bad, "\n".join(bad)


def test_api_examples_run(studies_out: Path, tmp_path: Path) -> None:
    """Every ```python block of docs/api.md runs (exit 0, some output) against the quick
    studies' results, ``results/`` standing for their folder; a block marked ``notest``
    (it needs root) must compile."""
    name = "docs/api.md"
    blocks = python_blocks((ROOT / name).read_text(encoding="utf-8"), name)
    assert any(b.run for b in blocks), f"{name} shows no python example that runs"
    (tmp_path / "results").symlink_to(studies_out, target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    problems = []
    for block in blocks:
        compile(block.code, block.where, "exec")
        if not block.run:
            continue
        res = subprocess.run([sys.executable, "-c", block.code], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        if res.returncode != 0 or not res.stdout.strip():
            problems.append(f"{block.where}: exit {res.returncode}: "
                            f"{(res.stderr or 'no output').strip()[-400:]}")
    assert not problems, "\n".join(problems)
