"""Chapter FP8: the bits explorer, the notebook's scaffolding (validation, the two kernel paths, launch
configurations), test inputs, the known mistakes and the checks of each exercise, and the cells that predict and
compare the paths.

The format itself (saturating cast, block scales, quantizer, dequantizer, references, bytes moved) is
qmatmul/formats/fp8.py; its names are re-exported here, where the notebook reaches them as `fp8.<name>`.
"""

from __future__ import annotations

import math
import re

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from qmatmul import checks, timing
from qmatmul.checks import CheckFailed, Mistake, common, harness
from qmatmul.formats.fp8 import (  # noqa: F401 - the notebook's names
    E4M3,
    E4M3_MAX,
    E4M3_OVERFLOW,
    FLOAT8_FIELDS,
    SCALE_BLOCK,
    block_amax,
    block_reference,
    bytes_moved,
    bytes_moved_naive,
    bytes_per_weight,
    cdiv,
    decode_bits,
    dequantize,
    expand_scales,
    naive,
    normalize_block,
    quantize,
    reference,
    saturate,
    scaled_mm,
)
from qmatmul.kernels import configs
from qmatmul.scaffold import validation
from qmatmul.teaching import compare, recorded, roofline_model, widgets
from qmatmul.teaching.roofline_model import bytes_moved_dense, flops  # noqa: F401 - the notebook's names

# Decode grading: a weight of 28672 x 8192 e4m3 (235 MB) is about 4x the H200's L2.
BANDWIDTH_SHAPE = (28672, 8192)
BANDWIDTH_MS = (1, 16)
BANDWIDTH_THRESHOLD = 0.5  # fraction of the copy bandwidth measured in the same process
PREFILL_SHAPE = (4096, 8192, 8192)  # M, N, K
# Prefill grading: a fraction of torch._scaled_mm (row-wise) TFLOP/s measured in the same process, between what
# the solution and the naive dequantize-then-matmul path reach on the H200 (docs/bench-h200.json, quoted in course.md):
# 57 % and 35 % graph-timed on 2026-12-02, after the solution began promoting its partial sums on Hopper (66 % before).
PREFILL_THRESHOLD = 0.42
# The names of the course package the learner's graded code may use (grader/static.py, course_problems).
GIVEN = {
    "qmatmul.fp8": {
        "prepare",
        "prepare_block",
        "prefill_config",
        "decode_config",
        "block_config",
        "SCALE_BLOCK",
    }
}


# ----------------------------------------------------------------------------------------------------------
# The bits of an 8-bit float


def describe_bits(v: float, fmt: str = "e4m3fn", saturating: bool = True) -> dict:
    """What happens to v in an 8-bit format: the code, its fields, its value and the error."""
    e_bits, m_bits, bias, has_inf = FLOAT8_FIELDS[fmt]
    dtype = E4M3 if fmt == "e4m3fn" else torch.float8_e5m2
    t = torch.tensor([v], dtype=torch.float32)
    if saturating:
        top = E4M3_MAX if fmt == "e4m3fn" else 57344.0
        t = t.clamp(-top, top)
    code = int(t.to(dtype).view(torch.uint8)[0])
    value = decode_bits(code, fmt)
    e = (code >> m_bits) & ((1 << e_bits) - 1)
    m = code & ((1 << m_bits) - 1)
    b = format(code, "08b")
    kind = "nan" if math.isnan(value) else "inf" if math.isinf(value) else "subnormal" if e == 0 else "normal"
    if value == 0:
        kind = "zero"
    return {
        "code": code,
        "bits": f"{b[0]} {b[1 : 1 + e_bits]} {b[1 + e_bits :]}",
        "sign": code >> 7,
        "exponent": e,
        "mantissa": m,
        "kind": kind,
        "value": value,
        "error": value - v if math.isfinite(value) else math.nan,
    }


def show_bits(values=(1.0, 0.1, -3.5, 448.0, 500.0, 2.0**-9, 1e-4, 60000.0)) -> None:
    """A table: each value in e4m3fn (saturating) and e5m2."""
    print(
        f"{'value':>12} | {'e4m3fn: s eeee mmm':<22}{'→':>2} {'decoded':>10} | {'e5m2: s eeeee mm':<22}{'→':>2} {'decoded':>10}"
    )
    for v in values:
        a, b = describe_bits(v, "e4m3fn"), describe_bits(v, "e5m2", saturating=False)
        print(f"{v:>12.6g} | {a['bits']:<12}{a['kind']:>10} {a['value']:>12.6g} | "
              f"{b['bits']:<12}{b['kind']:>10} {b['value']:>12.6g}")  # fmt: skip


def bits_explorer():
    """Type a number: see its e4m3fn and e5m2 codes, fields, decoded values and rounding error."""
    import ipywidgets as W

    def text(v: float, saturating: bool) -> str:
        rows = []
        for fmt, sat in (("e4m3fn", saturating), ("e5m2", False)):
            c = describe_bits(v, fmt, saturating=sat)
            _, m_bits, bias, _ = FLOAT8_FIELDS[fmt]
            rows.append(
                f"{fmt:<7} bits {c['bits']:<12} ({c['kind']}: sign {c['sign']}, exponent {c['exponent']} "
                f"(bias {bias}), mantissa {c['mantissa']}/{1 << m_bits})\n"
                f"        value {c['value']:.6g}   error {c['error']:+.3g}"
            )
        note = (
            ""
            if saturating
            else "\n(e4m3fn without saturation: |v| > 464 becomes NaN; torch ≤ 2.11 does this)"
        )
        return "\n".join(rows) + note

    v = W.FloatText(value=0.3, description="v")
    sat = W.Checkbox(value=True, description="saturate e4m3fn at ±448")
    return W.VBox([W.HBox([v, sat]), widgets.text_view(text, v=v, saturating=sat)])


# ----------------------------------------------------------------------------------------------------------
# Scaffolding for the kernels: validation, allocation, launch configurations


def out_dtype(device: str) -> torch.dtype:
    if device == "cuda" and torch.cuda.get_device_capability() >= (8, 0):
        return torch.bfloat16
    return torch.float16  # the interpreter and T4: fp16 (the chapter's 16-bit type there)


def has_fp8_dot(device: str) -> bool:
    return device == "cuda" and torch.cuda.get_device_capability() >= (8, 9)


def imprecise_fp8_accumulation(device: str) -> bool:
    """Whether Triton's fp8 tl.dot accumulates in reduced precision here unless told otherwise: on sm_90 alone
    (triton's CUDA backend sets max_num_imprecise_acc_default = 2**30 for capability 90)."""
    return device == "cuda" and tuple(torch.cuda.get_device_capability()) == (9, 0)


_FORCED_PATH: list = []  # the checks force one path or the other (see use_path)


class use_path:
    """Context manager: the configs choose the native fp8 tl.dot (True) or the decode-to-fp16 path (False)."""

    def __init__(self, fp8_dot: bool):
        self.fp8_dot = fp8_dot

    def __enter__(self):
        _FORCED_PATH.append(self.fp8_dot)
        checks.WORKER_STATE["qmatmul.fp8:_FORCED_PATH"] = list(_FORCED_PATH)  # the worker's configs too

    def __exit__(self, *exc):
        _FORCED_PATH.pop()
        checks.WORKER_STATE["qmatmul.fp8:_FORCED_PATH"] = list(_FORCED_PATH)


def _fp8_dot(device: str) -> bool:
    if _FORCED_PATH:
        return _FORCED_PATH[-1]
    return has_fp8_dot(device)


def _vector(t, n, name):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32 or t.numel() != n or t.dim() > 2 or (t.dim() == 2 and 1 not in t.shape):
        raise ValueError(
            f"{name} must be float32 with one scale per row: shape [{n}] or [{n}, 1], got {t.dtype} "
            f"of shape {list(t.shape)}"
        )
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t.reshape(-1)


def _operands(xq, wq) -> tuple[int, int, int]:
    """Both operands e4m3 [M, K] and [N, K]: returns M, N, K."""
    validation.require_tensors(xq=xq, wq=wq)
    validation.require_codes("xq", xq, E4M3)
    validation.require_codes("wq", wq, E4M3)
    validation.require_same_k("xq", xq, "wq", wq, "[N, K]", wq.shape[1])
    return xq.shape[0], wq.shape[0], xq.shape[1]


def prepare(xq, sx, wq, sw, out=None):
    """Validate the inputs of a W8A8-FP8 matmul with per-row scales; allocate out if needed.

    Returns M, N, K, sx, sw (as 1-D views), out.
    """
    M, N, K = _operands(xq, wq)
    sx = _vector(sx, M, "sx")
    sw = _vector(sw, N, "sw")
    validation.require_one_device(xq=xq, sx=sx, wq=wq, sw=sw)
    validation.require_contiguous("xq", wq=wq)
    return M, N, K, sx, sw, validation.output(out, M, N, out_dtype(xq.device.type), xq.device)


def prefill_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """Tile sizes and path of the tiled kernel. FP8_DOT: the native fp8 tl.dot (sm_89+)."""
    fp8_dot = _fp8_dot(device)
    if device != "cuda":
        return dict(configs.INTERPRETER_TILED, FP8_DOT=fp8_dot)
    if configs.fma_dot(device):  # a T4: FMA tiles (qmatmul/kernels/configs.py)
        return dict(configs.FMA_TILED, FP8_DOT=False)
    if not fp8_dot:  # decode e4m3 to fp16 in registers: 16-bit tiles, as in W8A16
        return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, FP8_DOT=False, num_warps=8, num_stages=3)
    # Swept on the H200 at 4096 x 8192 x 8192 (docs/perf-notes.md, 2026-12-02), % of torch._scaled_mm: with the
    # partial sums promoted every BLOCK_K, 256 x 128 x 128 with 8 warps, 3 stages 51 %; 128 x 128 x 128 with 8 warps
    # 47 %, with 4 warps 32 % (it spills). Without promotion (wrong on Hopper) 128 x 128 x 128 with 4 warps: 65 %.
    big = M > 64
    if big and imprecise_fp8_accumulation(device):  # the promoted partial sums want two warp groups
        return dict(BLOCK_M=256, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=8, num_stages=3)
    return dict(BLOCK_M=128 if big else 64, BLOCK_N=128, BLOCK_K=128, FP8_DOT=True, num_warps=4, num_stages=4)


def decode_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """The decode kernel: all M rows (padded to 16) in one program, a strip of BLOCK_N columns."""
    fp8_dot = _fp8_dot(device)
    if device != "cuda":
        return dict(configs.INTERPRETER_DECODE, FP8_DOT=fp8_dot)
    # Graph-timed on the H200 (docs/perf-notes.md, 2026-12-01), fraction of copy at M = 1 / 16: 28672 x 8192 with
    # 128 x 256: 93 / 97; 8192 x 28672 with 64 x 1024, 8 warps: 97 / 97 (64 x 512: 90 / 99); 8192 x 8192 with
    # 64 x 512: 81 / 80 (64 x 256: 65 / 64). The fp16 path (no fp8 tensor cores) keeps its earlier tiles.
    long_k = K >= 16384
    if configs.fma_dot(device):  # a T4: FMA tiles (qmatmul/kernels/configs.py)
        return dict(configs.FMA_DECODE, FP8_DOT=False)
    if not fp8_dot:
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512 if long_k else 256, FP8_DOT=False, num_warps=4,
                    num_stages=4 if long_k else 3)  # fmt: skip
    if N >= 16384:
        return dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=256, FP8_DOT=True, num_warps=4, num_stages=3)
    if long_k:
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=1024, FP8_DOT=True, num_warps=8, num_stages=3)
    return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=512, FP8_DOT=True, num_warps=4, num_stages=4)


# ----------------------------------------------------------------------------------------------------------
# Byte and FLOP counts


def explain_format(K: int = 8192) -> None:
    rows = [
        ("bf16 dense", 2.0),
        ("W8A16 int8 + fp32 scale per row", 1 + 4 / K),
        ("FP8 e4m3 + fp32 scale per row", bytes_per_weight(K)),
        ("FP8 e4m3 + fp32 scale per 128x128 block", bytes_per_weight(K, (128, 128))),
    ]
    print(f"Bytes per weight (rows of K = {K}):")
    for name, b in rows:
        print(f"  {name:<42} {b:.5f} B")
    print(
        "At decode FP8 moves the bytes of W8A16; at prefill the fp8 tensor cores run at twice the bf16 rate."
    )


# ----------------------------------------------------------------------------------------------------------
# Test inputs


def random_matrix(R: int, C: int, g: torch.Generator, outliers: bool = False) -> torch.Tensor:
    """Rows of distinct magnitudes; with outliers, a few large values (as in LLM activations)."""
    row_scale = torch.exp(torch.empty(R, 1).uniform_(-3.0, 3.0, generator=g))
    x = torch.randn(R, C, generator=g) * row_scale
    if outliers:
        cols = torch.randint(0, C, (max(1, C // 64),), generator=g)
        x[:, cols] *= 50.0
    return x


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


def random_problem(M, N, K, device, g, strided=False, per_tensor=False):
    """xq [M, K] (strided view when asked), sx [M], wq [N, K], sw [N] from the reference quantizer."""
    x = random_matrix(M, K + (9 if strided else 0), g)
    xq_full, sx = quantize(x, (M, K + (9 if strided else 0)) if per_tensor else (1, x.shape[1]))
    if per_tensor:
        sx = sx.expand(M, 1).contiguous()
    wq, sw = quantize(random_matrix(N, K, g) * 0.02, (1, K))
    return xq_full[:, :K].to(device), sx.reshape(-1).to(device), wq.to(device), sw.reshape(-1).to(device)


# ----------------------------------------------------------------------------------------------------------
# Exercise 1: the saturating cast and the quantizer


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
        with checks.worker_context("qmatmul.fp8:NonSaturatingCasts"):
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
                (random_matrix(256, 256, g), (128, 128)), (pitfall_matrix(), (1, 128))]  # fmt: skip
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

    return [
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
            raise CheckFailed(f"s must be float32, got {s.dtype}: compute in float32 (x.float()).{ctx}")
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
                lines.append("They differ in the last bits: compute max|x| / 448 in float32, from x.float().")
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


def granularity_figure(quantize_fn, seed: int = 0):
    """Relative error of x ≈ q·s on activations with outlier channels, per tensor / per row / per block."""
    import matplotlib.pyplot as plt

    g = checks.generator(seed)
    x = random_matrix(256, 1024, g, outliers=True)
    x[:, 5] *= 40  # one very large outlier channel
    x[7, :] *= 1e-3  # one quiet token
    cases = [("per tensor", (256, 1024)), ("per row (token)", (1, 1024)), ("1 x 128 blocks", (1, 128)),
             ("128 x 128 blocks", (128, 128))]  # fmt: skip
    names, errs, per_row = [], [], []
    for name, block in cases:
        q, s = quantize_fn(x, block)
        d = dequantize(q, s, block)
        names.append(name)
        errs.append(float((d - x).norm() / x.norm()))
        per_row.append(((d - x).norm(dim=1) / x.norm(dim=1)).numpy())
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4))
    a.bar(names, errs, color=["tab:red", "tab:orange", "tab:green", "tab:blue"])
    a.set_ylabel("‖q·s − x‖ / ‖x‖")
    a.set_yscale("log")
    a.set_title("whole tensor")
    for i, e in enumerate(errs):
        a.text(i, e, f"{e:.2%}", ha="center", va="bottom", fontsize=8)
    a.tick_params(axis="x", labelsize=8)
    for name, r in zip(names, per_row, strict=True):
        b.semilogy(r, label=name, lw=1)
    b.set_xlabel("row (token)")
    b.set_ylabel("relative error of the row")
    b.set_title("per row: the quiet token 7 is lost with one scale")
    b.legend(fontsize=8)
    fig.suptitle("e4m3 error against scaling granularity, on activations with outlier channels")
    fig.tight_layout()
    return fig


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


# ----------------------------------------------------------------------------------------------------------
# Exercises 3 and 4: the GEMM with row scales in the epilogue, and the decode kernel


FOLDED = ("before the dot rounds every product to 16 bits (the e4m3 values themselves are exact there), and the "
          "output drifts past the tolerance: multiply the fp32 accumulator by sx[:, None] · sw[None, :] in the "
          "epilogue.")  # fmt: skip


def kernel_mistakes(xq, sx, wq, sw, dtype: torch.dtype | None = None) -> list[Mistake]:
    """The known wrong outputs; with `dtype` (the decoded operands' 16-bit type) also a scale folded into one."""
    raw = xq.float().cpu() @ wq.float().cpu().T
    sxc, swc = sx.float().cpu().reshape(-1), sw.float().cpu().reshape(-1)
    M, K = xq.shape
    N = wq.shape[0]
    out = [
        Mistake("scales divided where they should multiply", "Dequantizing multiplies: y = acc * sx[m] * sw[n] "
                "(the quantizer divided by s).", raw / sxc[:, None] / swc[None, :]),
        Mistake("scales missing", "Apply both scales in the epilogue: acc * sx[:, None] * sw[None, :].", raw),
        Mistake("activation scale missing", "Multiply by sx[m], one per row of x (and of y).", raw * swc[None, :]),
        Mistake("weight scale missing", "Multiply by sw[n], one per output column.", raw * sxc[:, None]),
        Mistake("exponent bias not corrected", "e4m3 has bias 7, fp16 bias 15: the decoded tiles are 2^-8 too "
                "small, so the product is 2^-16 too small.", reference(xq, sx, wq, sw) * 2.0**-16),
    ]  # fmt: skip
    if M == N:
        out.append(Mistake("row scale on the wrong axis", "sx belongs to the rows m of y (sx[:, None]) and sw to "
                           "its columns n (sw[None, :]); they were swapped.", raw * swc[:, None] * sxc[None, :]))  # fmt: skip
    deq_w = wq.float().cpu() * swc[:, None]
    deq_x = xq.float().cpu() * sxc[:, None]
    for bk in (16, 32, 64, 128, 256, 512):
        kt = (K // bk) * bk
        if 0 < kt < K:
            out.append(Mistake(f"last partial K block dropped (BLOCK_K = {bk})", "Loop over range(0, K, BLOCK_K) "
                               "and mask k < K.", deq_x[:, :kt] @ deq_w[:, :kt].T))  # fmt: skip
    if dtype is not None:
        xf, wf = xq.float().cpu(), wq.float().cpu()
        out += [
            Mistake("sw folded into the weights", f"sw multiplied into the decoded weights {FOLDED}",
                    (xf @ deq_w.to(dtype).float().T) * sxc[:, None]),
            Mistake("sx folded into the activations", f"sx multiplied into the decoded activations {FOLDED}",
                    (deq_x.to(dtype).float() @ wf.T) * swc[None, :]),
        ]  # fmt: skip
    return out


def _name_overflowing(report: str, y: torch.Tensor, mistakes, dtype) -> str:
    """compare() never matches infinite outputs; a mistake that overflows the output dtype is named here."""
    if "known mistake" in report or not bool(torch.isinf(y.float()).any()):
        return report
    got = y.detach().float().cpu()
    for m in mistakes:
        if m.output is None or tuple(m.output.shape) != tuple(got.shape):
            continue
        want = m.output.to(dtype).float()
        fin = torch.isfinite(want)
        if (
            torch.equal(torch.isinf(got), ~fin)
            and torch.equal(got[~fin], want[~fin])
            and not bool(checks.mismatch(got[fin], m.output[fin], checks.tolerance_for(dtype)).any())
        ):
            head, *rest = report.splitlines()
            return "\n".join([head, f"This matches a known mistake: {m.name}. {m.explanation}", *rest])
    return report


def _paths(device: str) -> list[bool]:
    """Which paths to check: the decode-to-fp16 path always; the native fp8 dot where it runs."""
    # Native first: a kernel that passes there and fails on the portable path points at exercise 2's decoder.
    if device == "cuda":
        return [True, False] if has_fp8_dot(device) else [False]
    return [True, False]  # the interpreter runs both (tests/test_fp8.py records that its fp8 tl.dot works)


PATH_NAMES = {True: "native fp8 tl.dot", False: "e4m3 decoded to fp16"}  # fp8_dot -> the path in the messages


def _run_path(fn, args, fp8_dot: bool, n_passed: int, what: str):
    try:
        with use_path(fp8_dot):
            return checks.run_audited(fn, *args[:4], out=args[4], what=what)
    except CheckFailed as exc:
        if not fp8_dot and n_passed > 0 and "not implemented yet" in str(exc):
            raise CheckFailed(
                f"{what} passed on the native fp8 path, but its portable path calls e4m3_to_fp16 (exercise 2), "
                "which is not implemented yet: finish exercise 2, then run this cell again."
            ) from None
        raise


def _check_kernel(fn, what, shapes, device, g) -> int:
    n = 0
    dtype = out_dtype(device)
    for fp8_dot in _paths(device):
        path = PATH_NAMES[fp8_dot]
        for i, (M, N, K) in enumerate(shapes):
            strided = i % 2 == 1
            per_tensor = i == 1 and len(shapes) > 2  # strided x with one scale for the whole tensor
            xq, sx, wq, sw = random_problem(M, N, K, device, g, strided=strided, per_tensor=per_tensor)
            full, out = common.poisoned_out(M, N, dtype, device, strided)
            inputs = dict(xq=xq, sx=sx, wq=wq, sw=sw)
            before = checks.snapshot(inputs)
            ctx = (f" (M={M}, N={N}, K={K}, {path}{', strided xq and out' if strided else ''}"
                   f"{', per-tensor activation scale' if per_tensor else ''})")  # fmt: skip
            y, ops = _run_path(fn, (xq, sx, wq, sw, out), fp8_dot, n, what)
            mistakes = kernel_mistakes(xq, sx, wq, sw, dtype=dtype)
            try:
                checks.verify_kernel_result(y, ops, what=what, inputs=inputs, before=before, out=out, full=full,
                                            weight_shape=(N, K), dtype=dtype, expected=reference(xq, sx, wq, sw),
                                            mistakes=mistakes, ctx=ctx)  # fmt: skip
            except CheckFailed as exc:
                raise CheckFailed(_name_overflowing(str(exc), y, mistakes, dtype)) from None
            n += 1
    return n


def _skipped(device: str) -> str:
    if device == "cuda" and not has_fp8_dot(device):
        return (" The native fp8 tl.dot path was not checked: this GPU (sm_"
                f"{''.join(map(str, torch.cuda.get_device_capability()))}) has no fp8 tensor cores (sm_89+).")  # fmt: skip
    return ""


def accumulation_problem(M: int, N: int, K: int, device: str) -> tuple:
    """Every row of x: 448 at k = 0 and at k = K - 1, 0.125 on [256, K - 256). Every row of w: 448 at k = 0,
    -448 at k = K - 1, 0.125 at every 32nd k of [256, K - 256). The big products cancel; what is left is one
    1/64 for each 32 k's, (K - 512) / 2048 in all, exact in fp32 in any order. A running sum kept to 21 bits or
    fewer next to 448², as Hopper's fp8 tensor cores keep one over a K loop, drops every 1/64."""
    x, w = torch.zeros(K), torch.zeros(K)
    x[256 : K - 256] = 0.125
    w[256 : K - 256 : 32] = 0.125
    x[0] = x[K - 1] = w[0] = 448.0
    w[K - 1] = -448.0
    xq, wq = x.expand(M, K).to(E4M3).contiguous(), w.expand(N, K).to(E4M3).contiguous()
    return xq.to(device), torch.ones(M, device=device), wq.to(device), torch.ones(N, device=device)


ACCUMULATION_MISTAKE = (
    "fp8 partial sums accumulated in reduced precision. On Hopper (sm_90) the fp8 "
    "tensor cores keep only about 14 bits of a running sum, so a long K loop loses small terms next to large "
    "ones. Promote the partial sums to the fp32 accumulator every K step: tl.dot(..., acc, "
    "max_num_imprecise_acc=BLOCK_K), as DeepSeek-V3 does every 128 elements."
)


def _check_fixed(fn, what: str, device: str, M: int, N: int, K: int, problems) -> int:
    """Fixed problems that show a mistake random inputs show only by chance, run after the ordinary cases on every
    path: problems holds (args, note, mistakes, explanation); a failure names `mistakes` it matches, or is
    `explanation` (a known mistake with no output of its own to match)."""
    n = 0
    dtype = out_dtype(device)
    for fp8_dot in _paths(device):
        for args, note, mistakes, explanation in problems:
            args = tuple(t.clone() for t in args)  # fresh for each path, as if built again
            out = torch.full((M, N), float("nan"), dtype=dtype, device=device)
            y, _ = _run_path(fn, (*args, out), fp8_dot, 1, what)
            try:
                checks.compare(y, reference(*args), what=what, rtol=checks.tolerance_for(dtype), poisoned=True,
                               context=f" (M={M}, N={N}, K={K}, {PATH_NAMES[fp8_dot]}{note})",
                               mistakes=kernel_mistakes(*args, dtype=dtype) if mistakes else ())  # fmt: skip
            except CheckFailed as exc:
                if not explanation:
                    raise
                head, *rest = str(exc).splitlines()
                raise CheckFailed(
                    "\n".join([head, f"This matches a known mistake: {explanation}", *rest])
                ) from None
            n += 1
    return n


def _check_accumulation(fn, what: str, device: str) -> int:
    """A deterministic case that shows reduced-precision accumulation (run after the ordinary cases pass)."""
    M, N, K = (128, 128, 8192) if device == "cuda" else (32, 64, 1024)
    note = f": big products that cancel, small ones that sum to {(K - 512) / 2048:g}"
    return _check_fixed(fn, what, device, M, N, K,
                        [(accumulation_problem(M, N, K, device), note, False, ACCUMULATION_MISTAKE)])  # fmt: skip


def rounding_problems(M: int, N: int, K: int, device: str) -> list[tuple]:
    """The rounding probe (qmatmul/kernels/configs.py) for each operand, (which, (xq, sx, wq, sw)): one operand's rows sum to
    1 along K with the scale PROBE_SCALE, the other is ones with scale 1. A kernel that multiplies that scale into the
    decoded 16-bit operand before the dot misses it on every run."""
    d, s = common.rounding_probe_weights(max(M, N), K).float(), common.PROBE_SCALE
    problems = []
    for ones, xs, ws, sx, sw in (
        ("x", torch.ones(M, K), d[:N], 1.0, s),
        ("w", d[:M], torch.ones(N, K), s, 1.0),
    ):
        args = (xs.to(E4M3), torch.full((M,), sx), ws.to(E4M3), torch.full((N,), sw))
        problems.append((ones, tuple(t.to(device) for t in args)))
    return problems


def _check_rounding(fn, what: str, device: str) -> int:
    """The rounding probes, on every path: a scale folded into a 16-bit operand fails them on every run."""
    M, N, K = 16, 64, 128
    problems = [
        (args, f", the rounding probe: {ones} = 1", True, "")
        for ones, args in rounding_problems(M, N, K, device)
    ]
    return _check_fixed(fn, what, device, M, N, K, problems)


def _accumulation_hint(report: str, imprecise: bool) -> str:
    """A timed batch with a few wrong outputs in a million where fp8 accumulates imprecisely
    (imprecise_fp8_accumulation): the report, and what that points at."""
    wrong = re.search(r"(\d+) of (\d+) elements \([^)]*\) differ from the reference", report)
    if imprecise and wrong and int(wrong[1]) < 1e-4 * int(wrong[2]):
        lead = "On Hopper a few wrong outputs in a million at this K point at a known mistake"
        return f"{report}\n{lead}: {ACCUMULATION_MISTAKE}"
    return report


def check_matmul(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3: fp8_matmul on both paths, ragged shapes, strided views, poisoned output, fused."""
    seed, g, device = common.cell(seed)
    if not hidden:
        shapes = [(64, 64, 128), (50, 70, 90)]
    else:
        big = device == "cuda"
        M = int(torch.randint(17, 300 if big else 130, (1,), generator=g))
        shapes = [
            (M, M, int(torch.randint(40, 1000 if big else 260, (1,), generator=g)))
        ]  # square: names a swap
        M2 = int(torch.randint(17, 300 if big else 130, (1,), generator=g))
        shapes.append((M2, int(torch.randint(33, 700 if big else 200, (1,), generator=g)),
                       int(torch.randint(40, 1000 if big else 260, (1,), generator=g))))  # fmt: skip
        shapes.append((1, 129, 77))
    n = _check_kernel(fn, "fp8_matmul", shapes, device, g)
    n += _check_accumulation(fn, "fp8_matmul", device)
    n += _check_rounding(fn, "fp8_matmul", device)
    checks.passed(f"fp8_matmul: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})."
                  + _skipped(device))  # fmt: skip


def check_decode(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 4 (correctness): M = 1..16, ragged N and K, both paths where they run."""
    seed, g, device = common.cell(seed)
    if not hidden:
        shapes = [(16, 16, 200), (1, 64, 128)]  # a square one first: a swap of sx and sw can be named
    else:
        big = device == "cuda"
        shapes = [(16, 16, int(torch.randint(40, 3000 if big else 300, (1,), generator=g)))]
        shapes += [(M, int(torch.randint(33, 2000 if big else 200, (1,), generator=g)),
                   int(torch.randint(40, 3000 if big else 300, (1,), generator=g)))
                  for M in (1, int(torch.randint(2, 16, (1,), generator=g)), 16)]  # fmt: skip
    n = _check_kernel(fn, "fp8_decode", shapes, device, g)
    n += _check_rounding(fn, "fp8_decode", device)
    checks.passed(f"fp8_decode: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})."
                  + _skipped(device))  # fmt: skip


def _timing_problem(M, N, K, g):
    (xq,), (sx,) = (t.unbind(0) for t in timing_inputs(M, K, g, 1))
    return (xq, sx, *timing_weights(N, K, g))


def _timing_block_problem(M, N, K, g):
    xq, _, wq, _ = _timing_problem(M, N, K, g)
    kb, nb = cdiv(K, SCALE_BLOCK), cdiv(N, SCALE_BLOCK)
    sx = torch.rand(M, kb, device="cuda", generator=g) * 1e-2 + 1e-3
    sw = torch.rand(nb, kb, device="cuda", generator=g) * 1e-4 + 1e-5
    return xq, sx, wq, sw


def _recheck(fn, what, M, N, K, g):
    """Correctness on fresh inputs after timing: a kernel must not special-case the timed call."""
    xq, sx, wq, sw = _timing_problem(M, N, K, g)
    out = torch.full((M, N), float("nan"), dtype=out_dtype("cuda"), device="cuda")
    y = checks.call_learner(fn, xq, sx, wq, sw, out=out, what=what)
    checks.compare(y, reference(xq, sx, wq, sw), what=f"{what} (after timing)", rtol=checks.tolerance_for(out.dtype),
                   poisoned=True, context=f" (M={M}, N={N}, K={K})")  # fmt: skip


def timing_weights(N: int, K: int, g: torch.Generator) -> tuple:
    """The timed weight (qmatmul/checks/harness.py): e4m3 codes across the range and per-row scales."""
    wq = (torch.randn(N, K, device=g.device, generator=g) * 100).clamp(-448, 448).to(E4M3)
    sw = torch.rand(N, device=g.device, generator=g) * 1e-4 + 1e-5
    return wq, sw


def timing_inputs(M: int, K: int, g: torch.Generator, n: int) -> tuple:
    """n quantized activations [M, K] with their per-row scales, stacked: random bytes with the lowest mantissa
    bit cleared, so every exponent appears, ±448 and the subnormals too, and the NaN codes (0x7F, 0xFF) never do.
    The timed window holds the draw (qmatmul/checks/harness.py), so it is cheap: 64-bit words, one masking pass. Bytes
    drawn one at a time (randint on uint8) took 0.24 ms of the window a prefill call on the H200, 30 % of the
    kernel's time (2026-12-02)."""
    size = n * M * K
    words = torch.empty(-(-size // 8), dtype=torch.int64, device=g.device).random_(
        -(2**63), None, generator=g
    )
    words &= _CLEAR_LOW_MANTISSA
    xq = words.view(torch.uint8)[:size].view(n, M, K).view(E4M3)
    sx = torch.rand(n, M, device=g.device, generator=g) * 1e-2 + 1e-3
    return xq, sx


_CLEAR_LOW_MANTISSA = int.from_bytes(b"\xfe" * 8, "little", signed=True)  # 0xFE in every byte of a word


def check_prefill_speed(fn, *, threshold: float = PREFILL_THRESHOLD, seed: int | None = None):
    """Exercise 3 (performance): TFLOP/s as a fraction of torch._scaled_mm (row-wise scales), same process."""
    if not torch.cuda.is_available():
        return checks.not_measured(
            "Performance not measured: no CUDA GPU here. On a GPU with fp8 tensor cores (sm_89+) this cell "
            f"awards its points when fp8_matmul reaches {threshold:.0%} of torch._scaled_mm's TFLOP/s."
        )
    if not has_fp8_dot("cuda"):
        return checks.not_measured(
            f"Performance not measured: this GPU (sm_{''.join(map(str, torch.cuda.get_device_capability()))}) has "
            "no fp8 tensor cores, so there is no fp8 GEMM to compare with (sm_89+: L4, H100, H200, B200)."
        )
    checks.require_own_kernel(fn, what="fp8_matmul")
    seed = checks.fresh_seed() if seed is None else seed
    M, N, K = PREFILL_SHAPE
    nbytes, nflops = bytes_moved(M, N, K), flops(M, N, K)
    ref_problem = _timing_problem(M, N, K, checks.generator(seed, "cuda"))
    ref = timing.time_it(
        "torch._scaled_mm (row-wise)", lambda: scaled_mm(*ref_problem), nbytes, nflops, False
    )
    try:
        mine = harness.time_calls(fn, what="fp8_matmul", module=__name__, N=N, K=K, M=M,
                                  out_dtype=out_dtype("cuda"), nbytes=nbytes, seed=seed, est_ms=2 * ref.ms)  # fmt: skip
    except CheckFailed as exc:
        raise CheckFailed(_accumulation_hint(str(exc), imprecise_fp8_accumulation("cuda"))) from None
    print(mine.describe().split(" (copy")[0] + f", {nflops / (mine.ms * 1e-3) / 1e12:.0f} TFLOP/s")
    print(ref.describe())
    frac = ref.ms / mine.ms
    if frac < threshold:
        hopper = (
            " On Hopper keep the launch fp8.prefill_config gives (256 x 128 tiles, 8 warps): with one warp group "
            "(4 warps) the promoted partial sums spill, and the kernel reads about a third of torch._scaled_mm."
            if imprecise_fp8_accumulation("cuda")
            else ""
        )
        raise CheckFailed(
            f"fp8_matmul reaches {frac:.0%} of torch._scaled_mm's TFLOP/s; it must reach {threshold:.0%}. Feed fp8 "
            "tiles straight to tl.dot (no conversion in the loop) and keep the scales for the epilogue."
            + hopper
        )
    checks.passed(f"fp8_matmul: {frac:.0%} of torch._scaled_mm's TFLOP/s (threshold {threshold:.0%})")
    return mine, ref


def check_decode_bandwidth(fn, *, threshold: float = BANDWIDTH_THRESHOLD, seed: int | None = None) -> list:
    """Exercise 4 (performance): bandwidth over the bytes that must move, against the copy bandwidth."""
    if not torch.cuda.is_available():
        return harness.not_on_cpu("fp8_decode", threshold)
    if not has_fp8_dot("cuda"):
        return checks.not_measured(
            f"Performance not measured: this GPU (sm_{''.join(map(str, torch.cuda.get_device_capability()))}) has "
            "no fp8 tensor cores, so fp8_decode runs the portable path, whose e4m3 decode costs more arithmetic "
            f"than the bytes save ({_FP16_PATH_ON_H200:.0f} % of the copy bandwidth on an H200). Only correctness is "
            "graded here."
        )
    N, K = BANDWIDTH_SHAPE
    return harness.check_bandwidth(
        fn, what="fp8_decode", module=__name__, N=N, K=K, Ms=BANDWIDTH_MS, out_dtype=out_dtype("cuda"),
        nbytes=lambda M: bytes_moved(M, N, K), threshold=threshold, seed=seed,
        hint="Read each weight byte once, in wide tiles (BLOCK_K 256+), with every program busy on a strip of N.",
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Exercise 5: the block-scaled GEMM (DeepSeek-V3: activations 1 x 128, weights 128 x 128)


def prepare_block(xq, sx, wq, sw, out=None):
    """Validate a block-scaled fp8 matmul: sx float32 [M, cdiv(K, 128)], sw float32 [cdiv(N, 128), cdiv(K, 128)]."""
    M, N, K = _operands(xq, wq)
    kb, nb = cdiv(K, SCALE_BLOCK), cdiv(N, SCALE_BLOCK)
    for name, t, shape in (("sx", sx, (M, kb)), ("sw", sw, (nb, kb))):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or tuple(t.shape) != shape:
            raise ValueError(f"{name} must be float32 of shape {list(shape)} (one scale per block), got "
                             f"{getattr(t, 'dtype', type(t).__name__)} {list(getattr(t, 'shape', []))}")  # fmt: skip
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    validation.require_one_device(xq=xq, sx=sx, wq=wq, sw=sw)
    validation.require_contiguous("xq", wq=wq)
    return M, N, K, validation.output(out, M, N, out_dtype(xq.device.type), xq.device)


def block_config(M: int, N: int, K: int, device: str = "cuda") -> dict:
    """BLOCK_K is the scale block (128) so each K step has one activation and one weight scale."""
    fp8_dot = _fp8_dot(device)
    if device != "cuda":
        return dict(configs.INTERPRETER_TILED, BLOCK_K=SCALE_BLOCK, FP8_DOT=fp8_dot)
    if configs.fma_dot(device):  # a T4: BLOCK_K stays the scale block, so a narrower tile (16 KB, not 64 KB)
        return dict(configs.FMA_TILED, BLOCK_N=32, BLOCK_K=SCALE_BLOCK, FP8_DOT=False)
    if not fp8_dot:
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=SCALE_BLOCK, FP8_DOT=False, num_warps=8, num_stages=3)
    if M > 64 and torch.cuda.get_device_capability() == (9, 0):
        # Graph-timed on the H200 at M = 2048 and 4096, N = K = 8192 (docs/perf-notes.md, fifth round): 8 warps
        # 34-35 % of torch._scaled_mm row-wise, 4 warps 14 % (one warp group holds the step's product and the
        # accumulator: they spill), 256-row tiles 16-17 %.
        return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=SCALE_BLOCK, FP8_DOT=True, num_warps=8, num_stages=4)
    return dict(BLOCK_M=128 if M > 64 else 64, BLOCK_N=128, BLOCK_K=SCALE_BLOCK, FP8_DOT=True, num_warps=4,
                num_stages=4)  # fmt: skip


def random_block_problem(M, N, K, device, g, strided=False):
    """xq [M, K] (a strided view when asked) with 1 x 128 scales, wq [N, K] with 128 x 128 scales."""
    pad = 9 if strided else 0
    x = random_matrix(M, K + pad, g, outliers=True)
    xq_full, _ = quantize(x, (1, SCALE_BLOCK))
    xq = xq_full[:, :K]
    _, sx = quantize(x[:, :K], (1, SCALE_BLOCK))
    w = random_matrix(N, K, g) * 0.02
    w *= torch.exp(torch.empty(1, K).uniform_(-2.0, 2.0, generator=g))  # K blocks of distinct magnitudes
    wq, sw = quantize(w, (SCALE_BLOCK, SCALE_BLOCK))
    return xq.to(device), sx.to(device), wq.to(device), sw.to(device)


def block_mistakes(xq, sx, wq, sw) -> list[Mistake]:
    M, K = xq.shape
    N = wq.shape[0]
    B = SCALE_BLOCK
    xf, wf = xq.double().cpu(), wq.double().cpu()
    sxd, swd = sx.double().cpu(), sw.double().cpu()
    nkb = sxd.shape[1]
    sw_rows = swd.repeat_interleave(B, 0)[:N]  # [N, nkb]

    def with_scales(sx_kb, sw_kb):
        y = torch.zeros(M, N, dtype=torch.float64)
        for kb in range(nkb):
            part = xf[:, kb * B : (kb + 1) * B] @ wf[:, kb * B : (kb + 1) * B].T
            y += part * sx_kb(kb)[:, None] * sw_kb(kb)[None, :]
        return y.float()

    last = nkb - 1

    def nxt(t, zero_last):
        return lambda kb: (
            t[:, kb + 1] if kb < last else (torch.zeros_like(t[:, 0]) if zero_last else t[:, last])
        )

    raw = (xf @ wf.T).float()
    out = [
        Mistake("block-scale index off by a block", "K step k0 uses the scales of K block k0 // BLOCK_K (here "
                "the next block's were used): index sx[m, kb] and sw[n // 128, kb] with kb = k0 // BLOCK_K.",
                with_scales(nxt(sxd, True), nxt(sw_rows, True))),
        Mistake("block-scale index off by a block", "K step k0 uses the scales of K block k0 // BLOCK_K (here "
                "the next block's were used): index sx[m, kb] and sw[n // 128, kb] with kb = k0 // BLOCK_K.",
                with_scales(nxt(sxd, False), nxt(sw_rows, False))),
        Mistake("scales of the last K block applied in the epilogue", "Block scales change along K: multiply "
                "each K block's partial product by its own scales inside the loop, then add it to the fp32 "
                "accumulator.", (raw.double() * sxd[:, last, None] * sw_rows[None, :, last]).float()),
        Mistake("scales missing", "Multiply each K block's partial product by sx[m, kb] · sw[n // 128, kb].", raw),
        Mistake("exponent bias not corrected", "e4m3 has bias 7, fp16 bias 15: the decoded tiles are 2^-8 too "
                "small, so the product is 2^-16 too small (exercise 2).", block_reference(xq, sx, wq, sw) * 2.0**-16),
    ]  # fmt: skip
    ones_n, ones_m = torch.ones(N, dtype=torch.float64), torch.ones(M, dtype=torch.float64)
    out.append(
        Mistake(
            "weight block scale missing",
            "Each K block's product needs the weight block's scale sw[n // 128, kb] too.",
            with_scales(lambda kb: sxd[:, kb], lambda kb: ones_n),
        )
    )
    out.append(Mistake("activation block scale missing", "Each K block's product needs the token's scale "
                       "sx[m, kb] too.", with_scales(lambda kb: ones_m, lambda kb: sw_rows[:, kb])))  # fmt: skip
    return out


def check_block_matmul(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 5: the block-scaled GEMM on both paths, ragged shapes, strided views, poisoned output, fused."""
    seed, g, device = common.cell(seed)
    what = "fp8_block_matmul"
    dtype = out_dtype(device)
    if not hidden:
        shapes = [(40, 160, 300), (50, 200, 260)]  # N over two weight blocks, K over three
    else:
        big = device == "cuda"
        shapes = [(int(torch.randint(17, 300 if big else 70, (1,), generator=g)),
                   int(torch.randint(129, 700 if big else 260, (1,), generator=g)),
                   int(torch.randint(129, 1500 if big else 420, (1,), generator=g))) for _ in range(2)]  # fmt: skip
        shapes.append((1, 130, 77))
    n = 0
    for fp8_dot in _paths(device):
        path = PATH_NAMES[fp8_dot]
        for i, (M, N, K) in enumerate(shapes):
            strided = i % 2 == 1
            xq, sx, wq, sw = random_block_problem(M, N, K, device, g, strided=strided)
            full, out = common.poisoned_out(M, N, dtype, device, strided)
            ctx = f" (M={M}, N={N}, K={K}, {path}{', strided xq and out' if strided else ''})"
            inputs = dict(xq=xq, sx=sx, wq=wq, sw=sw)
            before = checks.snapshot(inputs)
            y, ops = _run_path(fn, (xq, sx, wq, sw, out), fp8_dot, n, what)
            mistakes = block_mistakes(xq, sx, wq, sw)
            try:
                checks.verify_kernel_result(y, ops, what=what, inputs=inputs, before=before, out=out, full=full,
                                            weight_shape=(N, K), dtype=dtype,
                                            expected=block_reference(xq, sx, wq, sw), mistakes=mistakes, ctx=ctx)  # fmt: skip
            except CheckFailed as exc:
                raise CheckFailed(_name_overflowing(str(exc), y, mistakes, dtype)) from None
            n += 1
    checks.passed(f"{what}: {n} {'hidden' if hidden else 'visible'} cases match the reference (seed {seed})."
                  + _skipped(device))  # fmt: skip


# ----------------------------------------------------------------------------------------------------------
# Predictions, the comparison of paths, the benchmark

# Recorded on the course's H200 (docs/bench-h200.json, eager) at M = 1, N x K = 28672 x 8192.
_FP16_PATH_ON_H200 = recorded.figure(
    "fp8 decode", "solution fp8_decode, fp16 path", 1, *BANDWIDTH_SHAPE, "copy_eager"
)
H200_RECORDED_US = recorded.decode_us(
    "fp8 decode",
    {
        "dense bf16 (cuBLAS)": "dense bf16 (cuBLAS)",
        "torch._scaled_mm (row-wise)": "torch._scaled_mm rowwise",
        "fp8_decode": "solution fp8_decode",
    },
    1, *BANDWIDTH_SHAPE,
)  # fmt: skip


def predictions(env) -> None:
    """Print the floor time of a decode and a prefill step on this GPU (the H200's figures on a CPU)."""
    N, K = BANDWIDTH_SHAPE
    roofline_model.predictions(env, ["fp8"], (1, 16, 4096), naive="fp8", shape=(N, K),
                      note=" (floors at the bf16 matmul rate)")  # fmt: skip
    if not env.has_gpu:
        fp8_rate = roofline_model.H200["fp8_flops"]
        t = flops(4096, N, K) / fp8_rate
        print(f"With the H200's fp8 tensor cores ({fp8_rate / 1e12:.0f} TFLOP/s recorded), the M=4096 floor drops "
              f"to {t * 1e6:.0f} µs: prefill is compute-bound, and fp8 doubles the rate.")  # fmt: skip


def compare_paths(env, matmul_fn, decode_fn, M: int = 1):
    """Time the dense matmul, the naive path, torch._scaled_mm and the learner's kernels at decode."""
    N, K = BANDWIDTH_SHAPE
    rows = [
        ("dense bf16 (cuBLAS)", bytes_moved_dense(M, N, K)),
        ("naive: dequantize, then matmul", bytes_moved_naive(M, N, K)),
        ("torch._scaled_mm (row-wise)", bytes_moved(M, N, K)),
        ("fp8_matmul (tiled)", bytes_moved(M, N, K)),
        ("fp8_decode", bytes_moved(M, N, K)),
    ]

    def fns():
        g = checks.generator(0, "cuda")
        xq, sx, wq, sw = _timing_problem(max(M, 16), N, K, g)
        xq, sx = xq[:M], sx[:M].contiguous()
        w = torch.randn(N, K, device="cuda", generator=g).to(env.act_dtype)
        x = torch.randn(M, K, device="cuda", generator=g).to(env.act_dtype)
        return [lambda: x @ w.T, lambda: naive(xq, sx, wq, sw, env.act_dtype), lambda: scaled_mm(xq, sx, wq, sw),
                lambda: matmul_fn(xq, sx, wq, sw), lambda: decode_fn(xq, sx, wq, sw)]  # fmt: skip

    return compare.compare_paths(env, rows, fns, H200_RECORDED_US, M=M, shape=(N, K), where_known=True)
