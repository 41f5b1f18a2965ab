"""Grade the solution and the demo class through the trusted grader directly, on a machine without nbgrader.

    python -m autograder.grade_direct [ASSIGNMENT ...] [--seeds N] [--json PATH]
    python -m autograder.grade_direct --cells bandwidth --seeds 20 --students naive --repeat 20   # stability

The same grading as `nbgrader autograde` (qmatmul/grader/trusted.py: test cells run here, each student's code
in a worker process of its own), without the notebook kernel: for the lent GPU (no jupyter or nbgrader there)
and for the tests. Each demo student's expectations are compared with the points; the solution is graded on
N fresh seeds. Exit status 1 when any expectation fails.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

from autograder import demo
from qmatmul.course import assignments
from qmatmul.grader import notebook, trusted

ROOT = Path(__file__).resolve().parent.parent


def solution_cells(assignment: str) -> list[notebook.Cell]:
    return notebook.read_folder(ROOT / "solutions" / assignment)


class Graded(NamedTuple):
    points: float
    message: str  # why points were lost ("" when none were)
    seconds: float
    said: str  # the cell's last printed line (a performance cell's measured figure)


def grade(assignment: str, overrides: dict | None = None, cells_filter=None, timeout: float = 240.0) -> dict:
    """grade_id -> Graded, through the trusted grader."""
    verdicts = trusted.grade(
        solution_cells(assignment), overrides=overrides, only=cells_filter, timeout=timeout
    )
    return {v.grade_id: Graded(v.points, v.message, v.seconds, _last_line(v.output)) for v in verdicts}


def _last_line(output: str) -> str:
    """What a cell said last, for the record of a GPU run."""
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def student_overrides(student: demo.DemoStudent) -> dict:
    return blank_overrides(student.assignment) if student.blank else student.changed_cells()


def blank_overrides(assignment: str) -> dict:
    """The released stubs: each solution region replaced by `raise NotImplementedError()`, as nbgrader does."""
    out = {}
    for c in solution_cells(assignment):
        if c.role == "solution":
            out[c.grade_id] = re.sub(
                r"^( *)### BEGIN SOLUTION\n.*?^ *### END SOLUTION\n?",
                lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError()\n",
                c.source + "\n",
                flags=re.S | re.M,
            )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--seeds", type=int, default=3, help="fresh-seed gradings of the solution")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--students", help="comma-separated demo students to grade (default: all)")
    parser.add_argument("--cells", help="comma-separated substrings of the grade_ids to grade (default: all)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="grade each chosen demo student this many times"
    )
    args = parser.parse_args(argv)
    only = args.cells.split(",") if args.cells else None

    from qmatmul import environment

    env = environment.start()
    where = "gpu" if env.has_gpu else "cpu"
    report, failed = {"env": env.describe(), "assignments": {}}, []
    for assignment in args.assignments or assignments():
        rows = {}
        wanted = set(args.students.split(",")) if args.students else None
        for student in demo.students(assignment):
            if wanted and student.name not in wanted:
                continue
            runs = [grade(assignment, student_overrides(student), only) for _ in range(args.repeat)]
            rows[student.name] = runs[0]
            if args.repeat > 1:
                passes = {gid: sum(1 for r in runs if r[gid].points > 0) for gid in runs[0]}
                report.setdefault("repeats", {})[f"{assignment}/{student.name}"] = passes
                print(f"{assignment} · {student.name}, passes in {args.repeat} gradings: {passes}")
            points = {gid: r.points for gid, r in rows[student.name].items()}
            messages = {gid: r.message for gid, r in rows[student.name].items()}
            failed += demo.unmet([student], {student.name: (points, messages)}, where)[0]
        seeds = [grade(assignment, None, only) for _ in range(args.seeds)]
        stable = {gid: sum(1 for s in seeds if s[gid].points > 0) for gid in seeds[0]} if seeds else {}
        report["assignments"][assignment] = {"students": rows, "solution_passes": stable, "seeds": args.seeds}
        cells = list(next(iter(rows.values()), stable))
        print(f"\n{assignment}: points per graded cell ({where})")
        print("student".ljust(16) + "".join(c.removeprefix("test_").rjust(18) for c in cells))
        for name, res in rows.items():
            print(
                name.ljust(16)
                + "".join(f"{res[c].points:g} ({res[c].seconds:.0f}s)".rjust(18) for c in cells)
            )
        print(
            "solution, fresh seeds passed: " + ", ".join(f"{c}: {n}/{args.seeds}" for c, n in stable.items())
        )
        for name, res in rows.items():
            for c in cells:
                if res[c].message or res[c].said:
                    print(f"  {name} · {c}: {(res[c].message or res[c].said)[:240]}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    for line in failed:
        print("UNEXPECTED:", line)
    print("all expectations met" if not failed else f"{len(failed)} expectations failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
