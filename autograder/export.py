"""Export the gradebook as grades an instructor can hand on: per chapter and for the course.

    python -m autograder.export [ASSIGNMENT ...] [--db PATH] [--autograded DIR] [--out DIR]

Writes three CSV files into --out (default autograder/, git-ignored) and prints the course table:

* grades.csv: one row per student (id, names, email from the roster), each chapter's total, and the course's
  points, bonus, late penalty, total, max, not_measured, percent and reasons (why a chapter earned nothing);
* grades-by-chapter.csv: one row per student and chapter, with the timestamp, how late it was and the reason;
* grades-by-cell.csv: one row per student and graded cell, with its status.

Naming chapters (`make export ASSIGNMENT=w8a16`) writes grades-w8a16.csv, grades-w8a16-by-chapter.csv and
grades-w8a16-by-cell.csv instead, so that the course-wide files are never overwritten by one chapter's.

The rules:

* **Chapters** count once they are assigned, that is, once anyone has a submission in the gradebook; chapters
  never assigned are left out. A student with no submission for an assigned chapter gets 0 for it.
* **Bonus** cells (`rule.BONUS`, the only list of them) are extra credit: their points add to the student's
  total but not to the maximum.
* **Not measured**: a cell the grading machine could not measure (the performance cells on a machine without a
  CUDA GPU: any graded notebook of the class raised the trusted grader's NotMeasured there) is "not measured", not "failed", and its points leave the
  maximum the percentage is computed on (`max_measured`) for every student alike, submitted or not;
  `max` keeps the full course maximum. The rule is autograder/rule.py's, which the gradebook print and the
  feedback page count with too.
* **No silent zero**: a chapter not submitted, a file that could not be graded (not a readable notebook, links,
  nbgrader failing) or a test cell the student deleted (graded from the release's copy) has a reason.
* **Late**: nbgrader's late penalty (`LateSubmissionPlugin.penalty_method`) is subtracted from the chapter.
* Scores are nbgrader's: a manual grade given in Formgrader replaces the autograde of that cell.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autograder import rule
from qmatmul.grader.notebook import load_node

ROOT = Path(__file__).resolve().parent.parent

# Extra-credit cells, by chapter: the one place that says which cells are bonus (course.md's "bonus" rows).
BONUS = rule.BONUS  # the bonus cells, by chapter: autograder/rule.py holds the one list


def course_order() -> list[str]:
    """Chapters in syllabus order (roofline first), then any other assignment by name."""
    syllabus = ["roofline", "w8a16", "w4a16", "fp8", "mxfp4", "nvfp4", "layouts"]
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
    status: str  # rule.status_of: passed, partial, failed, not measured, not graded, not submitted


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
    reason: str = (
        ""  # rule.reason: why it earned nothing (not submitted, not graded: ...), or a restored cell
    )

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


def graded_errors(autograded: Path, student: str, chapter: str, notebook: str) -> dict:
    """grade_id -> the name of the error the graded cell raised (rule.error_names), from the autograded notebook."""
    path = autograded / student / chapter / f"{notebook}.ipynb"
    if not path.exists():
        return {}
    try:
        nb = load_node(path)
    except Exception:  # a notebook nbgrader could not finish writing: no outputs, the reason says why
        return {}
    return rule.error_names(nb.cells)


def collect(
    db: Path, autograded: Path, selected: list[str] | None = None, submitted: Path | None = None
) -> Export:
    """Read the gradebook (nbgrader's Gradebook API) into per-cell and per-chapter rows, counted by the one rule
    (autograder/rule.py). `submitted` (default: beside `autograded`) is read for why a submission earned nothing."""
    from nbgrader.api import Gradebook, MissingEntry

    autograded = Path(autograded)
    submitted = Path(submitted) if submitted else autograded.parent / "submitted"
    logs = autograded.parent / "logs"
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
            notebooks = [nb.name for nb in in_db[chapter].notebooks]
            cells = [
                (nb.name, c.name, c.max_score) for nb in in_db[chapter].notebooks for c in nb.grade_cells
            ]
            subs, scores, errors = {}, {}, {}
            for st in students:
                sid = st["id"]
                try:
                    subs[sid] = gb.find_submission(chapter, sid)
                except MissingEntry:
                    continue
                scores[sid] = {
                    cell: rule.score_of(gb.find_grade(cell, nb_name, chapter, sid))
                    for nb_name, cell, _ in cells
                }
                errors[sid] = {}
                for nb_name in notebooks:
                    errors[sid].update(graded_errors(autograded, sid, chapter, nb_name))
            unmeasured = rule.unmeasurable(errors.values())
            for st in students:
                sid = st["id"]
                sub, folder = subs.get(sid), submitted / sid / chapter
                count = rule.tally([(c, m) for _, c, m in cells], scores.get(sid, {}), unmeasured=unmeasured,
                                   bonus=bonus, submitted=sub is not None or folder.is_dir())  # fmt: skip
                row = Chapter(sid, chapter, submitted=sub is not None, points=count.points, max=count.max,
                              bonus=count.bonus, bonus_max=count.bonus_max, not_measured=count.not_measured)  # fmt: skip
                if sub is not None:
                    row.late_penalty = sub.late_submission_penalty or 0.0
                    row.timestamp = str(sub.timestamp or "")
                    row.seconds_late = sub.total_seconds_late or 0.0
                row.reason = rule.reason(
                    submitted=sub is not None or folder.is_dir(),
                    problem=rule.submission_problem(folder, notebooks),
                    not_graded=sub is not None and any(scores[sid][c] is None for _, c, _ in cells),
                    log=logs / chapter / f"{sid}.log",
                    restored=[c for nb in notebooks for c in rule.restored_cells(autograded / sid / chapter / f"{nb}.ipynb")],
                )  # fmt: skip
                for nb_name, cell, max_score in cells:
                    score = (scores.get(sid, {}).get(cell)) or 0.0
                    exp.cells.append(Cell(sid, chapter, nb_name, cell, score, max_score, cell in bonus,
                                          count.status[cell]))  # fmt: skip
                exp.by_chapter.append(row)
    return exp


def _num(x: float) -> str:
    return f"{x:g}"


def export_paths(out: Path, selected: list[str] | None = None) -> list[Path]:
    """The three files: grades.csv and its two companions, or grades-<chapters>*.csv when chapters are named."""
    stem = "-".join(["grades", *sorted(selected or [])])
    return [out / f"{stem}.csv", out / f"{stem}-by-chapter.csv", out / f"{stem}-by-cell.csv"]


def reasons(exp: Export, student: str) -> str:
    """`chapter: reason` for each of a student's chapters that has one, joined by '; '."""
    return "; ".join(f"{c.chapter}: {c.reason}" for c in exp.by_chapter if c.student == student and c.reason)


def write(exp: Export, out: Path, selected: list[str] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = export_paths(out, selected)
    chapter_of = {(c.student, c.chapter): c for c in exp.by_chapter}
    with paths[0].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "first_name", "last_name", "email", *exp.chapters, "points", "bonus",
                    "late_penalty", "total", "max", "not_measured", "percent", "reasons"])  # fmt: skip
        for st in exp.students:
            course = exp.course(st["id"])
            w.writerow([st["id"], st["first_name"], st["last_name"], st["email"],
                        *[_num(chapter_of[st["id"], ch].total) for ch in exp.chapters],
                        *[_num(course[k]) for k in ("points", "bonus", "late_penalty", "total", "max", "not_measured")],
                        f"{course['percent']:.1f}", reasons(exp, st["id"])])  # fmt: skip
    with paths[1].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_id", "chapter", "submitted", "points", "max", "bonus", "bonus_max", "not_measured",
                    "late_penalty", "total", "timestamp", "seconds_late", "reason"])  # fmt: skip
        for c in exp.by_chapter:
            w.writerow([c.student, c.chapter, "yes" if c.submitted else "no", _num(c.points), _num(c.max),
                        _num(c.bonus), _num(c.bonus_max), _num(c.not_measured), _num(c.late_penalty),
                        _num(c.total), c.timestamp, _num(c.seconds_late), c.reason])  # fmt: skip
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
    print(
        "\nGrades (chapter: points / max + bonus; total and % over the points the grading machine could measure)"
    )
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
        measurable = f"{_num(course['total'])}/{_num(course['max_measured'])}"
        line += measurable.rjust(12) + f"{course['percent']:.1f}".rjust(8)
        print(line)
    unmeasured = sorted({(c.chapter, c.cell) for c in exp.cells if c.status == "not measured"})
    if unmeasured:
        cells = ", ".join(f"{ch}·{cell.removeprefix('test_')}" for ch, cell in unmeasured)
        print(f"not measured on the grading machine (left out of every student's percentage): {cells}")
    why = [c for c in exp.by_chapter if c.reason]
    if why:
        print("why a chapter earned nothing or was graded otherwise (the reasons column):")
    for c in why:
        print(f"  {c.student} · {c.chapter}: {c.reason}")


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
        paths = write(exp, args.out, args.assignments or None)
        shown = [str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p) for p in paths]
        print(f"grades exported: {', '.join(shown)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
