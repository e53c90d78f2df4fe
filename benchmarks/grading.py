"""How long does `testbed grade` take per student (issue 20: a class of 30 quick-run
bundles in under 2 minutes on the 2-core machine)?

Makes a class of N students, each a copy of a quick study's real output for an assignment
(P2 by default: cc.toml's two runs and loss.toml's run, about 13 MB of captures), grades
it as `testbed grade` does (take in, re-analyse every run from its captures, check, draw
the figures, write the gradebook and the pages), and prints the wall-clock and CPU time
in all and per student (CPU: this process and its workers), with the points every
student got (all equal: one solution).

    .venv/bin/python benchmarks/grading.py STUDIES_OUT [--students 30]
        [--assignment p2_cc] [--folders cc loss] [--jobs N]

STUDIES_OUT: the output of `testbed study ... --variant quick` (``<study>-quick/<spec>/``).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

STUDY_OF = {"p2_cc": "p2_three_paths-quick", "p1_spray": "p1_fattree_spray-quick",
            "p0_mptcp_gain": "p0_wifi_3g-quick", "p0_handover": "p0_wifi_3g-quick"}
DEFAULT_FOLDERS = {"p2_cc": ["cc", "loss"], "p1_spray": ["static"], "p0_mptcp_gain": ["paths"],
                   "p0_handover": ["outage"]}


def make_class(studies_out: Path, assignment: str, folders: list[str], students: int,
               dest: Path) -> Path:
    """dest/submissions with one folder per student, each a copy of the runs of folders."""
    subs = dest / "submissions"
    for i in range(students):
        for folder in folders:
            src = studies_out / STUDY_OF[assignment] / folder
            for meta in sorted(src.glob("*/metadata.json")):
                shutil.copytree(meta.parent, subs / f"student{i:02d}" / folder /
                                meta.parent.name)
    return subs


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the workers)."""
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + kids.ru_utime + kids.ru_stime


def main(argv: list[str] | None = None) -> int:
    from testbed.grade.gradebook import grade_class
    from testbed.grade.rubric import load_assignment

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("studies_out", type=Path)
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--assignment", default="p2_cc", choices=sorted(STUDY_OF))
    ap.add_argument("--folders", nargs="*", default=None)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                    help="students graded at once (as `testbed grade --jobs`)")
    args = ap.parse_args(argv)
    folders = args.folders or DEFAULT_FOLDERS[args.assignment]
    assignment = load_assignment(args.assignment)
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as tmp:
        subs = make_class(args.studies_out, args.assignment, folders, args.students,
                          Path(tmp))
        runs = len(list(subs.glob("*/*/*/metadata.json")))
        if runs == 0:
            print(f"{args.studies_out}: no runs of {folders} for {args.assignment}",
                  file=sys.stderr)
            return 2
        t0, c0 = time.perf_counter(), _cpu()
        students = grade_class(subs, assignment, Path(tmp) / "out", jobs=args.jobs)
        wall, cpu = time.perf_counter() - t0, _cpu() - c0
    points = sorted({s.points for s in students})
    print(f"{'assignment':<14}{'jobs':>5}{'students':>9}{'runs':>6}{'wall s':>9}{'cpu s':>8}"
          f"{'wall s/student':>16}{'cpu s/student':>15}  points")
    print(f"{args.assignment:<14}{args.jobs:>5}{len(students):>9}{runs:>6}{wall:>9.1f}{cpu:>8.1f}"
          f"{wall / len(students):>16.2f}{cpu / len(students):>15.2f}  "
          f"{', '.join(f'{p:g}' for p in points)} of {assignment.max_points:g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
