"""The gradebook read back: what classroom.py prints after grading, and what --resume and the demo need of it.

    gradebook(assignment, dirs)          one row per student: score per graded cell, total, failing cells' messages
    print_gradebook(assignment, rows)    the table, and why points were lost (a message cut at a word)
    cell_messages(path), summary(...)    the one-line message of each failing cell of a graded notebook
    scored_submissions(dirs)             the submissions whose graded cells all have a score
    reset_database(url)                  a scratch gradebook (the demo's) emptied

`dirs` is a classroom.CourseDirs (its gradebook URL and autograded folder).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

from qmatmul.grader import notebook

if TYPE_CHECKING:
    from autograder.classroom import CourseDirs

ROOT = Path(__file__).resolve().parent.parent


def scored_submissions(dirs: CourseDirs) -> set:
    """(assignment, student) of every submission whose graded cells all have a score in the gradebook."""
    from nbgrader.api import Gradebook

    out = set()
    with Gradebook(dirs.url) as gb:
        for a in gb.assignments:
            for sub in a.submissions:
                grades = [g for nb in sub.notebooks for g in nb.grades]
                if grades and all(g.score is not None for g in grades):
                    out.add((a.name, sub.student.id))
    return out


def reset_database(url: str) -> None:
    """Empty a scratch gradebook database (the demo's): every table of it dropped."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    meta = sqlalchemy.MetaData()
    meta.reflect(bind=engine)
    meta.drop_all(bind=engine)
    engine.dispose()


def cell_messages(path: Path) -> dict:
    """grade_id -> first line of the error each failing test cell raised."""
    out = {}
    if not path.exists():
        return out
    for cell in notebook.load(path)["cells"]:
        if not notebook.is_graded(cell):
            continue
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                out[notebook.grade_id(cell)] = summary(o.get("ename"), o.get("evalue") or "")
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
    with Gradebook(dirs.url) as gb:
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
            brief = textwrap.shorten(msg, 300, placeholder=" …")  # whole in the student's feedback
            print(f"  {r['student']} · {c.removeprefix('test_')}: {brief}")
    for c in sorted(unmeasured):
        print(
            f"  (everyone) · {c.removeprefix('test_')}: not measured on this machine (no CUDA GPU): no points"
        )
    for student, why in (failures or {}).items():
        print(f"  {student}: grading failed: {why}")
