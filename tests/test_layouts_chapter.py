"""Chapter "layouts" as a chapter: its solution's Gluon kernel compiles for Hopper with every layout conversion proven
trivial (the notebook's `layouts.compiles`, in a new process without the interpreter, as the learner's CPU runs it
after the setup cell), a wrong permute is refused by the compiler, and the scaffold's pieces are the expert kernel's."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder import demo
from qmatmul.kernels import mma_decode

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(mma_decode.gluon is None, reason="triton without Gluon")


def _compiles(overrides: dict) -> subprocess.CompletedProcess:
    """The chapter's notebook code (the solution with `overrides`) imported as a module, then layouts.compiles."""
    script = (
        "import sys\nfrom qmatmul.course import load_notebook_code\n"
        f"m = load_notebook_code('layouts', {overrides!r})\n"
        "from qmatmul import layouts\nsys.exit(0 if layouts.compiles(m.w4a16_mma_kernel) else 3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "TRITON_DEFAULT_FP_FUSION": "1"}
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )


def test_the_solutions_kernel_compiles_with_its_layouts_proven_and_a_wrong_permute_does_not():
    """The text says a wrong permute fails to compile on any machine with Gluon: demo student wrong_permute."""
    ok = _compiles({})
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-3000:]
    assert ok.stdout.count("every assert_trivial conversion proven") == 2
    student = next(s for s in demo.students("layouts") if s.name == "wrong_permute")
    bad = _compiles(student.changed_cells())
    assert bad.returncode == 3, bad.stdout[-2000:] + bad.stderr[-3000:]
    assert "does not compile for sm_90" in bad.stdout and "trivial" in bad.stdout.lower()
