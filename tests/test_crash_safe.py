"""A crash is a message, never a dead notebook (issue 43, item 1).

Under Triton's interpreter an output store without its row mask wrote past the buffer and killed the learner's
Jupyter kernel (FP8's decode 3 fresh kernels of 3, the tiled GEMM's one, NVFP4's decode 1 of 3). The visible checks
now run the learner's kernel guarded (qmatmul/checks/traffic.py): a load or store outside every tensor of its launch
is not performed, and the check fails naming the kernel argument, the edge and how far. Each chapter's solution
kernel with the row mask taken off its output store runs here in a child Python process, as a notebook would run the
visible check; the process must live on to run a later cell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, traffic
from tests.conftest import HAS_GPU, ROOT

pytestmark = pytest.mark.skipif(
    HAS_GPU, reason="the guard is the interpreter's: on a GPU the worker isolates"
)

FULL = "mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),"
NO_ROWS = "mask=offs_n[None, :] < N,"

# (chapter, solution cell, its row-masked store, without the row mask, function, visible check, kernel argument)
CASES = [
    ("w8a16", "ex3_decode", "y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)", "y_mask = offs_n[None, :] < N",
     "w8a16_decode", "check_decode", "y_ptr"),
    ("w4a16", "ex3_decode", "y_mask = (offs_m[:, None] < M) & n_ok[None, :]", "y_mask = n_ok[None, :]",
     "w4a16_decode", "check_decode", "y_ptr"),  # on the CPU the split-K path: the store is a tl.atomic_add
    ("fp8", "ex4_decode", "y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)", "y_mask = offs_n[None, :] < N",
     "fp8_decode", "check_decode", "y_ptr"),
    ("fp8", "ex3_matmul", FULL, NO_ROWS, "fp8_matmul", "check_matmul", "y_ptr"),
    ("fp8", "ex6_decode_fused", FULL, NO_ROWS, "fp8_decode_fused", "check_decode_fused", "y_ptr"),
    ("mxfp4", "ex3_decode", FULL, NO_ROWS, "mxfp4_decode", "check_decode", "y_ptr"),
    ("nvfp4", "ex3_decode", FULL, NO_ROWS, "nvfp4_decode", "check_decode", "y_ptr"),
]  # fmt: skip

# The child: the notebook's code with one cell changed, the visible check, then a later cell (the chapter's
# quantizer check and a torch computation). It prints one JSON line per cell.
CHILD = textwrap.dedent(
    """
    import json, os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    chapter, cell, old, new, fn, check = json.loads(sys.argv[1])
    from autograder.grade_direct import solution_cells
    from qmatmul import checks, course, environment
    environment.start(quiet=True)
    src = next(c.source for c in solution_cells(chapter) if c.grade_id == cell)
    assert src.count(old) == 1, f"{old!r} occurs {src.count(old)} times in {cell}"
    nb = course.load_notebook_code(chapter, {cell: src.replace(old, new)}, name=f"crash_{chapter}_{cell}")
    facade = getattr(nb, chapter)
    try:
        getattr(facade, check)(getattr(nb, fn), seed=0)
        print(json.dumps({"cell": "check", "failed": False}), flush=True)
    except checks.CheckFailed as exc:
        print(json.dumps({"cell": "check", "failed": True, "message": str(exc)}), flush=True)
    import torch
    quantizer = {"w8a16": "quantize_int8_per_channel", "w4a16": "quantize_int4", "fp8": "quantize_fp8",
                 "mxfp4": "quantize_mxfp4", "nvfp4": "quantize_nvfp4"}[chapter]
    facade.check_quantizer(getattr(nb, quantizer), seed=1)
    a = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    print(json.dumps({"cell": "later", "sum": float((a @ a.T).trace())}), flush=True)
    """
)


def _run_child(case) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(list(case))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=540,
    )  # fmt: skip
    cells = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc, cells


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_an_unmasked_output_store_is_a_message_and_the_notebook_lives(case):
    chapter, cell, old, new, fn, check, arg = case
    proc, cells = _run_child((chapter, cell, old, new, fn, check))
    said = f"exit status {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, said  # the process survived (a segfault is -11)
    assert [c["cell"] for c in cells] == ["check", "later"], said  # and ran the later cell
    first = cells[0]
    assert first["failed"], said
    message = first["message"]
    assert message.startswith(f"{fn} accessed memory outside its tensors (0 loads, "), message
    # Which tensor, which edge, how far: the output's rows past M (the visible checks run M = 1 or a ragged M).
    assert f"the store to `{arg}`" in message, message
    assert "reached rows m = " in message and "rows past the last row (M = " in message, message
    assert "none of them was performed" in message, message


# ----------------------------------------------------------------------------------------------------------
# The guard itself, in this process: nothing outside the launch's tensors is written, and the message says where


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def spill(out_ptr, n, BLOCK: tl.constexpr):  # stores BLOCK elements whatever n says
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, offs.to(out_ptr.dtype.element_ty))

    @triton.jit
    def tile(
        x_ptr, y_ptr, M, N, stride_m, BM: tl.constexpr, BN: tl.constexpr
    ):  # a [BM, BN] tile, columns unmasked
        rm = tl.arange(0, BM)
        rn = tl.arange(0, BN)
        ptrs = rm[:, None] * stride_m + rn[None, :]
        v = tl.load(x_ptr + ptrs, mask=rm[:, None] < M, other=0.0)
        tl.store(y_ptr + ptrs, v + 1, mask=rm[:, None] < M)

    return spill, tile


def test_a_store_past_the_end_is_not_performed_and_is_named():
    spill, _ = _kernels()
    full = torch.zeros(64)
    out = full[:16]  # the memory after `out` is the test's own: it shows whether the store went through

    def launch(out):
        spill[(1,)](out, out.numel(), BLOCK=32)
        return out

    with pytest.raises(CheckFailed) as caught:
        checks.call_learner(launch, out, what="spill")
    message = str(caught.value)
    assert "spill accessed memory outside its tensors (0 loads, 16 stores)" in message
    assert "the store to `out_ptr` (spill's argument, a [16] tensor) reached elements 16..31" in message
    assert "up to 16 elements past the last element" in message
    assert torch.equal(full[:16], torch.arange(16.0)) and not full[16:].any()  # inside written, outside not


def test_the_edge_is_read_from_the_block_not_from_the_address():
    """Column 70 of the last row lies where row M would start; the block's axes say it is a column."""
    _, tile = _kernels()
    M, N = 3, 64
    x = torch.ones(M * N + 128)[: M * N].view(
        M, N
    )  # each a view of a longer buffer: past its end lies no other
    y = torch.zeros(M * N + 128)[: M * N].view(M, N)  # tensor of the launch, whatever the allocator did

    def launch(x, y):
        tile[(1,)](x, y, M, N, N, BM=4, BN=128)
        return y

    with pytest.raises(CheckFailed) as caught:
        checks.call_learner(launch, x, y, what="tile")
    message = str(caught.value)
    assert "the store to `y_ptr` (tile's argument, a [3, 64] tensor) reached columns n = 64..127" in message
    assert "up to 64 columns past the last column (N = 64)" in message
    assert "rows" not in message.split("\n")[1]
    assert torch.equal(y, torch.full((M, N), 2.0))  # every column n >= N of rows 0..1 landed in the next row


def test_the_audit_reports_loads_outside_and_withholds_them_in_the_learners_process():
    _, tile = _kernels()
    x = torch.ones(3 * 64 + 128)[: 3 * 64].view(3, 64)
    y = torch.zeros(3, 128)

    def launch(x, y):
        tile[(1,)](x, y, 3, 64, 64, BM=4, BN=128)
        return y

    with pytest.raises(CheckFailed, match=r"\(64 loads, 0 stores\)") as caught:
        checks.run_audited(launch, x, y, what="tile")
    assert "the load from `x_ptr` (tile's argument, a [3, 64] tensor) reached columns" in str(caught.value)
    assert "none of them was performed" in str(caught.value)


def test_the_graders_audit_withholds_stores_only_and_says_so():
    """The worker's audit (grader/worker.py: traffic.count) holds back stores, which would write into memory that
    is not the kernel's, and reports through the worker's JSON reply as a list."""
    spill, _ = _kernels()
    full = torch.zeros(64)
    out = full[:16]
    with traffic.count({"out": out}) as seen:
        spill[(1,)](out, 16, BLOCK=32)
    assert not full[16:].any()
    loads, stores, where = json.loads(json.dumps(list(seen.outside)))
    assert (loads, stores) == (0, 16)
    assert "reached elements 16..31" in where and "held back every store" in where


def test_the_guard_is_on_by_default_under_the_interpreter():
    assert traffic.available()  # tests/conftest.py sets TRITON_INTERPRET=1 without a GPU
    assert not traffic.active()
    seen = []
    checks.call_learner(lambda: seen.append(traffic.active()), what="f")
    assert seen == [True] and not traffic.active()  # and the interpreter is left as it was
