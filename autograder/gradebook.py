"""The gradebook read back: what classroom.py prints after grading, and what --resume and the demo need of it.

    gradebook(assignment, dirs)          one row per student: score per graded cell, total, failing cells' messages
    print_gradebook(assignment, rows)    the table, and why points were lost (a message cut at a word)
    cell_messages(path), summary(...)    the one-line message of each failing cell of a graded notebook
    scored_submissions(dirs)             the submissions whose graded cells all have a score
    reset_database(url)                  a scratch gradebook (the demo's) emptied

`dirs` is a classroom.CourseDirs (its gradebook URL and autograded folder).
"""

from __future__ import annotations

import os
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
    """One row per student with a submission: score per test cell, total, the messages of failing cells, and,
    counted by the course's one rule (autograder/rule.py, as the export counts), `max` the points the grading
    machine could measure, `not_measured` the rest and `reason` why the chapter earned nothing (a file that could
    not be graded) or a test cell was put back. `missing`: the students of the gradebook without a submission."""
    from nbgrader.api import Gradebook, MissingEntry

    from autograder import rule

    rows, missing = [], []
    with Gradebook(dirs.url) as gb:
        try:
            assignment_row = gb.find_assignment(assignment)
        except MissingEntry:
            return rows
        notebooks = [nb.name for nb in assignment_row.notebooks]
        cells = [(nb.name, c.name, c.max_score) for nb in assignment_row.notebooks for c in nb.grade_cells]
        for student in sorted(s.id for s in gb.students):
            try:
                sub = gb.find_submission(assignment, student)
            except MissingEntry:
                # A file refused before nbgrader ran (classroom.py's intake: invalid JSON, a link) has no gradebook
                # submission, but its folder is there: a row with its reason, as the export gives it. (lexists:
                # the folder is the student's, never followed.)
                if not os.path.lexists(ROOT / dirs.submitted / student / assignment):
                    missing.append(student)
                    continue
                sub = None
            row = {"student": student, "scores": {}, "messages": {}, "errors": {}, "max": 0.0, "total": 0.0,
                   "graded": {}}  # fmt: skip
            for nb_name, cell, max_score in cells:
                if sub is None:
                    row["graded"][cell], row["scores"][cell] = None, (0.0, max_score)
                    continue
                grade = gb.find_grade(cell, nb_name, assignment, student)
                row["graded"][cell] = rule.score_of(grade)
                row["scores"][cell] = (grade.score if grade.score is not None else 0.0, max_score)
                row["total"] += row["scores"][cell][0]
            for nb_name in notebooks:
                graded = ROOT / dirs.autograded / student / assignment / f"{nb_name}.ipynb"
                row["messages"].update(cell_messages(graded))
                if graded.exists():
                    row["errors"].update(rule.error_names(notebook.load(graded)["cells"]))
            row["total"] = sub.score if sub is not None and sub.score is not None else row["total"]
            rows.append(row)
    unmeasured = rule.unmeasurable(r.pop("errors") for r in rows)
    for row in rows:
        student = row["student"]
        count = rule.tally([(c, m) for _, c, m in cells], row.pop("graded"), unmeasured=unmeasured,
                           bonus=rule.BONUS.get(assignment, set()))  # fmt: skip
        row["unmeasured"] = sorted(unmeasured)
        row["bonus_cells"] = sorted(rule.BONUS.get(assignment, set()))
        row["max"], row["not_measured"] = count.measurable_max, count.not_measured
        row["reason"] = rule.reason(
            submitted=True,
            problem=rule.submission_problem(ROOT / dirs.submitted / student / assignment, notebooks),
            not_graded=any(count.status[c] == "not graded" for _, c, _ in cells),
            log=dirs.logs / assignment / f"{student}.log",
            restored=[c for nb in notebooks for c in
                      rule.restored_cells(ROOT / dirs.autograded / student / assignment / f"{nb}.ipynb")],
        )  # fmt: skip
    if rows:
        rows[0]["missing"] = missing
    return rows


def print_gradebook(assignment: str, rows: list[dict], failures: dict | None = None) -> None:
    from autograder import rule

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
    bonus = ", ".join(c.removeprefix("test_") for c in rows[0].get("bonus_cells", ()))
    extra = f"; the bonus cells ({bonus}) add to the total, not to the maximum" if bonus else ""
    print(
        f"(total: over the {rows[0]['max']:g} points this machine could measure{extra}; the export counts the same)"
    )
    print("\nWhy points were lost:")
    unmeasured = set(rows[0].get("unmeasured", ()))
    for r in rows:
        for c, msg in r["messages"].items():
            if c in unmeasured:
                continue
            brief = textwrap.shorten(msg, 300, placeholder=" …")  # whole in the student's feedback
            print(f"  {r['student']} · {c.removeprefix('test_')}: {brief}")
    for c in sorted(unmeasured):
        said = [r["messages"][c] for r in rows if r["messages"].get(c, "").startswith(rule.NOT_MEASURED)]
        why = (
            textwrap.shorten(said[0].removeprefix(f"{rule.NOT_MEASURED}: "), 200, placeholder=" …")
            if said
            else ""
        )
        print(f"  (everyone) · {c.removeprefix('test_')}: not measured on this machine, no points ({why})")
        # a check that said "not measured" for some notebooks and graded others: its rule is not the machine's
        scored = [r["student"] for r in rows if r["scores"][c][0] > 0]
        if scored:
            print(f"  WARNING · {c.removeprefix('test_')}: not measured for {len(said)} notebook(s) but scored for "
                  f"{len(scored)} ({', '.join(scored[:3])}{', ...' if len(scored) > 3 else ''}): the totals above "
                  "count those points over a maximum without the cell")  # fmt: skip
    # a check that said "not measured" for some notebooks where the machine measured others: those earn 0 of it
    for c in sorted({c for r in rows for c in r["messages"]} - unmeasured):
        said = [r["student"] for r in rows if r["messages"].get(c, "").startswith(rule.NOT_MEASURED)]
        if said:
            print(f"  WARNING · {c.removeprefix('test_')}: not measured for {len(said)} notebook(s) "
                  f"({', '.join(said[:3])}{', ...' if len(said) > 3 else ''}) where this machine measured others: "
                  "each of those earns 0 of its points")  # fmt: skip
    for r in rows:
        if r.get("reason"):
            print(f"  {r['student']}: {r['reason']}")
    for student, why in (failures or {}).items():
        print(f"  {student}: grading failed: {why}")
    missing = rows[0].get("missing") or []
    if missing:
        names = textwrap.shorten(", ".join(missing), 300, placeholder=" …")
        print(f"  not submitted ({len(missing)}, 0 points each): {names}")
