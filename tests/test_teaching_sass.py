"""qmatmul/teaching/sass.py, the SASS reading core that tools/sass.py imports, and chapter "layouts"'s
`instructions_per_weight()`, which a learner calls in a notebook on any machine: compiled for sm_90 on this CPU.

The compiles run in new processes: in this one (and in a CPU notebook) triton was imported with TRITON_INTERPRET=1,
so its own @jit helpers are interpreter functions and no kernel compiles (tests/test_mma_decode.py::measured)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from qmatmul.teaching import sass as package_sass
from tools import sass as tools_sass

ROOT = Path(__file__).resolve().parent.parent


def _python(script: str, cwd: Path = ROOT, **env) -> str:
    """stdout of `script` run in a new process on the repository's path, env's entries added (None: removed)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_DEFAULT_FP_FUSION": "1", **env}
    full = {k: v for k, v in full.items() if v is not None}
    out = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=full, capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out.stdout


def test_tools_sass_reads_with_the_packages_functions():
    for name in ("ISSUE_BUDGET", "disassemble", "loops", "main_loop", "opcode", "weights_per_thread", "capability",
                 "mma_row"):  # fmt: skip
        assert getattr(tools_sass, name) is getattr(package_sass, name), name


def test_tools_and_the_package_count_the_w4a16_solution_alike():
    script = (
        "import json\nfrom tools import sass as t\nfrom qmatmul.teaching import sass as p\n"
        "row = t.kernels()['w4a16']\n"
        "print(json.dumps([row == p.w4a16_row(), t.measure('w4a16', row), p.measure('w4a16', p.w4a16_row())], "
        "default=str))\n"
    )
    same_row, tools_row, package_row = json.loads(_python(script, TRITON_INTERPRET=None).splitlines()[-1])
    assert same_row
    assert tools_row == package_row
    # the chapter's readable decode issues more than the budget a weight (docs/perf-notes.md: 8.72 with triton 3.9)
    assert tools_row["per_weight"] > package_sass.ISSUE_BUDGET


_NOTEBOOK = (
    "from qmatmul import environment\nenv = environment.start(quiet=True)\n"  # a CPU notebook's setup: the interpreter
    "import json, os, triton, triton.language as tl\n"
    "assert os.environ['TRITON_INTERPRET'] == '1' and type(tl.cdiv).__name__ == 'InterpretedFunction'\n"
    "from qmatmul import layouts\n"
    "rows = layouts.instructions_per_weight()\n"
    "print(json.dumps(rows, default=str))\n"
)


def _measured(**kw) -> tuple[str, list[dict]]:
    out = _python(_NOTEBOOK, TRITON_INTERPRET="1", **kw)
    *table, rows = out.strip().splitlines()
    return "\n".join(table), json.loads(rows)


def test_a_cpu_notebook_measures_the_readable_decode_against_the_gluon_one():
    """From the layouts chapter's folder, as the learner runs it: ../w4a16/w4a16.ipynb is the unfinished exercise
    notebook, so the course's solution is measured, and said to be."""
    table, rows = _measured(cwd=ROOT / "notebooks" / "layouts", QMATMUL_KERNEL_NOTEBOOKS=None)
    readable, gluon = rows
    assert readable["label"] == "w4a16_decode_kernel (course, Triton)", table
    assert "the course's solution" in readable["source"] and "unfinished" in readable["source"], table
    assert "../w4a16/w4a16.ipynb" in readable["source"], table
    assert gluon["label"] == "_w4_mma_kernel (course, Gluon)", table
    assert readable["per_weight"] > gluon["per_weight"], table
    assert readable["loop"] > 0 and readable["weights"] > 0 and 0 < gluon["ceiling"] <= 1, table
    for r in rows:  # the table printed each row
        assert f"{r['label']} " in table and f"{r['per_weight']:.2f}" in table, table


def test_a_finished_chapter_notebook_is_measured_as_the_learners():
    """The chapter notebooks where $QMATMUL_KERNEL_NOTEBOOKS says (the capstone's lookup): solutions/, finished."""
    _, rows = _measured(cwd=ROOT, QMATMUL_KERNEL_NOTEBOOKS=str(ROOT / "solutions"))
    readable = rows[0]
    assert readable["label"] == "w4a16_decode_kernel (yours, Triton)", readable
    assert readable["source"].startswith("your w4a16_decode_kernel, from ") and readable["source"].endswith(
        "solutions/w4a16/w4a16.ipynb"
    ), readable
    assert readable["per_weight"] > rows[1]["per_weight"]
