"""Grade the solution and the demo class's code through the checks directly, on a machine without nbgrader.

    python autograder/gpu_check.py [ASSIGNMENT ...] [--seeds N] [--json PATH]
    python autograder/gpu_check.py --cells bandwidth --seeds 20 --students naive --repeat 20   # stability

For the lent GPU (no jupyter or nbgrader there): each demo student's cells are imported as a module,
every graded cell's check runs in order, and the points are compared with the student's expectations.
It also runs the solution's checks on N fresh seeds. Exit status 1 when any expectation fails.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "autograder"))

import classroom  # noqa: E402

CELLS: list[str] = []  # --cells: grade only the cells whose grade_id contains one of these


def graded_cells(assignment: str) -> list[tuple[str, float, list[str]]]:
    """(grade_id, points, statements) of each test cell, hidden tests included, in notebook order."""
    out = []
    for nb in sorted((ROOT / "solutions" / assignment).glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and cell["cell_type"] == "code":
                src = "".join(cell["source"])
                lines = [ln for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
                if not CELLS or any(c in meta["grade_id"] for c in CELLS):
                    out.append((meta["grade_id"], float(meta.get("points", 0)), lines))
    return out


def grade(module, assignment: str, report=None) -> dict:
    """grade_id -> (points, message, seconds). Each cell's statements run with the module's names in scope;
    report(grade_id, result), if given, hears of each cell as soon as it is graded."""
    from qmatmul import checks

    results = {}
    for gid, points, lines in graded_cells(assignment):
        scope = dict(vars(module))
        t0 = time.time()
        try:
            for line in lines:
                exec(line, scope)  # noqa: S102 - the course's own test cells
            results[gid] = (points, "", time.time() - t0)
        except checks.CheckFailed as exc:
            results[gid] = (0.0, classroom.summary(type(exc).__name__, str(exc)), time.time() - t0)
        except Exception as exc:  # noqa: BLE001
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            results[gid] = (0.0, f"{type(exc).__name__}: {tb[:300]}", time.time() - t0)
        if report:
            report(gid, results[gid])
    return results


def grade_in_child(assignment: str, overrides: dict, name: str) -> dict:
    """grade() in a process of its own: a submission that crashes the process loses the cells left."""
    import subprocess
    import tempfile

    spec = Path(tempfile.mkdtemp()) / "job.json"
    spec.write_text(json.dumps(dict(assignment=assignment, overrides=overrides, name=name, cells=CELLS)))
    proc = subprocess.run([sys.executable, __file__, "--child", str(spec)], capture_output=True, text=True)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith(CHILD_MARK):
            gid, res = json.loads(line[len(CHILD_MARK) :])
            results[gid] = tuple(res)
        else:
            print(line)
    for gid, _, _ in graded_cells(assignment):
        if gid not in results:
            why = signal.Signals(-proc.returncode).name if proc.returncode < 0 else f"exit {proc.returncode}"
            results[gid] = (
                0.0,
                f"CheckFailed: {gid}: your code crashed the process that ran it ({why})",
                0.0,
            )
    return results


CHILD_MARK = "@@cell@@"


def child(spec_path: str) -> int:
    from qmatmul import course

    job = json.loads(Path(spec_path).read_text())
    CELLS[:] = job.get("cells", [])
    module = course.load_notebook_code(job["assignment"], job["overrides"], name=job["name"])
    grade(module, job["assignment"], lambda gid, res: print(CHILD_MARK + json.dumps([gid, res]), flush=True))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("assignments", nargs="*")
    parser.add_argument("--seeds", type=int, default=3, help="fresh-seed reruns of the solution's checks")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--students", help="comma-separated demo students to grade (default: all)")
    parser.add_argument("--cells", help="comma-separated substrings of the grade_ids to grade (default: all)")
    parser.add_argument(
        "--repeat", type=int, default=1, help="grade each chosen demo student this many times (fresh seeds)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    CELLS[:] = args.cells.split(",") if args.cells else []

    from qmatmul import course, environment

    env = environment.start()
    where = "gpu" if env.has_gpu else "cpu"
    report, failed = {"env": env.describe(), "assignments": {}}, []
    for assignment in args.assignments or classroom.assignments():
        rows = {}
        wanted = set(args.students.split(",")) if args.students else None
        for student in classroom.demo_students(assignment):
            if wanted and student.name not in wanted:
                continue
            if student.blank:
                overrides = _blank_overrides(assignment)
            else:
                overrides = student.cells
            rows[student.name] = grade_in_child(assignment, overrides, f"demo_{assignment}_{student.name}")
            if args.repeat > 1:
                module = course.load_notebook_code(assignment, overrides, name=f"again_{student.name}")
                again = [grade(module, assignment) for _ in range(args.repeat - 1)]
                passes = {
                    gid: sum(1 for r in [rows[student.name], *again] if r[gid][0] > 0) for gid in again[0]
                }
                report.setdefault("repeats", {})[f"{assignment}/{student.name}"] = passes
                print(f"{assignment} · {student.name}, passes in {args.repeat} gradings: {passes}")
            for scope, cell, points, message in student.expects:
                if scope not in ("any", where) or cell not in rows[student.name]:
                    continue
                got, msg, _ = rows[student.name][cell]
                if got != points or (message.strip() and message.strip() not in msg):
                    failed.append(
                        f"{assignment} · {student.name} · {cell}: {got} points ({msg!r}); expected {points}"
                    )
        solution = course.load_notebook_code(assignment, name=f"solution_{assignment}")
        seeds = [grade(solution, assignment) for _ in range(args.seeds)]
        stable = {gid: sum(1 for s in seeds if s[gid][0] > 0) for gid in seeds[0]} if seeds else {}
        report["assignments"][assignment] = {"students": rows, "solution_passes": stable, "seeds": args.seeds}
        print(f"\n{assignment}: points per graded cell ({where})")
        cells = [gid for gid, _, _ in graded_cells(assignment)]
        print("student".ljust(16) + "".join(c.removeprefix("test_").rjust(18) for c in cells))
        for name, res in rows.items():
            print(name.ljust(16) + "".join(f"{res[c][0]:g} ({res[c][2]:.0f}s)".rjust(18) for c in cells))
        print(
            "solution, fresh seeds passed: " + ", ".join(f"{c}: {n}/{args.seeds}" for c, n in stable.items())
        )
        for name, res in rows.items():
            for c in cells:
                if res[c][1]:
                    print(f"  {name} · {c}: {res[c][1][:240]}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    for line in failed:
        print("UNEXPECTED:", line)
    print("all expectations met" if not failed else f"{len(failed)} expectations failed")
    return 1 if failed else 0


def _blank_overrides(assignment: str) -> dict:
    """The released stubs: each solution region replaced by `raise NotImplementedError()`, as nbgrader does."""
    out = {}
    for nb in sorted((ROOT / "solutions" / assignment).glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("solution"):
                src = "".join(cell["source"])
                out[meta["grade_id"]] = re.sub(
                    r"^( *)### BEGIN SOLUTION\n.*?^ *### END SOLUTION\n?",
                    lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError()\n",
                    src + "\n",
                    flags=re.S | re.M,
                )
    return out


if __name__ == "__main__":
    sys.exit(main())
