"""Chapter MXFP4, the trusted grading: the timed shape and the bandwidth bar, the test inputs (random,
adversarial and log2 weights, the problems), the known mistakes and the checks of each exercise (the quantizer and
packer, the tiled and decode kernels, the decode's bandwidth) and of the tl.dot_scaled bonus, and the timed weights
(qmatmul/checks/harness.py). NVFP4's checks reuse its hidden weights and shapes (qmatmul/checks/nvfp4.py)."""

from __future__ import annotations

import functools
import os

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, Mistake, common
from qmatmul.formats import fp4
from qmatmul.formats.mxfp4 import (
    BLOCK,
    EMAX_E2M1,
    bytes_moved,
    dequantize,
    quantize,
    quantize_codes,
    reference,
    shared_exponent,
)
from qmatmul.teaching import roofline_model

BANDWIDTH_SHAPE = common.BANDWIDTH_SHAPE
BANDWIDTH_MS = common.BANDWIDTH_MS
# Fraction of the copy bandwidth measured in the same process (graded on the CUDA-graph figure where the calls can
# be captured, else the eager one: qmatmul/checks/harness.py). Decoding, not memory, bounds a plain Triton kernel for this
# format on the H200: the bar is half what the solution reaches there, rounded down, and far above the naive path
# (the recorded figures: docs/bench-h200.json, quoted in course.md; docs/perf-notes.md says why half).
BANDWIDTH_THRESHOLD = 0.12


# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_weight(N: int, K: int, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Weights whose rows and blocks have distinct magnitudes (so the blocks get distinct scales)."""
    return fp4.block_weight(N, K, BLOCK, g, -1.5, dtype)


def adversarial_weight(N: int, K: int, g: torch.Generator) -> torch.Tensor:
    """Every corner of the rounding and scale rules, one block per case (N >= 4, K >= 8 blocks)."""
    w = random_weight(N, K, g)
    X = 2.0 ** int(torch.randint(-8, -2, (1,), generator=g))
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 4.0]) * X  # amax 5X: floor -> X
    w[0, 0:32] = torch.cat([ties, -ties, ties.flip(0), -ties.flip(0)])
    w[0, 32:64] = 0  # an all-zero block
    w[1, 0:32] = torch.randn(32, generator=g) * 1e-41  # a subnormal-sized block
    w[1, 32:64] = torch.randn(32, generator=g).clamp(-1, 1) * 4 * X
    w[1, 33] = 4 * X  # amax exactly a power of two
    w[2, 0:32] = torch.linspace(-7.9, 7.9, 32) * X  # values in (6, 8)·X clip to ±6
    w[2, 5] = 7.99 * X
    w[3, 0:32] = -(torch.rand(32, generator=g) * 0.2 + 0.01) * X  # negative values that round to -0
    w[3, 0] = -X * 4.5  # a negative amax
    return w


def log2_weight(N: int = 2, K: int = 256) -> torch.Tensor:
    """Deterministic blocks whose amax is one float32 ulp below a power of two, 2^k for k = -8, -3, 3, ...: there
    float32 `torch.log2(amax)` rounds up to k, and floor(log2(amax)) = k - 1 is lost. The notebook warns of it."""
    w = torch.linspace(-0.9, 0.9, BLOCK).repeat(N, K // BLOCK)
    for i in range(N * (K // BLOCK)):
        n, b = divmod(i, K // BLOCK)
        p = torch.tensor(2.0 ** (-8 + 5 * (i % 4) + (i % 3)))
        w[n, BLOCK * b : BLOCK * (b + 1)] *= p
        w[n, BLOCK * b + (i % BLOCK)] = torch.nextafter(p, torch.zeros(()))  # the block's amax
    return w


def random_problem(M: int, N: int, K: int, dtype, device: str, g: torch.Generator, strided: bool = False):
    """x [M, K] (a strided view when `strided`), packed, scales from the reference quantizer."""
    return common.problem((M, K), quantize(random_weight(N, K, g)), dtype, device, g, strided)


# ----------------------------------------------------------------------------------------------------------
# Checks for exercise 1: the quantizer and packer


def _quantizer_inputs(g: torch.Generator, hidden: bool):
    if not hidden:
        return [random_weight(4, 64, g), adversarial_weight(8, 256, g), log2_weight()]
    cases = hidden_weights(g, random_weight, adversarial_weight, block=BLOCK, k_blocks=(8, 12))
    # A long row: more than 31 blocks, where a block count computed with a wrong divisor stops coinciding.
    cases.append(random_weight(3, BLOCK * int(torch.randint(32, 48, (1,), generator=g)), g))
    return cases


def hidden_weights(g: torch.Generator, random_weight, adversarial_weight, *, block: int, k_blocks) -> list:
    """The hidden quantizer inputs of a block-scaled format (MXFP4 and NVFP4): an adversarial weight in float32,
    random ones in float16 and bfloat16, each N x K with N in 5..39 and K / block in range(*k_blocks)."""
    cases = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        N = int(torch.randint(5, 40, (1,), generator=g))
        K = block * int(torch.randint(*k_blocks, (1,), generator=g))
        cases.append(
            adversarial_weight(N, K, g).to(dtype) if dtype == torch.float32 else random_weight(N, K, g, dtype)
        )
    return cases


def no_saturation_codes(w: torch.Tensor) -> torch.Tensor:
    """Codes of a quantizer that rounds |v| > 6 on up, past E2M1's top (6 -> "8" = 0b1000), and ORs the sign."""
    N, K = w.shape
    blocks = w.float().reshape(N, K // BLOCK, BLOCK)
    e = shared_exponent(blocks.abs().amax(dim=2))
    v = torch.ldexp(blocks, -e[:, :, None].float())
    mag = fp4.e2m1_encode_magnitude(v.abs()).int() + (v.abs() >= 7).int()
    return ((mag | (torch.signbit(v).int() << 3)) & 0xF).to(torch.uint8).reshape(N, K)


def _float_log2_codes(w: torch.Tensor):
    """Codes and scales of a quantizer that takes floor(torch.log2(amax)) in float32 (the notebook's pitfall)."""
    N, K = w.shape
    blocks = w.float().reshape(N, K // BLOCK, BLOCK)
    amax = blocks.abs().amax(dim=2)
    e = torch.floor(torch.log2(amax)).nan_to_num(neginf=-(1 << 20)).to(torch.int32) - EMAX_E2M1
    e = torch.where(amax > 0, e, torch.full_like(e, -fp4.E8M0_BIAS)).clamp(-fp4.E8M0_BIAS, fp4.E8M0_BIAS)
    v = torch.ldexp(blocks, -e[:, :, None].float())
    return fp4.e2m1_encode(v).reshape(N, K), fp4.e8m0_from_exponent(e)


def quantizer_mistakes(w: torch.Tensor):
    """(name, explanation, packed, scales) of the known wrong quantizers."""
    codes, scales = quantize_codes(w)
    packed = fp4.pack_nibbles(codes)
    ceil_codes, ceil_scales = quantize_codes(w, "ceil")
    log2_codes, log2_scales = _float_log2_codes(w)
    mistakes = [
        ("nibble order", "Element 2i goes in the LOW nibble and element 2i+1 in the high nibble: "
         "packed = codes[:, 0::2] | (codes[:, 1::2] << 4).", fp4.swap_nibbles(packed), scales),
        ("E8M0 bias off by one (128)", "The E8M0 code of 2^e is e + 127 (bias 127, like fp32's exponent).",
         packed, (scales.int() + 1).clamp(0, 254).to(torch.uint8)),
        ("E8M0 bias off by one (126)", "The E8M0 code of 2^e is e + 127 (bias 127, like fp32's exponent).",
         packed, (scales.int() - 1).clamp(0, 254).to(torch.uint8)),
        ("ceil instead of floor", "The OCP spec takes X = 2^(floor(log2(amax)) - 2): the largest power of two "
         "of the block minus emax = 2, not ceil(log2(amax / 6)). Values in (6, 8)·X then saturate to ±6.",
         fp4.pack_nibbles(ceil_codes), ceil_scales),
        ("missing saturation", "Values of |w / X| above 6 (up to 8 with the floor rule) must saturate to code "
         "0b0111 (±6); rounding them up overflows into the sign bit.",
         fp4.pack_nibbles(no_saturation_codes(w)), scales),
        ("sign bit lost", "Bit 3 of each code is the sign of w: code = (w < 0) << 3 | magnitude code.",
         fp4.pack_nibbles(codes & 0x7), scales),
        ("floor(torch.log2(amax)) rounded up", "Just below a power of two, float32 log2(amax) rounds up to the "
         "integer (log2(0.99999994 · 8) gives 3.0), so floor() is one too large. Take the exponent from the bits: "
         "torch.frexp(amax) gives amax = m · 2^e with 0.5 <= m < 1, exactly, so floor(log2(amax)) = e - 1.",
         fp4.pack_nibbles(log2_codes), log2_scales),
    ]  # fmt: skip
    # A variant equal to the reference on this input (no amax just below a power of two) names nothing.
    return [m for m in mistakes if not (torch.equal(m[2], packed) and torch.equal(m[3], scales))]


def _named_quantizer_mistake(w, packed, scales) -> str | None:
    for name, explanation, mp, ms in quantizer_mistakes(w):
        if torch.equal(packed, mp) and torch.equal(scales, ms):
            return f"This matches a known mistake: {name}. {explanation}"
    for name, explanation, _mp, ms in quantizer_mistakes(w):
        if torch.equal(scales, ms) and name.startswith(("E8M0", "ceil")):
            return f"This matches a known mistake: {name}. {explanation}"
    for name, explanation, mp, _ms in quantizer_mistakes(w):
        if torch.equal(packed, mp) and not name.startswith("E8M0"):
            return f"This matches a known mistake: {name}. {explanation}"
    return None


def _code_diff_hint(w, codes, codes_ref, scales_ref) -> str:
    """Where the element codes differ, and what those elements have in common."""
    N, K = w.shape
    bad = codes != codes_ref
    v = torch.ldexp(w.float(), -(scales_ref.int() - 127).repeat_interleave(BLOCK, 1).float())
    i = bad.nonzero()[0].tolist()
    r = float(v[i[0], i[1]])
    text = (
        f"first at [n={i[0]}, k={i[1]}]: w / X = {r:.6g}, got code {int(codes[i[0], i[1]]):04b} "
        f"({float(fp4.e2m1_decode(codes[i[0], i[1]])):g}), expected {int(codes_ref[i[0], i[1]]):04b} "
        f"({float(fp4.e2m1_decode(codes_ref[i[0], i[1]])):g})."
    )
    a = v.abs()[bad]
    ties = torch.tensor([m for m, _ in fp4.E2M1_MIDPOINTS])
    if bool((a[:, None] == ties[None, :]).any(dim=1).all()):
        text += (" Every difference is an exact tie between two E2M1 values: round half to the EVEN code "
                 "(0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4).")  # fmt: skip
    elif bool((a > 6).all()):
        text += " Every difference has |w / X| > 6: those must saturate to ±6 (code 0b0111 with its sign)."
    elif bool(((codes ^ codes_ref)[bad] == 8).all()):
        text += " Only the sign bit (bit 3) differs: it is the sign of w, also for values that round to 0."
    return text


def check_quantizer(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1: packed codes and E8M0 scales must equal the reference bit for bit."""
    seed, g, _ = common.cell(seed)
    what = "quantize_mxfp4"
    for w in _quantizer_inputs(g, hidden):
        N, K = w.shape
        ctx = f" (w: {str(w.dtype).replace('torch.', '')} [{N}, {K}])"
        packed, scales = common.call_quantizer(fn, w, what=what, returns=("packed", "scales"), ctx=ctx)
        if tuple(packed.shape) == (N, K):
            raise CheckFailed(
                f"packed has shape [N, K] = [{N}, {K}]: pack two codes per byte, shape [N, K/2] = [{N}, {K // 2}].{ctx}"
            )
        if packed.dtype != torch.uint8 or tuple(packed.shape) != (N, K // 2):
            raise CheckFailed(
                f"packed must be uint8 of shape [{N}, {K // 2}], got {packed.dtype} {list(packed.shape)}{ctx}"
            )
        if scales.dtype != torch.uint8 or tuple(scales.shape) != (N, K // BLOCK):
            hint = (
                " Return the E8M0 codes (e + 127) as uint8, not the float scales."
                if scales.is_floating_point()
                else ""
            )
            raise CheckFailed(
                f"scales must be uint8 E8M0 codes of shape [{N}, {K // BLOCK}] (one per block of 32 along K), got "
                f"{scales.dtype} {list(scales.shape)}.{hint}{ctx}"
            )
        packed_ref, scales_ref = quantize(w)
        if torch.equal(packed, packed_ref) and torch.equal(scales, scales_ref):
            continue
        named = _named_quantizer_mistake(w, packed, scales)
        lines = [named] if named else []
        if not torch.equal(scales, scales_ref):
            bad = scales != scales_ref
            i, b = bad.nonzero()[0].tolist()
            amax = float(w.float()[i, b * BLOCK : (b + 1) * BLOCK].abs().max())
            lines.insert(
                0, f"scales differ from the reference in {int(bad.sum())} of {bad.numel()} blocks{ctx}"
            )
            lines.append(
                f"First at [n={i}, block={b}]: amax = {amax:.6g}, got code {int(scales[i, b])}, expected "
                f"{int(scales_ref[i, b])} (X = 2^{int(scales_ref[i, b]) - 127}). Blocks differ "
                f"{checks.where_2d(bad, ('rows', 'blocks'))}."
            )
        else:
            codes, codes_ref = fp4.unpack_nibbles(packed), fp4.unpack_nibbles(packed_ref)
            bad = codes != codes_ref
            lines.insert(
                0, f"packed differs from the reference in {int(bad.sum())} of {bad.numel()} codes{ctx}"
            )
            if not named:
                lines.append(_code_diff_hint(w, codes, codes_ref, scales_ref))
            lines.append(f"Differences lie {checks.where_2d(bad, ('rows', 'columns'))}.")
        raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


# ----------------------------------------------------------------------------------------------------------
# Checks for exercises 2 and 3: the kernels


def kernel_mistakes(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> list[Mistake]:
    xf = x.float().cpu()
    packed, scales = packed.cpu(), scales.cpu()
    M, K = xf.shape
    w = dequantize(packed, scales)
    scale = fp4.e8m0_decode(scales).repeat_interleave(BLOCK, 1)
    codes = fp4.unpack_nibbles(packed)
    out = [
        Mistake("nibble order", "Element 2i is the LOW nibble (p & 0xF) and element 2i+1 the high one "
                "(p >> 4): pair the low nibbles with x's even columns.", xf @ dequantize(fp4.swap_nibbles(packed), scales).T),
        Mistake("E8M0 bias off by one", "The E8M0 code e stands for 2^(e - 127): the float with exponent "
                "field e, i.e. (e << 23) bitcast to float32.", xf @ (2 * w).T),
        Mistake("E8M0 bias off by one", "The E8M0 code e stands for 2^(e - 127): the float with exponent "
                "field e, i.e. (e << 23) bitcast to float32.", xf @ (0.5 * w).T),
        Mistake("block scale missing", "Each E2M1 value must be multiplied by its block's E8M0 scale.",
                xf @ fp4.e2m1_decode(codes).T),
        Mistake("sign bit lost", "Bit 3 of each code is the sign: codes 8..15 are the negative values.",
                xf @ (fp4.e2m1_decode(codes & 7) * scale).T),
        Mistake("block index off", "The scale of element k is scales[n, k // 32]; a byte at offset kb "
                "holds elements 2kb and 2kb+1, so its block is kb // 16.",
                xf @ (fp4.e2m1_decode(codes) * fp4.e8m0_decode(scales).repeat_interleave(2 * BLOCK, 1)[:, :K]
                      if K >= 2 * BLOCK else w).T),
    ]  # fmt: skip
    for bk in (64, 128, 256, 512):
        kt = (K // bk) * bk
        if 0 < kt < K:
            out.append(Mistake(f"last partial K block dropped (BLOCK_K = {bk})", "The loop or the K mask skips "
                               "the final, partial block of K: loop over range(0, K, BLOCK_K) and mask k < K.",
                               xf[:, :kt] @ w[:, :kt].T))  # fmt: skip
    return out


# common.check_kernel(fn, what, cases, **kw) on this chapter's problems, reference and known mistakes
check_kernel = functools.partial(
    common.check_kernel, names=("x", "packed", "scales"), problem=random_problem,
    reference=reference, mistakes=kernel_mistakes,
)  # fmt: skip


def prefill_shapes(g, device: str, hidden: bool, *, block: int, k_blocks, tail) -> list:
    """The prefill cases of a block-scaled format (MXFP4 and NVFP4): two visible shapes, or two ragged hidden ones
    with K a multiple of `block` (k_blocks: lower bound, GPU and CPU upper bounds of K / block), then `tail`."""
    if not hidden:
        return [(32, 64, 64), (50, 70, 96)]
    big = device == "cuda"
    shapes = []
    for _ in range(2):
        M = int(torch.randint(17, 300 if big else 100, (1,), generator=g))
        N = int(torch.randint(33, 700 if big else 150, (1,), generator=g))
        K = block * int(torch.randint(k_blocks[0], k_blocks[1] if big else k_blocks[2], (1,), generator=g))
        # The audit flags any float tensor shaped like the weight, and the interpreter copies x [M, K] and
        # out [M, N] inside the call: keep M apart from N and K so no activation looks like a weight.
        M = M - 1 if M == K else M
        N = N + 1 if N == M else N
        shapes.append((M, N, K))
    return [*shapes, tail]


def decode_shapes(g, device: str, hidden: bool, *, block: int, visible, k_blocks, long_blocks) -> list:
    """The decode cases of a block-scaled format: `visible`, or M = 1, a random M < 16 and 16 on ragged N with K a
    multiple of `block` (k_blocks: lower bound, GPU and CPU upper bounds of K / block), and on the CPU one long row
    whose K / block lies in `long_blocks` (past 1024, where a wrong block divisor stops coinciding)."""
    if not hidden:
        return visible
    big = device == "cuda"
    shapes = [
        (M, int(torch.randint(33, 2000 if big else 200, (1,), generator=g)),
         block * int(torch.randint(k_blocks[0], k_blocks[1] if big else k_blocks[2], (1,), generator=g)))
        for M in (1, int(torch.randint(2, 16, (1,), generator=g)), 16)
    ]  # fmt: skip
    if not big:
        shapes.append((1, int(torch.randint(17, 48, (1,), generator=g)),
                       block * int(torch.randint(*long_blocks, (1,), generator=g))))  # fmt: skip
    return shapes


def check_prefill(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2: the tiled kernel on ragged shapes, poisoned output, strided views, fused."""
    seed, g, device = common.cell(seed)
    shapes = prefill_shapes(g, device, hidden, block=BLOCK, k_blocks=(2, 40, 8), tail=(1, 129, 160))
    check_kernel(fn, "mxfp4_matmul", shapes, g=g, hidden=hidden, seed=seed)


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3 (correctness): M = 1..16, ragged N, K a multiple of 32."""
    seed, g, device = common.cell(seed)
    shapes = decode_shapes(g, device, hidden, block=BLOCK, visible=[(1, 64, 128), (16, 96, 192)],
                           k_blocks=(2, 100, 9), long_blocks=(36, 48))  # fmt: skip
    check_kernel(fn, "mxfp4_decode", shapes, g=g, hidden=hidden, seed=seed)


def check_decode_bandwidth(fn, *, threshold: float = BANDWIDTH_THRESHOLD, seed: int | None = None) -> list:
    """Exercise 3 (performance): bandwidth over the bytes that must move, against the copy bandwidth."""
    return common.check_decode_bandwidth(
        fn, what="mxfp4_decode", module=__name__, shape=BANDWIDTH_SHAPE, Ms=BANDWIDTH_MS, threshold=threshold,
        seed=seed, nbytes=lambda M: bytes_moved(M, *BANDWIDTH_SHAPE),
        hint=f"The naive path moves {roofline_model.naive_factor('mxfp4', 1, *BANDWIDTH_SHAPE):.1f} times the bytes a fused "
        "kernel must (at M = 1 on the timed shape): load each packed tile once, "
        "decode it in registers, and keep the per-element work to a few integer operations.",
    )  # fmt: skip


def timing_weights(N: int, K: int, g: torch.Generator) -> tuple:
    """The timed weight (qmatmul/checks/harness.py): random e2m1 pairs and e8m0 scales near 2^-7."""
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=g.device, generator=g)
    scales = torch.randint(118, 123, (N, K // BLOCK), dtype=torch.uint8, device=g.device, generator=g)
    return packed, scales


timing_inputs = common.timing_activations  # the timed activations (qmatmul/checks/harness.py)


# ----------------------------------------------------------------------------------------------------------
# The bonus: tl.dot_scaled


def dot_scaled_status() -> tuple[bool, str]:
    """Can this triton run tl.dot_scaled with e2m1 weights here? (ok, why)."""
    import triton
    import triton.language as tl

    if not hasattr(tl, "dot_scaled"):
        return False, f"triton {triton.__version__} has no tl.dot_scaled"
    interp = os.environ.get("TRITON_INTERPRET") == "1"
    if interp:
        major, minor = (int(p) for p in triton.__version__.split(".")[:2])
        if (major, minor) < (3, 9):
            return False, f"triton {triton.__version__}'s interpreter has no tl.dot_scaled (3.9 has)"
        return True, f"triton {triton.__version__}'s interpreter emulates tl.dot_scaled in numpy"
    cap = torch.cuda.get_device_capability()
    if cap >= (8, 0):
        # Compiled for sm_80 to sm_120 on a CPU (tools/sass.py --fit, docs/gpu-fit.md): with bf16 activations every
        # one of them multiplies in bf16, Blackwell's fp4 tensor cores included.
        return True, (f"sm_{cap[0]}{cap[1]}: triton upcasts e2m1 to bf16 before the MMA (with bf16 activations it "
                      "does so on Blackwell too: docs/gpu-fit.md)")  # fmt: skip
    return False, f"sm_{cap[0]}{cap[1]}: tl.dot_scaled needs sm_80 or newer"


def check_dot_scaled(fn, *, seed: int | None = None) -> None:
    """The bonus: same checks as the prefill kernel, where tl.dot_scaled can run (else it says why)."""
    ok, why = dot_scaled_status()
    if not ok:
        return checks.not_measured(f"tl.dot_scaled cannot run here: {why}. Nothing to check.")
    seed, g, device = common.cell(seed)
    shapes = [(32, 64, 64), (50, 70, 96), (1, 129, 160)]
    check_kernel(fn, "mxfp4_matmul_dot_scaled", shapes, g=g, hidden=False, seed=seed,
                  dtypes=common.act_dtypes(device)[-1:], note=f"; {why}")  # fmt: skip
