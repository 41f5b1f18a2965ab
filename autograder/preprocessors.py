"""nbgrader plug-ins of the instructor's side (nbgrader_config.py names them):

    OverwriteCells    nbgrader's own, logging the expected restoration of hidden tests at INFO instead of warning
                      about a "changed checksum" (Autograde's sanitizing step), and putting back a graded test
                      cell the student deleted (from the gradebook's copy of the release) so that it is graded
    StudentFeedback   the feedback HTML led by what the learner needs (points earned over what this machine could
                      measure, the points it could not and where they count, each exercise by name: `summary`),
                      without hidden tests' code or tracebacks, long lines wrapped (GenerateFeedback)

The grading plug-ins (the trusted verdicts) are qmatmul/grader/nbhooks.py's; the intake's (regular files only)
autograder/intake.py's.
"""

from __future__ import annotations

import copy
import functools
import os
import textwrap
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
    reported as nbgrader reports it.

    A graded test cell missing from the submission (the student deleted it) is put back from the gradebook's copy,
    after the nearest cell before it that is still there, headed by nbgrader's note "This cell (id:…) was missing
    from the submission" (autograder/rule.py reads it back: the gradebook, the export and the feedback say so), and
    graded as any other: nbgrader's own add_missing_cells, on by default here, placed without its KeyError when
    the cell before the deleted one was deleted as well."""

    add_missing_cells = Bool(True, help="Put graded test cells a student deleted back before grading.").tag(
        config=True
    )

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [c.name for c in source_nb.source_cells]
        sources = {c.name: c for c in source_nb.source_cells}
        solutions = {c.name for c in source_nb.solution_cells}
        present = {notebook.grade_id(c) for c in nb.cells} - {None}
        for graded in sorted(source_nb.grade_cells, key=lambda c: order.index(c.name)):
            if graded.name in present or graded.name not in sources:
                continue
            self.log.warning("Cell %s was deleted from the submission: put back from the release and graded",
                             graded.name)  # fmt: skip
            cell = self.missing_cell_transform(sources[graded.name], graded.max_score,
                                               is_solution=graded.name in solutions)  # fmt: skip
            before = set(order[: order.index(graded.name)])
            at = max((i + 1 for i, c in enumerate(nb.cells) if notebook.grade_id(c) in before), default=0)
            nb.cells.insert(at, cell)
            present.add(graded.name)
        return nb, resources

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
.rendered_html table { border-collapse: collapse; margin: 0.6em 0; }
.rendered_html th, .rendered_html td { padding: 0.3em 0.9em; border: 1px solid #ccc; text-align: left; }
"""


class StudentFeedback(Preprocessor):
    """Feedback a student can read: hidden tests' code out, errors as their message, long lines wrapped."""

    enabled = Bool(True, help="nbgrader registers preprocessors without enabling them").tag(config=True)
    show_hidden_tests = Bool(False, help="Show the code of hidden tests in the feedback.").tag(config=True)
    short_tracebacks = Bool(
        True, help="Show each error as its type and message only, not the traceback through the grader."
    ).tag(config=True)

    lead_with_summary = Bool(True, help="Open the page with the points and each exercise's result.").tag(
        config=True
    )

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        resources.setdefault("inlining", {}).setdefault("css", []).append(WRAP_CSS)
        if self.lead_with_summary:
            nb.cells.insert(0, NotebookNode(cell_type="markdown", metadata={}, source=summary(nb, resources)))
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


@functools.lru_cache(maxsize=64)
def _class_errors(autograded: Path, assignment: str, notebook_id: str) -> tuple:
    """The error names of every graded notebook of the class per graded cell (for rule.unmeasurable), read once."""
    from autograder import export

    root = Path(autograded)
    students = sorted(p.name for p in root.iterdir() if (p / assignment).is_dir()) if root.is_dir() else []
    return tuple(export.graded_errors(root, s, assignment, notebook_id) for s in students)


def summary(nb, resources) -> str:
    """The feedback's first cell, counted by the course's rule (autograder/rule.py, as the export counts): points
    earned over what the grading machine could measure, the points it could not (and where they count), and a table
    of the exercises by name, each linked to its cell, with its points and result."""
    from autograder import export, gradebook, rule

    info = resources.get("nbgrader", {})
    assignment, notebook_id = info.get("assignment", ""), info.get("notebook", "")
    graded = [c for c in nb.cells if utils.is_grade(c)]
    folder = resources.get("metadata", {}).get("path")
    others = _class_errors(Path(folder).parent.parent, assignment, notebook_id) if folder else ()
    unmeasured = rule.unmeasurable([rule.error_names(graded), *others])
    meta = {notebook.grade_id(c): c.metadata.nbgrader for c in graded}
    count = rule.tally([(g, float(m.get("points") or 0)) for g, m in meta.items()],
                       {g: m.get("score") for g, m in meta.items()}, unmeasured=unmeasured,
                       bonus=export.BONUS.get(assignment, set()))  # fmt: skip
    late = float(info.get("late_penalty") or 0)
    lines = [f"## {assignment}: {count.points + count.bonus - late:g} of {count.measurable_max:g} points "
             f"({count.percent(late):.0f} %)", ""]  # fmt: skip
    if count.bonus_max:
        lines.append(
            f"Bonus (extra credit, beyond the maximum): {count.bonus:g} of {count.bonus_max:g} points."
        )
    if late:
        lines.append(f"Late submission: {late:g} points deducted.")
    if count.not_measured:
        names = ", ".join(g.removeprefix("test_") for g in meta if g in unmeasured)
        word = "point" if count.not_measured == 1 else "points"
        lines.append(f"**{count.not_measured:g} more {word} could not be measured on the grading machine** ({names}): "
                     "neither earned nor lost, and left out of the maximum. They are performance cells, graded only "
                     "where they can be timed (a CUDA GPU; the cell's message says which).")  # fmt: skip
    restored = rule.restored_cells_in(nb)
    if restored:
        lines.append(f"You deleted the test cell{'s' if len(restored) > 1 else ''} {', '.join(restored)}: "
                     "it was put back from the released notebook and graded.")  # fmt: skip
    lines += ["", "| exercise | points | result |", "|:--|--:|:--|"]
    for g, m in meta.items():
        status = count.status[g]
        cell = next(c for c in graded if notebook.grade_id(c) == g)
        errors = [gradebook.summary(o.get("ename"), o.get("evalue") or "") for o in cell.get("outputs", [])
                  if o.get("output_type") == "error"]  # fmt: skip
        result = status if status == "passed" or not errors else f"{status}: {errors[0]}"
        result = textwrap.shorten(_no_paths(result), 220, placeholder=" …").replace("|", "\\|")
        got = "–" if status == "not measured" else f"{float(m.get('score') or 0):g}"
        kind = " (bonus)" if g in export.BONUS.get(assignment, set()) else ""
        lines.append(f"| [{g.removeprefix('test_').replace('_', ' ')}](#{g}){kind} | {got} / {float(m.get('points') or 0):g} "
                     f"| {result} |")  # fmt: skip
    return "\n".join(lines)


def _no_paths(text: str) -> str:
    """The course's folders as relative paths: students do not need the instructor's."""
    return text.replace(str(ROOT) + os.sep, "").replace(str(ROOT), ".")
