"""Chapter W4A16: the notebook's scaffolding (validation, launch configurations), the nibble explorer, test inputs,
the known mistakes and the checks of each exercise and bonus, and the cells that predict and compare the paths.

The format itself (quantizer, packer, dequantizer, reference, bytes moved, the tinygemm and GPTQ layouts) is
qmatmul/formats/w4a16.py; its names are re-exported here, where the notebook reaches them as `w4a16.<name>`.
"""

from __future__ import annotations

import functools
import inspect

import torch

from qmatmul import checks, timing
from qmatmul.checks import CheckFailed, Mistake, common
from qmatmul.formats.w4a16 import (  # noqa: F401 - the notebook's names
    GPTQ_PACK,
    GROUP_SIZES,
    QMAX,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    dequantize,
    gptq_dequantize,
    gptq_prepare,
    grouped,
    naive,
    pack,
    quantize,
    quantize_codes,
    reference,
    tinygemm_operands,
    to_gptq,
    unpack,
    unpack_int32,
)
from qmatmul.kernels import configs
from qmatmul.kernels.gemm import decoded_gemm  # noqa: F401 - the notebook's names
from qmatmul.scaffold import validation
from qmatmul.scaffold.validation import ACT_DTYPES  # noqa: F401 - the notebook's names
from qmatmul.teaching import plots, recorded, roofline_model, widgets
from qmatmul.teaching.roofline_model import bytes_moved_dense, flops  # noqa: F401 - the notebook's names

# Decode grading: a 28672 x 8192 int4 weight is 117 MB packed (plus 5.9 MB of scales and zeros): about twice
# the H200's L2 and far above a T4's.
BANDWIDTH_SHAPE = (28672, 8192)
BANDWIDTH_GROUP = 128
BANDWIDTH_MS = (1, 16)
# Fraction of the copy bandwidth measured in the same process (graded on the CUDA-graph figure where the calls can
# be captured, else the eager one: qmatmul/checks/harness.py). The bar is about half what the solution reaches on the lent
# H200 and far above the naive path (the recorded figures: docs/bench-h200.json, quoted in course.md;
# docs/perf-notes.md says why half).
BANDWIDTH_THRESHOLD = 0.13
# The names of the course package the learner's graded code may use (grader/static.py, course_problems).
GIVEN = {
    "qmatmul.w4a16": {
        "prepare",
        "prefill_config",
        "decode_config",
        "decode_split",
        "decoded_gemm",
        "gptq_prepare",
    }
}


# ----------------------------------------------------------------------------------------------------------
# The scaffolding the notebook's wrappers use: validation, allocation, launch configurations


def prepare(x, packed, scales, zeros, group_size, out=None):
    """Validate the inputs of a W4A16 matmul with clear messages; allocate out if needed.

    Returns M, N, K, out.
    """
    validation.require_tensors(x=x, packed=packed, scales=scales, zeros=zeros)
    M, K = validation.require_activations(x)
    validation.require_codes("packed", packed, torch.uint8, "[N, K/2]")
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group_size must be one of {GROUP_SIZES}, got {group_size}")
    N = packed.shape[0]
    validation.require_same_k("x", x, "packed", packed, "[N, K/2]", 2 * packed.shape[1])
    if K % group_size:
        raise ValueError(f"K = {K} must be a multiple of the group size {group_size}")
    groups = K // group_size
    if scales.dtype != torch.float32 or tuple(scales.shape) != (N, groups):
        raise ValueError(
            f"scales must be float32 of shape [N, K/G] = [{N}, {groups}], got {scales.dtype} of shape "
            f"{list(scales.shape)}"
        )
    if zeros.dtype != torch.uint8 or tuple(zeros.shape) != (N, groups):
        raise ValueError(
            f"zeros must be uint8 of shape [N, K/G] = [{N}, {groups}], got {zeros.dtype} of shape "
            f"{list(zeros.shape)}"
        )
    return M, N, K, validation.placed(x, out, M, N, dict(packed=packed, scales=scales, zeros=zeros))


def prefill_config(M: int, N: int, K: int, group_size: int, device: str = "cuda") -> dict:
    """Tile sizes for the tiled kernel. BLOCK_K divides the group size: one scale and zero per K block."""
    if device != "cuda":
        return dict(configs.INTERPRETER_TILED, BLOCK_K=min(64, group_size))
    if configs.fma_dot(
        device
    ):  # a T4: FMA tiles (qmatmul/kernels/configs.py); BLOCK_K still divides the group size
        return dict(configs.FMA_TILED, BLOCK_K=min(configs.FMA_TILED["BLOCK_K"], group_size))
    big = M > 64
    # The best of 8 configurations timed on the H200 at M = 2048, N = K = 8192 (still only 9.5 % of cuBLAS).
    return dict(
        BLOCK_M=128 if big else 64,
        BLOCK_N=256 if big else 128,
        BLOCK_K=min(64, group_size),
        num_warps=8 if big else 4,
        num_stages=3 if big else 4,
    )


def decode_config(M: int, N: int, K: int, group_size: int, device: str = "cuda") -> dict:
    """Tile sizes for the decode kernel: all M rows (padded to 16) in one program, a strip of N, one group
    of K per step."""
    if device != "cuda":
        return dict(configs.INTERPRETER_DECODE, BLOCK_K=group_size)
    # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01), the tile read as it lies ([BLOCK_N, BLOCK_K/2]):
    # 32 columns, 4 warps, 4 stages reached 29 % of the copy bandwidth at 28672 x 8192 for M = 1 and 16 (16 columns:
    # 15 %; 128 columns with 8 warps: 22 %). The earlier [BLOCK_K/2, BLOCK_N] kernel's best was 25 / 16 %.
    return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=group_size, num_warps=4, num_stages=4)


def decode_split(M: int, N: int, K: int, group_size: int, device: str = "cuda") -> int:
    """How many slices of K the decode kernel's grid sums (split-K): more programs when N alone gives too few."""
    groups = K // group_size
    if device != "cuda":
        return 2 if groups >= 2 else 1  # the interpreter runs the split path too, so the tests cover it
    strips = -(-N // decode_config(M, N, K, group_size, device)["BLOCK_N"])
    # H200: 8192 columns (256 strips) ran at 21 % unsplit and 24-26 % in two slices; 28672 (896 strips) the same.
    return 2 if strips < 512 and groups >= 2 else 1


# ----------------------------------------------------------------------------------------------------------
# Byte and FLOP counts


def explain_format(K: int = 8192) -> None:
    """Print the bytes per weight of each format and what that means for a decode step."""
    rows = [("bf16/fp16 dense", 2.0), ("W8A16 (int8 + fp32 scale per row)", 1 + 4 / K)]
    rows += [(f"W4A16, G = {g} (int4 + fp32 scale + u8 zero)", bytes_per_weight(g)) for g in (32, 64, 128)]
    print(f"Bytes per weight (rows of K = {K}):")
    for name, b in rows:
        print(f"  {name:<44} {b:.5f} B   {2 / b:4.2f}x fewer than bf16")
    print(
        f"At G = 128 the scales and zeros add {5 / 128:.3f} B per weight ({100 * (5 / 128) / 0.5:.0f} % on top of "
        "the nibbles): a decode step can be up to "
        f"{2 / bytes_per_weight(128):.2f}x faster than bf16."
    )


# ----------------------------------------------------------------------------------------------------------
# The nibble explorer (a widget) and the error-against-group-size figure


def nibble_code(even: int, odd: int) -> dict:
    """Pack two 4-bit codes (elements 2i and 2i+1) into one byte, and unpack it again, showing each step."""
    even, odd = int(even) & 0xF, int(odd) & 0xF
    byte = even | (odd << 4)
    return {
        "even (2i)": format(even, "04b"),
        "odd (2i+1)": format(odd, "04b"),
        "odd << 4": format(odd << 4, "08b"),
        "byte": format(byte, "08b"),
        "byte value": byte,
        "byte & 0xF": byte & 0xF,
        "byte >> 4": byte >> 4,
        "swapped (wrong) byte": format(odd | (even << 4), "08b"),
    }


def nibble_explorer():
    """Sliders for the codes of elements 2i and 2i+1 (and a zero point): the byte they share, bit by bit."""
    import ipywidgets as W

    def text(even: int, odd: int, zero: int, scale: float) -> str:
        c = nibble_code(even, odd)
        return (
            f"element 2i   code {even:>2} = {c['even (2i)']}        → low nibble  (bits 3..0)\n"
            f"element 2i+1 code {odd:>2} = {c['odd (2i+1)']}        → high nibble (bits 7..4)\n"
            f"byte = even | (odd << 4) = <b>{c['byte'][:4]}</b> {c['byte'][4:]}  = {c['byte value']}\n"
            f"unpack: byte & 0xF = {c['byte & 0xF']:>2}    byte >> 4 = {c['byte >> 4']:>2}\n"
            f"dequantized: (q - zero) · scale = {(even - zero) * scale:+.4f} and {(odd - zero) * scale:+.4f}\n"
            f"swapped nibbles would store {c['swapped (wrong) byte']}: element 2i would read back {odd}"
        )

    even = W.IntSlider(value=3, min=0, max=15, description="code 2i")
    odd = W.IntSlider(value=12, min=0, max=15, description="code 2i+1")
    zero = W.IntSlider(value=8, min=0, max=15, description="zero")
    scale = W.FloatSlider(
        value=0.01, min=0.001, max=0.05, step=0.001, readout_format=".3f", description="scale"
    )
    return W.VBox(
        [even, odd, zero, scale, widgets.text_view(text, even=even, odd=odd, zero=zero, scale=scale)]
    )


def error_against_group_size(w: torch.Tensor, quantize_fn, sizes=(32, 64, 128)):
    """Relative error ‖w − deq‖ / ‖w‖ of quantize_fn at each group size, beside one scale per row (G = K)."""
    import matplotlib.pyplot as plt

    N, K = w.shape
    labels, errs, bpw = [], [], []
    for g in sizes:
        packed, s, z = quantize_fn(w, g)
        deq = dequantize(packed, s, z, g)
        labels.append(f"G = {g}")
        errs.append(float((deq - w.float()).norm() / w.float().norm()))
        bpw.append(bytes_per_weight(g))
    # One scale and zero per row, the whole of K (what many blog posts do): the reference at G = K.
    wg = w.float()
    lo, hi = wg.amin(1, keepdim=True).clamp(max=0), wg.amax(1, keepdim=True).clamp(min=0)
    s = ((hi - lo) / QMAX).clamp_min(1e-30)
    z = torch.round(-lo / s).clamp(0, QMAX)
    q = (torch.round(wg / s) + z).clamp(0, QMAX)
    labels.append(f"one per row (G = K = {K})")
    errs.append(float(((q - z) * s - wg).norm() / wg.norm()))
    bpw.append(0.5 + 5 / K)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    bars = ax.bar(labels, [100 * e for e in errs], color=["tab:blue"] * len(sizes) + ["tab:red"])
    for b, e, bb in zip(bars, errs, bpw, strict=True):
        ax.annotate(f"{100 * e:.1f} %\n{bb:.3f} B/w", (b.get_x() + b.get_width() / 2, b.get_height()),
                    ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.set_ylabel("‖w − dequant‖ / ‖w‖ (%)")
    ax.set_title("int4 error against group size: smaller groups, less error, more bytes")
    ax.set_ylim(0, 130 * max(errs))
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_weight(N: int, K: int, g: torch.Generator, dtype=torch.float32) -> torch.Tensor:
    """Weights whose rows and groups have distinct magnitudes and offsets (every group a distinct scale/zero)."""
    row_scale = torch.exp(torch.empty(N, 1).uniform_(-2.0, 2.0, generator=g)) * 0.02
    w = torch.randn(N, K, generator=g) * row_scale
    # A smooth drift along K, different per row: groups get different ranges and zero points.
    drift = torch.randn(N, 1, generator=g) * row_scale * torch.linspace(-1.5, 1.5, K)[None, :]
    return (w + drift).to(dtype)


def random_problem(M, N, K, G, dtype, device, g, strided: bool = False):
    """x [M, K] (a strided view when `strided`) and the reference quantization of a random weight."""
    return common.problem((M, K), quantize(random_weight(N, K, g), G), dtype, device, g, strided)


def rounding_probe(M, N, K, G, dtype, device, strided: bool = False):
    """The checks' rounding probe (qmatmul/checks/common.py): x of ones and weights (q - 8) · PROBE_SCALE whose rows sum to
    one scale; scales folded into 16-bit weights before the dot miss it on every run."""
    q = (common.rounding_probe_weights(N, K) + 8).to(torch.uint8)
    scales = torch.full((N, K // G), common.PROBE_SCALE)
    zeros = torch.full((N, K // G), 8, dtype=torch.uint8)
    x = common.rounding_probe_x(M, K, dtype, device, strided)
    return x, *(t.to(device) for t in (pack(q), scales, zeros))


def random_packed(N: int, K: int, G: int, device: str, g: torch.Generator):
    """Random codes, scales and zeros straight on the device (for the bandwidth cells)."""
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, device=device, generator=g)
    s = torch.rand(N, K // G, device=device, generator=g) * 1e-3 + 1e-4
    z = torch.randint(0, 16, (N, K // G), dtype=torch.uint8, device=device, generator=g)
    return packed, s, z


# ----------------------------------------------------------------------------------------------------------
# Checks for exercise 1: the quantizer and packer


def _quantizer_inputs(g: torch.Generator, hidden: bool):
    """(w, group_size) pairs."""
    if not hidden:
        w = random_weight(16, 256, g)
        w[0, :128] = 0  # an all-zero group
        w[1, :128] = (
            w[1, :128].abs() + 0.01
        )  # an all-positive group: the range must still hold 0 (the text says so)
        w[2, 128:] = -w[2, 128:].abs()  # an all-negative group
        return [(random_weight(4, 64, g), 32), (w, 128)]
    cases = []
    for dtype, G in ((torch.float32, 32), (torch.float16, 64), (torch.bfloat16, 128), (torch.float32, 128)):
        N = int(torch.randint(5, 40, (1,), generator=g))
        K = G * int(torch.randint(2, 5, (1,), generator=g))
        w = random_weight(N, K, g)
        w[0, :G] = 0  # an all-zero group
        w[1, :G] = w[1, :G].abs() + 0.01  # an all-positive group: the range must still hold 0
        w[2, G : 2 * G] = -w[2, G : 2 * G].abs()  # an all-negative group
        w[3, int(torch.randint(0, K, (1,), generator=g))] = 1.0  # one outlier
        cases.append((w.to(dtype), G))
    return cases


def _wrong_quantizers(w: torch.Tensor, G: int):
    """(name, explanation, packed, scales, zeros) of the known wrong quantizers."""
    q, s, z = quantize_codes(w, G)
    N, K = w.shape
    wg = grouped(w, G)
    out = []
    out.append(("swapped nibbles", "Element 2i goes in the LOW nibble: packed = q[:, 0::2] | (q[:, 1::2] << 4).",
                q[:, 1::2] | (q[:, 0::2] << 4), s, z))  # fmt: skip
    q_nz = torch.round(wg / s[..., None]).clamp(0, QMAX).reshape(N, K).to(torch.uint8)
    out.append(("zero point ignored", "Add the group's zero point before clamping: q = clamp(round(w / scale) "
                "+ zero, 0, 15); without it every negative weight clamps to 0.", pack(q_nz), s, z))  # fmt: skip
    # One scale and zero for all of K in a row, repeated for every group.
    lo, hi = wg.amin(dim=(1, 2)).clamp(max=0), wg.amax(dim=(1, 2)).clamp(min=0)
    s1 = (hi - lo) / QMAX
    s1 = torch.where(s1 > 0, s1, torch.ones_like(s1))
    z1 = torch.round(-lo / s1).clamp(0, QMAX)
    q1 = (torch.round(w.float() / s1[:, None]) + z1[:, None]).clamp(0, QMAX).to(torch.uint8)
    out.append(("one scale per column", "Every group of G consecutive k along a row has its own scale and zero: "
                "reshape to [N, K/G, G] and reduce over the last axis.", pack(q1),
                s1[:, None].expand_as(s).contiguous(), z1[:, None].expand_as(z).to(torch.uint8)))  # fmt: skip
    # The range from the group's min and max without including 0 (AWQ's formula as often copied).
    lo2, hi2 = wg.amin(dim=2), wg.amax(dim=2)
    s2 = torch.where(hi2 > lo2, (hi2 - lo2) / QMAX, torch.ones_like(hi2))
    z2 = torch.round(-lo2 / s2).clamp(0, QMAX)
    q2 = (torch.round(wg / s2[..., None]) + z2[..., None]).clamp(0, QMAX).reshape(N, K).to(torch.uint8)
    out.append(("range without 0", "Take lo = min(min w, 0) and hi = max(max w, 0): the range must hold 0, or an "
                "all-positive group clips.", pack(q2), s2, z2.to(torch.uint8)))  # fmt: skip
    qt = (torch.trunc(wg / s[..., None]) + z.float()[..., None]).clamp(0, QMAX).reshape(N, K).to(torch.uint8)
    out.append(("truncation instead of rounding", "Round w / scale (torch.round) before adding the zero and "
                "converting; .to(torch.uint8) truncates.", pack(qt), s, z))  # fmt: skip
    s16 = torch.where((s * QMAX / 16) > 0, s * QMAX / 16, torch.ones_like(s))
    z16 = torch.round(-wg.amin(dim=2).clamp(max=0) / s16).clamp(0, QMAX)
    q16 = (torch.round(wg / s16[..., None]) + z16[..., None]).clamp(0, QMAX).reshape(N, K).to(torch.uint8)
    out.append(("16 levels instead of 15 steps", "Four bits give codes 0..15: 15 steps, scale = (hi - lo) / 15.",
                pack(q16), s16, z16.to(torch.uint8)))  # fmt: skip
    return out


def _check_types(result, what, N, K, G, ctx):
    packed, s, z = result
    if tuple(packed.shape) == (N, K):
        raise CheckFailed(
            f"packed has shape [N, K] = [{N}, {K}]: pack two codes per byte, packed[n, i] = q[n, 2i] | "
            f"(q[n, 2i+1] << 4), for shape [{N}, {K // 2}].{ctx}"
        )
    if tuple(packed.shape) == (N // 2, K) and N % 2 == 0:
        raise CheckFailed(f"packed has shape [N/2, K]: pack along K (pairs of k), not along N.{ctx}")
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (N, K // 2):
        raise CheckFailed(
            f"packed must be uint8 of shape [{N}, {K // 2}], got {packed.dtype} {list(packed.shape)}{ctx}"
        )
    groups = K // G
    if tuple(s.shape) in ((N,), (N, 1)) and groups > 1:
        raise CheckFailed(
            f"scales has shape {list(s.shape)}: one scale per column for all of K. Each group of {G} "
            f"consecutive k has its own scale: shape [N, K/G] = [{N}, {groups}].{ctx}"
        )
    if tuple(s.shape) == (groups, N) and groups != N:
        raise CheckFailed(f"scales has shape [K/G, N]: the course layout is [N, K/G] = [{N}, {groups}].{ctx}")
    if tuple(s.shape) != (N, groups):
        raise CheckFailed(f"scales must have shape [N, K/G] = [{N}, {groups}], got {list(s.shape)}{ctx}")
    if s.dtype != torch.float32:
        raise CheckFailed(f"scales must be float32, got {s.dtype}: compute in float32 (w.float()).{ctx}")
    if tuple(z.shape) != (N, groups) or z.dtype != torch.uint8:
        raise CheckFailed(f"zeros must be uint8 of shape [{N}, {groups}], got {z.dtype} {list(z.shape)}{ctx}")
    checks.check_finite(s, what=f"scales{ctx}")
    return packed, s, z


def check_quantizer(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1: packed, scales and zeros equal the reference bit for bit.

    An all-zero group may have any positive scale and any zero point, as long as its codes equal that zero."""
    seed, g, _ = common.cell(seed)
    what = "quantize_int4"
    for w, G in _quantizer_inputs(g, hidden):
        N, K = w.shape
        ctx = f" (w: {str(w.dtype).replace('torch.', '')} [{N}, {K}], group_size={G})"
        result = common.call_quantizer(
            fn, w, G, what=what, returns=("packed", "scales", "zeros"), ctx=ctx, copy=True
        )
        packed, s, z = _check_types(result, what, N, K, G, ctx)
        p_ref, s_ref, z_ref = quantize(w, G)
        zero_groups = grouped(w, G).abs().amax(dim=2) == 0
        if bool((s[zero_groups] <= 0).any()):
            raise CheckFailed(
                f"an all-zero group got scale {s[zero_groups].min().item()}: it must be positive{ctx}"
            )
        q = unpack(packed)
        q_ref = unpack(p_ref)
        # All-zero groups: accept their own zero point if every code equals it (they dequantize to 0).
        zmask = zero_groups.repeat_interleave(G, dim=1)
        q_cmp = torch.where(zmask & (q == z.repeat_interleave(G, dim=1)), q_ref, q)
        s_cmp = torch.where(zero_groups, s_ref, s)
        z_cmp = torch.where(zero_groups, z_ref, z)
        ok = torch.equal(q_cmp, q_ref) and torch.equal(s_cmp, s_ref) and torch.equal(z_cmp, z_ref)
        if not ok:
            named = None
            for name, explanation, mp, ms, mz in _wrong_quantizers(w, G):
                ms, mz = torch.where(zero_groups, s_ref, ms), torch.where(zero_groups, z_ref, mz)
                same_all = torch.equal(packed, mp) and torch.equal(s_cmp, ms) and torch.equal(z_cmp, mz)
                same_scales = torch.equal(s_cmp, ms) and not torch.equal(ms, s_ref)
                if same_all or same_scales:
                    named = f"This matches a known mistake: {name}. {explanation}"
                    break
            lines = [named] if named else []
            if not torch.equal(s_cmp, s_ref):
                bad = (s_cmp != s_ref).nonzero().tolist()
                n, gi = bad[0]
                lines.append(
                    f"scales differ from the reference in {len(bad)} of {s.numel()} groups, first at [n={n}, "
                    f"group={gi}] (k = {gi * G}..{gi * G + G - 1}): got {float(s_cmp[n, gi]):.8g}, expected "
                    f"{float(s_ref[n, gi]):.8g}{ctx}"
                )
            elif not torch.equal(z_cmp, z_ref):
                bad = (z_cmp != z_ref).nonzero().tolist()
                n, gi = bad[0]
                lines.append(
                    f"zeros differ from the reference in {len(bad)} of {z.numel()} groups, first at [n={n}, "
                    f"group={gi}]: got {int(z_cmp[n, gi])}, expected {int(z_ref[n, gi])}{ctx}"
                )
            else:
                diff = q_cmp.int() - q_ref.int()
                n_bad = int((diff != 0).sum())
                lines.append(f"the codes differ from the reference in {n_bad} of {q.numel()} weights{ctx}")
                if not named and int(diff.abs().max()) == 1:
                    lines.append("Every difference is ±1: check the rounding (round half to even, torch.round) "
                                 "and that w / scale is a division.")  # fmt: skip
                lines.append(f"Differences lie {checks.where_2d(diff != 0, ('rows', 'k'))}.")
            if not named:
                lines[0] = lines[0][0].upper() + lines[0][1:]
            raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


# ----------------------------------------------------------------------------------------------------------
# Checks for exercises 2 and 3: the kernels


def _deq_with(q, s, z, G):
    return (q - z.repeat_interleave(G, dim=1)) * s.repeat_interleave(G, dim=1)


def kernel_mistakes(x, packed, scales, zeros, G) -> list[Mistake]:
    xf = x.float().cpu()
    p, s, z = packed.cpu(), scales.float().cpu(), zeros.float().cpu()
    q = unpack(p).float()
    N, K = q.shape
    groups = K // G
    sw = torch.empty_like(q)
    sw[:, 0::2], sw[:, 1::2] = q[:, 1::2], q[:, 0::2]
    s_rep, z_rep = s.repeat_interleave(G, dim=1), z.repeat_interleave(G, dim=1)

    def y(w):
        return xf @ w.T

    def shifted(t, by, fill):
        idx = torch.arange(groups) + by
        valid = (idx >= 0) & (idx < groups)
        out = t[:, idx.clamp(0, groups - 1)]
        return out if fill is None else torch.where(valid[None, :], out, torch.full_like(out, fill))

    out = [
        Mistake("swapped nibbles", "Element 2i is the LOW nibble (byte & 0xF), element 2i+1 the high one "
                "(byte >> 4): pair the low nibbles with x's even columns.", y(_deq_with(sw, s, z, G))),
        Mistake("zero point ignored", "Subtract each group's zero point before scaling: w = (q - zero) · scale.",
                y(q * s_rep)),
        Mistake("zero applied after the scale", "The zero point is in code units: w = (q - zero) · scale, "
                "not q · scale - zero.", y(q * s_rep - z_rep)),
        Mistake("one scale per column", "Each group of G consecutive k has its own scale and zero: index "
                "scales[n, k // G], not scales[n, 0] for all of K.",
                y(_deq_with(q, s[:, :1].expand(N, groups), z[:, :1].expand(N, groups), G))),
        Mistake("scale missing", "Multiply (q - zero) by the group's scale.", y(q - z_rep)),
        Mistake("weights rounded to 16 bits", "(q - zero) · scale rounded to fp16/bf16 loses up to half a unit "
                "in the last place per weight, and the output drifts past the tolerance: put the exact integer "
                "(q - zero) in the dot and multiply the group's partial sum by the scale.",
                xf @ _deq_with(q, s, z, G).to(x.dtype).float().T),
        Mistake("group index from the byte index", "The group of weight k is k // G; a byte j of packed holds "
                "k = 2j and 2j+1, so its group is 2j // G, not j // G.",
                y(_deq_with(q, s[:, torch.arange(groups) // 2], z[:, torch.arange(groups) // 2], G))),
    ]  # fmt: skip
    if groups > 1:
        for by in (1, -1):  # unmasked: row n's last group reads row n+1's first (the flattened layout)
            sf, zf = torch.roll(s.flatten(), -by), torch.roll(z.flatten(), -by)
            out.append(Mistake("group index off by one", "Weight k belongs to group k // G (groups start at 0): "
                               "check how the K loop's offset becomes a group index.",
                               y(_deq_with(q, sf.reshape(N, groups), zf.reshape(N, groups), G))))  # fmt: skip
        for by in (1, -1):
            for fill_s, fill_z in ((None, None), (0.0, 0.0)):
                out.append(Mistake("group index off by one", "Weight k belongs to group k // G (groups "
                                   "start at 0): check how the K loop's offset becomes a group index.",
                                   y(_deq_with(q, shifted(s, by, fill_s), shifted(z, by, fill_z), G))))  # fmt: skip
    return out


# common.check_kernel(fn, what, cases, **kw) on this chapter's problems, reference and known mistakes
_check_kernel = functools.partial(
    common.check_kernel, names=("x", "packed", "scales", "zeros"), problem=random_problem,
    reference=reference, mistakes=kernel_mistakes, probe=rounding_probe, probe_case=(2, 64, 128, 32),
)  # fmt: skip


def check_prefill(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2: the tiled kernel on ragged M and N, every group size, poisoned and strided outputs, fused."""
    seed, g, device = common.cell(seed)
    if not hidden:
        cases = [(32, 64, 128, 32), (50, 70, 256, 128)]
    else:
        big = device == "cuda"
        cases = []
        for G in GROUP_SIZES:
            M = int(torch.randint(17, 300 if big else 100, (1,), generator=g))
            N = int(torch.randint(33, 700 if big else 160, (1,), generator=g))
            K = G * int(torch.randint(2, (3000 if big else 300) // G + 1, (1,), generator=g))
            cases.append((M, N, K, G))

    _check_kernel(fn, "w4a16_matmul", cases, g=g, hidden=hidden, seed=seed, strided_cases=(False, True) if not hidden else (True,))  # fmt: skip


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3 (correctness): M = 1..16, ragged N, every group size."""
    seed, g, device = common.cell(seed)
    if not hidden:
        cases = [(1, 64, 256, 128), (16, 96, 128, 32)]
    else:
        big = device == "cuda"
        cases = []
        for M, G in ((1, 64), (int(torch.randint(2, 16, (1,), generator=g)), 32), (16, 128)):
            N = int(torch.randint(33, 2000 if big else 200, (1,), generator=g))
            K = G * int(torch.randint(2, (4000 if big else 300) // G + 1, (1,), generator=g))
            cases.append((M, N, K, G))

    _check_kernel(fn, "w4a16_decode", cases, g=g, hidden=hidden, seed=seed, strided_cases=(False, True) if not hidden else (True,))  # fmt: skip


def check_decode_bandwidth(fn, *, threshold: float = BANDWIDTH_THRESHOLD, seed: int | None = None) -> list:
    """Exercise 3 (performance): bandwidth over the bytes that must move, against the copy bandwidth.

    Awards nothing without a CUDA GPU. Every timed output is checked (qmatmul/checks/harness.py).
    """
    return common.check_decode_bandwidth(
        fn, what="w4a16_decode", module=__name__, shape=BANDWIDTH_SHAPE, Ms=BANDWIDTH_MS, threshold=threshold,
        seed=seed, nbytes=lambda M: bytes_moved(M, *BANDWIDTH_SHAPE, BANDWIDTH_GROUP),
        hint=f"The naive path moves {roofline_model.naive_factor('w4a16', 1, *BANDWIDTH_SHAPE, BANDWIDTH_GROUP):.1f} times "
        "the bytes a fused kernel must (at M = 1 on the timed shape): read each packed tile once, "
        "unpack it in registers, and keep the per-weight work to a few integer operations.",
    )  # fmt: skip


def timing_weights(N: int, K: int, g: torch.Generator) -> tuple:
    """The timed weight (qmatmul/checks/harness.py): random codes, scales and zeros at G = BANDWIDTH_GROUP."""
    return (*random_packed(N, K, BANDWIDTH_GROUP, g.device, g), BANDWIDTH_GROUP)


timing_inputs = common.timing_activations  # the timed activations (qmatmul/checks/harness.py)


# ----------------------------------------------------------------------------------------------------------
# What the roofline predicts, and what the paths measure

# Recorded on the course's H200 (docs/bench-h200.json, eager: L2 flushed, median) at N x K = 28672 x 8192, G = 128,
# bf16 activations: µs by M (recorded at M = 1, 4 and 16).
_RECORDED_PATHS = {
    "dense bf16 (cuBLAS)": "dense (cuBLAS)",
    "naive: dequantize, then matmul": "naive: dequantize, matmul",
    "torch._weight_int4pack_mm": "torch._weight_int4pack_mm",
    "the course solution's w4a16_decode": "solution w4a16_decode",
}
_BY_M = {M: recorded.decode_us("w4a16 decode", _RECORDED_PATHS, M, *BANDWIDTH_SHAPE) for M in (1, 4, 16)}
H200_RECORDED_US = {label: {M: us[label] for M, us in _BY_M.items()} for label in _RECORDED_PATHS}


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    roofline_model.predictions(env, ["w8a16", "w4a16"], (1, 16, 2048), naive="w4a16", shape=BANDWIDTH_SHAPE)


def compare_paths(env, decode_fn, ms=(1, 2, 4, 8, 16)):
    """Bandwidth against M: the learner's decode kernel, the dense matmul, the naive path and, where the GPU
    has it, PyTorch's int4 kernel (torch._weight_int4pack_mm, tinygemm). On a CPU: the H200's recorded times."""
    import matplotlib.pyplot as plt

    N, K = BANDWIDTH_SHAPE
    G = BANDWIDTH_GROUP
    series: dict[str, list] = {}
    if env.has_gpu:
        g = checks.generator(0, "cuda")
        dtype = env.act_dtype
        p, s, z = random_packed(N, K, G, "cuda", g)
        w = torch.randn(N, K, device="cuda", generator=g).to(dtype)
        tiny = tinygemm_operands(p, s, z, G) if dtype == torch.bfloat16 else None
        tiny_fn = None if tiny is None else (lambda x: torch._weight_int4pack_mm(x, *tiny))
        paths = {
            "dense bf16 (cuBLAS)": lambda x: x @ w.T,
            "naive: dequantize, then matmul": lambda x: naive(x, p, s, z, G),
            "torch._weight_int4pack_mm": tiny_fn,
            "your w4a16_decode": lambda x: decode_fn(x, p, s, z, G),
        }
        for label, fn in paths.items():
            series[label] = []
            for M in ms:
                x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
                t = None
                if fn is not None:
                    try:
                        fn(x)
                        t = timing.median_ms(lambda fn=fn, x=x: fn(x)) * 1e3
                    except Exception as exc:  # noqa: BLE001 - an unfinished exercise shows as "not measured"
                        print(f"{label}: not measured ({type(exc).__name__})")
                series[label].append(t)
        note = f"measured on {env.gpu_name}, L2 flushed, median"
    else:
        for label, by_m in H200_RECORDED_US.items():
            series[label] = [by_m.get(M) for M in ms]
        note = plots.recorded_note()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, times in series.items():
        nb = bytes_moved_dense if label.startswith("dense") else None
        pts = [(M, (nb(M, N, K) if nb else bytes_moved(M, N, K, G)) / (t * 1e-6) / 1e12)
               for M, t in zip(ms, times, strict=True) if t]  # fmt: skip
        if pts:
            ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o", label=label)
        print(f"{label:<34}" + "".join(f"{'—' if t is None else f'{t:.0f} µs':>10}" for t in times))
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ms), [str(m) for m in ms])
    ax.set_xlabel("M (tokens)")
    ax.set_ylabel("TB/s over the bytes that must move")
    ax.set_title(f"decode, N x K = {N} x {K}, G = {G}: {note}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------------------
# Bonus: the magic-number dequantization

# Ops that allocate, move or view a float tensor without computing one (the interpreter itself runs set_ and copy_).
_ALLOCATIONS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "full", "fill_", "set_",
    "copy_", "detach", "alias", "view", "as_strided", "_reshape_alias", "reshape", "t", "transpose", "permute",
    "slice", "select", "unsqueeze", "squeeze", "expand", "lift_fresh",
}  # fmt: skip


def _kernel_source(kernel) -> str:
    """The source of a @triton.jit function, compiled (JITFunction.src) or interpreted (InterpretedFunction.fn)."""
    src = getattr(kernel, "src", None)
    if src is None:
        try:
            src = inspect.getsource(getattr(kernel, "fn", kernel))
        except (OSError, TypeError):
            src = "bitcast=True"  # source unavailable: do not fail the learner on our inability to read it
    return src


def check_unpack_magic(fn, kernel=None, *, hidden: bool = False, seed: int | None = None) -> None:
    """Bonus: fn(packed) -> float16 codes [N, K], bit for bit, computed by a Triton kernel that bitcasts."""
    seed, g, _ = common.cell(seed)
    what = "unpack_magic"
    device = validation.device()
    shapes = [(4, 64), (3, 100)] if not hidden else [
        (int(torch.randint(1, 40, (1,), generator=g)), 2 * int(torch.randint(1, 700, (1,), generator=g)))
        for _ in range(3)
    ]  # fmt: skip
    for N, K in shapes:
        q = torch.randint(0, 16, (N, K), dtype=torch.uint8, generator=g)
        k = min(32, K)
        q[0, :k] = torch.arange(k) % 16  # every code appears (where K allows)
        packed = pack(q).to(device)
        ctx = f" (packed [{N}, {K // 2}])"
        y, ops = checks.run_audited(fn, packed, what=what)
        used = sorted(
            {
                op.name
                for op in ops
                if op.name not in _ALLOCATIONS and any(d.is_floating_point for d in op.dtypes)
            }
        )
        if used:
            raise CheckFailed(
                f"{what} computed floats with PyTorch ({', '.join(used)}): do the whole unpacking in the Triton "
                f"kernel.{ctx}"
            )
        if not isinstance(y, torch.Tensor) or y.dtype != torch.float16 or tuple(y.shape) != (N, K):
            got = f"{y.dtype} {list(y.shape)}" if isinstance(y, torch.Tensor) else type(y).__name__
            raise CheckFailed(f"{what} must return float16 codes of shape [{N}, {K}], got {got}{ctx}")
        expected = q.to(y.device).half()
        if torch.equal(y, expected) and kernel is not None:
            # The wrapper's torch.empty may hand back memory that already holds the right codes: launch the
            # kernel once more into NaN, as the wrapper does, so that an element it never writes shows.
            import triton

            y = torch.full((N, K), float("nan"), dtype=torch.float16, device=device)
            n = packed.numel()
            checks.call_learner(kernel[(triton.cdiv(n, 1024),)], packed, y, n, BLOCK=1024, what=what)
        if torch.equal(y, expected):
            continue
        yc = y.float().cpu()
        qf = q.float()
        known = [
            ("swapped nibbles", "byte & 0xF is element 2i, byte >> 4 element 2i+1.",
             torch.stack([qf[:, 1::2], qf[:, 0::2]], dim=-1).reshape(N, K)),
            ("1024 not subtracted", "0x6400 | q reads as 1024 + q: subtract 1024.0 (exact in fp16).", qf + 1024),
        ]  # fmt: skip
        lines = []
        for name, explanation, out in known:
            if torch.equal(yc, out):
                lines.append(f"This matches a known mistake: {name}. {explanation}")
        bad = yc != qf
        nan = torch.isnan(yc)
        lines.append(f"{what}: {int(bad.sum())} of {N * K} codes differ from byte & 0xF / byte >> 4{ctx}")
        if nan.any():
            lines.append(f"{int(nan.sum())} are NaN: check the store mask and that every byte is read.")
        i = int(bad.flatten().nonzero()[0])
        lines.append(
            f"First at [{i // K}, {i % K}]: got {float(yc.flatten()[i])}, expected {float(qf.flatten()[i])}."
        )
        raise CheckFailed("\n".join(lines))
    if kernel is not None and "bitcast=True" not in _kernel_source(kernel):
        raise CheckFailed(
            f"{what}: the kernel never bitcasts. The trick is to OR each code into the bits of fp16 1024.0 "
            "(0x6400) and reinterpret them: `.to(tl.float16, bitcast=True)`, then subtract 1024."
        )
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


# ----------------------------------------------------------------------------------------------------------
# Bonus: reading a GPTQ checkpoint (the layout: qmatmul/formats/w4a16.py)


def _gptq_inputs(g: torch.Generator, hidden: bool):
    """(packed, scales, zeros, G) in the course layout, zeros in 1..16 and fp16-exact scales."""
    if not hidden:
        # N = 40 is ragged (not a multiple of 64); the second is symmetric: every zero 8, qzeros 0x77777777.
        shapes = [(40, 64, 32, False), (24, 256, 128, True)]
    else:
        shapes = []
        for G in GROUP_SIZES:
            K = G * int(torch.randint(1, 5, (1,), generator=g))
            N = GPTQ_PACK * int(torch.randint(1, 40, (1,), generator=g))
            while N in (K // 2, K // G):  # no square shapes: a transposed answer must show in its shape
                N += GPTQ_PACK
            shapes.append((N, K, G, False))
    cases = []
    for N, K, G, symmetric in shapes:
        q = torch.randint(0, 16, (N, K), dtype=torch.uint8, generator=g)
        k = min(K, 64)
        q[0, :k] = torch.arange(k) % 16  # every code appears, in every position of a word
        if symmetric:
            z = torch.full((N, K // G), 8, dtype=torch.uint8)
        else:
            z = torch.randint(1, 17, (N, K // G), dtype=torch.uint8, generator=g)
            z.view(-1)[: min(16, z.numel())] = torch.arange(1, 17, dtype=torch.uint8)[: min(16, z.numel())]
            z[7, 0] = 16  # stored 15 in the top nibble of a qzeros word: the word is negative
        s = (torch.rand(N, K // G, generator=g) * 0.05 + 1e-4).half().float()
        cases.append((pack(q), s, z, G))
    return cases


def _gptq_mistakes(packed, scales, zeros, qzeros, G):
    """(name, explanation, tensor name, wrong value) for the known mistakes of a GPTQ reader."""
    N, half = packed.shape
    K = 2 * half
    groups = K // G
    q = unpack(packed)
    stored = zeros.to(torch.int32) - 1  # [N, K/G]: the nibbles of qzeros
    rev_q = q.reshape(N, K // 8, 8).flip(-1).reshape(N, K)
    rev_z = stored.T.reshape(groups, N // 8, 8).flip(-1).reshape(groups, N).T + 1
    # Arithmetic shift of the int32 without a mask on the top nibble: nibble 7 of a negative word comes out
    # negative (stored - 16). In the packed bytes the wrap to uint8 hides it; in the zeros it shows.
    top = (torch.arange(N) % 8 == 7)[:, None] & (stored >= 8)
    signed = torch.where(top, stored - 16, stored) + 1
    # qzeros unpacked as if packed along K/G (qweight's axis): [8 K/G, N/8], then reshaped to fit.
    wrong_axis = unpack_int32(qzeros, dim=0) + 1
    out = [
        ("zero offset: forgot the +1 of GPTQ's stored zeros",
         "The v1 format (checkpoint_format \"gptq\") stores zero − 1: the zero point is the nibble + 1.",
         "zeros", stored.to(torch.uint8)),
        ("nibble order reversed within the int32",
         "Element 8i + j of a word is bits 4j..4j+3 (j = 0 in the lowest bits): shift right by 4·j.",
         "packed", pack(rev_q)),
        ("nibble order reversed within the int32",
         "Zero point 8c + j of a qzeros word is bits 4j..4j+3 (j = 0 in the lowest bits): shift right by 4·j.",
         "zeros", rev_z.to(torch.uint8)),
        ("sign: used arithmetic shift on int32 so code 8..15 became negative",
         "qzeros and qweight are signed int32 and `>>` copies the sign bit into the top: mask every field, "
         "top nibble included, with & 0xF (or reinterpret the bytes as uint8).",
         "zeros", signed.to(torch.uint8)),
        ("unpacked qzeros along the wrong axis",
         "qweight packs 8 codes along K (its rows), qzeros 8 zero points along N (its columns): qzeros[g, c] "
         "holds the zeros of n = 8c … 8c + 7 in group g.",
         "zeros", wrong_axis.reshape(groups, N).T.contiguous().to(torch.uint8)),
        ("unpacked qzeros along the wrong axis",
         "qweight packs 8 codes along K (its rows), qzeros 8 zero points along N (its columns): qzeros[g, c] "
         "holds the zeros of n = 8c … 8c + 7 in group g.",
         "zeros", wrong_axis.T.reshape(N, groups).contiguous().to(torch.uint8)),
    ]  # fmt: skip
    return out


def _check_gptq_types(result, what, N, K, G, ctx):
    if not (isinstance(result, (tuple, list)) and len(result) == 3):
        raise CheckFailed(
            f"{what} must return a triple (packed, scales, zeros), got {type(result).__name__}{ctx}"
        )
    for name, t in zip(("packed", "scales", "zeros"), result, strict=True):
        if not isinstance(t, torch.Tensor):
            raise CheckFailed(f"{what} must return three tensors; {name} is a {type(t).__name__}{ctx}")
    packed, s, z = result
    groups = K // G
    if tuple(packed.shape) == (K // 8, N) and packed.dtype == torch.int32:
        raise CheckFailed(f"packed is qweight unchanged (int32 [K/8, N]): the course layout is uint8 [N, K/2] = "
                          f"[{N}, {K // 2}], two codes per byte along K.{ctx}")  # fmt: skip
    if tuple(packed.shape) == (K // 2, N) != (N, K // 2):
        raise CheckFailed(f"transposed: returned [K/2, N] = [{K // 2}, {N}] for packed. GPTQ stores [K/8, N] "
                          f"(in_features first); the course layout is [N, K/2] = [{N}, {K // 2}]: one row per "
                          f"output channel n.{ctx}")  # fmt: skip
    if packed.dtype != torch.uint8 or tuple(packed.shape) != (N, K // 2):
        raise CheckFailed(f"packed must be uint8 of shape [N, K/2] = [{N}, {K // 2}], got {packed.dtype} "
                          f"{list(packed.shape)}{ctx}")  # fmt: skip
    for name, t in (("scales", s), ("zeros", z)):
        if tuple(t.shape) == (groups, N) != (N, groups):
            raise CheckFailed(f"transposed: returned [K/G, N] = [{groups}, {N}] for {name}, GPTQ's layout; the "
                              f"course layout is [N, K/G] = [{N}, {groups}].{ctx}")  # fmt: skip
    if tuple(z.shape) in ((N // 8, 8 * groups), (8 * groups, N // 8)) and tuple(z.shape) != (N, groups):
        raise CheckFailed(f"zeros has shape {list(z.shape)}: unpacked qzeros along the wrong axis. qzeros "
                          f"[K/G, N/8] packs 8 zero points per int32 along N; zeros must be [N, K/G] = "
                          f"[{N}, {groups}].{ctx}")  # fmt: skip
    if tuple(s.shape) != (N, groups):
        raise CheckFailed(f"scales must have shape [N, K/G] = [{N}, {groups}], got {list(s.shape)}{ctx}")
    if s.dtype != torch.float32:
        raise CheckFailed(f"scales must be float32, got {s.dtype}: .float() converts GPTQ's fp16 scales "
                          f"exactly (every fp16 value is a float32 value).{ctx}")  # fmt: skip
    if tuple(z.shape) != (N, groups) or z.dtype != torch.uint8:
        raise CheckFailed(f"zeros must be uint8 of shape [N, K/G] = [{N}, {groups}], got {z.dtype} "
                          f"{list(z.shape)}{ctx}")  # fmt: skip
    for name, t in (("packed", packed), ("scales", s), ("zeros", z)):
        if not t.is_contiguous():
            raise CheckFailed(f"{name} is not contiguous (a transposed view?): w4a16_matmul's prepare() refuses "
                              f"it. Call .contiguous().{ctx}")  # fmt: skip
    return packed, s, z


def check_from_gptq(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Bonus: fn(qweight, qzeros, scales, group_size) -> (packed, scales, zeros) in the course layout, bit for bit,
    reading GPTQ's v1 format (zeros stored minus one). Ragged N (a multiple of 8), G = 32/64/128."""
    seed, g, _ = common.cell(seed)
    what = "from_gptq"
    for packed, s, z, G in _gptq_inputs(g, hidden):
        N, K = packed.shape[0], 2 * packed.shape[1]
        qweight, qzeros, s16 = to_gptq(packed, s, z, G)
        ctx = (
            f" (qweight [{K // 8}, {N}], qzeros [{K // G}, {N // 8}], scales [{K // G}, {N}], group_size={G})"
        )
        inputs = dict(qweight=qweight, qzeros=qzeros, scales=s16)
        before = {k: v.clone() for k, v in inputs.items()}
        result = checks.call_learner(fn, qweight, qzeros, s16, G, what=what)
        for name, t in inputs.items():
            if not torch.equal(t, before[name]):
                raise CheckFailed(
                    f"{what} modified its input {name} in place; leave the checkpoint untouched.{ctx}"
                )
        got = dict(
            zip(("packed", "scales", "zeros"), _check_gptq_types(result, what, N, K, G, ctx), strict=True)
        )
        got = {k: v.cpu() for k, v in got.items()}
        expected = dict(packed=packed, scales=s, zeros=z)
        wrong = [k for k in expected if not torch.equal(got[k], expected[k])]
        if wrong:
            lines = [f"{what}: {' and '.join(wrong)} differ{'s' if len(wrong) == 1 else ''} from the course "
                     f"layout of the same weight{ctx}"]  # fmt: skip
            for name, explanation, tensor, value in _gptq_mistakes(packed, s, z, qzeros, G):
                line = f"This matches a known mistake: {name}. {explanation}"
                if tensor in wrong and torch.equal(got[tensor], value) and line not in lines:
                    lines.append(line)
            for name in wrong:
                bad = (got[name] != expected[name]).nonzero().tolist()
                r, c = bad[0]
                fmt = (lambda v: f"{float(v):.8g}") if name == "scales" else (lambda v: f"{int(v)}")
                lines.append(f"{name}: {len(bad)} of {expected[name].numel()} differ, first at [{r}, {c}]: got "
                             f"{fmt(got[name][r, c])}, expected {fmt(expected[name][r, c])}")  # fmt: skip
            deq = dequantize(got["packed"], got["scales"], got["zeros"], G)
            n_bad = int((deq != gptq_dequantize(qweight, qzeros, s16, G)).sum())
            lines.append(f"Dequantized, {n_bad} of {N * K} weights differ from GPTQ's (q − (stored zero + 1)) · "
                         "scale.")  # fmt: skip
            raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs, the dequantized weights equal "
                  f"GPTQ's (seed {seed})")  # fmt: skip
