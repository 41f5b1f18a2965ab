"""Run All on the solution notebooks, as a learner would: every cell executed (past an error, so one run lists
all of them), each cell's time and outcome printed as it finishes, the executed copies kept for reading.

    python -m tools.run_all [--jobs N] [--out DIR] [--cell-timeout S] [CHAPTER ...]

Without a GPU the tests run it under TRITON_INTERPRET=1 (tests/test_notebooks.py); on a GPU it is the record
of issue 16's GPU Run All (docs/grading-h200.md). Exit status 1 if any cell raised.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from qmatmul.grader import notebook

ROOT = Path(__file__).resolve().parent.parent


def run_notebook(
    path: Path, workdir: Path, *, cell_timeout: int = 600, log=None, keep: Path | None = None
) -> list:
    """Execute one notebook top to bottom; return one line per cell that raised (its first error)."""
    nb = notebook.load_node(path)
    started = time.perf_counter()
    last = [started]

    def on_cell_executed(cell, cell_index, execute_reply=None, **_):
        now = time.perf_counter()
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        gid = notebook.grade_id(cell) or ""
        if log is not None and cell.cell_type == "code":
            state = f"ERROR {errors[0].ename}" if errors else "ok"
            log(f"[{path.stem}] cell {cell_index:2} {gid:24} {now - last[0]:7.1f} s  {state}")
        last[0] = now

    client = NotebookClient(
        nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
        resources={"metadata": {"path": str(workdir)}}, on_cell_executed=on_cell_executed,
    )  # fmt: skip
    try:
        client.execute()
    finally:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, keep / path.name)
    if log is not None:
        log(f"[{path.stem}] done in {time.perf_counter() - started:.1f} s")
    failures = []
    for cell in nb.cells:
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        gid = notebook.grade_id(cell) or "?"
        failures += [f"{path.name} cell {gid}: {e.ename}: {e.evalue[:500]}" for e in errors[:1]]
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("chapters", nargs="*")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "run-all")
    parser.add_argument("--cell-timeout", type=int, default=600)
    args = parser.parse_args(argv)
    from qmatmul import course

    chapters = args.chapters or course.assignments()
    paths = [p for ch in chapters for p in sorted((ROOT / "solutions" / ch).glob("*.ipynb"))]

    def one(path: Path) -> list:
        work = args.out / "work" / path.stem
        work.mkdir(parents=True, exist_ok=True)
        return run_notebook(path, work, cell_timeout=args.cell_timeout, log=lambda s: print(s, flush=True),
                            keep=args.out / "executed")  # fmt: skip

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        failures = [f for fs in pool.map(one, paths) for f in fs]
    print("\n".join(["", f"{len(paths)} notebooks, {len(failures)} cells raised", *failures]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
