"""Chapter FP8's checks of exercises 1 and 2: the saturating cast and the quantizer (bit-exact against
qmatmul/formats/fp8.py, graded under casts that do not saturate), and the e4m3 -> fp16 decoder, with their inputs
and known mistakes. The kernel exercises' checks are qmatmul/checks/fp8.py."""

from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from qmatmul import checks
from qmatmul.checks import CheckFailed, common
from qmatmul.checks.fp8 import random_matrix
from qmatmul.formats.fp8 import (
    E4M3,
    E4M3_MAX,
    E4M3_OVERFLOW,
    block_amax,
    cdiv,
    expand_scales,
    normalize_block,
    quantize,
    saturate,
)
from qmatmul.scaffold import validation

# ----------------------------------------------------------------------------------------------------------
# Exercise 1: the saturating cast and the quantizer


def pitfall_matrix(R: int = 6, C: int = 200) -> torch.Tensor:
    """Deterministic: the pitfalls exercise 1's text names. Ragged 1 x 128 blocks (C = 200: the last block of a row
    is partial), an all-zero row (its blocks get s = 1), a negative-dominated row, and rows of exact e4m3 midpoints
    times s, where x * (448 / amax) and x / s round to different codes."""
    mids = torch.tensor([1.0625, 1.1875, 1.3125, 1.4375, 1.5625, 1.6875, 1.8125, 1.9375])
    x = torch.zeros(R, C)
    for r in range(2, R):
        for b, c0 in enumerate(range(0, C, 128)):
            c1 = min(C, c0 + 128)
            s = torch.tensor((0.37 + 0.11 * r + 0.05 * b) / E4M3_MAX)
            exps = torch.arange(c1 - c0) % 9 - 4  # midpoints across nine binades below 448
            x[r, c0:c1] = mids[torch.arange(c1 - c0) % 8] * torch.ldexp(torch.ones(c1 - c0), exps.float()) * s
            x[r, c0] = s * E4M3_MAX  # the block's amax
    x[1] = -torch.linspace(0.01, 3.0, C)  # negative-dominated: max(x) != max |x|
    return x


class NonSaturatingCasts(TorchDispatchMode):
    """Casts to float8_e4m3fn behave as in torch <= 2.11 and on the GPU without .satfinite: |v| > 464 -> NaN.

    torch 2.13 saturates by itself; torch 2.11 does not. Grading under this mode makes a missing clamp
    visible on every torch, so a submission gets the same points everywhere.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._overloadpacket.__name__
        if name == "_to_copy" and kwargs.get("dtype") == E4M3 and args[0].dtype != E4M3:
            return _overflow_to_nan(args[0], out)
        if name == "copy_" and args[0].dtype == E4M3 and args[1].dtype != E4M3:
            _overflow_to_nan(args[1].expand_as(args[0]), args[0])
            return args[0]
        return out


def _overflow_to_nan(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    src = src.float().to(dst.device)
    bad = src.abs() > E4M3_OVERFLOW  # inf included; NaN compares False and is NaN anyway
    if bool(bad.any()):
        bits = dst.view(torch.uint8)
        bits[bad] = torch.where(src[bad] < 0, 0xFF, 0x7F).to(torch.uint8)
    return dst


def _cast_inputs(g: torch.Generator, hidden: bool) -> list[torch.Tensor]:
    edges = torch.tensor(
        [0.0, -0.0, 1.0, 447.0, 448.0, -448.0, 449.0, 470.0, -500.0, 1e4, 3e38, float("inf"), float("-inf"),
         2.0**-9, 2.0**-10, 3 * 2.0**-11, 1.0625, 1.1875, 240.0, 57344.0]
    )  # fmt: skip
    cases = [edges, torch.randn(64, generator=g) * 300]
    if hidden:
        cases.append(torch.randn(7, 33, generator=g) * torch.logspace(-4, 4, 33))
        cases.append((torch.randn(300, generator=g) * 1000).to(torch.bfloat16))
    return cases


def _cast_mistakes(v: torch.Tensor) -> list[tuple[str, str, torch.Tensor]]:
    vf = v.float()
    return [
        ("missing saturation", "A value beyond ±448 has no e4m3fn code: without a clamp it becomes NaN (0x7F), "
         "as torch ≤ 2.11 and the GPU's plain conversion do. Clamp to ±448 before the cast.",
         _overflow_to_nan(vf, vf.to(E4M3))),
        ("clamped to ±240", "240 is the largest e4m3fnuz (AMD) value; e4m3fn reaches 448.",
         vf.clamp(-240, 240).to(E4M3)),
    ]  # fmt: skip


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: same code, or both NaN (any NaN code)."""
    same = a.view(torch.uint8) == b.view(torch.uint8)
    return same | (torch.isnan(a.float()) & torch.isnan(b.float()))


def _call_non_saturating(fn, *args, what):
    if checks.is_remote(fn):  # the learner's casts happen in the worker: the mode goes there
        with checks.worker_context("qmatmul.checks.fp8_casts:NonSaturatingCasts"):
            return checks.call_learner(fn, *args, what=what)
    with NonSaturatingCasts():
        return checks.call_learner(fn, *args, what=what)


def check_saturate(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    seed, g, _ = common.cell(seed)
    what = "saturate_e4m3"
    for v in _cast_inputs(g, hidden):
        got = _call_non_saturating(fn, v.clone(), what=what)
        ctx = f" (v: {str(v.dtype).replace('torch.', '')} {list(v.shape)})"
        if not isinstance(got, torch.Tensor) or got.dtype != E4M3 or got.shape != v.shape:
            raise CheckFailed(f"{what} must return a float8_e4m3fn tensor of v's shape {list(v.shape)}, got "
                              f"{getattr(got, 'dtype', type(got).__name__)} {list(getattr(got, 'shape', []))}{ctx}")  # fmt: skip
        ref = saturate(v)
        ok = _bits_equal(got, ref)
        if bool(ok.all()):
            continue
        bad = (~ok).flatten().nonzero().flatten()
        i = int(bad[0])
        vf = v.float().flatten()
        lines = [
            f"{what}: {len(bad)} of {v.numel()} codes differ from the saturating cast{ctx}",
            f"First at element {i}: v = {float(vf[i]):.6g} gave {float(got.flatten()[i].float()):.6g} "
            f"(code 0x{int(got.flatten().view(torch.uint8)[i]):02X}), expected {float(ref.flatten()[i].float()):.6g} "
            f"(code 0x{int(ref.flatten().view(torch.uint8)[i]):02X}).",
        ]
        for name, expl, out in _cast_mistakes(v):
            if bool(_bits_equal(got, out).all()):
                lines.insert(0, f"This matches a known mistake: {name}. {expl}")
                break
        raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


def _quantizer_inputs(g: torch.Generator, hidden: bool):
    """(x, block) pairs; block None means 'the whole dimension'."""
    if not hidden:
        x = random_matrix(8, 256, g)
        return [(x, (None, None)), (x, (1, None)), (random_matrix(4, 256, g), (1, 128)),
                (random_matrix(256, 256, g), (128, 128)), (pitfall_matrix(), (1, 128)),
                *sixteen_bit_pitfalls()]  # fmt: skip
    cases = []
    for dtype, block in ((torch.float32, (1, None)), (torch.bfloat16, (1, 128)), (torch.float16, (128, 128)),
                         (torch.float32, (None, None)), (torch.float32, (128, 128))):  # fmt: skip
        R = int(torch.randint(3, 300 if block[0] == 128 else 40, (1,), generator=g))
        C = int(torch.randint(130, 400, (1,), generator=g))
        x = random_matrix(R, C, g, outliers=True)
        x[0] = 0  # an all-zero row (and, for 1 x 128 blocks, zero blocks)
        x[1] = -x[1].abs()  # negative-dominated: max != max |x|
        cases.append((x.to(dtype), block))
    return cases


def sixteen_bit_pitfalls() -> list[tuple[torch.Tensor, tuple]]:
    """Deterministic 16-bit inputs (the pitfall matrix in bf16 per 1 x 128 block, in fp16 per row) on which a scale
    computed in x's own dtype, max|x| / 448 rounded to 16 bits, differs from the float32 one in most blocks
    (tests/test_fp8.py): the visible check names that mistake on every run, not only the hidden one."""
    return [(pitfall_matrix().to(torch.bfloat16), (1, 128)), (pitfall_matrix().to(torch.float16), (1, None))]


SIXTEEN_BIT = ("scale computed in 16 bits", "compute the scale in float32: x.float() first, then max|x| / 448. In "
               "x's own 16-bit dtype the division rounds s to 8 (bf16) or 11 (fp16) significant bits, and every code "
               "of the block moves with it.")  # fmt: skip


def _block_text(block, shape):
    R, C = shape
    br, bc = block
    if (br, bc) == (R, C):
        return "per tensor"
    if (br, bc) == (1, C):
        return "per row"
    return f"blocks of {br} x {bc}"


def _quantizer_mistakes(x, block):
    xf = x.float()
    amax = block_amax(x, block)
    s_ref = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    se = expand_scales(s_ref, tuple(x.shape), block)
    signed_max = block_amax(x.float().clamp_min(0), block)

    def with_s(s):
        return saturate(xf / expand_scales(s, tuple(x.shape), block)), s

    out = []
    if x.dtype in (torch.float16, torch.bfloat16):  # the whole quantizer in x's dtype: s and x / s in 16 bits
        a16 = amax.to(x.dtype)
        s16 = torch.where(a16 > 0, a16 / E4M3_MAX, torch.ones_like(a16))
        q16 = saturate(x / expand_scales(s16, tuple(x.shape), block))
        out.append((*SIXTEEN_BIT, q16, s16.float()))
    return out + [
        ("scale multiplied where it should divide", "q = saturate(x / s): dividing by s = amax / 448 maps the "
         "block's largest magnitude onto 448. x * s shrinks everything towards 0.", saturate(xf * se), s_ref),
        ("multiplied by the reciprocal", "x * (448 / amax) rounds differently from x / s in the last bit: "
         "compute s = amax / 448 first, then divide x by s.", saturate(xf * expand_scales(torch.where(amax > 0, E4M3_MAX / amax, 1.0), tuple(x.shape), block)), s_ref),
        ("max instead of max |x|", "The scale must cover the largest magnitude, negative values included: "
         "use x.abs() before the max.", *with_s(torch.where(signed_max > 0, signed_max / E4M3_MAX, 1.0))),
        ("240 instead of 448", "240 is e4m3fnuz's (AMD) largest value; e4m3fn's is 448: s = amax / 448.",
         *with_s(torch.where(amax > 0, amax / 240, 1.0))),
    ]  # fmt: skip


def check_quantizer(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """quantize_fp8(x, block) must equal the reference bit for bit (zero blocks: any positive finite scale)."""
    seed, g, _ = common.cell(seed)
    what = "quantize_fp8"
    for x, block in _quantizer_inputs(g, hidden):
        R, C = x.shape
        nb = normalize_block(block, x.shape)
        sg = (cdiv(R, nb[0]), cdiv(C, nb[1]))
        ctx = (
            f" (x: {str(x.dtype).replace('torch.', '')} [{R}, {C}], {_block_text(nb, x.shape)}: block = {nb})"
        )
        x_before = x.clone()
        q_ref, s_ref = quantize(x, nb)
        result = _call_non_saturating(fn, x, nb, what=what)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise CheckFailed(f"{what} must return a pair (q, s), got {type(result).__name__}")
        q, s = result
        if not isinstance(q, torch.Tensor) or not isinstance(s, torch.Tensor):
            raise CheckFailed(f"{what} must return two tensors (q, s)")
        if q.dtype != E4M3 or tuple(q.shape) != (R, C):
            raise CheckFailed(
                f"q must be float8_e4m3fn of shape [{R}, {C}], got {q.dtype} {list(q.shape)}{ctx}"
            )
        if tuple(s.shape) != sg:
            hint = ""
            if tuple(s.shape) == (R // nb[0], C // nb[1]):
                hint = " The last, partial block at the edge needs a scale too: use a ceiling division."
            elif tuple(s.shape) == sg[::-1]:
                hint = " The scale grid is transposed: rows of blocks first, s[i, j] for block (i, j)."
            elif s.numel() == math.prod(sg):
                hint = f" Return the grid as 2-D [{sg[0]}, {sg[1]}] (reshape it)."
            raise CheckFailed(f"s must have shape [cdiv({R}, {nb[0]}), cdiv({C}, {nb[1]})] = {list(sg)}, got "
                              f"{list(s.shape)}.{hint}{ctx}")  # fmt: skip
        if s.dtype != torch.float32:
            raise CheckFailed(f"s must be float32, got {s.dtype}: compute the scale in float32 (x.float() first)."
                              f"{ctx}")  # fmt: skip
        zero = block_amax(x_before, nb) == 0
        if bool((s[zero] <= 0).any()) or not bool(torch.isfinite(s).all()):
            raise CheckFailed(f"an all-zero block got scale {s[zero].min().item() if zero.any() else 'NaN'}: "
                              f"it must be a positive finite number (the course uses 1){ctx}")  # fmt: skip
        s_cmp = torch.where(zero, s_ref, s)
        q_ok = bool(_bits_equal(q, q_ref).all())
        if torch.equal(s_cmp, s_ref) and q_ok:
            if not torch.equal(x, x_before):
                raise CheckFailed(f"{what} modified its input x in place{ctx}")
            continue
        named = None
        for name, expl, mq, ms in _quantizer_mistakes(x_before, nb):
            if (torch.equal(torch.where(zero, ms, s), ms) and not torch.equal(ms, s_ref)) or bool(
                _bits_equal(q, mq).all()
            ):
                named = f"This matches a known mistake: {name}. {expl}"
                break
        nan = torch.isnan(q.float()) & ~torch.isnan(q_ref.float())
        if named is None and bool(nan.any()):
            named = (f"This matches a known mistake: missing saturation. {int(nan.sum())} codes are NaN: "
                     "clamp x / s to ±448 before the cast (a cast that does not saturate turns |v| > 464 "
                     "into NaN, as torch ≤ 2.11 and the GPU's plain cvt do).")  # fmt: skip
        lines = [named] if named else []
        if not torch.equal(s_cmp, s_ref):
            bad = (s_cmp != s_ref).nonzero()
            i, j = (int(t) for t in bad[0])
            ratio = float(s_cmp[i, j] / s_ref[i, j])
            lines.append(f"s differs from the reference in {len(bad)} of {s.numel()} blocks, first at block "
                         f"[{i}, {j}]: got {float(s_cmp[i, j]):.8g}, expected {float(s_ref[i, j]):.8g}{ctx}")  # fmt: skip
            if abs(ratio - 1) < 1e-3:
                lines.append("They differ in the last bits: compute the scale in float32, max|x| / 448 from "
                             "x.float().")  # fmt: skip
        else:
            diff = ~_bits_equal(q, q_ref)
            lines.append(f"q differs from the reference in {int(diff.sum())} of {q.numel()} codes{ctx}")
            lines.append(f"Differences lie {checks.where_2d(diff)}.")
        raise CheckFailed("\n".join(lines))
    checks.passed(f"{what}: bit-exact on {'hidden' if hidden else 'visible'} inputs (seed {seed})")


def check_quantizers(saturate_fn, quantize_fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1: the saturating cast, then the quantizer at every granularity."""
    check_saturate(saturate_fn, hidden=hidden, seed=seed)
    check_quantizer(quantize_fn, hidden=hidden, seed=seed)


# ----------------------------------------------------------------------------------------------------------
# Exercise 2: the e4m3 -> fp16 decoder


def check_decoder(decode_fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """decode_fn(codes: uint8 tensor) -> fp16 tensor, through the learner's Triton function: all 256 codes."""
    what = "e4m3_to_fp16"
    checks.require_own_kernel(decode_fn, what=what)
    device = validation.device()
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    if hidden:
        seed = checks.fresh_seed() if seed is None else seed
        g = checks.generator(seed)
        codes = codes[torch.randperm(256, generator=g)].repeat(2)  # order and length the kernel cannot assume
    got, _ = checks.run_audited(decode_fn, codes.to(device), what=what)
    if not isinstance(got, torch.Tensor) or got.dtype != torch.float16 or got.shape != codes.shape:
        raise CheckFailed(f"{what} must give float16 values, one per code, got {getattr(got, 'dtype', got)}")
    got = got.cpu()
    ref = codes.view(E4M3).to(torch.float16)
    ok = (got == ref) | (torch.isnan(got) & torch.isnan(ref))
    ok &= ~(torch.isnan(got) & ~torch.isnan(ref))
    if bool(ok.all()) and torch.equal(
        torch.signbit(got[~torch.isnan(got)]), torch.signbit(ref[~torch.isnan(ref)])
    ):
        checks.passed(f"{what}: all 256 codes decode exactly{' (hidden order)' if hidden else ''}")
        return
    bad = (~ok).nonzero().flatten()
    if len(bad) == 0:  # only the sign of zero differs
        raise CheckFailed(f"{what}: 0x80 must decode to -0.0 (the sign bit goes to bit 15 of the fp16)")
    lines = [f"{what}: {len(set(codes[bad].tolist()))} of 256 codes decode wrong"]
    kinds = {"subnormal (exponent 0)": [], "normal": [], "NaN (0x7F, 0xFF)": []}
    for i in bad.tolist():
        c = int(codes[i])
        key = (
            "NaN (0x7F, 0xFF)"
            if c & 0x7F == 0x7F
            else "subnormal (exponent 0)"
            if (c >> 3) & 0xF == 0
            else "normal"
        )
        if c not in [x[0] for x in kinds[key]]:
            kinds[key].append((c, float(got[i]), float(ref[i])))
    for key, items in kinds.items():
        if items:
            c, gv, rv = items[0]
            lines.append(f"{len(items)} {key} codes, e.g. 0x{c:02X}: got {gv:.6g}, expected {rv:.6g}")
    ratios = [
        float(got[i] / ref[i])
        for i in bad.tolist()
        if float(ref[i]) not in (0.0,) and not math.isnan(float(ref[i]))
    ]
    if ratios and all(abs(r - ratios[0]) < 1e-6 for r in ratios) and ratios[0] > 0:
        lines.insert(1, f"This matches a known mistake: exponent bias not corrected. Every wrong value is off by "
                        f"a factor {ratios[0]:.6g}: e4m3's bias is 7 and fp16's 15, so multiply by 2^8 = 256 "
                        "after placing the bits (or add 8 to the exponent field).")  # fmt: skip
    elif kinds["NaN (0x7F, 0xFF)"] and not kinds["normal"] and not kinds["subnormal (exponent 0)"]:
        lines.insert(1, "This matches a known mistake: NaN not handled. e4m3fn has no infinity: S.1111.111 is "
                        "NaN, and 0x7E (448) is the largest value. Select NaN with tl.where.")  # fmt: skip
    raise CheckFailed("\n".join(lines))
