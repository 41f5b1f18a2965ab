"""Demo students and adversarial submissions: the one reader of their files, and what each one submits.

A student file starts with prose and `expect` lines, then sections that change the solution's cells:

    expect[cpu|gpu] <grade_id>: <points> / <message substring>      (no scope = both; `blank: true`, `e2e: true`)

    # %% <solution grade_id>                 the whole cell, as the student wrote it
    ...
    # %% <solution grade_id>: replace        a patch: this snippet of the solution cell ...
    ...
    # %% with                                ... becomes this one
    ...

Cells a file does not name come from the solution. A snippet is the text between its header and the next one,
blank lines at either end left out; it must occur exactly once in the cell as patched so far, or the student
cannot be built (`PatchError` names the student, the cell and the snippet): a solution that changes under a
patch fails loudly instead of leaving the student testing old code. A whole cell holding only
`# (this cell was deleted)` stands for a learner who deleted that cell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from qmatmul.grader import notebook

ROOT = Path(__file__).resolve().parent.parent
DEMO_CLASS = ROOT / "autograder" / "demo_class"
DELETED_CELL = "# (this cell was deleted)"
HEADER = re.compile(r"^# %% (\S+?)(: replace)?[ \t]*$", re.M)
EXPECT = re.compile(r"^expect(?:\[(cpu|gpu)\])? (\S+): (\d+(?:\.\d+)?) /(.*)$", re.M)


class PatchError(ValueError):
    """A student's patch does not apply to the solution it names."""


@dataclass
class Patch:
    grade_id: str
    old: str | None  # None: `new` is the whole cell
    new: str


@dataclass
class DemoStudent:
    name: str
    assignment: str
    doc: str
    patches: list = field(default_factory=list)  # Patch, in file order
    blank: bool = False  # submit the released notebook untouched
    e2e: bool = False  # `make test` grades it through nbgrader too (the others through the checks directly)
    expects: list = field(default_factory=list)  # (where, grade_id, points, message substring)
    path: Path | None = None

    def cells(self, solution: dict[str, str]) -> dict[str, str]:
        """grade_id -> source of every cell this student changes, given the solution's cells (markers removed)."""
        out: dict[str, str] = {}
        for p in self.patches:
            if p.grade_id not in solution:
                raise PatchError(f"{self.where}: no solution cell named {p.grade_id!r} in {self.assignment}")
            if p.old is None:
                out[p.grade_id] = p.new
                continue
            src = out.get(p.grade_id, solution[p.grade_id])
            n = src.count(p.old)
            if n != 1:
                found = "does not occur" if n == 0 else f"occurs {n} times"
                raise PatchError(
                    f"{self.where}: in cell {p.grade_id!r} the snippet to replace {found} "
                    f"(it must occur exactly once; has the solution changed?):\n{p.old}"
                )
            out[p.grade_id] = src.replace(p.old, p.new)
        return out

    def changed_cells(self) -> dict[str, str]:
        """What this student submits in place of the solution's cells (for a blank student: nothing; the
        caller submits the release's stubs)."""
        return {} if self.blank else self.cells(solution(self.assignment))

    @property
    def where(self) -> str:
        return f"demo student {self.assignment}/{self.name}" + (f" ({self.path})" if self.path else "")


def solution(assignment: str) -> dict[str, str]:
    """grade_id -> source of each solution cell of an assignment, markers removed."""
    return notebook.solutions(notebook.read_folder(ROOT / "solutions" / assignment))


def _body(text: str) -> str:
    return text.strip("\n")


def parse(text: str, name: str, assignment: str, path: Path | None = None) -> DemoStudent:
    parts = HEADER.split(text)  # [doc, gid, replace?, body, gid, replace?, body, ...]
    doc, patches = parts[0], []
    sections = [(parts[i], bool(parts[i + 1]), parts[i + 2]) for i in range(1, len(parts), 3)]
    where = f"demo student {assignment}/{name}"
    i = 0
    while i < len(sections):
        gid, replace, body = sections[i]
        if gid == "with" and not replace:
            raise PatchError(f"{where}: '# %% with' without a '# %% <cell>: replace' before it")
        if not replace:
            patches.append(Patch(gid, None, _body(body) + "\n"))
            i += 1
            continue
        if i + 1 >= len(sections) or sections[i + 1][:2] != ("with", False):
            raise PatchError(f"{where}: '# %% {gid}: replace' must be followed by '# %% with'")
        old, new = _body(body), _body(sections[i + 1][2])
        if not old:
            raise PatchError(f"{where}: an empty snippet to replace in cell {gid!r}")
        patches.append(Patch(gid, old, new))
        i += 2
    whole = {p.grade_id for p in patches if p.old is None}
    mixed = whole & {p.grade_id for p in patches if p.old is not None}
    if mixed or len(whole) < sum(p.old is None for p in patches):
        raise PatchError(f"{where}: a cell given whole must be given once and not patched too")
    expects = [(w or "any", gid, float(pts), msg.strip()) for w, gid, pts, msg in EXPECT.findall(doc)]
    blank = "blank: true" in doc
    e2e = blank or name == "correct" or "e2e: true" in doc
    return DemoStudent(name, assignment, doc, patches, blank=blank, e2e=e2e, expects=expects, path=path)


def load(path: Path) -> DemoStudent:
    path = Path(path)
    return parse(path.read_text(), path.stem, path.parent.name, path)


def students(assignment: str, folder: Path = DEMO_CLASS) -> list[DemoStudent]:
    """The demo class of one assignment (or another folder of submissions in the same format)."""
    return [load(p) for p in sorted((folder / assignment).iterdir()) if p.suffix in (".txt", ".py")]


def unmet(students: list[DemoStudent], rows: dict, where: str) -> tuple[list[str], int]:
    """Every expectation of `students` in scope `where` ("cpu" or "gpu") against what they were given:
    `rows` maps a student's name to (points by grade_id, message by grade_id). Cells a row lacks (a partial
    grading) are not checked. Returns (one line per expectation not met, how many were checked)."""
    failed, checked = [], 0
    for st in students:
        points, messages = rows[st.name]
        for scope, cell, want, message in st.expects:
            if scope not in ("any", where) or cell not in points:
                continue
            checked += 1
            got, msg = points[cell], messages.get(cell) or ""
            if got != want or message not in msg:
                failed.append(f"{st.assignment} · {st.name} · {cell}: {got:g} points ({msg[:300]!r}); "
                              f"expected {want:g}" + (f" and a message with {message!r}" if message else ""))  # fmt: skip
    return failed, checked
