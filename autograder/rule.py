"""The course's grading rule, in one place: a chapter's maximum, each cell's status, and why a submission earned
nothing. The export (autograder/export.py), the gradebook print (autograder/gradebook.py) and the feedback page
(autograder/preprocessors.py, autograder/feedback.py) all count with it.

    error_names(cells)                 grade_id -> the name of the error a graded cell's output holds, or None
    unmeasurable(errors)               the cells the grading machine could not measure (none passed), for the class
    tally(cells, scores, ...)          one student's chapter: points, bonus, max, not measured, percent, statuses
    submission_problem(folder, names)  what is wrong with a submitted folder's files, or None
    restored_cells(notebook)           the graded test cells the student deleted, restored from the release
    reason(...)                        the one line an instructor and the student read when a chapter earned nothing

**The maximum** counts every regular (not bonus) graded cell of an assigned chapter, less the cells the grading
machine could not measure (a performance cell without a CUDA GPU, FP8's without fp8 tensor cores). Which cells
those are is a fact about the machine, not about a student: a cell is unmeasurable when any graded notebook of the
chapter reported it so, and then it leaves the maximum of every student alike, whether they submitted, submitted
nothing or submitted a file that could not be graded. A cell that some notebook passed on the same machine is
measurable there, whatever another notebook's check said: a "not measured" decided from what a notebook's run
made the GPU do (the capstone's capture cell times the course's step to see whether a capture gains anything, and
a submission could keep the GPU busy meanwhile) then costs that notebook the cell's points and no one else
anything. "Reported it so" is structural: the cell's error is named
`NotMeasured`, the class of the exception the trusted grader caught in its own process (qmatmul/grader/trusted.py:
the checks raise it from what that process sees of the machine). The name is written by TrustedGrades; an error of
the learner's code is always named CheckFailed there, so no text a student's code prints or raises (a message
saying "not measured") can take a cell out of anyone's maximum (tests/test_instructor.py keeps such a submission).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The bonus cells of each chapter (extra credit: their points add to the total, not to the maximum).
BONUS = {
    "w4a16": {"test_unpack_magic", "test_from_gptq"},
    "mxfp4": {"test_dot_scaled"},
    "layouts": {"test_repack_fp4", "test_fp4_pair"},
}

# The error name of a cell the grading machine could not measure: qmatmul.checks.NotMeasured, as trusted.py names it.
NOT_MEASURED = "NotMeasured"
# A graded cell without any output: the trusted grader wrote no verdict into it (no evidence either way).
NO_VERDICT = "NoVerdict"
# What nbgrader writes at the top of a graded test cell it put back (OverwriteCells.add_missing_cells).
RESTORED = re.compile(r"This cell \(id:(\w+)\) was missing from the submission")


def error_names(cells: Iterable) -> dict[str, str | None]:
    """grade_id -> the name (ename) of the error output of each graded cell of an autograded notebook, None when it
    has output and no error (it passed: the trusted grader's verdict line), NO_VERDICT when it has no output at all
    (its grading did not run). Only the name: the message may quote the learner's code."""
    from qmatmul.grader.notebook import grade_id, is_graded

    out = {}
    for cell in cells:
        if is_graded(cell):
            outputs = cell.get("outputs", [])
            names = [o.get("ename") for o in outputs if o.get("output_type") == "error"]
            out[grade_id(cell)] = names[0] if names else (None if outputs else NO_VERDICT)
    return out


def unmeasurable(errors: Iterable[Mapping[str, str | None]]) -> set[str]:
    """The cells (grade ids) that a graded notebook could not measure on the grading machine and that no graded
    notebook passed there. `errors`: for each graded notebook of the chapter, grade_id -> its error's name
    (error_names; None where the cell passed, which a performance cell does only having measured)."""
    errors = list(errors)
    said = {cell for names in errors for cell, name in names.items() if name == NOT_MEASURED}
    measured = {cell for names in errors for cell, name in names.items() if name is None}
    return said - measured


def score_of(grade) -> float | None:
    """A gradebook grade's score, or None when nothing scored it (nbgrader reads that as 0 and "needs manual
    grading": a notebook it could not grade, a cell it could not find)."""
    return None if grade.auto_score is None and grade.manual_score is None else grade.score


def status_of(score: float | None, max_score: float, measurable: bool, submitted: bool) -> str:
    """passed, partial, failed, not measured, not graded or not submitted."""
    if not submitted:
        return "not submitted"
    if score is not None and score >= max_score:
        return "passed"
    if not measurable:
        return "not measured"
    if score is None:
        return "not graded"
    return "partial" if score > 0 else "failed"


@dataclass
class Tally:
    """One student's chapter under the rule."""

    points: float = 0.0  # regular cells
    max: float = 0.0  # every regular cell
    bonus: float = 0.0
    bonus_max: float = 0.0
    not_measured: float = 0.0  # regular points the grading machine could not measure (the same for everyone)
    status: dict = field(default_factory=dict)  # grade_id -> status_of

    @property
    def measurable_max(self) -> float:
        return self.max - self.not_measured

    def percent(self, late_penalty: float = 0.0) -> float:
        total = self.points + self.bonus - late_penalty
        return 100 * total / self.measurable_max if self.measurable_max else 0.0


def tally(cells: Iterable[tuple[str, float]], scores: Mapping[str, float | None], *, unmeasured: set[str],
          bonus: set[str] = frozenset(), submitted: bool = True) -> Tally:  # fmt: skip
    """Count one student's chapter: `cells` the chapter's graded cells (grade_id, max score) in order, `scores`
    the gradebook's score of each (None: not graded), `unmeasured` the class's `unmeasurable` set."""
    out = Tally()
    for cell, max_score in cells:
        score = scores.get(cell)
        got = score or 0.0
        out.status[cell] = status_of(score, max_score, cell not in unmeasured, submitted)
        if cell in bonus:
            out.bonus += got
            out.bonus_max += max_score
        else:
            out.points += got
            out.max += max_score
            out.not_measured += max_score if cell in unmeasured else 0.0
    return out


class FileProblem(str):
    """Why a submission was not graded that lies in the student's files (submission_problem): the class's grading
    went on, the student's feedback says what to fix, and `make autograde` does not fail for it."""


def chapter_notebooks(chapter: str, root: Path | None = None) -> list[str]:
    """The notebooks a chapter hands out (their names, without .ipynb), from solutions/<chapter>/."""
    root = root or Path(__file__).resolve().parent.parent
    return sorted(p.stem for p in (root / "solutions" / chapter).glob("*.ipynb"))


def submission_problem(folder: Path, notebooks: Iterable[str]) -> str | None:
    """What is wrong with a submitted folder's files, in words a student can act on, or None: a notebook missing
    (and what was there instead), a file that is not a readable notebook, anything that is not a regular file."""
    from autograder import intake

    folder = Path(folder)
    if not folder.is_dir():
        return None
    refused = intake.refusal(folder)
    if refused:
        return refused
    for name in notebooks:
        path = folder / f"{name}.ipynb"
        if not path.is_file():
            found = sorted(p.name for p in folder.glob("*.ipynb"))
            return f"{name}.ipynb is not in the submission" + (
                f" (it holds {', '.join(found)}: hand in the chapter's notebook under its own name)" if found else
                " (hand in the chapter's notebook, as the Assignment List's Submit does)"
            )  # fmt: skip
        try:
            nb = json.loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError) as exc:
            return (f"{name}.ipynb is not a readable notebook (invalid JSON: {str(exc)[:160]}); the file was damaged "
                    "before it was handed in. Open it in Jupyter, or start again from the released notebook, save, "
                    "and submit again")  # fmt: skip
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            return f"{name}.ipynb is JSON but not a notebook (no list of cells); submit the notebook itself"
    return None


def restored_cells(path: Path) -> list[str]:
    """The graded test cells missing from a submission that nbgrader put back from the release before grading."""
    try:
        nb = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return []
    return restored_cells_in(nb) if isinstance(nb, dict) else []


def restored_cells_in(nb) -> list[str]:
    """restored_cells of a notebook already read (a dict or nbformat node)."""
    out = []
    for cell in nb.get("cells", []):
        src = cell.get("source", "")
        found = RESTORED.search("".join(src) if isinstance(src, list) else src)
        if found:
            out.append(found.group(1))
    return out


def reason(*, submitted: bool, problem: str | None, not_graded: bool, log: Path | None = None,
           restored: Iterable[str] = ()) -> str:  # fmt: skip
    """The one line every view gives for a chapter that earned nothing through no check's verdict (or for cells
    the grader restored): empty when the chapter was graded as usual."""
    if problem:
        return problem if problem.startswith("not graded") else f"not graded: {problem}"
    if not submitted:
        return "not submitted"
    if not_graded:
        where = f" (nbgrader's log: {log})" if log is not None and log.exists() else ""
        return f"not graded: nbgrader could not grade the submission{where}; run `make autograde` again"
    restored = list(restored)
    if restored:
        return (f"test cell{'s' if len(restored) > 1 else ''} {', '.join(restored)} deleted from the notebook: graded "
                "from the release's copy")  # fmt: skip
    return ""
