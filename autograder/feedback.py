"""Feedback for the students: generated for the whole course or one chapter, pruned to what the course generated,
handed back through the exchange.

    feedback(selected)            generate_feedback for every graded chapter, a page for each submission that
                                  could not be graded (problem_pages), then the grades export
    prune_feedback(assignment)    leave in each feedback folder only the pages nbgrader generated
    hand_back(assignment)         release the feedback to the students who submitted through the exchange

`python -m autograder.term feedback | hand-back` runs them (`make feedback`, `make hand-back`). What the feedback
page shows (hidden tests' code out, errors as their message) is StudentFeedback's: autograder/preprocessors.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from autograder import advice, intake
from autograder.nbgrader_cli import AUTOGRADED, FEEDBACK, ROOT, nbgrader, students_with


def feedback(selected: list[str], export: bool = True, autograded: Path = AUTOGRADED) -> int:
    """generate_feedback for every chapter with graded submissions (skipping the others), then the export."""
    status = 0
    for assignment in selected:
        pages = problem_pages(assignment, autograded=autograded)
        for page in pages:
            shown = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
            print(f"{assignment}: a submission that could not be graded; its feedback says why: {shown}")
        if not students_with(autograded, assignment):
            print(f"{assignment}: nothing graded yet, no feedback")
            continue
        res = nbgrader("generate_feedback", assignment, "--force", quiet=True)
        if res.returncode != 0:
            print(
                f"{assignment}: nbgrader generate_feedback failed{advice.advise(res.stderr)}:\n{res.stderr[-2000:]}"
            )
            status = 1
            continue
        prune_feedback(assignment)
        print(f"{assignment}: feedback in autograder/feedback/<student>/{assignment}/")
    if export:
        from autograder import export as grades_export

        grades_export.main([])
    return status


PROBLEM_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{notebook}: not graded</title></head>
<body style="font-family: sans-serif; max-width: 46em; margin: 2em auto; line-height: 1.5">
<h2>{assignment}: your submission could not be graded (0 points for now)</h2>
<p><b>What was wrong:</b> {why}</p>
<p>Nothing in it was run or scored: this is not a verdict on your code. Fix the file and submit again (before the
due date if there is one), or ask your instructor.</p>
</body></html>
"""


def problem_pages(assignment: str, autograded: Path = AUTOGRADED) -> list[Path]:
    """A feedback page for each submission of `assignment` that could not be graded (a damaged notebook, one
    missing or under another name, links; or nbgrader failing on it), saying what was wrong in words the student
    can act on (autograder/rule.py), with the exchange's timestamp and secret beside it so that `make hand-back`
    returns it like any other feedback. submitted/, feedback/ and logs/ are `autograded`'s siblings (nbgrader
    failing: its log there, written by `make autograde`). Returns the pages written."""
    import html

    from autograder import rule

    notebooks, written = rule.chapter_notebooks(assignment), []
    submitted, feedback_dir, logs = (autograded.parent / name for name in ("submitted", "feedback", "logs"))
    for student in students_with(submitted, assignment):
        folder = submitted / student / assignment
        problem = rule.submission_problem(folder, notebooks)
        graded = all((autograded / student / assignment / f"{nb}.ipynb").is_file() for nb in notebooks)
        failed = not graded and (logs / assignment / f"{student}.log").is_file()  # tried, and nbgrader failed
        if not problem and not failed:
            continue
        why = (problem or "").removeprefix("not graded: ") or (
            "the grader could not run it; your instructor has been told and will grade it again"
        )
        out = feedback_dir / student / assignment
        out.mkdir(parents=True, exist_ok=True)
        if not intake.problems(folder):  # regular files only: a link is never followed into the feedback
            for name in ("timestamp.txt", "submission_secret.txt"):
                if (folder / name).is_file() and not (out / name).exists():
                    intake.copy_regular(str(folder / name), str(out / name))
        for nb in notebooks:
            page = out / f"{nb}.html"
            page.unlink(missing_ok=True)
            page.write_text(PROBLEM_PAGE.format(assignment=html.escape(assignment), notebook=html.escape(nb),
                                                why=html.escape(why)))  # fmt: skip
            written.append(page)
    return written


def prune_feedback(assignment: str, feedback_dir: Path = FEEDBACK) -> list[Path]:
    """Leave in each student's feedback folder only what the course generated (intake.feedback_extras): nbgrader
    copies a submission's other files there and its release_feedback publishes every `*.html`, so a student's
    `notes.html` (or a link named so) would be handed back as feedback. Returns what was removed."""
    notebooks = [p.stem for p in (ROOT / "solutions" / assignment).glob("*.ipynb")]
    removed = []
    for student in students_with(feedback_dir, assignment):
        for extra in intake.feedback_extras(feedback_dir / student / assignment, notebooks):
            if extra.is_dir() and not extra.is_symlink():
                shutil.rmtree(extra)
            else:
                extra.unlink()
            removed.append(extra)
    return removed


def hand_back(assignment: str, feedback_dir: Path = FEEDBACK, flags: tuple = ()) -> int:
    """Release the feedback of `assignment` to the exchange, student by student.

    `nbgrader release_feedback` can only return feedback to submissions that came through the exchange (they
    carry submission_secret.txt) and stops at the first hand-copied one; here those are listed instead, for
    the instructor to send their HTML some other way."""
    status, by_hand = 0, []
    prune_feedback(assignment, feedback_dir)
    for student in students_with(feedback_dir, assignment):
        if not (feedback_dir / student / assignment / "submission_secret.txt").exists():
            by_hand.append(student)
            continue
        res = nbgrader("release_feedback", assignment, f"--student={student}", quiet=True, flags=flags)
        if res.returncode != 0:
            print(
                f"{assignment} · {student}: release_feedback failed{advice.advise(res.stderr)}:\n{res.stderr[-1500:]}"
            )
            status = 1
        else:
            print(f"{assignment} · {student}: feedback released to the exchange")
    for student in by_hand:
        html = feedback_dir.relative_to(ROOT) if feedback_dir.is_relative_to(ROOT) else feedback_dir
        print(
            f"{assignment} · {student}: not submitted through the exchange; send {html}/{student}/{assignment}/"
        )
    return status
