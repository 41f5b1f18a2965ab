"""Keep committed notebooks reviewable: no outputs, no execution counts, no editor metadata.

python -m tools.notebook_format PATH ...          rewrite the notebooks under PATH in place
python -m tools.notebook_format --check PATH ...  exit 1 and list the notebooks that would change
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat

from qmatmul.grader import notebook

KEEP_CELL_METADATA = {"nbgrader", "tags", "deletable", "editable"}


def normalized(text: str) -> str:
    nb = notebook.parse_node(text)
    for cell in nb.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in KEEP_CELL_METADATA}
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
    return nbformat.writes(nb) + "\n"


def notebooks(paths: list[str]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        out += sorted(p.rglob("*.ipynb")) if p.is_dir() else [p]
    return [p for p in out if ".ipynb_checkpoints" not in p.parts]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    changed = []
    for path in notebooks(args.paths):
        text = path.read_text()
        new = normalized(text)
        if new != text:
            changed.append(path)
            if not args.check:
                path.write_text(new)
    for path in changed:
        print(f"{'would reformat' if args.check else 'reformatted'} {path}")
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
