"""Where the course's files are, and the solutions for people who study alone."""

from __future__ import annotations

from pathlib import Path

from qmatmul.grader import notebook


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


def assignments(root: Path | None = None) -> list[str]:
    """The chapters: folders of solutions/ that hold a notebook."""
    root = root or repo_root()
    return sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def selected_assignments(names: list[str], error) -> list[str]:
    """The chapters a command names (all of them when it names none); error(message) for an unknown one."""
    known = assignments()
    unknown = set(names) - set(known)
    if unknown:
        error(f"no such assignment: {', '.join(sorted(unknown))} (choose from {', '.join(known)})")
    return list(names) or known


def solution_source(cell_id: str) -> str:
    """The source of the solution cell `cell_id` (its nbgrader grade_id), markers included."""
    for path in solution_notebooks():
        for cell in notebook.read(path):
            if cell.grade_id == cell_id:
                return cell.source
    raise LookupError(
        f"no solution cell {cell_id!r} found: the solutions/ folder of the course checkout is needed "
        "(instructors may withhold it during a graded class)"
    )


def show_solution(cell_id: str) -> None:
    """Print a solution, markers removed. For self-study: try the hints first."""
    print(notebook.strip_markers(solution_source(cell_id)).rstrip("\n"))


def notebook_code(assignment: str, overrides: dict | None = None, root: Path | None = None) -> str:
    """The code a learner's notebook defines (what the grader's worker runs), as one module's source.

    overrides maps a solution cell's grade_id to other source (a demo student's cell, say).
    """
    root = root or repo_root()
    cells = [c for nb in sorted((root / "solutions" / assignment).glob("*.ipynb")) for c in notebook.read(nb)]
    return "\n\n".join(src for _, src in notebook.program(cells, overrides)) + "\n"


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
