"""Chapter W4A16, the trusted grading of the exercises: the decode grading's shape, group and threshold, the test
inputs, the known mistakes and the checks of the quantizer and the kernels, and the timed problem (timing_weights,
timing_inputs, reference) that qmatmul/checks/harness.py draws by this module's name. The bonuses' checks are
qmatmul/checks/w4a16_bonus.py.
"""

from __future__ import annotations

import functools

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, Mistake, common
from qmatmul.formats.w4a16 import (
    GROUP_SIZES,
    QMAX,
    bytes_moved,
    grouped,
    pack,
    quantize,
    quantize_codes,
    reference,
    unpack,
)
from qmatmul.teaching import roofline_model

# Decode grading: a 28672 x 8192 int4 weight is 117 MB packed (plus 5.9 MB of scales and zeros): about twice
# the H200's L2 and far above a T4's.
BANDWIDTH_SHAPE = common.BANDWIDTH_SHAPE
BANDWIDTH_GROUP = 128
BANDWIDTH_MS = common.BANDWIDTH_MS
# Fraction of the copy bandwidth measured in the same process (graded on the CUDA-graph figure where the calls can
# be captured, else the eager one: qmatmul/checks/harness.py). The bar is about half what the solution reaches on the lent
# H200 and far above the naive path (the recorded figures: docs/bench-h200.json, quoted in course.md;
# docs/perf-notes.md says why half).
BANDWIDTH_THRESHOLD = 0.13


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
        # and a fixed bf16 weight, on which arithmetic in w's own dtype differs (tests/test_text_claims.py)
        return [
            (random_weight(4, 64, g), 32),
            (w, 128),
            (random_weight(8, 256, checks.generator(1), torch.bfloat16), 128),
        ]
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


def quantizer_mistakes(w: torch.Tensor, G: int):
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
    try:
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
                for name, explanation, mp, ms, mz in quantizer_mistakes(w, G):
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
                    lines.append(
                        f"the codes differ from the reference in {n_bad} of {q.numel()} weights{ctx}"
                    )
                    if not named and int(diff.abs().max()) == 1:
                        lines.append("Every difference is ±1: check the rounding (round half to even, torch.round) "
                                     "and that w / scale is a division.")  # fmt: skip
                    lines.append(f"Differences lie {checks.where_2d(diff != 0, ('rows', 'k'))}.")
                if not named:
                    lines[0] = lines[0][0].upper() + lines[0][1:]
                raise CheckFailed("\n".join(lines))
    except CheckFailed as exc:
        raise CheckFailed(common.named_16_bit(str(exc), fn, w, G, what=what, returns=("packed", "scales", "zeros"), reference=lambda w: quantize(w, G))) from None  # fmt: skip
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
