"""A notebook's cells and what each is for: the one place that reads notebook sources, cell roles, nbgrader's
metadata and solution markers.

    read(path), read_folder(folder), cells_of(nb)   a notebook's cells as `Cell`s (source, grade_id, role, points)
    load(path)                                      the notebook file's JSON as a dict, as it is written
    load_node(path), parse_node(text)               the notebook as nbformat reads it (to write it back or run it)
    nbgrader_meta, grade_id, role, is_graded,       one cell, given as a dict or as nbformat's NotebookNode (a dict)
    cell_source
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
HIDDEN_BEGIN, HIDDEN_END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
# The setup cell finds the package and prints the machine; a process that is not a notebook starts quietly.
QUIET_START = "from qmatmul import environment\nenv = environment.start(quiet=True)\n"


@dataclass
class Cell:
    index: int
    kind: str  # "code" or "markdown"
    source: str
    grade_id: str | None
    role: str  # "setup", "scaffold" (locked code), "solution", "test", "plain" (unmarked code), "markdown"
    points: float = 0.0


def nbgrader_meta(cell: dict) -> dict:
    """A cell's nbgrader metadata ({} for a cell nbgrader does not mark): a dict or an nbformat NotebookNode."""
    return cell.get("metadata", {}).get("nbgrader", {})


def grade_id(cell: dict) -> str | None:
    """The cell's nbgrader grade_id, or None for a cell nbgrader does not name."""
    return nbgrader_meta(cell).get("grade_id")


def cell_source(cell: dict) -> str:
    """A cell's source as one string (a notebook file may hold it as a list of lines)."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def is_graded(cell: dict) -> bool:
    """A code cell nbgrader scores (`grade` in its metadata): a test cell, or an answer cell graded as a whole."""
    return cell.get("cell_type") == "code" and bool(nbgrader_meta(cell).get("grade"))


def role(cell: dict) -> str:
    """What a cell is for: "setup", "scaffold" (locked code), "solution", "test", "plain" (unmarked code) or
    "markdown"."""
    meta = nbgrader_meta(cell)
    if cell.get("cell_type") != "code":
        return "markdown"
    if meta.get("solution"):
        return "solution"
    if meta.get("grade"):
        return "test"
    if meta.get("grade_id") == "setup":
        return "setup"
    if meta.get("locked"):
        return "scaffold"
    return "plain"


def cells_of(nb: dict) -> list[Cell]:
    """The cells of a notebook given as a dict (nbformat's NotebookNode is one)."""
    out = []
    for i, cell in enumerate(nb["cells"]):
        meta = nbgrader_meta(cell)
        out.append(Cell(i, cell.get("cell_type", "code"), cell_source(cell), meta.get("grade_id"), role(cell),
                        float(meta.get("points", 0) or 0)))  # fmt: skip
    return out


def load(path: Path) -> dict:
    """A notebook file's JSON as it is written (a source, or an output's text, may be a list of lines)."""
    return json.loads(Path(path).read_text())


def load_node(path: Path):
    """The notebook as nbformat reads it (version 4, lines joined, attribute access): for code that writes it back
    or hands it to nbclient."""
    import nbformat

    return nbformat.read(path, as_version=4)


def parse_node(text: str):
    """load_node for a notebook's text."""
    import nbformat

    return nbformat.reads(text, as_version=4)


def read(path: Path) -> list[Cell]:
    return cells_of(load(path))


def read_folder(folder: Path) -> list[Cell]:
    """The cells of every notebook in a folder (an assignment's), notebooks in the order of their names."""
    return [c for nb in sorted(Path(folder).glob("*.ipynb")) for c in read(nb)]


def strip_markers(src: str) -> str:
    """Source without the solution markers (what a learner's finished cell would hold)."""
    return "\n".join(ln for ln in src.splitlines() if BEGIN not in ln and END not in ln) + "\n"


def without_hidden_tests(src: str) -> str:
    out, hidden = [], False
    for ln in src.splitlines():
        if HIDDEN_BEGIN in ln:
            hidden = True
        elif HIDDEN_END in ln:
            hidden = False
        elif not hidden:
            out.append(ln)
    return "\n".join(out) + "\n"


def program(cells: list[Cell], overrides: dict | None = None) -> list[tuple[str, str]]:
    """(label, source) of the code that defines the learner's functions, in notebook order: a quiet start in
    place of the setup cell, the locked scaffolding, and the solution cells as written (or as `overrides`
    gives them by grade_id). Test cells and unmarked cells (figures, widgets) are left out."""
    overrides = overrides or {}
    out = []
    for c in cells:
        if c.role == "setup":
            out.append(("setup", QUIET_START))
        elif c.role == "scaffold":
            out.append((c.grade_id or f"cell {c.index}", c.source))
        elif c.role == "solution":
            out.append((c.grade_id, overrides.get(c.grade_id, strip_markers(c.source))))
    return out


def added_definitions(cells: list[Cell]) -> dict[str, str]:
    """name -> where it is defined, for each name that an unmarked code cell (a cell the learner added, or a figure
    cell of the release) binds at its top level (def, class, assignment, import): `program` leaves those cells out,
    so the grader's messages can say why such a name is missing. Where several such cells bind it, the last one."""
    out = {}
    for c in cells:
        if c.role != "plain":
            continue
        try:  # magics and shell escapes (`%time`, `!ls`) as a blank line: only the definitions matter here
            tree = ast.parse(re.sub(r"(?m)^([ \t]*)[%!].*$", r"\1pass", c.source))
        except SyntaxError:
            continue
        lines = c.source.splitlines()
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
            else:
                continue
            line = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
            for name in names:
                out[name] = f"the notebook's cell {c.index + 1} from the top, `{line[:80]}`"
    return out


def solutions(cells: list[Cell]) -> dict[str, str]:
    """grade_id -> source of each solution cell, markers removed."""
    return {c.grade_id: strip_markers(c.source) for c in cells if c.role == "solution"}


def tests(cells: list[Cell]) -> list[Cell]:
    return [c for c in cells if c.role == "test"]


def scaffold_source(cells: list[Cell]) -> str:
    """The locked non-setup code cells (the imports): what the trusted side needs for the test cells' names."""
    return "\n\n".join(c.source for c in cells if c.role == "scaffold") + "\n"
