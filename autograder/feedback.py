"""Feedback for the students: generated for the whole course or one chapter, pruned to what the course generated,
handed back through the exchange.

    feedback(selected)            generate_feedback for every graded chapter, then the grades export
    prune_feedback(assignment)    leave in each feedback folder only the pages nbgrader generated
    hand_back(assignment)         release the feedback to the students who submitted through the exchange

`python -m autograder.term feedback | hand-back` runs them (`make feedback`, `make hand-back`). What the feedback
page shows (hidden tests' code out, errors as their message) is StudentFeedback's: autograder/preprocessors.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from autograder import intake
from autograder.nbgrader_cli import AUTOGRADED, FEEDBACK, ROOT, nbgrader, students_with


def feedback(selected: list[str], export: bool = True, autograded: Path = AUTOGRADED) -> int:
    """generate_feedback for every chapter with graded submissions (skipping the others), then the export."""
    status = 0
    for assignment in selected:
        if not students_with(autograded, assignment):
            print(f"{assignment}: nothing graded yet, no feedback")
            continue
        res = nbgrader("generate_feedback", assignment, "--force", quiet=True)
        if res.returncode != 0:
            print(f"{assignment}: nbgrader generate_feedback failed:\n{res.stderr[-2000:]}")
            status = 1
            continue
        prune_feedback(assignment)
        print(f"{assignment}: feedback in autograder/feedback/<student>/{assignment}/")
    if export:
        from autograder import export as grades_export

        grades_export.main([])
    return status


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
            print(f"{assignment} · {student}: release_feedback failed:\n{res.stderr[-1500:]}")
            status = 1
        else:
            print(f"{assignment} · {student}: feedback released to the exchange")
    for student in by_hand:
        html = feedback_dir.relative_to(ROOT) if feedback_dir.is_relative_to(ROOT) else feedback_dir
        print(
            f"{assignment} · {student}: not submitted through the exchange; send {html}/{student}/{assignment}/"
        )
    return status
