"""Export the gradebook as grades an instructor can hand on: per chapter and for the course.

    python -m autograder.export [ASSIGNMENT ...] [--db PATH] [--autograded DIR] [--out DIR]

Writes three CSV files into --out (default autograder/, git-ignored) and prints the course table:

* grades.csv: one row per student (id, names, email from the roster), each chapter's total, and the course's
  points, bonus, late penalty, total, max, not_measured and percent;
* grades-by-chapter.csv: one row per student and chapter, with the timestamp and how late it was;
* grades-by-cell.csv: one row per student and graded cell, with its status.

The rules:

* **Chapters** count once they are assigned, that is, once anyone has a submission in the gradebook; chapters
  never assigned are left out. A student with no submission for an assigned chapter gets 0 for it.
* **Bonus** cells (`BONUS` below, the only list of them) are extra credit: their points add to the student's
  total but not to the maximum.
* **Not measured**: a cell whose output says its measurement could not be made on the grading machine (the
  performance cells on a machine without a CUDA GPU) is "not measured", not "failed", and its points leave
  the maximum the percentage is computed on (`max_measured`); `max` keeps the full course maximum.
* **Late**: nbgrader's late penalty (`LateSubmissionPlugin.penalty_method`) is subtracted from the chapter.
* Scores are nbgrader's: a manual grade given in Formgrader replaces the autograde of that cell.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from qmatmul.grader.notebook import grade_id, is_graded, load_node

ROOT = Path(__file__).resolve().parent.parent

# Extra-credit cells, by chapter: the one place that says which cells are bonus (course.md's "bonus" rows).
BONUS = {
    "w4a16": {"test_unpack_magic", "test_from_gptq"},
    "mxfp4": {"test_dot_scaled"},
}
# What a cell prints or raises when it cannot measure on this machine (qmatmul's NotMeasured, "not measured").
NOT_MEASURED = re.compile(r"\bNotMeasured\b|\bnot measured\b", re.I)


def course_order() -> list[str]:
    """Chapters in syllabus order (roofline first), then any other assignment by name."""
    syllabus = ["roofline", "w8a16", "w4a16", "fp8", "mxfp4", "nvfp4"]
    found = (
        sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
        if (ROOT / "solutions").is_dir()
        else []
    )
    return [a for a in syllabus if a in found] + [a for a in found if a not in syllabus]


@dataclass
class Cell:
    student: str
    chapter: str
    notebook: str
    cell: str
    score: float
    max_score: float
    bonus: bool
    status: str  # passed, partial, failed, not measured, not submitted


@dataclass
class Chapter:
    student: str
    chapter: str
    submitted: bool
    points: float = 0.0  # regular cells
    max: float = 0.0
    bonus: float = 0.0
    bonus_max: float = 0.0
    not_measured: float = 0.0  # regular points that could not be measured
    late_penalty: float = 0.0
    timestamp: str = ""
    seconds_late: float = 0.0

    @property
    def total(self) -> float:
        return self.points + self.bonus - self.late_penalty


@dataclass
class Export:
    chapters: list[str]
    students: list[dict]  # id, first_name, last_name, email
    cells: list[Cell] = field(default_factory=list)
    by_chapter: list[Chapter] = field(default_factory=list)

    def course(self, student: str) -> dict:
        rows = [c for c in self.by_chapter if c.student == student]
        out = {
            k: sum(getattr(c, k) for c in rows) for k in ("points", "bonus", "late_penalty", "total", "max")
        }
        out["not_measured"] = sum(c.not_measured for c in rows)
        out["max_measured"] = out["max"] - out["not_measured"]
        out["percent"] = 100 * out["total"] / out["max_measured"] if out["max_measured"] else 0.0
        return out


def _outputs_text(cell) -> str:
    parts = []
    for o in cell.get("outputs", []):
        parts += [o.get("ename", ""), o.get("evalue", ""), o.get("text", "")]
        parts += [str(v) for v in o.get("data", {}).values()]
    return "\n".join(parts)


def graded_outputs(autograded: Path, student: str, chapter: str, notebook: str) -> dict:
    """grade_id -> everything the graded cell printed or raised, from the autograded notebook."""
    path = autograded / student / chapter / f"{notebook}.ipynb"
    if not path.exists():
        return {}
    nb = load_node(path)
    out = {}
    for cell in nb.cells:
        if is_graded(cell):
            out[grade_id(cell)] = _outputs_text(cell)
    return out


def status_of(score: float, max_score: float, printed: str) -> str:
    if score >= max_score:
        return "passed"
    if NOT_MEASURED.search(printed or ""):
        return "not measured"
    return "partial" if score > 0 else "failed"


def collect(db: Path, autograded: Path, selected: list[str] | None = None) -> Export:
    """Read the gradebook (nbgrader's Gradebook API) into per-cell and per-chapter rows."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(str(db) if "://" in str(db) else f"sqlite:///{db}") as gb:
        in_db = {a.name: a for a in gb.assignments}
        order = [a for a in course_order() if a in in_db] + sorted(set(in_db) - set(course_order()))
        chapters = [a for a in order if (not selected or a in selected) and in_db[a].submissions]
        students = [
            {
                "id": s.id,
                "first_name": s.first_name or "",
                "last_name": s.last_name or "",
                "email": s.email or "",
            }
            for s in sorted(gb.students, key=lambda s: s.id)
        ]
        exp = Export(chapters, students)
        for chapter in chapters:
            bonus = BONUS.get(chapter, set())
            cells = [
                (nb.name, c.name, c.max_score) for nb in in_db[chapter].notebooks for c in nb.grade_cells
            ]
            for st in students:
                sid = st["id"]
                try:
                    sub = gb.find_submission(chapter, sid)
                except MissingEntry:
                    sub = None
                row = Chapter(sid, chapter, submitted=sub is not None)
                if sub is not None:
                    row.late_penalty = sub.late_submission_penalty or 0.0
                    row.timestamp = str(sub.timestamp or "")
                    row.seconds_late = sub.total_seconds_late or 0.0
                printed = {}
                for nb_name, cell, max_score in cells:
                    if sub is None:
                        score, status = 0.0, "not submitted"
                    else:
                        if nb_name not in printed:
                            printed[nb_name] = graded_outputs(autograded, sid, chapter, nb_name)
                        grade = gb.find_grade(cell, nb_name, chapter, sid)
                        score = grade.score if grade.score is not None else 0.0
                        status = status_of(score, max_score, printed[nb_name].get(cell, ""))
                    is_bonus = cell in bonus
                    exp.cells.append(Cell(sid, chapter, nb_name, cell, score, max_score, is_bonus, status))
                    if is_bonus:
                        row.bonus += score
                        row.bonus_max += max_score
                    else:
                        row.points += score
                        row.max += max_score
                        if status == "not measured":
                            row.not_measured += max_score
                exp.by_chapter.append(row)
    return exp


def _num(x: float) -> str:
    return f"{x:g}"


def write(exp: Export, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "grades.csv", out / "grades-by-chapter.csv", out / "grades-by-cell.csv"]
    chapter_of = {(c.student, c.chapter): c for c in exp.by_chapter}
    with paths[0].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "first_name", "last_name", "email", *exp.chapters, "points", "bonus",
                    "late_penalty", "total", "max", "not_measured", "percent"])  # fmt: skip
        for st in exp.students:
            course = exp.course(st["id"])
            w.writerow([st["id"], st["first_name"], st["last_name"], st["email"],
                        *[_num(chapter_of[st["id"], ch].total) for ch in exp.chapters],
                        *[_num(course[k]) for k in ("points", "bonus", "late_penalty", "total", "max", "not_measured")],
                        f"{course['percent']:.1f}"])  # fmt: skip
    with paths[1].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "chapter", "submitted", "points", "max", "bonus", "bonus_max", "not_measured",
                    "late_penalty", "total", "timestamp", "seconds_late"])  # fmt: skip
        for c in exp.by_chapter:
            w.writerow([c.student, c.chapter, "yes" if c.submitted else "no", _num(c.points), _num(c.max),
                        _num(c.bonus), _num(c.bonus_max), _num(c.not_measured), _num(c.late_penalty),
                        _num(c.total), c.timestamp, _num(c.seconds_late)])  # fmt: skip
    with paths[2].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "chapter", "notebook", "cell", "score", "max", "kind", "status"])
        for c in exp.cells:
            w.writerow([c.student, c.chapter, c.notebook, c.cell, _num(c.score), _num(c.max_score),
                        "bonus" if c.bonus else "regular", c.status])  # fmt: skip
    return paths


def print_table(exp: Export) -> None:
    if not exp.chapters:
        print("grades: no chapter has submissions yet; nothing to export")
        return
    maxes = {ch: next(c for c in exp.by_chapter if c.chapter == ch) for ch in exp.chapters}
    head = [f"{ch} /{_num(maxes[ch].max)}" + (f"+{_num(maxes[ch].bonus_max)}" if maxes[ch].bonus_max else "")
            for ch in exp.chapters]  # fmt: skip
    width = max([len(s["id"]) for s in exp.students] + [7]) + 2
    print("\nGrades (chapter: points / max + bonus; course % over the points that could be measured)")
    print(
        "student".ljust(width) + "".join(h.rjust(len(h) + 2) for h in head) + "total".rjust(12) + "%".rjust(8)
    )
    chapter_of = {(c.student, c.chapter): c for c in exp.by_chapter}
    for st in exp.students:
        course = exp.course(st["id"])
        line = st["id"].ljust(width)
        for ch, h in zip(exp.chapters, head, strict=True):
            c = chapter_of[st["id"], ch]
            line += (_num(c.total) if c.submitted else "-").rjust(len(h) + 2)
        line += f"{_num(course['total'])}/{_num(course['max'])}".rjust(12) + f"{course['percent']:.1f}".rjust(
            8
        )
        print(line)
    unmeasured = sorted({(c.chapter, c.cell) for c in exp.cells if c.status == "not measured"})
    if unmeasured:
        cells = ", ".join(f"{ch}·{cell.removeprefix('test_')}" for ch, cell in unmeasured)
        print(f"not measured on the grading machine (left out of the percentage): {cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("assignments", nargs="*", help="default: every chapter with submissions")
    parser.add_argument("--db", default=os.environ.get("QMATMUL_DB_URL") or str(ROOT / "autograder" / "gradebook.db"),
                        help="the SQLite gradebook, or a database URL (default: QMATMUL_DB_URL)")  # fmt: skip
    parser.add_argument("--autograded", type=Path, default=ROOT / "autograder" / "autograded")
    parser.add_argument("--out", type=Path, default=ROOT / "autograder")
    args = parser.parse_args(argv)
    if "://" not in args.db and not Path(args.db).exists():
        print(f"no gradebook at {args.db}: run `make release` and `make autograde` first")
        return 1
    exp = collect(args.db, args.autograded, args.assignments or None)
    print_table(exp)
    if exp.chapters:
        paths = write(exp, args.out)
        shown = [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in paths]
        print(f"grades exported: {', '.join(shown)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
