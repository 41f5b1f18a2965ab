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


def current_chapter(root: Path | None = None) -> str | None:
    """The chapter of the running notebook: Jupyter's JPY_SESSION_NAME (the notebook's path) or the folder the kernel
    runs in (notebooks/w8a16/, or ~/w8a16/ as nbgrader's Assignment List fetches it), when it names one."""
    import os

    known = set(assignments(root)) if (root or repo_root()) else set()
    session = os.environ.get("JPY_SESSION_NAME", "")
    candidates = [Path(session).parent.name, Path(session).stem] if session else []
    candidates += [Path.cwd().name, Path.cwd().parent.name]
    return next((c for c in candidates if c in known), None)


def solution_source(cell_id: str, chapter: str | None = None) -> str:
    """The source of the solution cell `cell_id` (its nbgrader grade_id) of `chapter`, markers included. Grade ids
    repeat across chapters (every chapter has an ex2_prefill or so): without `chapter`, the running notebook's
    chapter (current_chapter), and where none is found an id that several chapters hold is refused, naming them."""
    chapter = chapter or current_chapter()
    found = {}
    for path in solution_notebooks():
        if chapter and path.parent.name != chapter:
            continue
        for cell in notebook.read(path):
            if cell.grade_id == cell_id:
                found.setdefault(path.parent.name, cell.source)
    if len(found) == 1:
        return next(iter(found.values()))
    if found:
        names = ", ".join(sorted(found))
        raise LookupError(f"{cell_id!r} is a cell of several chapters ({names}): say which, e.g. "
                          f"show_solution({cell_id!r}, chapter={sorted(found)[0]!r})")  # fmt: skip
    where = f" in chapter {chapter!r}" if chapter else ""
    raise LookupError(
        f"no solution cell {cell_id!r} found{where}: the solutions/ folder of the course checkout is needed "
        "(instructors may withhold it during a graded class)"
    )


def show_solution(cell_id: str, chapter: str | None = None) -> None:
    """Print a solution, markers removed (of the running notebook's chapter, or `chapter`). For self-study: try the
    hints first."""
    print(notebook.strip_markers(solution_source(cell_id, chapter)).rstrip("\n"))


KERNELS_ENV = "QMATMUL_KERNEL_NOTEBOOKS"  # where a learner's finished chapter notebooks are looked for


def notebooks_folder(folder=None) -> Path:
    """Where a learner's own chapter notebooks are: `folder`, else $QMATMUL_KERNEL_NOTEBOOKS, else the folder above the
    running notebook's (notebooks/, when it runs in notebooks/capstone/ or notebooks/layouts/)."""
    import os

    return Path(folder or os.environ.get(KERNELS_ENV) or Path.cwd().parent)


def chapter_notebook(chapter: str, folder=None) -> Path:
    """A learner's own notebook of `chapter` (notebooks_folder)."""
    return notebooks_folder(folder) / chapter / f"{chapter}.ipynb"


def defined_code(path: Path) -> str:
    """The code a learner's chapter notebook defines: its 'imports' cell and its solution cells (nbgrader metadata),
    after a quiet start, magics and shell escapes left out."""
    parts = ["from qmatmul import environment\nenv = environment.start(quiet=True)"]
    for cell in notebook.read(path):
        if cell.kind == "code" and (cell.grade_id == "imports" or cell.role == "solution"):
            parts.append(
                "\n".join(ln for ln in cell.source.splitlines() if not ln.lstrip().startswith(("%", "!")))
            )
    return "\n\n".join(parts) + "\n"


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
