"""A term with nbgrader: the exchange, timestamps of hand-copied submissions, feedback, and nbgrader plug-ins.

    python autograder/term.py exchange               create the exchange (QMATMUL_EXCHANGE) and the students' config
    python autograder/term.py stamp [ASSIGNMENT ...]   write timestamp.txt into submissions that have none
    python autograder/term.py feedback [ASSIGNMENT ...]  feedback HTML for every graded chapter, then the export
    python autograder/term.py hand-back ASSIGNMENT     release feedback to the students who submitted by exchange

Run from the repository root. Without ASSIGNMENT every chapter under solutions/ is taken, and a chapter with
nothing submitted (stamp) or nothing graded (feedback) is skipped with a line saying so.

The plug-ins nbgrader_config.py names: `OverwriteCells` (nbgrader's own, logging the expected restoration of
hidden tests at INFO instead of warning about a "changed checksum"), `StudentFeedback` (the feedback HTML
without hidden tests' code or tracebacks, long lines wrapped).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import os
import shutil
import subprocess
import sys
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.preprocessors import OverwriteCells as _OverwriteCells
from traitlets import Bool

from qmatmul.course import assignments, selected_assignments  # noqa: F401 - assignments: used by its callers

sys.path.insert(0, str(Path(__file__).resolve().parent))
import intake  # noqa: E402 - autograder/intake.py, beside this file

ROOT = Path(__file__).resolve().parent.parent
SUBMITTED = ROOT / "autograder" / "submitted"
AUTOGRADED = ROOT / "autograder" / "autograded"
FEEDBACK = ROOT / "autograder" / "feedback"
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's (Exchange.timestamp_format), in UTC
COURSE_ID = "qmatmul"


def students_with(base: Path, assignment: str) -> list[str]:
    """Students that have a folder for this assignment under base (submitted/ or autograded/)."""
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if (p / assignment).is_dir())


def nbgrader(*args: str, quiet: bool = False, flags: tuple = ()) -> subprocess.CompletedProcess:
    """Run nbgrader from the repository root with the course's environment first on PATH; `flags` override
    nbgrader_config.py (tests point the course at folders of their own)."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    cmd = [sys.executable, "-m", "nbgrader", *args, *flags]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=quiet, text=True)


# ----------------------------------------------------------------------------------------------------------
# The exchange


def exchange_root() -> Path:
    """The exchange nbgrader_config.py chooses (QMATMUL_EXCHANGE, or its default)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    return Path(config.Exchange.root).resolve()


def student_config(root: Path) -> str:
    return (
        "# nbgrader for the students of the qmatmul course (written by `make exchange`)\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(root)!r}\n"
    )


def make_exchange(config_dir: Path | None = None) -> Path:
    """Create the exchange folder, writable by everyone as nbgrader wants it (0777), and the students' config.

    The config (course id and exchange) goes to `<sys.prefix>/etc/jupyter/nbgrader_config.py`, which every
    Jupyter started from this environment reads: students who run the course's .venv see the course in their
    Assignment List. Students with an environment of their own need the same two lines in theirs (or in
    /etc/jupyter/nbgrader_config.py)."""
    root = exchange_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        root.chmod(0o777)  # nbgrader's ExchangeReleaseAssignment.ensure_root: rwx for all, no sticky bit
    except PermissionError:
        raise SystemExit(
            f"cannot create {root}: run `sudo mkdir -p {root} && sudo chmod 777 {root}` once, or choose a "
            "folder you own with QMATMUL_EXCHANGE=/path (students must be able to write to it)"
        ) from None
    config_dir = config_dir or Path(sys.prefix) / "etc" / "jupyter"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "nbgrader_config.py").write_text(student_config(root))
    print(f"exchange: {root} (mode 777)")
    print(f"students' nbgrader config: {config_dir / 'nbgrader_config.py'}")
    print("  (students with their own Jupyter: put these lines in ~/.jupyter/nbgrader_config.py)")
    print("  " + student_config(root).replace("\n", "\n  ").rstrip())
    return root


# ----------------------------------------------------------------------------------------------------------
# Timestamps of hand-copied submissions


def stamp_submissions(assignment: str, submitted: Path = SUBMITTED) -> list[str]:
    """Write timestamp.txt (the newest file's modification time, UTC) into every submission of `assignment`
    that has none, so that nbgrader can apply the due date. `nbgrader collect` writes its own; copy by hand
    with `cp -p` (or rsync -t, unzip) to keep the students' times. Returns the students stamped."""
    stamped = []
    for student in students_with(submitted, assignment):
        folder = submitted / student / assignment
        if (folder / "timestamp.txt").exists():
            continue
        files = [p for p in folder.rglob("*") if p.is_file()]
        if not files:
            continue
        newest = max(p.stat().st_mtime for p in files)
        when = dt.datetime.fromtimestamp(newest, dt.timezone.utc).strftime(TIMESTAMP_FORMAT)
        (folder / "timestamp.txt").write_text(when + "\n")
        stamped.append(student)
    if stamped:
        print(f"{assignment}: timestamp.txt written from the files' times for {', '.join(stamped)}")
    return stamped


# ----------------------------------------------------------------------------------------------------------
# Feedback for the whole course or one chapter


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
        sys.path.insert(0, str(ROOT / "autograder"))
        import export as grades_export  # autograder/export.py

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


# ----------------------------------------------------------------------------------------------------------
# nbgrader plug-ins (named in nbgrader_config.py)


def _hidden_stripped(source: str) -> str:
    cell = NotebookNode(source=source)
    ClearHiddenTests(enforce_metadata=False)._remove_hidden_test_region(cell)
    return cell.source


class OverwriteCells(_OverwriteCells):
    """nbgrader's OverwriteCells, logging "hidden tests restored" at INFO for a test cell left as released.

    nbgrader keeps each locked cell's source *with* its hidden tests in the gradebook, and the released
    notebook carries it without them. So the sanitizing step finds a different checksum for every test cell
    that has hidden tests, even in an untouched notebook, and restores the gradebook's source (that is how the
    hidden tests come back). Only the log level changes here; a cell that differs from the released one is
    reported as nbgrader reports it."""

    def preprocess_cell(self, cell, resources, cell_index):
        self._as_released = False
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None and utils.is_locked(cell):
            try:
                source = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id)
            except Exception:  # MissingEntry: nbgrader's own code reports it
                source = None
            if source is not None and source.locked and source.source != cell.source:
                self._as_released = _hidden_stripped(source.source) == cell.source
        return super().preprocess_cell(cell, resources, cell_index)

    def report_change(self, name, attr, old, new):
        if attr == "checksum" and self._as_released:
            self.log.info("Cell %s: hidden tests restored from the gradebook", name)
            return
        super().report_change(name, attr, old, new)


HIDDEN_NOTE = "# (hidden tests ran here; their code is not shown)"
WRAP_CSS = """
/* autograder/term.py: long lines wrap instead of scrolling sideways */
div.output_area pre, div.output_subarea pre, div.input_area pre, .highlight pre {
  white-space: pre-wrap; word-break: break-word; overflow-wrap: anywhere;
}
div.output_scroll { height: auto; }
div.output_area img, div.output_subarea img { max-width: 100%; height: auto; }
"""


class StudentFeedback(Preprocessor):
    """Feedback a student can read: hidden tests' code out, errors as their message, long lines wrapped."""

    enabled = Bool(True, help="nbgrader registers preprocessors without enabling them").tag(config=True)
    show_hidden_tests = Bool(False, help="Show the code of hidden tests in the feedback.").tag(config=True)
    short_tracebacks = Bool(
        True, help="Show each error as its type and message only, not the traceback through the grader."
    ).tag(config=True)

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        resources.setdefault("inlining", {}).setdefault("css", []).append(WRAP_CSS)
        return nb, resources

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        for out in cell.get("outputs", []):  # nbconvert warns about every image without a description
            for kind in ("image/png", "image/jpeg"):
                if kind in out.get("data", {}) and "alt" not in out.get("metadata", {}).get(kind, {}):
                    out.setdefault("metadata", {}).setdefault(kind, {})["alt"] = "a figure this cell drew"
        if not utils.is_grade(cell):
            return cell, resources
        if not self.show_hidden_tests:
            marked = copy.deepcopy(cell)
            ClearHiddenTests(enforce_metadata=False)._remove_hidden_test_region(marked)
            if marked.source != cell.source:
                cell.source = marked.source.rstrip("\n") + "\n" + HIDDEN_NOTE
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and self.short_tracebacks:
                out["traceback"] = [_no_paths(f"{out.get('ename', 'Error')}: {out.get('evalue', '')}")]
            elif out.get("output_type") == "stream":
                out["text"] = _no_paths(out.get("text", ""))
        return cell, resources


def _no_paths(text: str) -> str:
    """The course's folders as relative paths: students do not need the instructor's."""
    return text.replace(str(ROOT) + os.sep, "").replace(str(ROOT), ".")


# ----------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["exchange", "stamp", "feedback", "hand-back"])
    parser.add_argument("assignments", nargs="*", help="default: every assignment under solutions/")
    args = parser.parse_args(argv)
    selected = selected_assignments(args.assignments, parser.error)
    if args.command == "exchange":
        make_exchange()
        return 0
    if args.command == "stamp":
        for a in selected:
            stamp_submissions(a)
        return 0
    if args.command == "hand-back":
        if not args.assignments:
            parser.error("name the chapter: hand-back ASSIGNMENT")
        return max(hand_back(a) for a in selected)
    return feedback(selected)


if __name__ == "__main__":
    sys.exit(main())
