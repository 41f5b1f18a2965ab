"""nbgrader plug-ins of the instructor's side (nbgrader_config.py names them):

    OverwriteCells    nbgrader's own, logging the expected restoration of hidden tests at INFO instead of warning
                      about a "changed checksum" (Autograde's sanitizing step)
    StudentFeedback   the feedback HTML without hidden tests' code or tracebacks, long lines wrapped
                      (GenerateFeedback)

The grading plug-ins (the trusted verdicts) are qmatmul/grader/nbhooks.py's; the intake's (regular files only)
autograder/intake.py's.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests
from nbgrader.preprocessors import OverwriteCells as _OverwriteCells
from traitlets import Bool

from qmatmul.grader import notebook

ROOT = Path(__file__).resolve().parent.parent


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
        grade_id = notebook.grade_id(cell)
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
/* autograder/preprocessors.py: long lines wrap instead of scrolling sideways */
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
