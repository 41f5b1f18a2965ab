"""FP8 exercise 6 (the decode that quantizes its activations itself): the given encoder fp8.e4m3_bits bit-exact against
torch and ml_dtypes, the interpreter's own cast shown wrong, the probes shown to tell every known mistake from the
reference on every run, and the check shown to pass the solution and to name each mistake a kernel makes."""

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import HAS_GPU
from fp8_mistakes import fails_every_visible_run_and_is_named, mistaken_sources

from qmatmul import checks, fp8
from qmatmul.checks import CheckFailed, fp8_fused, fp8_probes

E4M3 = torch.float8_e4m3fn


# ---------------------------------------------------------------------------------------------------------
# The given encoder


@pytest.fixture(scope="module")
def encode(env):
    """fp8.e4m3_bits run over a float32 tensor, in a kernel of its own: the uint8 codes."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(v_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(v_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + offs, fp8.e4m3_bits(v), mask=offs < n)

    def run(v: torch.Tensor) -> torch.Tensor:
        v = v.float().contiguous()
        out = torch.empty(v.numel(), dtype=torch.uint8)
        kernel[(triton.cdiv(v.numel(), 4096),)](v, out, v.numel(), BLOCK=4096)
        return out

    return run


def _edge_cases() -> torch.Tensor:
    """Every e4m3 value (both signs), every midpoint between neighbours (ties both ways) and the float32 values just
    above and below each, the values next to each e4m3 value, ±0, ±448 and beyond, infinities, subnormals and tiny
    values that round to zero, 2^20 random float32 bit patterns and random values over 15 binades."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(E4M3).float()
    finite = torch.unique(codes[torch.isfinite(codes)])
    mids = ((finite[:-1].double() + finite[1:].double()) / 2).float()
    assert torch.equal(mids.double(), (finite[:-1].double() + finite[1:].double()) / 2)  # exact in float32

    def step(t, to):
        return torch.nextafter(t, torch.full_like(t, to))

    g = checks.generator(0)
    pattern = torch.randint(-(2**31), 2**31 - 1, (1 << 20,), generator=g, dtype=torch.int64).to(torch.int32)
    pattern = pattern.view(torch.float32)
    parts = [finite, -finite, mids, -mids]
    parts += [step(t, to) for t in (mids, -mids, finite, -finite) for to in (math.inf, -math.inf)]
    parts += [torch.tensor([0.0, -0.0, 448.0, -448.0, 449.0, 463.99, 464.0, -464.0, 465.0, 480.0, 1e4, 3e38,
                            math.inf, -math.inf, 2.0**-10, -(2.0**-10), 2.0**-11, 3 * 2.0**-11, 2.0**-30, 1e-45,
                            -1e-45, 1.17e-38, 31.6, 31.5, 30.0, 1.96875])]  # fmt: skip
    parts += [
        pattern[torch.isfinite(pattern)],
        torch.randn(100_000, generator=g) * torch.logspace(-12, 3, 100_000),
    ]
    return torch.cat(parts)


def test_e4m3_bits_is_exact_against_torch_and_ml_dtypes(encode):
    v = _edge_cases()
    ours = encode(v)
    # torch <= 2.11 on the GPU does not saturate: both oracles get values clamped to ±448 first
    by_torch = v.clamp(-448, 448).to(E4M3).view(torch.uint8)
    by_ml = np.clip(v.numpy(), -448, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert torch.equal(ours, by_torch), int((ours != by_torch).sum())
    np.testing.assert_array_equal(ours.numpy(), by_ml)


def test_e4m3_bits_saturates_keeps_signs_and_gives_nan_a_nan_code(encode):
    v = torch.tensor([500.0, -1e30, math.inf, -math.inf, -0.0, -(2.0**-12), math.nan, -math.nan])
    codes = encode(v).tolist()
    assert codes[:6] == [0x7E, 0xFE, 0x7E, 0xFE, 0x80, 0x80]
    assert {codes[6], codes[7]} <= {0x7F, 0xFF} and codes[6] != codes[7]  # NaN codes, the sign bit kept


@pytest.mark.skipif(HAS_GPU, reason="an interpreter fact")
def test_fact_the_interpreters_cast_to_e4m3_rounds_wrongly_and_the_model_of_it_is_exact(env):
    """Triton 3.9's interpreter: `.to(tl.float8e4nv)` loses the carry out of the mantissa (31.6 -> 16, not 32) and
    rounds a tie up; the check's model of it (_interpreter_cast) gives the same codes as a kernel that casts."""
    import triton
    import triton.language as tl

    @triton.jit
    def cast(v_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        v = tl.load(v_ptr + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + offs, v.to(tl.float8e4nv).to(tl.uint8, bitcast=True), mask=offs < n)

    g = checks.generator(1)
    v = torch.cat([torch.tensor([31.6, 1.0625]), (torch.randn(4094, generator=g) * 50).clamp(-448, 448)])
    out = torch.empty(v.numel(), dtype=torch.uint8)
    cast[(1,)](v, out, v.numel(), BLOCK=4096)
    got = out.view(E4M3).float()
    assert got[0] == 16.0 and got[1] == 1.125  # right: 32 and 1.0
    assert (got != v.to(E4M3).float()).sum() > 40
    assert torch.equal(fp8_fused._interpreter_cast(v), got)


# ---------------------------------------------------------------------------------------------------------
# The probes tell every known mistake from the reference, bit for bit, on every run


TWO_TILES_ALIKE = {
    "amax taken as the loop goes",
    "amax of each K tile on its own, the last tile's in the epilogue",
}


def _probe_outputs(M, K, dtype, device):
    x, wq, sw = fp8.probe_problem(M, K, dtype, "cpu")
    xq, sx = fp8.quantize(x, (1, K))
    ref = fp8.reference(xq, sx, wq, sw)
    return x, wq, sw, ref, fp8.fused_mistakes(x, wq, sw, device)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_known_mistake_differs_from_the_reference_on_the_probes(device, dtype):
    """The probe of each device's K (the CPU's 332, a GPU's 1100), in fp16 and bf16 outputs, at M = 16 and 5: each
    mistake's output differs from the reference in some output's bits, for every BLOCK_K from 16 to 1024 shorter
    than K, and the first mistake that matches it bit for bit is one of its own name (a name is never shadowed; the
    BLOCK_K it names may be another one of the same output, the check lists the launch's own first)."""
    K = fp8_probes.probe_k(device)
    for M in fp8_probes.PROBE_MS:
        x, wq, sw, ref, mistakes = _probe_outputs(M, K, dtype, device)
        names = {m.name for m in mistakes}
        assert any("first K tile only (BLOCK_K = 1024)" in n for n in names) == (K > 1024)
        assert any("first K tile only (BLOCK_K = 16)" in n for n in names)
        for m in mistakes:
            y = m.output.to(dtype)
            assert not fp8_fused.same_bits(y, ref).all(), (M, m.name)
            first = next(o for o in mistakes if fp8_fused.same_bits(y, o.output).all())
            names = {first.name.split(" (BLOCK_K")[0], m.name.split(" (BLOCK_K")[0]}
            if (
                len(names) > 1
            ):  # two K tiles: a running maximum is each tile's own, the last tile's in the epilogue
                tiles = -(-K // int(m.name.split("BLOCK_K = ")[1].rstrip(")")))
                assert tiles == 2 and names == TWO_TILES_ALIKE, (m.name, first.name)


def test_the_probe_rows_are_what_their_comment_says():
    """Every row but one keeps its amax at k = K - 1 (in the last, partial K tile for every BLOCK_K; the one at k = 0:
    a first pass from k = 1 misses it, a mutant that survived without it), each midpoint row's
    quotients x / sx lie one unit in the last place above an e4m3 midpoint, and every value is exact in fp16 and
    bf16."""
    for K in (332, 1100):
        assert all(K % bk for bk in fp8_fused.BLOCK_KS)
        x, _, _ = fp8.probe_problem(16, K, torch.bfloat16, "cpu")
        xf = x.float()
        amax = xf.abs().amax(dim=1)
        nonzero = amax > 0
        last = nonzero.clone()
        last[fp8_probes.FIRST_AMAX_ROW] = False
        assert torch.equal(xf[last, K - 1].abs(), amax[last]) and int((~nonzero).sum()) == 1
        r = fp8_probes.FIRST_AMAX_ROW
        assert xf[r, 0].abs() == amax[r] and (xf[r, 1:].abs() < amax[r]).all()
        assert torch.equal(x.half().float(), xf)
        s = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
        midpoint_rows = 0
        for r, (row_amax, _) in enumerate(fp8_probes.PROBE_ROWS):
            if row_amax and math.log2(abs(row_amax) / 31).is_integer():  # a midpoint row: amax 31 · 2^e
                midpoint_rows += 1
                v = xf[r] / s[r]
                for i in range(8):
                    mid = 336.0 * 2.0**-i
                    at = (v.abs() - mid).abs() < mid * 2.0**-20
                    assert at.any() and bool((v.abs()[at] > mid).all())
        assert midpoint_rows == 8
    # a sample of the search behind them: for amax = 124 all four reciprocal forms give the other code
    a = torch.tensor(124.0)
    xs = a * 0.75 * 2.0 ** -torch.arange(8.0)
    s = a / 448
    ref = fp8.saturate(xs / s)
    for v in (xs * (448 / a), xs * (1 / s), (xs * 448) / a, xs / (a * torch.tensor(1 / 448))):
        assert (fp8.saturate(v).view(torch.uint8) != ref.view(torch.uint8)).all()


# ---------------------------------------------------------------------------------------------------------
# The check: the solution passes, each mistake fails and is named


@pytest.fixture(scope="module")
def fp8_solution(env):
    from qmatmul import course

    return course.load_notebook_code("fp8")


def test_solution_passes(fp8_solution):
    for seed in range(2):
        fp8.check_decode_fused(fp8_solution.fp8_decode_fused, seed=seed)
        fp8.check_decode_fused(fp8_solution.fp8_decode_fused, hidden=True, seed=seed)


def test_solution_equals_quantize_then_decode(fp8_solution):
    """The spec: y == fp8_decode(*quantize_fp8(x, (1, K)), wq, sw), bit for bit, on both paths."""
    x, wq, sw = fp8.random_fused_problem(7, 70, 333, torch.float16, "cpu", checks.generator(3), zero_row=2)
    for path in (True, False):
        with fp8.use_path(path):
            y = fp8_solution.fp8_decode_fused(x, wq, sw)
            two = fp8_solution.fp8_decode(*fp8_solution.quantize_fp8(x, (1, x.shape[1])), wq, sw)
        assert torch.equal(y, two)


def _variant(name: str, source: str):
    from qmatmul import course

    return course.load_notebook_code("fp8", {"ex6_decode_fused": source}, name=f"fused_{name}")


def _solution_source() -> str:
    from qmatmul import course

    return course.solution_source("ex6_decode_fused", "fp8")


_BODY_START = """    pid_n = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    amax = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0)
"""
_BODY_END = """    sw = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=0.0)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             (acc * sw[None, :]).to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
"""
ONE_LOOP = {  # kernels with one loop over K: the scale of a tile, not of the row
    "amax taken as the loop goes": """        amax = tl.maximum(amax, tl.max(tl.abs(x), axis=1))
        sx = tl.where(amax > 0, tl.div_rn(amax, 448.0), 1.0)
        xq = fp8.e4m3_bits(tl.div_rn(x, sx[:, None]))
        acc = tl.dot(e4m3_to_fp16(xq), e4m3_to_fp16(w), acc)
    acc = acc * sx[:, None]
""",
    "amax of each K tile on its own (BLOCK_K": """        t = tl.max(tl.abs(x), axis=1)
        sx = tl.where(t > 0, tl.div_rn(t, 448.0), 1.0)
        xq = fp8.e4m3_bits(tl.div_rn(x, sx[:, None]))
        acc += tl.dot(e4m3_to_fp16(xq), e4m3_to_fp16(w)) * sx[:, None]
""",
    "the last tile's in the epilogue": """        t = tl.max(tl.abs(x), axis=1)
        sx = tl.where(t > 0, tl.div_rn(t, 448.0), 1.0)
        xq = fp8.e4m3_bits(tl.div_rn(x, sx[:, None]))
        acc = tl.dot(e4m3_to_fp16(xq), e4m3_to_fp16(w), acc)
    acc = acc * sx[:, None]
""",
}
_TRUNCATING_ENCODER = """@triton.jit
def e4m3_truncated(v):
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    a = tl.minimum(bits & 0x7FFFFFFF, 0x43E00000)
    normal = (a >> 20) - (120 << 3)
    sub = (a.to(tl.float32, bitcast=True) * 512.0).to(tl.int32)
    return (tl.where(a < 0x3C800000, sub, normal) | sign).to(tl.uint8)


"""
SOLUTION_CHANGES = {  # a learner's kernel -> (the mistake it is named as, solution snippet, the learner's)
    "first tile": ("amax of the first K tile only", "amax = tl.maximum(amax, tl.max(tl.abs(x), axis=1))",
                   "amax = tl.where(k0 == 0, tl.max(tl.abs(x), axis=1), amax)"),
    "x * (1 / sx)": (fp8_fused.RECIPROCAL, "tl.div_rn(x, sx[:, None])", "x * (1.0 / sx[:, None])"),
    "x * (448 / amax)": (fp8_fused.RECIPROCAL, "tl.div_rn(x, sx[:, None])",
                         "x * tl.where(amax > 0, 448.0 / amax, 1.0)[:, None]"),
    "x * (448 / amax), zero rows unguarded": (fp8_fused.ZERO_ROW[0], "tl.div_rn(x, sx[:, None])",
                                              "x * (448.0 / amax)[:, None]"),
    "interpreter cast": ("cast with .to(tl.float8e4nv) in the interpreter. Use fp8.e4m3_bits",
                         "fp8.e4m3_bits(tl.div_rn(x, sx[:, None]))",
                         "tl.div_rn(x, sx[:, None]).to(tl.float8e4nv).to(tl.uint8, bitcast=True)"),
    "no sx": ("activation scale missing in the epilogue", "(acc * sx[:, None] * sw[None, :])", "(acc * sw[None, :])"),
    "per tensor": ("one scale for all the rows", "    sx = tl.where(amax > 0,", "    amax = tl.zeros((BLOCK_M,), "
                   "dtype=tl.float32) + tl.max(amax, axis=0)\n    sx = tl.where(amax > 0,"),
    "max(x)": ("max(x) instead of max |x|", "tl.max(tl.abs(x), axis=1)", "tl.max(x, axis=1)"),
    "no zero guard": (fp8_fused.ZERO_ROW[0], "tl.where(amax > 0, tl.div_rn(amax, 448.0), 1.0)",
                      "tl.div_rn(amax, 448.0)"),
}  # fmt: skip


def _mistaken_sources() -> dict[str, tuple[str, str]]:
    """A learner's kernel -> (the mistake it is named as, its cell's source)."""
    src = _solution_source()
    bodies = {name: (name, _BODY_START + loop + _BODY_END) for name, loop in ONE_LOOP.items()}
    out = mistaken_sources(src, SOLUTION_CHANGES, bodies)
    out["truncated"] = ("rounded toward zero (truncated)",
                        _TRUNCATING_ENCODER + src.replace("fp8.e4m3_bits(", "e4m3_truncated("))  # fmt: skip
    return out


MISTAKES = _mistaken_sources()


@pytest.mark.parametrize("kernel", MISTAKES)
def test_each_known_mistake_fails_every_visible_run_and_is_named(kernel):
    name, source = MISTAKES[kernel]
    if "interpreter" in name and HAS_GPU:
        pytest.skip("a GPU's cast is right")
    fails_every_visible_run_and_is_named(fp8.check_decode_fused, _variant("m", source).fp8_decode_fused, name)


def test_the_reciprocals_pass_the_random_problems_and_only_the_probes_catch_them():
    """x · (1 / sx) moves a code only next to a midpoint: the random problems pass it; the probes fail it on every
    run, visible and hidden (why the probes exist)."""
    module = _variant("recip", MISTAKES["x * (1 / sx)"][1])
    with pytest.raises(CheckFailed, match="the quantization probe") as exc:
        fp8.check_decode_fused(module.fp8_decode_fused, hidden=True, seed=3)
    assert "differ from the reference bit for bit" in str(exc.value) or "elements" in str(exc.value)


def test_unmasked_rows_are_caught(fp8_solution):
    src = _solution_source()
    old = "        mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),\n    )\n    ### END SOLUTION"
    module = _variant(
        "rows", src.replace(old, "        mask=(offs_n[None, :] < N),\n    )\n    ### END SOLUTION")
    )
    with pytest.raises(CheckFailed, match="reached rows m = 5..15"):
        fp8.check_decode_fused(module.fp8_decode_fused, seed=0)


def test_a_wrapper_that_quantizes_with_pytorch_earns_nothing():
    src = _solution_source() + (
        "\n\ndef fp8_decode_fused(x, wq, sw, out=None):\n"
        "    return fp8_decode(*quantize_fp8(x, (1, x.shape[1])), wq, sw, out=out)\n"
    )
    module = _variant("two_steps", src)
    with pytest.raises(
        CheckFailed,
        match="computed with PyTorch outside its kernel .*quantize_fp8 does.*one launch per Linear",
    ):
        fp8.check_decode_fused(module.fp8_decode_fused, seed=0)


# A quantizing kernel of the learner's own (the tests of more than one launch)
_QUANTIZE_ROWS = """
@triton.jit
def quantize_rows_kernel(x_ptr, q_ptr, s_ptr, K, stride_xm, stride_xk, BLOCK_K: tl.constexpr):
    m = tl.program_id(0)
    offs = tl.arange(0, BLOCK_K)
    amax = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + m * stride_xm + (k0 + offs) * stride_xk, mask=k0 + offs < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    a = tl.max(amax, axis=0)
    s = tl.where(a > 0, tl.div_rn(a, 448.0), 1.0)
    tl.store(s_ptr + m, s)
    for k0 in range(0, K, BLOCK_K):
        x = tl.load(x_ptr + m * stride_xm + (k0 + offs) * stride_xk, mask=k0 + offs < K, other=0.0).to(tl.float32)
        tl.store(q_ptr + m * K + k0 + offs, fp8.e4m3_bits(tl.div_rn(x, s)), mask=k0 + offs < K)

"""


def test_two_kernel_launches_earn_nothing():
    """A quantizing kernel of the learner's own, then exercise 4's decode: right numbers, two launches."""
    src = (
        _solution_source()
        + """

{QUANTIZE_ROWS}

def fp8_decode_fused(x, wq, sw, out=None):
    M, K = x.shape
    q = torch.empty((M, K), dtype=torch.uint8, device=x.device)
    s = torch.empty((M,), dtype=torch.float32, device=x.device)
    quantize_rows_kernel[(M,)](x, q, s, K, x.stride(0), x.stride(1), BLOCK_K=128)
    return fp8_decode(q.view(torch.float8_e4m3fn), s, wq, sw, out=out)
"""
    )
    module = _variant("two_launches", src.replace("{QUANTIZE_ROWS}", _QUANTIZE_ROWS))
    x, wq, sw = fp8.random_fused_problem(5, 40, 200, torch.float16, "cpu", checks.generator(0))
    assert torch.equal(module.fp8_decode_fused(x, wq, sw), fp8.fused_reference(x, wq, sw).half())
    with pytest.raises(CheckFailed, match="launched 2 kernels .*`quantize_rows_kernel`, `fp8_decode_kernel`"):
        fp8.check_decode_fused(module.fp8_decode_fused, seed=0)


def test_one_kernel_launched_twice_earns_nothing():
    """One kernel, two launches told apart by a flag in memory (the first pass stores the scales, the second decodes):
    both launches have arguments of the same types, which the launch record once listed as one launch, and this
    earned the cell's points. Every launch is counted now (demo student fp8/fused_launched_twice: the same through
    the trusted grader)."""
    src = (
        _solution_source()
        + """

@triton.jit
def two_pass_kernel(x_ptr, s_ptr, w_ptr, sw_ptr, y_ptr, M, N, K, sxm, sxk, swn, swk, sym, syn, pass_ptr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, FP8_DOT: tl.constexpr):
    pid_n = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    if tl.load(pass_ptr) == 0:
        amax = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + offs_k
            x = tl.load(x_ptr + offs_m[:, None] * sxm + k[None, :] * sxk,
                        mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(tl.abs(x), axis=1))
        tl.store(s_ptr + offs_m, tl.where(amax > 0, tl.div_rn(amax, 448.0), 1.0), mask=offs_m < M)
    else:
        sx = tl.load(s_ptr + offs_m, mask=offs_m < M, other=1.0)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + offs_k
            x = tl.load(x_ptr + offs_m[:, None] * sxm + k[None, :] * sxk,
                        mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0).to(tl.float32)
            xq = fp8.e4m3_bits(tl.div_rn(x, sx[:, None]))
            w = tl.load(w_ptr + offs_n[None, :] * swn + k[:, None] * swk,
                        mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0)
            if FP8_DOT:
                acc = tl.dot(xq.to(tl.float8e4nv, bitcast=True), w.to(tl.float8e4nv, bitcast=True), acc)
            else:
                acc = tl.dot(e4m3_to_fp16(xq), e4m3_to_fp16(w), acc)
        sw = tl.load(sw_ptr + offs_n, mask=offs_n < N, other=0.0)
        tl.store(y_ptr + offs_m[:, None] * sym + offs_n[None, :] * syn,
                 (acc * sx[:, None] * sw[None, :]).to(y_ptr.dtype.element_ty),
                 mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def fp8_decode_fused(x, wq, sw, out=None):
    M, N, K, sw, out = fp8.prepare_fused(x, wq, sw, out)
    cfg = fp8.fused_config(M, N, K, x.device.type)
    w8, s = wq.view(torch.uint8), torch.empty(16, dtype=torch.float32, device=x.device)
    for flag in (torch.zeros(1, dtype=torch.int32, device=x.device), torch.ones(1, dtype=torch.int32, device=x.device)):
        two_pass_kernel[(triton.cdiv(N, cfg["BLOCK_N"]),)](
            x, s, w8, sw, out, M, N, K, x.stride(0), x.stride(1), w8.stride(0), w8.stride(1), out.stride(0),
            out.stride(1), flag, **cfg)
    return out
"""
    )
    module = _variant("two_passes", src)
    x, wq, sw = fp8.random_fused_problem(5, 40, 200, torch.float16, "cpu", checks.generator(0))
    assert torch.equal(module.fp8_decode_fused(x, wq, sw), fp8.fused_reference(x, wq, sw).half())
    with pytest.raises(CheckFailed, match="launched 2 kernels .*`two_pass_kernel`"):
        fp8.check_decode_fused(module.fp8_decode_fused, seed=0)


def test_a_warm_up_on_a_shapes_first_call_costs_nothing():
    """An autotuner times its configurations on the first call of a shape (several launches), then launches once:
    the first call's extra launches are no second pass. (The interpreter cannot run triton.autotune: a wrapper that
    times two tile sizes itself on a shape's first call stands for it.)"""
    src = _solution_source().replace(
        "    w8 = wq.view(torch.uint8)\n",
        "    w8 = wq.view(torch.uint8)\n"
        "    if (M, N, K) not in SEEN:  # time another tile once per shape, as triton.autotune would\n"
        "        SEEN.add((M, N, K))\n"
        "        fp8_decode_fused_kernel[(triton.cdiv(N, cfg['BLOCK_N']),)](\n"
        "            x, w8, sw, out, M, N, K, x.stride(0), x.stride(1), w8.stride(0), w8.stride(1), out.stride(0),\n"
        "            out.stride(1), **{**cfg, 'BLOCK_K': cfg['BLOCK_K'] // 2})\n",
    )
    module = _variant("warmed", "SEEN = set()\n\n" + src)
    fp8.check_decode_fused(module.fp8_decode_fused, seed=0)
    fp8.check_decode_fused(module.fp8_decode_fused, hidden=True, seed=1)


def test_scales_kept_from_a_shapes_first_call_earn_nothing():
    """Two kernels on a shape's first call, the quantized x kept and decoded alone after: one launch on the call
    after, with the first x's codes. The second call is on another x, and its answer is wrong."""
    src = (
        _solution_source()
        + """

KEPT = {}


{QUANTIZE_ROWS}

def fp8_decode_fused(x, wq, sw, out=None):
    M, K = x.shape
    if (M, K) not in KEPT:
        q = torch.empty((M, K), dtype=torch.uint8, device=x.device)
        s = torch.empty((M,), dtype=torch.float32, device=x.device)
        quantize_rows_kernel[(M,)](x, q, s, K, x.stride(0), x.stride(1), BLOCK_K=128)
        KEPT[(M, K)] = (q, s)
    q, s = KEPT[(M, K)]
    return fp8_decode(q.view(torch.float8_e4m3fn), s, wq, sw, out=out)
"""
    )
    module = _variant("kept", src.replace("{QUANTIZE_ROWS}", _QUANTIZE_ROWS))
    with pytest.raises(CheckFailed, match="a second call on this shape, with another x, after a first call that "
                                          "launched 2 kernels"):  # fmt: skip
        fp8.check_decode_fused(module.fp8_decode_fused, seed=0)


def test_plain_division_passes_in_the_interpreter():
    """The interpreter divides exactly with `/` too: the CPU cannot tell it from tl.div_rn (the text says so)."""
    if HAS_GPU:
        pytest.skip("on a GPU `/` is approximate")
    module = _variant("slash", _solution_source().replace("tl.div_rn(x, sx[:, None])", "x / sx[:, None]"))
    fp8.check_decode_fused(module.fp8_decode_fused, seed=0)


@pytest.mark.parametrize(
    "args,match",
    [
        (lambda x, wq, sw: (x.float(), wq, sw), "x must be float16 or bfloat16"),
        (lambda x, wq, sw: (x, wq.view(torch.uint8), sw), "wq must be a 2-D float8_e4m3fn"),
        (lambda x, wq, sw: (x[:, :-1], wq, sw), "the K's differ"),
        (lambda x, wq, sw: (x, wq, sw.half()), "sw must be float32"),
        (lambda x, wq, sw: (torch.cat([x] * 4), wq, sw), "at most 16 rows"),
    ],
)
def test_bad_input_gets_a_clear_message(fp8_solution, args, match):
    x, wq, sw = fp8.random_fused_problem(5, 32, 48, torch.float16, "cpu", checks.generator(0))
    with pytest.raises((TypeError, ValueError), match=match):
        fp8_solution.fp8_decode_fused(*args(x, wq, sw))


def test_the_t4_tiles_run_the_solution_correctly(fp8_solution, monkeypatch):
    """The decode launch a T4 takes (BLOCK_K = 32, 128 columns, the portable path), run through the visible check:
    nine K tiles and more, the probes' amax still in the last."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    real, used = fp8.fused_config, []

    def as_on_a_t4(M, N, K, device):
        used.append(real(M, N, K, "cuda"))
        return used[-1]

    monkeypatch.setattr(fp8, "fused_config", as_on_a_t4)
    fp8.check_decode_fused(fp8_solution.fp8_decode_fused, seed=0)
    assert used and all(c["BLOCK_K"] == 32 and not c["FP8_DOT"] for c in used)
