"""Drive nbgrader for a class: build the demo class, autograde with progress, print the gradebook.

    python autograder/classroom.py demo [ASSIGNMENT ...]      release into build/demo, grade the demo class
    python autograder/classroom.py autograde [ASSIGNMENT ...] grade autograder/submitted/ (a real class)
    python autograder/classroom.py gradebook [ASSIGNMENT ...] print the gradebook of autograder/gradebook.db

Run from the repository root (nbgrader reads nbgrader_config.py there). Submitted notebooks are never
modified: nbgrader copies them to the autograded folder and grades the copies.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import demo
import sandbox

from qmatmul.course import assignments, selected_assignments  # noqa: F401 - assignments: used by its callers

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / "build" / "demo"
STUDENT_TIMEOUT = float(
    os.environ.get("QMATMUL_STUDENT_TIMEOUT", "3600")
)  # seconds for one student's notebook


@dataclass
class CourseDirs:
    """The folders and gradebook of one nbgrader course (the real class or the demo)."""

    submitted: str = "autograder/submitted"
    autograded: str = "autograder/autograded"
    feedback: str = "autograder/feedback"
    release: str = "notebooks"
    db: str = "autograder/gradebook.db"
    sandbox: bool = False  # run each student's code in bubblewrap (sandbox_exec.sh)

    def flags(self) -> list[str]:
        return [
            f"--CourseDirectory.submitted_directory={self.submitted}",
            f"--CourseDirectory.autograded_directory={self.autograded}",
            f"--CourseDirectory.feedback_directory={self.feedback}",
            f"--CourseDirectory.release_directory={self.release}",
            f"--CourseDirectory.db_url=sqlite:///{self.db}",
        ]


DEMO_DIRS = CourseDirs(
    submitted="build/demo/submitted",
    autograded="build/demo/autograded",
    feedback="build/demo/feedback",
    release="build/demo/release",
    db="build/demo/gradebook.db",
)


def nbgrader(
    *args: str, dirs: CourseDirs, quiet: bool = True, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Run nbgrader with the course's folders. Output goes to files, not pipes (a process the student's code
    left behind cannot hold the grader up), and past `timeout` seconds nbgrader and its process group are
    killed."""
    import signal
    import tempfile

    cmd = [sys.executable, "-m", "nbgrader", *args, *dirs.flags()]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if dirs.sandbox and args and args[0] == "autograde":
        env["QMATMUL_SANDBOX"] = "1"  # nbgrader_config.py: sandbox.configure()
        private = [dirs.submitted, dirs.autograded, dirs.feedback, dirs.db, dirs.release]
        env[sandbox.EXTRA_ENV] = os.pathsep.join(str(ROOT / p) for p in private)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out if quiet else None, stderr=err if quiet else None,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)  # fmt: skip
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = -9
            err.write(f"\nTimeoutError: nbgrader {args[0]} ran past {timeout:.0f} s and was stopped\n")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever the run left behind in its process group
            except (ProcessLookupError, PermissionError):
                pass
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(
            cmd, code, out.read() if quiet else "", err.read() if quiet else ""
        )


def sandbox_available() -> bool:
    return sandbox.available()


# ----------------------------------------------------------------------------------------------------------
# The demo class (autograder/demo.py reads the students' files and says what each one submits)


def build_submission(student: demo.DemoStudent, release: Path, dest: Path) -> None:
    """Write the student's notebook: the released notebook with its solution cells filled in."""
    solution = demo.solution(student.assignment)
    changed = student.changed_cells()
    dest.mkdir(parents=True, exist_ok=True)
    for nb_path in (release / student.assignment).glob("*.ipynb"):
        nb = json.loads(nb_path.read_text())
        if not student.blank:
            for cell in nb["cells"]:
                meta = cell.get("metadata", {}).get("nbgrader", {})
                if meta.get("solution"):
                    gid = meta["grade_id"]
                    cell["source"] = changed.get(gid, solution[gid]).splitlines(keepends=True)
            # A cell holding only DELETED_CELL stands for a learner who deleted that cell.
            nb["cells"] = [c for c in nb["cells"] if "".join(c["source"]).strip() != demo.DELETED_CELL]
        (dest / nb_path.name).write_text(json.dumps(nb, indent=1) + "\n")


# ----------------------------------------------------------------------------------------------------------
# Grading and the gradebook


def autograde(assignment: str, students: list[str], dirs: CourseDirs) -> dict:
    """Grade student by student with progress; a failure is reported and the class goes on."""
    failures = {}
    for i, student in enumerate(students, 1):
        t0 = time.time()
        print(f"[{i}/{len(students)}] {assignment} · {student} ...", end=" ", flush=True)
        res = nbgrader(
            "autograde", assignment, f"--student={student}", "--force", dirs=dirs, timeout=STUDENT_TIMEOUT
        )
        seconds = time.time() - t0
        if res.returncode != 0 or "ERROR" in res.stderr:
            failures[student] = nbgrader_error(res)
            print(f"FAILED ({seconds:.0f} s): {failures[student]}")
        else:
            print(f"done ({seconds:.0f} s)")
    return failures


def nbgrader_error(res: subprocess.CompletedProcess) -> str:
    """The most telling line of a failed nbgrader run: the exception, not 'see the above traceback'."""
    lines = [ln.strip() for ln in res.stderr.splitlines()]
    exceptions = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception)\b.*:", ln)]
    if exceptions:
        return exceptions[-1][:300]
    errors = [ln for ln in lines if "ERROR" in ln and "see the the above traceback" not in ln]
    return (errors[-1] if errors else f"nbgrader exited {res.returncode}")[:300]


def cell_messages(notebook: Path) -> dict:
    """grade_id -> first line of the error each failing test cell raised."""
    out = {}
    if not notebook.exists():
        return out
    for cell in json.loads(notebook.read_text())["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or cell["cell_type"] != "code":
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out[meta["grade_id"]] = summary(o.get("ename"), o.get("evalue") or "")
    return out


def summary(ename: str, evalue: str) -> str:
    """One line for the gradebook: the check's verdict, and the known mistake it names, if any."""
    text = evalue.strip().splitlines()
    line = text[0] if text else ""
    if not line and ename == "CellTimeoutError":
        line = "the cell ran past the time limit and was interrupted"
    named = [ln for ln in text[1:] if ln.startswith("This matches a known mistake")]
    return f"{ename}: {line}" + (f" [{named[0]}]" if named else "")


def gradebook(assignment: str, dirs: CourseDirs) -> list[dict]:
    """One row per student: score per test cell, total, and the messages of failing cells."""
    from nbgrader.api import Gradebook, MissingEntry

    rows = []
    with Gradebook(f"sqlite:///{ROOT / dirs.db}") as gb:
        try:
            assignment_row = gb.find_assignment(assignment)
        except MissingEntry:
            return rows
        cells = [(nb.name, c.name, c.max_score) for nb in assignment_row.notebooks for c in nb.grade_cells]
        for student in sorted(s.id for s in gb.students):
            try:
                sub = gb.find_submission(assignment, student)
            except MissingEntry:
                continue
            row = {"student": student, "scores": {}, "messages": {}, "max": 0.0, "total": 0.0}
            for nb_name, cell, max_score in cells:
                grade = gb.find_grade(cell, nb_name, assignment, student)
                score = grade.score if grade.score is not None else 0.0
                row["scores"][cell] = (score, max_score)
                row["total"] += score
                row["max"] += max_score
                nb_path = ROOT / dirs.autograded / student / assignment / f"{nb_name}.ipynb"
                row["messages"].update(cell_messages(nb_path))
            row["total"] = sub.score if sub.score is not None else row["total"]
            rows.append(row)
    return rows


def print_gradebook(assignment: str, rows: list[dict], failures: dict | None = None) -> None:
    if not rows:
        print(f"{assignment}: nothing graded yet")
        return
    cells = list(rows[0]["scores"])
    short = [c.removeprefix("test_") for c in cells]
    width = max(len(r["student"]) for r in rows) + 2
    print(f"\nGradebook · {assignment}")
    print("student".ljust(width) + "".join(s.rjust(max(len(s), 5) + 2) for s in short) + "total".rjust(10))
    for r in rows:
        line = r["student"].ljust(width)
        for c, s in zip(cells, short, strict=True):
            got, mx = r["scores"][c]
            line += f"{got:g}/{mx:g}".rjust(max(len(s), 5) + 2)
        print(line + f"{r['total']:g}/{r['max']:g}".rjust(10))
    print("\nWhy points were lost:")
    unmeasured = set()
    for r in rows:
        for c, msg in r["messages"].items():
            if msg.startswith("NotMeasured"):
                unmeasured.add(c)
                continue
            print(f"  {r['student']} · {c.removeprefix('test_')}: {msg[:300]}")
    for c in sorted(unmeasured):
        print(
            f"  (everyone) · {c.removeprefix('test_')}: not measured on this machine (no CUDA GPU): no points"
        )
    for student, why in (failures or {}).items():
        print(f"  {student}: grading failed: {why}")


def students_in(dirs: CourseDirs, assignment: str) -> list[str]:
    base = ROOT / dirs.submitted
    return sorted(p.name for p in base.iterdir() if (p / assignment).is_dir()) if base.is_dir() else []


# ----------------------------------------------------------------------------------------------------------


def run_demo(selected: list[str], sandbox: bool = False) -> int:
    dirs = dataclasses.replace(DEMO_DIRS, sandbox=sandbox)
    if DEMO_DIR.exists():
        shutil.rmtree(DEMO_DIR)
    DEMO_DIR.mkdir(parents=True)
    status = 0
    for assignment in selected:
        students = demo.students(assignment)
        if not students:
            continue
        print(f"Releasing {assignment} (nbgrader generate_assignment) ...", flush=True)
        res = nbgrader("generate_assignment", assignment, "--force", dirs=dirs)
        if res.returncode != 0:
            print(res.stderr)
            return 1
        for st in students:
            build_submission(st, ROOT / dirs.release, ROOT / dirs.submitted / st.name / assignment)
        failures = autograde(assignment, [s.name for s in students], dirs)
        rows = gradebook(assignment, dirs)
        print_gradebook(assignment, rows, failures)
        status |= 1 if failures else 0
    for assignment in selected:
        nbgrader("generate_feedback", assignment, "--force", dirs=dirs)
    res = nbgrader("export", f"--to={DEMO_DIR / 'grades.csv'}", dirs=dirs)
    if res.returncode == 0:
        print(f"\nGrades exported to {DEMO_DIR.relative_to(ROOT)}/grades.csv; feedback in {dirs.feedback}/")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["demo", "autograde", "gradebook"])
    parser.add_argument("assignments", nargs="*", help="default: every assignment under solutions/")
    parser.add_argument("--sandbox", action="store_true", help="run each submission's kernel in bubblewrap")
    args = parser.parse_args(argv)
    selected = selected_assignments(args.assignments, parser.error)
    if args.command == "demo":
        return run_demo(selected, args.sandbox)
    import term  # autograder/term.py, beside this file

    dirs = CourseDirs(sandbox=args.sandbox)
    status = 0
    for assignment in selected:
        failures = {}
        if args.command == "autograde":
            students = students_in(dirs, assignment)
            if not students:
                print(f"{assignment}: no submissions under {dirs.submitted}/<student>/{assignment}/")
                continue
            term.stamp_submissions(assignment, ROOT / dirs.submitted)  # hand-copied folders: for due dates
            failures = autograde(assignment, students, dirs)
            status |= 1 if failures else 0
        print_gradebook(assignment, gradebook(assignment, dirs), failures)
    return status


if __name__ == "__main__":
    sys.exit(main())
