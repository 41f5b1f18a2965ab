"""Where the course's files are, and the solutions for people who study alone."""

from __future__ import annotations

import json
from pathlib import Path


def repo_root(start: Path | None = None) -> Path | None:
    """The course checkout holding this package, or None (e.g. a pip install without the notebooks)."""
    here = Path(__file__).resolve().parent.parent
    for p in [here, *(start or Path.cwd()).resolve().parents, (start or Path.cwd()).resolve()]:
        if (p / "solutions").is_dir() and (p / "qmatmul").is_dir():
            return p
    return None


def solution_notebooks(root: Path | None = None) -> list[Path]:
    root = root or repo_root()
    return sorted(root.glob("solutions/*/*.ipynb")) if root else []


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def grade_id(cell: dict) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def solution_source(cell_id: str) -> str:
    """The source of the solution cell `cell_id` (its nbgrader grade_id)."""
    for nb in solution_notebooks():
        for cell in cells(nb):
            if grade_id(cell) == cell_id:
                return "".join(cell["source"])
    raise LookupError(
        f"no solution cell {cell_id!r} found: the solutions/ folder of the course checkout is needed "
        "(instructors may withhold it during a graded class)"
    )


def show_solution(cell_id: str) -> None:
    """Print a solution, markers removed. For self-study: try the hints first."""
    lines = [ln for ln in solution_source(cell_id).splitlines() if "### BEGIN SOLUTION" not in ln]
    print("\n".join(ln for ln in lines if "### END SOLUTION" not in ln))


def _strip_markers(src: str) -> str:
    return "\n".join(
        ln for ln in src.splitlines() if "### BEGIN SOLUTION" not in ln and "### END SOLUTION" not in ln
    )


def notebook_code(assignment: str, overrides: dict | None = None, root: Path | None = None) -> str:
    """The code a learner's notebook defines: the 'imports' cell and every solution cell, in order.

    overrides maps a solution cell's grade_id to other source (a demo student's cell, say).
    """
    root = root or repo_root()
    overrides = overrides or {}
    parts = ["from qmatmul import environment\nenv = environment.start(quiet=True)"]
    for nb in sorted((root / "solutions" / assignment).glob("*.ipynb")):
        for cell in cells(nb):
            meta = cell.get("metadata", {}).get("nbgrader", {})
            gid = meta.get("grade_id")
            if gid == "imports" or meta.get("solution"):
                parts.append(overrides.get(gid, _strip_markers("".join(cell["source"]))))
    return "\n\n".join(parts) + "\n"


def load_notebook_code(assignment: str, overrides: dict | None = None, name: str | None = None):
    """Import notebook_code() as a module (Triton reads kernel source from files, so it goes to one)."""
    import importlib.util
    import tempfile

    name = name or f"qmatmul_nb_{assignment}"
    path = Path(tempfile.mkdtemp(prefix="qmatmul-")) / f"{name}.py"
    path.write_text(notebook_code(assignment, overrides))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
