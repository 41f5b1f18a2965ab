"""Chapter 0, the roofline, its teaching cells: the two ceilings measured (measure_ceilings; the H200's recorded
figures where there is no GPU) and the gap between the naive W8A16 path's floor and its time (naive_gap).
"""

from __future__ import annotations

import torch

from qmatmul import checks, environment, timing
from qmatmul.formats import w8a16
from qmatmul.teaching.roofline_model import (
    H200,
    LAYER_SHAPE,
    Ceilings,
    ceilings,
    floor_seconds,
    model_bytes_naive,
    model_flops,
    recorded_ceilings,
)
from qmatmul.teaching.w8a16 import H200_RECORDED_US as W8A16_RECORDED_US

# ---- the two ceilings, measured in the notebook


def measure_ceilings(env, verbose: bool = True) -> Ceilings:
    """Measure the copy bandwidth and the dense matmul rate (and show why zeros are a bad input).

    On a machine without a CUDA GPU: the H200's recorded figures, and it says so; under the autograder too (the
    notebook's later figures draw with them).
    """
    if environment.autograding():
        return recorded_ceilings()
    if not env.has_gpu:
        ceil = ceilings(env)
        if verbose:
            print(
                "No CUDA GPU here: nothing can be timed (the interpreter's timings say nothing about a GPU).\n"
                f"This chapter teaches with the figures recorded on an {H200['gpu']} on {H200['date']} "
                f"({H200['versions']}):\n"
                f"  copy bandwidth (bytes read + bytes written) {H200['copy_bandwidth'] / 1e12:.2f} TB/s\n"
                f"  dense bf16 matmul (cuBLAS, 8192^3)          {H200['bf16_flops'] / 1e12:.0f} TFLOP/s\n"
                f"  fp8 matmul (torch._scaled_mm, 8192^3)       {H200['fp8_flops'] / 1e12:.0f} TFLOP/s"
            )
        return ceil
    bw = timing.copy_bandwidth()
    rate = timing.matmul_flops(dtype=env.act_dtype)
    ceil = Ceilings(env.gpu_name, bw, rate, True)
    if verbose:
        n = 8192
        z = torch.zeros(n, n, dtype=env.act_dtype, device="cuda")
        zeros_rate = 2 * n**3 / (timing.median_ms(lambda: z @ z) * 1e-3)
        del z
        small = torch.randn(4 << 20, dtype=torch.float16, device="cuda")  # 8 MB: src + dst fit in the L2
        small_out = torch.empty_like(small)
        flushed = timing.median_ms(lambda: small_out.copy_(small))
        warm = _loop_ms(lambda: small_out.copy_(small))  # back to back, never flushed: served by the L2
        dt = str(env.act_dtype).replace("torch.", "")
        print(
            f"{env.gpu_name}, measured now (median of runs after a 25 ms warm-up, L2 flushed before each run):"
        )
        print(f"  copy bandwidth, 1 GiB, bytes read + written: {bw / 1e12:.2f} TB/s")
        print(f"  dense {dt} matmul, 8192^3, random inputs:     {rate / 1e12:.0f} TFLOP/s")
        print(
            f"  the same matmul on zeros:                      {zeros_rate / 1e12:.0f} TFLOP/s "
            f"({zeros_rate / rate:.2f}x: zeros toggle no bits, draw less power and clock higher)"
        )
        print(
            f"  an 8 MB copy: {2 * small.nbytes / (flushed * 1e-3) / 1e12:.2f} TB/s with the L2 flushed, "
            f"{2 * small.nbytes / (warm * 1e-3) / 1e12:.2f} TB/s back to back without a flush (the L2 serves it): "
            "measure with tensors several times the L2, flushed"
        )
    return ceil


def _loop_ms(fn, calls: int = 100) -> float:
    """Mean time of back-to-back calls between two CUDA events, L2 never flushed (what not to do)."""
    for _ in range(10):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def naive_gap(env, bytes_fn=None, floor_fn=None) -> None:
    """Explain the gap between the naive path's floor and its time: each PyTorch step timed apart on a GPU. Not
    under the autograder."""
    if environment.autograding():
        return
    N, K = LAYER_SHAPE
    M = 1
    nbytes = model_bytes_naive("w8a16", M, N, K)
    if bytes_fn is not None:
        try:
            nbytes = bytes_fn("w8a16", M, N, K)
        except NotImplementedError:
            print("(exercise 3 unfinished: using the course's byte model)")
    if not env.has_gpu:
        ceil = ceilings(env)
        t, _ = floor_seconds(nbytes, model_flops(M, N, K), ceil)
        recorded = W8A16_RECORDED_US["naive: dequantize, then matmul"]
        steps = 1 + 2 + 2 + 2 + 2  # read int8, write bf16; read, write (x s); read in the matmul
        print(
            f"No CUDA GPU here: figures recorded on an {H200['gpu']} on {H200['date']} ({H200['versions']}).\n"
            f"naive W8A16 at M=1, {N} x {K}: floor {t * 1e6:.0f} µs ({nbytes / 1e9:.2f} GB at "
            f"{ceil.copy_bandwidth / 1e12:.2f} TB/s), measured {recorded:.0f} µs ({recorded / (t * 1e6):.1f}x).\n"
            f"PyTorch runs `q.to(bf16)` and `* s` as two kernels, so the weight moves {steps} bytes per weight, not "
            "5 (9 / 5 = 1.8x); the rest of the gap is each step running below the copy bandwidth. On a GPU this "
            "cell times each step."
        )
        return
    dtype = env.act_dtype
    gen = checks.generator(0, "cuda")
    q = torch.randint(-127, 128, (N, K), dtype=torch.int8, device="cuda", generator=gen)
    s = torch.rand(N, device="cuda", generator=gen) * 1e-3 + 1e-4
    x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
    qh = q.to(dtype)
    w = qh * s.to(dtype)[:, None]
    bw = timing.copy_bandwidth()
    steps = [
        ("q.to(bf16): read 1 B, write 2 B per weight", lambda: q.to(dtype), 3 * N * K),
        (
            "* s[:, None]: read 2 B, write 2 B per weight",
            lambda: qh * s.to(dtype)[:, None],
            4 * N * K + 2 * N,
        ),
        ("x @ w.T: read 2 B per weight", lambda: x @ w.T, 2 * N * K + 2 * (M * K + M * N)),
        ("the whole naive path (w8a16.naive)", lambda: w8a16.naive(x, q, s), None),
    ]
    total = 0.0
    print(f"naive W8A16 at M={M}, {N} x {K} on {env.gpu_name} (median, L2 flushed):")
    for label, fn, nb in steps:
        ms = timing.median_ms(fn)
        if nb is None:
            print(f"  {label:<46}{ms * 1e3:>8.0f} µs   (the steps add up to {total * 1e3:.0f} µs)")
        else:
            total += ms
            print(f"  {label:<46}{ms * 1e3:>8.0f} µs   {nb / (ms * 1e-3) / 1e12:.2f} TB/s = "
                  f"{nb / (ms * 1e-3) / bw:.0%} of copy")  # fmt: skip
    if floor_fn is not None:
        try:
            t = floor_fn(nbytes, model_flops(M, N, K), bw, timing.matmul_flops(dtype=dtype))[0]
            print(f"  your floor for the naive path (5 B per weight at the copy bandwidth): {t * 1e6:.0f} µs")
        except NotImplementedError:
            pass
