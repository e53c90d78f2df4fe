"""The coupled congestion controls against RFC 6356's goals, for all four controls
(issue 17): the table the acceptance asks for.

Runs (or reads) P0's full ``cc_fairness`` and ``cc_disjoint`` specs, shortened to
``--duration`` and ``--repetitions`` (default 30 s, 3 runs: the acceptance's setting):

* shared bottleneck: one 10 Mbit/s link, a 2-subflow MPTCP connection and one TCP reno
  flow; the MPTCP connection's share of what both carried, from the captures (analysis)
  and, independently, from the senders' ``bytes_acked`` in the last ``ss`` sample;
  goals: coupled at most 58 %, uncoupled reno at least 62 %;
* disjoint paths: two 5 Mbit/s paths, the connection's throughput over 10 Mbit/s;
  goal: at least 85 %;
* every decision each BPF program logged, recomputed by the reference model (equal /
  compared).

    .venv/bin/python benchmarks/coupled_cc.py [--out DIR] [--duration 30s]
        [--repetitions 3] [--from DIR]

``--from DIR`` reads an earlier output (this script's, or ``testbed study`` quick
output ``<dir>/p0_wifi_3g-quick``) instead of running.  A run takes about 55 s in the
software-emulated CI VM; the default 27 runs about 25 minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from analysis.evidence import mean_interval  # noqa: E402
from analysis.study_tables import complete_runs  # noqa: E402
from experiments.p0_wifi_3g.cc import (  # noqa: E402
    ccs_in,
    disjoint_use,
    fairness_shares,
    run_ccs,
)
from testbed.host.coupled.reference import check_trace  # noqa: E402

SPECS = ("cc_fairness", "cc_disjoint")


def run_specs(out: Path, duration: str, repetitions: int,
              controls: dict[str, list[str] | None]) -> None:
    """testbed run each spec into out/<spec>, one control at a time (finished runs are
    skipped on a re-run); controls: spec -> the controls to run ([]: its whole sweep;
    None: skip the spec)."""
    for spec in SPECS:
        chosen = controls.get(spec, [])
        if chosen is None:
            continue
        sets = [[f"transport.cc={cc}"] for cc in chosen] or [[]]
        for extra in sets:
            cmd = [str(REPO / ".venv" / "bin" / "testbed"), "run",
                   str(REPO / "experiments" / "p0_wifi_3g" / "full" / f"{spec}.toml"),
                   "--out", str(out / spec), "--set", f"duration={duration}",
                   "--set", f"repetitions={repetitions}"]
            for kv in extra:
                cmd += ["--set", kv]
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=False)


def ss_shares(spec_out: Path) -> dict[str, list[float]]:
    """cc -> MPTCP share from the senders' last ``bytes_acked`` per socket (ss), per run."""
    out: dict[str, list[float]] = {}
    ccs = run_ccs(spec_out)
    for run in complete_runs(spec_out):
        cc = ccs.get(run.name, "?")
        last: dict[tuple[str, int], tuple[str, float]] = {}
        for line in (run / "samples" / "cwnd.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r.get("host") == "client" and r.get("bytes_acked") is not None:
                last[(r["src_addr"], r["sport"])] = (r["protocol"], float(r["bytes_acked"]))
        mp = sum(b for p, b in last.values() if p == "mptcp")
        tcp = sum(b for p, b in last.values() if p == "tcp")
        if mp + tcp > 0:
            out.setdefault(cc, []).append(mp / (mp + tcp))
    return out


def traces(out: Path) -> dict[str, tuple[int, int]]:
    """cc -> (decisions equal to the model, decisions compared) over every run."""
    got: dict[str, tuple[int, int]] = {}
    for f in sorted(out.glob("cc_*/*/samples/cc-trace-*.jsonl")):
        res = check_trace([json.loads(x) for x in f.read_text().splitlines()])
        cc = f.stem.removeprefix("cc-trace-")
        e, n = got.get(cc, (0, 0))
        got[cc] = (e + res.equal, n + res.compared)
    return got


def cell(values: list[float] | None) -> str:
    """'mean [low, high] (n)' in %, or why there is no number."""
    if not values:
        return "not run"
    m, lo, hi, n = mean_interval([100 * v for v in values])
    if lo is None or hi is None or math.isnan(m):
        return f"{m:.1f} (n={n})"
    return f"{m:.1f} [{lo:.1f}, {hi:.1f}] (n={n})"


def _merge(parts: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for part in parts:
        for cc, values in part.items():
            out.setdefault(cc, []).extend(values)
    return out


def table(outs: list[Path]) -> str:
    """The results in the folders outs (each with cc_fairness/ and cc_disjoint/)."""
    shares = _merge([fairness_shares(o) for o in outs])
    ss = _merge([ss_shares(o / "cc_fairness") for o in outs])
    use = _merge([disjoint_use(o) for o in outs])
    checked: dict[str, tuple[int, int]] = {}
    for o in outs:
        for cc, (e, n) in traces(o).items():
            e0, n0 = checked.get(cc, (0, 0))
            checked[cc] = (e0 + e, n0 + n)
    names = ccs_in({**shares, **use})
    head = (f"{'control':<8} {'shared: MPTCP %, captures':<28} {'same, from ss':<28} "
            f"{'disjoint: % of 10 Mbit/s':<28} {'decisions = model':<18}")
    rows = [head, "-" * len(head)]
    for cc in names:
        e, n = checked.get(cc, (0, 0))
        model = f"{e}/{n}" if n else ("uncoupled" if cc == "reno" else "no trace")
        rows.append(f"{cc:<8} {cell(shares.get(cc)):<28} {cell(ss.get(cc)):<28} "
                    f"{cell(use.get(cc)):<28} {model:<18}")
    rows.append("goals: shared, coupled <= 58 % and uncoupled reno >= 62 % (fair share 50 %); "
                "disjoint >= 85 %")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "results" / "bench-coupled-cc")
    ap.add_argument("--duration", default="30s")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--fairness", nargs="*", default=[], metavar="CC",
                    help="run only these controls at the shared bottleneck (default: all)")
    ap.add_argument("--disjoint", nargs="*", default=None, metavar="CC",
                    help="run only these over disjoint paths (default: all; none: skip)")
    ap.add_argument("--from", dest="sources", type=Path, nargs="+", default=None)
    args = ap.parse_args()
    if args.sources is None:
        disjoint = [] if args.disjoint is None else (args.disjoint or None)
        run_specs(args.out, args.duration, args.repetitions,
                  {"cc_fairness": args.fairness, "cc_disjoint": disjoint})
        outs = [args.out]
    else:
        outs = [o / "p0_wifi_3g-quick" if (o / "p0_wifi_3g-quick").is_dir() else o
                for o in args.sources]
    print(table(outs))


if __name__ == "__main__":
    main()
