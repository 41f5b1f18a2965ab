"""FP8 exercise 7 (the activation quantized once, one program a row): the check passes the solution, fails each known
mistake on every visible run and names it, and gives nothing to a PyTorch quantizer or to two launches."""

import pytest
import torch
from conftest import HAS_GPU
from fp8_mistakes import fails_every_visible_run_and_is_named, mistaken_sources

from qmatmul import checks, fp8
from qmatmul.checks import CheckFailed, fp8_fused


@pytest.fixture(scope="module")
def fp8_solution(env):
    from qmatmul import course

    return course.load_notebook_code("fp8")


def _variant(name: str, source: str):
    from qmatmul import course

    return course.load_notebook_code("fp8", {"ex7_quantize_rows": source}, name=f"rows_{name}")


def _solution_source() -> str:
    from qmatmul import course

    return course.solution_source("ex7_quantize_rows", "fp8")


def test_solution_passes_and_equals_quantize_fp8(fp8_solution):
    for seed in range(2):
        fp8.check_quantize_rows(fp8_solution.quantize_fp8_rows, seed=seed)
        fp8.check_quantize_rows(fp8_solution.quantize_fp8_rows, hidden=True, seed=seed)
    x = fp8.random_fused_problem(20, 1, 333, torch.float16, "cpu", checks.generator(3), zero_row=2)[0]
    xq, sx = fp8_solution.quantize_fp8_rows(x)
    want_q, want_s = fp8_solution.quantize_fp8(x, (1, x.shape[1]))
    assert torch.equal(xq.view(torch.uint8), want_q.view(torch.uint8)) and torch.equal(sx, want_s)


SOLUTION_CHANGES = {  # a learner's kernel -> (the mistake it is named as, solution snippet, the learner's)
    "x * (1 / sx)": (fp8_fused.RECIPROCAL, "tl.div_rn(x, sx)", "x * (1.0 / sx)"),
    "no zero guard": (fp8_fused.ZERO_ROW[0], "tl.where(amax_row > 0, tl.div_rn(amax_row, 448.0), 1.0)",
                      "tl.div_rn(amax_row, 448.0)"),
    "max(x)": ("max(x) instead of max |x|", "tl.maximum(amax, tl.abs(x))", "tl.maximum(amax, x)"),
    "interpreter cast": ("cast with .to(tl.float8e4nv) in the interpreter", "fp8.e4m3_bits(tl.div_rn(x, sx))",
                         "tl.div_rn(x, sx).to(tl.float8e4nv).to(tl.uint8, bitcast=True)"),
    "first tile": ("amax of the first K tile only", "amax = tl.maximum(amax, tl.abs(x))",
                   "amax = tl.where(k0 == 0, tl.abs(x), amax)"),
}  # fmt: skip
ONE_LOOP = """    m = tl.program_id(0)
    offs_k = tl.arange(0, BLOCK_K)
    amax = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + m * stride_xm + k * stride_xk, mask=k < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
        a = tl.max(amax, axis=0)
        sx = tl.where(a > 0, tl.div_rn(a, 448.0), 1.0)
        tl.store(xq_ptr + m * K + k, fp8.e4m3_bits(tl.div_rn(x, sx)), mask=k < K)
    tl.store(sx_ptr + m, sx)
"""


MISTAKES = mistaken_sources(_solution_source(), SOLUTION_CHANGES,
                            {"one loop": ("amax taken as the loop goes", ONE_LOOP)})  # fmt: skip


@pytest.mark.parametrize("kernel", MISTAKES)
def test_each_known_mistake_fails_every_visible_run_and_is_named(kernel):
    name, source = MISTAKES[kernel]
    if "interpreter" in name and HAS_GPU:
        pytest.skip("a GPU's cast is right")
    fails_every_visible_run_and_is_named(
        fp8.check_quantize_rows, _variant("m", source).quantize_fp8_rows, name
    )


def test_an_unmasked_last_tile_is_caught():
    module = _variant("unmasked", _solution_source().replace("fp8.e4m3_bits(tl.div_rn(x, sx)), mask=k < K)",
                                                             "fp8.e4m3_bits(tl.div_rn(x, sx)))"))  # fmt: skip
    with pytest.raises(CheckFailed, match="past|outside"):
        fp8.check_quantize_rows(module.quantize_fp8_rows, seed=0)


def test_a_pytorch_quantizer_earns_nothing():
    """quantize_fp8's codes copied into the outputs (demo student fp8/fused_calls_quantize_fp8 through the trusted
    grader: no kernel of its own); here, in the learner's process, with the kernel launched too, the PyTorch
    arithmetic is named."""
    src = _solution_source()
    assert src.count("    return xq, sx") == 1
    src = src.replace(
        "    return xq, sx",
        "    q, s = quantize_fp8(x, (1, K))\n    xq.copy_(q)\n    sx.copy_(s)\n    return xq, sx",
    )
    with pytest.raises(CheckFailed, match="computed with PyTorch outside its kernel .*one program a row"):
        fp8.check_quantize_rows(_variant("torch", src).quantize_fp8_rows, seed=0)


def test_two_launches_earn_nothing():
    """The kernel launched once for the scales and once again for the codes: right outputs, two launches."""
    src = _solution_source().replace(
        "    return xq, sx",
        "    quantize_rows_kernel[(M,)](x, xq.view(torch.uint8), sx, K, x.stride(0), x.stride(1), **cfg)\n"
        "    return xq, sx",
    )
    with pytest.raises(CheckFailed, match="launched 2 kernels .*`quantize_rows_kernel`"):
        fp8.check_quantize_rows(_variant("twice", src).quantize_fp8_rows, seed=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(x=torch.zeros(3, 8, dtype=torch.float32)), "float16 or bfloat16"),
        (dict(x=torch.zeros(3, 8).half(), sx=torch.zeros(3)), r"sx must be torch.float32 of shape \[3, 1\]"),
        (dict(x=torch.zeros(3, 8).half(), xq=torch.zeros(3, 8)), "xq must be torch.float8_e4m3fn"),
    ],
)
def test_bad_input_gets_a_clear_message(fp8_solution, kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        fp8_solution.quantize_fp8_rows(**kwargs)


# ----------------------------------------------------------------------------------------------------------
# Through the trusted grader (the worker process, nbgrader's path): a cheat the exercise's rules do not name, and two
# honest styles the solution does not use


COPY_KERNEL = """
@triton.jit
def copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)

"""
GRADED = {  # a submission -> its cell (the test says what each deserves)
    "numpy quantize, own copy kernel": COPY_KERNEL
    + """
def quantize_fp8_rows(x, xq=None, sx=None):
    M, K, xq, sx = fp8.prepare_rows(x, xq, sx)
    import numpy as np
    a = x.float().cpu().numpy()
    amax = np.abs(a).max(axis=1, keepdims=True)
    s = np.where(amax > 0, amax / np.float32(448.0), np.float32(1.0)).astype(np.float32)
    q = torch.from_numpy(np.clip(a / s, -448, 448)).to(torch.float8_e4m3fn).view(torch.uint8).to(x.device)
    copy_kernel[(triton.cdiv(M * K, 1024),)](q, xq.view(torch.uint8), M * K, BLOCK=1024)
    sx.copy_(torch.from_numpy(s).to(x.device))
    return xq, sx
""",
    "honest: one tile, x kept in registers": """
@triton.jit
def quantize_rows_kernel(x_ptr, xq_ptr, sx_ptr, K, stride_xm, stride_xk, BLOCK_K: tl.constexpr):
    m = tl.program_id(0)
    k = tl.arange(0, BLOCK_K)
    x = tl.load(x_ptr + m * stride_xm + k * stride_xk, mask=k < K, other=0.0).to(tl.float32)
    a = tl.max(tl.abs(x), axis=0)
    s = tl.where(a > 0, tl.div_rn(a, 448.0), 1.0)
    tl.store(sx_ptr + m, s)
    tl.store(xq_ptr + m * K + k, fp8.e4m3_bits(tl.div_rn(x, s)), mask=k < K)


def quantize_fp8_rows(x, xq=None, sx=None):
    M, K, xq, sx = fp8.prepare_rows(x, xq, sx)
    quantize_rows_kernel[(M,)](x, xq.view(torch.uint8), sx, K, x.stride(0), x.stride(1),
                               BLOCK_K=triton.next_power_of_2(K))
    return xq, sx
""",
    "honest: one program for all rows, per-tile maxima": """
@triton.jit
def quantize_rows_kernel(x_ptr, xq_ptr, sx_ptr, M, K, stride_xm, stride_xk, BLOCK_K: tl.constexpr):
    for m in range(0, M):
        a = 0.0
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + m * stride_xm + k * stride_xk, mask=k < K, other=0.0).to(tl.float32)
            a = tl.maximum(a, tl.max(tl.abs(x), axis=0))
        s = tl.where(a > 0, tl.div_rn(a, 448.0), 1.0)
        tl.store(sx_ptr + m, s)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + tl.arange(0, BLOCK_K)
            x = tl.load(x_ptr + m * stride_xm + k * stride_xk, mask=k < K, other=0.0).to(tl.float32)
            tl.store(xq_ptr + m * K + k, fp8.e4m3_bits(tl.div_rn(x, s)), mask=k < K)


def quantize_fp8_rows(x, xq=None, sx=None):
    M, K, xq, sx = fp8.prepare_rows(x, xq, sx)
    quantize_rows_kernel[(1,)](x, xq.view(torch.uint8), sx, M, K, x.stride(0), x.stride(1), BLOCK_K=64)
    return xq, sx
""",
}


@pytest.mark.parametrize("name", ["numpy quantize, own copy kernel", "honest: one tile, x kept in registers",
                                  "honest: one program for all rows, per-tile maxima"])  # fmt: skip
def test_the_trusted_grader_gives_a_host_quantizer_nothing_and_honest_styles_the_point(name):
    from autograder import grade_direct

    res = grade_direct.grade("fp8", {"ex7_quantize_rows": GRADED[name]}, cells_filter=["quantize_rows"])
    (verdict,) = res.values()
    if name.startswith("honest"):
        assert verdict.points == 1, verdict.message
    else:
        assert verdict.points == 0 and "reads tensor values into Python (.numpy)" in verdict.message, (
            verdict.message
        )
