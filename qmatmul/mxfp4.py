"""Chapter MXFP4: the notebook's scaffolding (validation, launch configurations), the block explorer and the
figures that compare the scale rules, test inputs, the known mistakes and the checks of each exercise and of the
tl.dot_scaled bonus, and the cells that predict and compare the paths.

The format itself (shared exponent, quantizer, dequantizer, reference, bytes moved) is qmatmul/formats/mxfp4.py
and its element codecs qmatmul/formats/fp4.py; the format's names are re-exported here, where the notebook reaches
them as `mxfp4.<name>`.
"""

from __future__ import annotations

import functools
import os

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, Mistake, common
from qmatmul.formats import fp4
from qmatmul.formats.mxfp4 import (  # noqa: F401 - the notebook's names
    BLOCK,
    EMAX_E2M1,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    dequantize,
    naive,
    quantize,
    quantize_codes,
    reference,
    shared_exponent,
)
from qmatmul.kernels import configs
from qmatmul.kernels.gemm import decoded_gemm  # noqa: F401 - the notebook's names
from qmatmul.scaffold import validation
from qmatmul.scaffold.validation import ACT_DTYPES  # noqa: F401 - the notebook's names
from qmatmul.teaching import compare, plots, recorded, roofline_model, widgets
from qmatmul.teaching.roofline_model import bytes_moved_dense, flops  # noqa: F401 - the notebook's names

BANDWIDTH_SHAPE = (28672, 8192)
BANDWIDTH_MS = (1, 16)
# Fraction of the copy bandwidth measured in the same process (graded on the CUDA-graph figure where the calls can
# be captured, else the eager one: qmatmul/checks/harness.py). Decoding, not memory, bounds a plain Triton kernel for this
# format on the H200: the bar is half what the solution reaches there, rounded down, and far above the naive path
# (the recorded figures: docs/bench-h200.json, quoted in course.md; docs/perf-notes.md says why half).
BANDWIDTH_THRESHOLD = 0.12
# The names of the course package the learner's graded code may use (grader/static.py, course_problems).
GIVEN = {
    "qmatmul.mxfp4": {
        "prepare",
        "prefill_config",
        "decoded_gemm",
        "decode_config",
        "divisible_k",
        "dot_scaled_config",
        "BLOCK",
    }
}


# ----------------------------------------------------------------------------------------------------------
# The scaffolding the notebook's wrappers use


def prepare(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, out: torch.Tensor | None = None):
    """Validate the inputs of an MXFP4 matmul with clear messages; allocate out if needed. Returns M, N, K, out."""
    M, N, K = validation.require_block_scaled(
        x, packed, scales, block=BLOCK, block_name="MX", codes="E8M0 codes"
    )
    return M, N, K, validation.placed(x, out, M, N, dict(packed=packed, scales=scales))


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the tiled kernel (BLOCK_K is a multiple of 32: whole MX blocks per step)."""
    if device != "cuda":
        return dict(configs.INTERPRETER_TILED)
    if configs.fma_dot(device):  # a T4: FMA tiles (qmatmul/kernels/configs.py)
        return dict(configs.FMA_TILED)
    big = M > 64
    if big and torch.cuda.get_device_capability() >= (9, 0):
        # Graph-timed on the H200 (docs/perf-notes.md): 12 % of cuBLAS at M = 2048 and 4096 against 7 % for
        # 128 x 128 x 64; Hopper's 227 KB of shared memory holds the three stages (an A100's 164 KB would not).
        return dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=3)
    return _prefill_tiles(M)


def _prefill_tiles(M: int) -> dict:
    big = M > 64
    return dict(
        BLOCK_M=128 if big else 64,
        BLOCK_N=128,
        BLOCK_K=64 if big else 128,
        num_warps=8 if big else 4,
        num_stages=3,
    )


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the decode kernel: all M rows (padded to 16) in one program, a strip of N."""
    if device != "cuda":
        return dict(configs.INTERPRETER_DECODE)
    if configs.fma_dot(device):
        # A T4: FMA tiles (qmatmul/kernels/configs.py) with two scale blocks a step (divisible_k); 32 columns keep 64 of K
        # free of spills on sm_75 (128 columns spilled 196 registers, tools/sass.py).
        return dict(configs.FMA_DECODE, BLOCK_N=32, BLOCK_K=configs.MIN_DECODE_BLOCK_K)
    # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01): with the tile read as it lies ([BLOCK_N, BLOCK_K/2]),
    # 32 columns x 512 of K, 4 warps, 3 stages reached 24-27 % of the copy bandwidth on all three shapes, M = 1 and
    # 16 (128 columns: 22 % on 28672 x 8192, 18 % on 8192 x 28672).
    return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=512, num_warps=4, num_stages=3)


def divisible_k(x, packed, scales, block_k: int):
    """The decode wrapper's operands and BLOCK_K: validation.divisible_k with blocks of 32."""
    return validation.divisible_k(x, packed, scales, block_k, BLOCK)


def dot_scaled_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes for the tl.dot_scaled bonus: the decode tiles for M <= 16 (BLOCK_N = 64 measured best for it on
    the H200), the prefill tiles above."""
    if M > 16:
        return prefill_config(M, N, K, device) if device != "cuda" else _prefill_tiles(M)
    if device != "cuda":
        return decode_config(M, N, K, device)
    return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3)


# ----------------------------------------------------------------------------------------------------------
# Byte and FLOP counts


def explain_format() -> None:
    """Print the E2M1 code table, the E8M0 rule and the bytes per weight."""
    print("E2M1 codes (bit 3 sign | bits 2-1 exponent, bias 1 | bit 0 mantissa):")
    for c in range(8):
        e, m = c >> 1, c & 1
        how = f"0.{5 * m} (subnormal: m · 0.5)" if e == 0 else f"2^{e - 1} · 1.{5 * m}"
        print(
            f"  {c:04b}  {fp4.E2M1_MAGNITUDES[c]:>3g}   = {how}      {c | 8:04b}  -{fp4.E2M1_MAGNITUDES[c]:g}"
        )
    print("E8M0 scale code e: the value 2^(e - 127); 0xFF is NaN. No sign, no mantissa: a pure power of two.")
    rows = [
        ("bf16/fp16 dense", 2.0),
        ("W8A16 (int8 + fp32 per row)", 1.0),
        ("MXFP4 (E2M1 + E8M0 per 32)", bytes_per_weight()),
    ]
    print("Bytes per weight:")
    for name, b in rows:
        print(f"  {name:<30} {b:.5f} B  ({8 * b:.2f} bits)")
    print(f"At decode MXFP4 can be up to {2 / bytes_per_weight():.2f}x faster than bf16.")


# ----------------------------------------------------------------------------------------------------------
# The widget: one block of 32 values, its scale and each code


def block_table(values, rule: str = "floor") -> dict:
    """What the explorer shows for one block of 32 values."""
    v = torch.as_tensor(values, dtype=torch.float32).reshape(1, BLOCK)
    codes, scales = quantize_codes(v, rule)
    X = float(fp4.e8m0_decode(scales)[0, 0])
    back = fp4.e2m1_decode(codes) * X
    return {
        "amax": float(v.abs().max()),
        "scale_code": int(scales[0, 0]),
        "exponent": int(scales[0, 0]) - fp4.E8M0_BIAS,
        "X": X,
        "values": v[0].tolist(),
        "ratios": (v[0] / X).tolist(),
        "codes": codes[0].tolist(),
        "dequantized": back[0].tolist(),
        "clipped": int((v[0].abs() / X > fp4.E2M1_MAX).sum()),
        "rel_error": float((back - v).norm() / v.norm().clamp_min(1e-30)),
    }


def block_text(values, rule: str = "floor") -> str:
    t = block_table(values, rule)
    lines = [
        f"amax = {t['amax']:.5g};  floor(log2 amax) - 2 = {t['exponent']}  ->  E8M0 code {t['scale_code']} "
        f"({t['scale_code']:08b}), X = 2^{t['exponent']} = {t['X']:.5g}"
        if rule == "floor"
        else f"amax = {t['amax']:.5g};  ceil(log2(amax / 6)) = {t['exponent']}  ->  E8M0 code {t['scale_code']}, "
        f"X = {t['X']:.5g}",
        f"{'i':>3} {'w':>10} {'w / X':>8} {'code':>5} {'E2M1':>6} {'code·X':>10}",
    ]
    for i in range(BLOCK):
        c = t["codes"][i]
        lines.append(
            f"{i:>3} {t['values'][i]:>10.4g} {t['ratios'][i]:>8.3f} {c:04b}  {float(fp4.e2m1_decode(torch.tensor(c))):>6g} "
            f"{t['dequantized'][i]:>10.4g}" + ("  clipped to ±6" if abs(t["ratios"][i]) > 6 else "")
        )
    lines.append(f"clipped: {t['clipped']};  relative error of the block: {t['rel_error']:.3%}")
    return "\n".join(lines)


def block_explorer():
    """Sliders: a block of 32 Gaussian weights (seed), one outlier's size, and the scale rule."""
    import ipywidgets as W

    def text(seed: int, outlier: float, rule: str) -> str:
        g = checks.generator(seed)
        v = torch.randn(BLOCK, generator=g) * 0.02
        v[5] = outlier * 0.02
        return block_text(v, rule)

    seed = W.IntSlider(value=0, min=0, max=50, description="block")
    outlier = W.FloatSlider(value=3.5, min=-8, max=8, step=0.05, description="w[5] / 0.02")
    rule = W.ToggleButtons(options=["floor", "ceil"], description="scale rule")
    return W.VBox(
        [W.HBox([seed, outlier]), rule, widgets.text_view(text, seed=seed, outlier=outlier, rule=rule)]
    )


# ----------------------------------------------------------------------------------------------------------
# The comparison figure: floor vs ceil rule, MXFP4 vs int4 at equal bits


def int4_groupwise(w: torch.Tensor, group: int) -> torch.Tensor:
    """Dequantized symmetric int4 (-7..7) with one bf16 absmax scale per group of `group` along K."""
    N, K = w.shape
    b = w.float().reshape(N, K // group, group)
    s = (b.abs().amax(dim=2, keepdim=True) / 7).to(torch.bfloat16).float()
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (torch.round(b / s).clamp(-7, 7) * s).reshape(N, K)


def realistic_weights(kind: str, N: int = 512, K: int = 2048, seed: int = 0) -> torch.Tensor:
    """Gaussian rows of distinct scales, or heavy-tailed (Student t, 4 degrees of freedom) like LLM weights."""
    g = checks.generator(seed)
    row = torch.exp(torch.empty(N, 1).uniform_(-1.0, 1.0, generator=g)) * 0.02
    if kind == "gaussian":
        return torch.randn(N, K, generator=g) * row
    z = torch.randn(N, K, generator=g)
    chi2 = sum(torch.randn(N, K, generator=g) ** 2 for _ in range(4)) / 4
    return z / chi2.sqrt() * row


def error_table(w: torch.Tensor) -> list[tuple[str, float, float]]:
    """(method, bits per weight, relative RMS error) on w."""

    def rel(deq):
        return float((deq - w).norm() / w.norm())

    def mx(rule):
        codes, scales = quantize_codes(w, rule)
        return dequantize(fp4.pack_nibbles(codes), scales)

    return [
        ("MXFP4, spec (floor)", 4.25, rel(mx("floor"))),
        ("MXFP4, ceil(log2(amax/6))", 4.25, rel(mx("ceil"))),
        ("int4 g=64, bf16 scale", 4.25, rel(int4_groupwise(w, 64))),
        ("int4 g=32, bf16 scale", 4.5, rel(int4_groupwise(w, 32))),
    ]


def compare_rules_figure(seed: int = 0):
    """Relative error of each method on two weight distributions; prints the table too."""
    tables = {k: error_table(realistic_weights(k, seed=seed)) for k in ("gaussian", "heavy-tailed")}
    return plots.error_bars(tables, "512 × 2048 weights: relative error by format and scale rule")


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


def _no_saturation_codes(w: torch.Tensor) -> torch.Tensor:
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


def _quantizer_mistakes(w: torch.Tensor):
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
         fp4.pack_nibbles(_no_saturation_codes(w)), scales),
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
    for name, explanation, mp, ms in _quantizer_mistakes(w):
        if torch.equal(packed, mp) and torch.equal(scales, ms):
            return f"This matches a known mistake: {name}. {explanation}"
    for name, explanation, _mp, ms in _quantizer_mistakes(w):
        if torch.equal(scales, ms) and name.startswith(("E8M0", "ceil")):
            return f"This matches a known mistake: {name}. {explanation}"
    for name, explanation, mp, _ms in _quantizer_mistakes(w):
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
_check_kernel = functools.partial(
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
    _check_kernel(fn, "mxfp4_matmul", shapes, g=g, hidden=hidden, seed=seed)


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3 (correctness): M = 1..16, ragged N, K a multiple of 32."""
    seed, g, device = common.cell(seed)
    shapes = decode_shapes(g, device, hidden, block=BLOCK, visible=[(1, 64, 128), (16, 96, 192)],
                           k_blocks=(2, 100, 9), long_blocks=(36, 48))  # fmt: skip
    _check_kernel(fn, "mxfp4_decode", shapes, g=g, hidden=hidden, seed=seed)


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
    _check_kernel(fn, "mxfp4_matmul_dot_scaled", shapes, g=g, hidden=False, seed=seed,
                  dtypes=common.act_dtypes(device)[-1:], note=f"; {why}")  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# What the roofline predicts, and what the paths measure

# Recorded on the course's H200 (docs/bench-h200.json, eager) at M = 1, N x K = 28672 x 8192, bf16 activations.
H200_RECORDED_US = recorded.decode_us(
    "mxfp4 decode",
    {
        "dense bf16 (cuBLAS)": "dense (cuBLAS)",
        "naive: dequantize, then matmul": "naive: dequantize, matmul",
        "mxfp4_matmul (tiled)": "solution mxfp4_matmul (tiled)",
        "mxfp4_decode": "solution mxfp4_decode",
        "tl.dot_scaled kernel": "solution tl.dot_scaled",
    },
    1, *BANDWIDTH_SHAPE,
)  # fmt: skip


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    roofline_model.predictions(env, ["mxfp4"], (1, 16, 2048), naive="mxfp4", shape=BANDWIDTH_SHAPE)


def compare_paths(env, prefill_fn, decode_fn, dot_scaled_fn=None, M: int = 1):
    """Time the dense matmul, the naive path and the learner's kernels at decode; plot bytes and time."""
    N, K = BANDWIDTH_SHAPE
    rows = [
        ("dense bf16 (cuBLAS)", bytes_moved_dense(M, N, K)),
        ("naive: dequantize, then matmul", bytes_moved_naive(M, N, K)),
        ("mxfp4_matmul (tiled)", bytes_moved(M, N, K)),
        ("mxfp4_decode", bytes_moved(M, N, K)),
    ]
    if dot_scaled_fn is not None:
        rows.append(("tl.dot_scaled kernel", bytes_moved(M, N, K)))

    def fns():
        g = checks.generator(0, "cuda")
        packed, scales = timing_weights(N, K, g)
        w = torch.randn(N, K, device="cuda", generator=g).to(env.act_dtype)
        x = torch.randn(M, K, device="cuda", generator=g).to(env.act_dtype)
        kernels = [prefill_fn, decode_fn] + ([dot_scaled_fn] if dot_scaled_fn is not None else [])
        return [lambda: x @ w.T, lambda: naive(x, packed, scales)] + [
            lambda fn=fn: fn(x, packed, scales) for fn in kernels
        ]

    return compare.compare_paths(env, rows, fns, H200_RECORDED_US, M=M, shape=(N, K))
