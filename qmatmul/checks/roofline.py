"""Chapter 0, the roofline, the trusted grading: the layers, GPUs and known mistakes of each exercise (the bytes a
Linear layer moves, FLOPs, intensity and floor time, the naive round trip) and their checks, against the model of
qmatmul/teaching/roofline_model.py; and the naive W8A16 path timed against the learner's floor (GPU only).
"""

from __future__ import annotations

import numbers

import torch

from qmatmul import checks, timing
from qmatmul.checks import CheckFailed, common
from qmatmul.formats import w8a16
from qmatmul.teaching.roofline_model import (
    FORMATS,
    H200,
    LAYER_SHAPE,
    Ceilings,
    byte_parts,
    floor_seconds,
    model_bytes,
    model_bytes_naive,
    model_flops,
)

# ---- exercise 1: the bytes a Linear layer must move


def _is_number(v) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, numbers.Real):
        return True
    return hasattr(v, "item") and getattr(v, "ndim", getattr(v, "dim", lambda: 1)) in (0,)


def _as_float(v, what: str) -> float:
    if hasattr(v, "dim") and callable(v.dim) and v.dim() == 0:
        v = v.item()
    if not _is_number(v):
        raise CheckFailed(f"{what} must return a number, got {type(v).__name__}: {v!r}"[:300])
    v = float(v)
    if v != v or v in (float("inf"), float("-inf")):
        raise CheckFailed(f"{what} returned {v}")
    return v


def bytes_mistakes(fmt: str, M: int, N: int, K: int, group_size: int = 128) -> list[tuple[str, str, int]]:
    """(name, explanation, value) of the known wrong byte counts for one layer (recomputed wrong formulas)."""
    p = byte_parts(fmt, M, N, K, group_size)
    w, s, z, a, o = p["weights"], p["scales"], p["zeros"], p["activations"], p["output"]
    out = []
    if s:
        out.append(("forgot the scales", "The scales travel with the weights: add their bytes (fp32 = 4 bytes, "
                    "E8M0 and e4m3 = 1 byte), one per row, group or block.", w + z + a + o))  # fmt: skip
    if fmt == "w4a16":
        out.append(("forgot the scales", "Each group of group_size weights brings a 4-byte fp32 scale and a 1-byte "
                    "zero point: N * (K // group_size) * 5 bytes.", w + a + o))  # fmt: skip
        out.append(("zero points forgotten", "W4A16 is asymmetric: each group also stores a uint8 zero point "
                    "(1 byte per group) beside its fp32 scale.", w + s + a + o))  # fmt: skip
        out.append(("the scales counted per weight", "There is one scale and one zero per group of group_size "
                    "weights along K, not per weight.", w + 5 * N * K + a + o))  # fmt: skip
    if fmt == "fp8":
        out.append(("the activation scales forgotten", "FP8 W8A8 quantizes the activations too: one fp32 scale "
                    "per token (row of x), 4 * M bytes, beside the 4 * N weight-row scales.", w + 4 * N + a + o))  # fmt: skip
        out.append(("fp8 activations counted at 2 bytes", "In W8A8 the activations are e4m3 as well: 1 byte each "
                    "(the output is 16-bit).", w + s + 2 * M * K + o))  # fmt: skip
    if fmt in ("mxfp4", "nvfp4"):
        block = 32 if fmt == "mxfp4" else 16
        out.append(("the block scales counted as fp32", f"{fmt.upper()}'s block scales are 1 byte each "
                    f"({'E8M0' if fmt == 'mxfp4' else 'e4m3'}), one per {block} weights.",
                    w + 4 * N * K // block + (4 if fmt == "nvfp4" else 0) + a + o))  # fmt: skip
    if fmt == "nvfp4":
        out.append(("the fp32 tensor scale forgotten", "NVFP4 has a second level: one fp32 scale for the whole "
                    "tensor (4 bytes).", w + s - 4 + a + o))  # fmt: skip
    if fmt != "bf16":
        out.append(("counted the weight at 2 bytes", "That is the dense bf16 weight. The quantized weight is "
                    f"{'1 byte' if w == N * K else 'half a byte'} per weight: that is the whole point.",
                    2 * N * K + s + z + a + o))  # fmt: skip
    if w * 2 == N * K:
        out.append(("int4 counted at 1 byte per weight", "Two 4-bit codes share a byte: the packed weight is "
                    "N * K // 2 bytes.", N * K + s + z + a + o))  # fmt: skip
    for name, value in (("forgot the activations/output", w + s + z), ("forgot the activations/output", w + s + z + o),
                        ("forgot the activations/output", w + s + z + a)):  # fmt: skip
        out.append((name, "The kernel also reads x (M x K activations) and writes y (M x N, 16-bit); at "
                    "prefill these dominate.", value))  # fmt: skip
    return out


def _call_form(name, fmt, M, N, K, group_size):
    g = f", group_size={group_size}" if fmt == "w4a16" else ""
    return f"{name}({fmt!r}, M={M}, N={N}, K={K}{g})"


def _bytes_cases(g, hidden: bool) -> list[tuple[str, int, int, int, int]]:
    if not hidden:
        cases = []
        for fmt in FORMATS:
            cases += [(fmt, 1, 4096, 4096, 128), (fmt, 2048, 4096, 4096, 128), (fmt, 16, 1024, 512, 128)]
        cases += [("w4a16", 1, 4096, 4096, 32), ("w4a16", 256, 768, 512, 64)]
        return cases

    def r(lo, hi):
        return int(torch.randint(lo, hi, (1,), generator=g))

    cases = []
    for fmt in FORMATS:
        for M in (1, r(2, 17), r(100, 4097)):
            G = (32, 64, 128)[r(0, 3)] if fmt == "w4a16" else 128
            cases.append((fmt, M, r(1, 30000), 128 * r(1, 200), G))
    return cases


def _check_bytes_value(fn, name, fmt, M, N, K, G, expected, mistakes) -> None:
    call = _call_form(name, fmt, M, N, K, G)
    kwargs = dict(group_size=G) if fmt == "w4a16" else {}
    got = _as_float(checks.call_learner(fn, fmt, M, N, K, **kwargs, what=name), f"{call}")
    if abs(got - expected) < 0.5:
        return
    lines = [f"{call} returned {got:,.0f} bytes; the bytes that must move are {expected:,} "
             f"({got - expected:+,.0f}, {got / expected:.3f}x)."]  # fmt: skip
    matched = {}
    for mname, explanation, value in mistakes:
        if abs(got - value) < 0.5:
            matched.setdefault(mname, explanation)  # on some shapes two wrong formulas agree: name both
    if matched:
        (first, why), *more = matched.items()
        lines.insert(0, f"This matches a known mistake: {first}. {why}")
        lines += [f"On this shape it also matches a known mistake: {m}. {w}" for m, w in more]
    else:
        lines.append(
            "Count every tensor the kernel reads or writes once: the packed weights, their scales (and zero "
            "points), the activations x in, the output y out."
        )
    raise CheckFailed("\n".join(lines))


def check_linear_bytes(fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 1: linear_bytes(fmt, M, N, K, group_size=128) equals the chapter modules' byte models."""
    seed = checks.fresh_seed() if seed is None else seed
    cases = _bytes_cases(checks.generator(seed), hidden)
    for fmt, M, N, K, G in cases:
        expected = model_bytes(fmt, M, N, K, G)
        _check_bytes_value(fn, "linear_bytes", fmt, M, N, K, G, expected, bytes_mistakes(fmt, M, N, K, G))
    checks.passed(
        f"linear_bytes: {len(cases)} {'hidden' if hidden else 'visible'} layers, every format, decode and "
        f"prefill (seed {seed})"
    )


# ---- exercise 2: FLOPs, intensity, floor time


def _gpus(g, hidden: bool, n: int) -> list[tuple[float, float]]:
    """n (bandwidth, FLOP rate) pairs: the H200 and GPUs like a T4 and an A100, or random ones when hidden."""
    if hidden:
        return [(float(torch.empty(1).uniform_(0.2e12, 8e12, generator=g)),
                 float(torch.empty(1).uniform_(50e12, 2000e12, generator=g))) for _ in range(n)]  # fmt: skip
    known = [
        (H200["copy_bandwidth"], H200["bf16_flops"]),
        (0.27e12, 65e12),
        (1.6e12, 290e12),
    ]  # T4, A100 40 GB
    return known[:n]


def _floor_cases(g, hidden: bool):
    """(nbytes, nflops, bandwidth, flops_rate): decode (memory-bound) and prefill (compute-bound) layers."""
    gpus = _gpus(g, hidden, 3)
    shapes = [("w8a16", 1, 28672, 8192), ("w4a16", 16, 8192, 8192), ("bf16", 4096, 8192, 8192),
              ("fp8", 2048, 4096, 4096)]  # fmt: skip
    if hidden:
        fmts = [FORMATS[int(torch.randint(0, len(FORMATS), (1,), generator=g))] for _ in range(4)]
        shapes = [(f, M, 128 * int(torch.randint(8, 200, (1,), generator=g)),
                   128 * int(torch.randint(8, 200, (1,), generator=g)))
                  for f, M in zip(fmts, (1, int(torch.randint(2, 64, (1,), generator=g)), 4096, 8192), strict=True)]  # fmt: skip
    cases = []
    for bw, rate in gpus:
        for fmt, M, N, K in shapes:
            cases.append((fmt, M, N, K, model_bytes(fmt, M, N, K), model_flops(M, N, K), bw, rate))
    return cases


def check_floor(flops_fn, intensity_fn, floor_fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 2: linear_flops(M, N, K), intensity(nbytes, nflops), floor_time(nbytes, nflops, bw, rate)."""
    seed, g, _ = common.cell(seed)
    cases = _floor_cases(g, hidden)
    for _, M, N, K, _, nflops, _, _ in cases:
        call = f"linear_flops(M={M}, N={N}, K={K})"
        got = _as_float(checks.call_learner(flops_fn, M, N, K, what="linear_flops"), call)
        if got != nflops:
            named = {M * N * K: ("FLOPs counted once, not twice", "Each multiply-add is two FLOPs: 2 * M * N * K."),
                     2 * N * K: ("M forgotten", "Every one of the M rows of x meets every weight: 2 * M * N * K.")}  # fmt: skip
            lines = [f"{call} returned {got:,.0f}; a matmul does {nflops:,} FLOPs ({got / nflops:.3g}x)."]
            if got in named:
                lines.insert(0, "This matches a known mistake: {}. {}".format(*named[got]))
            raise CheckFailed("\n".join(lines))
    for *_, nbytes, nflops, _, _ in cases:
        call = f"intensity(nbytes={nbytes}, nflops={nflops})"
        got = _as_float(checks.call_learner(intensity_fn, nbytes, nflops, what="intensity"), call)
        want = nflops / nbytes
        if abs(got - want) > 1e-9 * want:
            lines = [f"{call} returned {got:.6g}; the arithmetic intensity is {want:.6g} FLOP/byte."]
            if abs(got - nbytes / nflops) <= 1e-9 * (nbytes / nflops):
                lines.insert(0, "This matches a known mistake: intensity inverted. Arithmetic intensity is FLOPs "
                             "per byte moved (nflops / nbytes): high means compute-bound.")  # fmt: skip
            raise CheckFailed("\n".join(lines))
    for fmt, M, N, K, nbytes, nflops, bw, rate in cases:
        call = f"floor_time(nbytes={nbytes}, nflops={nflops}, bandwidth={bw:.4g}, flops_rate={rate:.4g})"
        res = checks.call_learner(floor_fn, nbytes, nflops, bw, rate, what="floor_time")
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            raise CheckFailed(f"floor_time must return a pair (seconds, bound), got {type(res).__name__}: "
                              f"{res!r}"[:300])  # fmt: skip
        t = _as_float(res[0], call)
        bound = res[1]
        t_mem, t_math = nbytes / bw, nflops / rate
        want, want_bound = floor_seconds(nbytes, nflops, Ceilings("", bw, rate, True))
        ctx = f" ({fmt} layer M={M}, N={N}, K={K})"
        if abs(t - want) > 1e-9 * want:
            wrong = [
                ("min instead of max", "The kernel must both move its bytes and do its FLOPs: the floor is the "
                 "larger of the two times, max(bytes / bandwidth, flops / rate).", min(t_mem, t_math)),
                ("sum instead of max", "Memory and math overlap in a good kernel: the floor is the larger time, "
                 "not their sum.", t_mem + t_math),
                ("bandwidth and FLOP rate swapped", "Bytes go over the bandwidth, FLOPs over the FLOP rate.",
                 max(nbytes / rate, nflops / bw)),
                ("microseconds instead of seconds", "Return seconds (the caller converts).", want * 1e6),
                ("milliseconds instead of seconds", "Return seconds (the caller converts).", want * 1e3),
            ]  # fmt: skip
            lines = [f"{call} returned {t:.6g} s; the floor is {want:.6g} s{ctx}: memory {t_mem:.4g} s, "
                     f"math {t_math:.4g} s."]  # fmt: skip
            for name, explanation, value in wrong:
                if abs(t - value) <= 1e-9 * abs(value):
                    lines.insert(0, f"This matches a known mistake: {name}. {explanation}")
                    break
            raise CheckFailed("\n".join(lines))
        if bound != want_bound:
            lines = [f"{call} says {bound!r}-bound; it is {want_bound!r}-bound{ctx}: memory {t_mem:.4g} s, "
                     f"math {t_math:.4g} s."]  # fmt: skip
            if bound in ("memory", "compute"):
                lines.insert(0, "This matches a known mistake: bound labels swapped. The bound is the side that "
                             "takes longer: 'memory' when bytes / bandwidth >= flops / rate.")  # fmt: skip
            else:
                lines.append("Return the string 'memory' or 'compute'.")
            raise CheckFailed("\n".join(lines))
    checks.passed(
        f"linear_flops, intensity, floor_time: {len(cases)} {'hidden' if hidden else 'visible'} layers on "
        f"{len({(c[6], c[7]) for c in cases})} GPUs, decode and prefill (seed {seed})"
    )


# ---- exercise 3: the naive round trip


def naive_mistakes(fmt: str, M: int, N: int, K: int, group_size: int = 128) -> list[tuple[str, str, int]]:
    fused = model_bytes(fmt, M, N, K, group_size)
    if fmt == "bf16":
        return [("a round trip counted for bf16", "A bf16 weight needs no dequantization: the naive path is the "
                 "dense matmul, nothing more.", fused + 4 * N * K)]  # fmt: skip
    extra = 4 * N * K + (4 * M * K if fmt == "fp8" else 0)
    p = byte_parts(fmt, M, N, K, group_size)
    out = [
        ("no round trip counted", "The naive path first WRITES the dequantized 16-bit weight to memory, then the "
         "matmul READS it back: 2 + 2 bytes per weight on top of the fused bytes.", fused),
        ("only half the round trip counted", "The dequantized 16-bit weight is written once (2 bytes per weight) "
         "AND read back once by the matmul (2 more).", fused + extra // 2),
        ("dequantized to fp32", "The naive path dequantizes into the activations' 16-bit type: 2 bytes per weight "
         "written and 2 read, not 4.", fused + 2 * extra),
        ("the read of the packed weight forgotten", "Dequantizing starts by reading the packed weight and its "
         "scales (and zeros).", extra + p["activations"] + p["output"]),
    ]  # fmt: skip
    if fmt == "fp8":
        out.append(("fp8: only the weight dequantized", "The naive FP8 path (fp8.naive) dequantizes both operands: "
                    "x (M x K) also makes a 16-bit round trip.", fused + 4 * N * K))  # fmt: skip
    for name, _, value in bytes_mistakes(fmt, M, N, K, group_size):
        out.append((f"carried over from exercise 1 ({name})", "Fix linear_bytes first.", value + extra))
    return out


def check_naive(bytes_fn, slowdown_fn, *, hidden: bool = False, seed: int | None = None) -> None:
    """Exercise 3: naive_bytes(fmt, M, N, K, group_size) and naive_slowdown(fmt, M, N, K, bw, rate, group_size)."""

    seed, g, _ = common.cell(seed)
    cases = _bytes_cases(g, hidden)
    for fmt, M, N, K, G in cases:
        expected = model_bytes_naive(fmt, M, N, K, G)
        _check_bytes_value(
            bytes_fn, "naive_bytes", fmt, M, N, K, G, expected, naive_mistakes(fmt, M, N, K, G)
        )
    gpus = _gpus(g, hidden, 2)
    slow_cases = [(fmt, M, N, K, G) for fmt, M, N, K, G in cases if M in (1, 2048) or hidden]
    slow_cases += [("w8a16", 8192, 8192, 8192, 128), ("w4a16", 8192, 4096, 4096, 64)]
    for bw, rate in gpus:
        ceil = Ceilings("", bw, rate, True)
        for fmt, M, N, K, G in slow_cases:
            nflops = model_flops(M, N, K)
            fused_b, naive_b = model_bytes(fmt, M, N, K, G), model_bytes_naive(fmt, M, N, K, G)
            want = floor_seconds(naive_b, nflops, ceil)[0] / floor_seconds(fused_b, nflops, ceil)[0]
            g_kw = dict(group_size=G) if fmt == "w4a16" else {}
            call = (
                f"naive_slowdown({fmt!r}, M={M}, N={N}, K={K}, bandwidth={bw:.4g}, flops_rate={rate:.4g}"
                + (f", group_size={G})" if fmt == "w4a16" else ")")
            )
            got = _as_float(checks.call_learner(slowdown_fn, fmt, M, N, K, bw, rate, **g_kw, what="naive_slowdown"),
                            call)  # fmt: skip
            if abs(got - want) <= 1e-9 * want:
                continue
            lines = [f"{call} returned {got:.6g}; the naive path's floor is {want:.6g}x the fused kernel's."]
            wrong = [
                ("ratio inverted", "naive floor / fused floor: a slowdown is at least 1.", 1 / want),
                ("the compute floor ignored", "Compare floor times, not bytes: at prefill both paths are "
                 "compute-bound and the round trip hides behind the math.", naive_b / fused_b),
            ]  # fmt: skip
            for name, explanation, value in wrong:
                if abs(got - value) <= 1e-9 * value:
                    lines.insert(0, f"This matches a known mistake: {name}. {explanation}")
                    break
            else:
                lines.append(
                    "naive_slowdown is floor(naive bytes) / floor(fused bytes), both with 2·M·N·K FLOPs: it reuses "
                    "your functions, so make exercises 1 and 2 pass first."
                )
            raise CheckFailed("\n".join(lines))
    checks.passed(
        f"naive_bytes and naive_slowdown: {len(cases)} layers and {len(slow_cases) * len(gpus)} predictions, "
        f"{'hidden' if hidden else 'visible'} (seed {seed})"
    )


# ---- the naive path measured (CUDA GPU only)

NAIVE_MS = (1, 16)


def check_naive_measured(bytes_fn, floor_fn, *, slack: float = 0.9) -> None:
    """Time PyTorch's naive W8A16 path at decode and check the learner's floor holds (GPU only)."""
    N, K = LAYER_SHAPE
    if not torch.cuda.is_available():
        return checks.not_measured(
            "Performance not measured: no CUDA GPU here (the interpreter's timings say nothing about a GPU). "
            f"On a GPU this cell times the naive W8A16 path at M = 1 and 16 on a {N} x {K} weight and checks "
            "that your predicted floor holds; it awards its point only there."
        )
    dtype = torch.bfloat16 if torch.cuda.get_device_capability() >= (8, 0) else torch.float16
    bw, rate = timing.copy_bandwidth(), timing.matmul_flops(dtype=dtype)
    gen = checks.generator(0, "cuda")
    q = torch.randint(-127, 128, (N, K), dtype=torch.int8, device="cuda", generator=gen)
    s = torch.rand(N, device="cuda", generator=gen) * 1e-3 + 1e-4
    for M in NAIVE_MS:
        expected = model_bytes_naive("w8a16", M, N, K)
        _check_bytes_value(bytes_fn, "naive_bytes", "w8a16", M, N, K, 128, expected,
                           naive_mistakes("w8a16", M, N, K))  # fmt: skip
        res = checks.call_learner(floor_fn, expected, model_flops(M, N, K), bw, rate, what="floor_time")
        predicted = _as_float(res[0] if isinstance(res, (tuple, list)) else res, "floor_time")
        x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
        ms = timing.median_ms(lambda x=x: w8a16.naive(x, q, s))
        print(f"naive W8A16, M={M}: measured {ms * 1e3:.0f} µs, your floor {predicted * 1e6:.0f} µs "
              f"({ms * 1e-3 / predicted:.1f}x the floor)")  # fmt: skip
        if ms * 1e-3 < slack * predicted:
            raise CheckFailed(
                f"The naive path ran in {ms * 1e3:.0f} µs at M={M}, below your floor of {predicted * 1e6:.0f} µs: "
                "a floor cannot be beaten, so floor_time over-estimates (bytes / bandwidth, flops / rate, max)."
            )
    checks.passed(
        f"the naive path never beat your floor (copy {bw / 1e12:.2f} TB/s, matmul {rate / 1e12:.0f} TFLOP/s)"
    )
