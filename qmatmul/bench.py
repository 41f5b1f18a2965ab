"""Honest timing on a CUDA GPU: median time with the L2 flushed, bandwidth over the bytes that must move.

Everything here needs a CUDA GPU; callers check `torch.cuda.is_available()` first (the interpreter's
timings say nothing about a GPU, so nothing is timed there).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import torch


def median_ms(fn, *, warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median time of fn() in ms. triton's do_bench times with CUDA events and clears the L2 between calls."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


@functools.lru_cache(maxsize=4)
def copy_bandwidth(device: str = "cuda", nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    free, _ = torch.cuda.mem_get_info()
    nbytes = min(nbytes, free // 4)
    src = torch.empty(nbytes // 2, dtype=torch.float16, device=device).normal_()
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3)


@functools.lru_cache(maxsize=4)
def matmul_flops(device: str = "cuda", dtype: torch.dtype = torch.bfloat16, n: int = 8192) -> float:
    """Dense matmul rate in FLOP/s through torch (cuBLAS), on random data."""
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    ms = median_ms(lambda: a @ b)
    return 2 * n**3 / (ms * 1e-3)


def time_paths(fns) -> list[float | None]:
    """Median µs of each zero-argument function; None (with the reason printed) for one that fails, so that
    an unfinished exercise or a path this GPU lacks shows as "not measured"."""
    times = []
    for fn in fns:
        try:
            fn()
            times.append(median_ms(fn) * 1e3)
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            first = str(exc).splitlines()[0] if str(exc) else ""
            print(f"not measured: {type(exc).__name__}: {first}")
            times.append(None)
    return times


@dataclass
class Timing:
    label: str
    ms: float
    nbytes: int
    flops: int = 0
    copy_bw: float | None = None
    wall_ms: float | None = None  # synchronized wall-clock time per call

    @property
    def bandwidth(self) -> float:
        return self.nbytes / (self.ms * 1e-3)

    @property
    def fraction_of_copy(self) -> float | None:
        return None if not self.copy_bw else self.bandwidth / self.copy_bw

    def describe(self) -> str:
        text = f"{self.label}: {self.ms * 1e3:.1f} µs, {self.bandwidth / 1e12:.3f} TB/s"
        if self.copy_bw:
            text += f" = {100 * self.fraction_of_copy:.0f} % of the copy bandwidth ({self.copy_bw / 1e12:.2f} TB/s)"
        if self.flops:
            text += f", {self.flops / (self.ms * 1e-3) / 1e12:.1f} TFLOP/s"
        return text


def wall_ms(fn, calls: int = 10) -> float:
    """Host wall-clock time per call, the device synchronized: work on any stream counts."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / calls


def time_it(label: str, fn, nbytes: int, flops: int = 0, with_copy_bw: bool = True) -> Timing:
    fn()
    torch.cuda.synchronize()
    t = Timing(label, median_ms(fn), nbytes, flops, copy_bandwidth() if with_copy_bw else None)
    t.wall_ms = wall_ms(fn)
    return t


def escaped_stream(t: Timing) -> bool:
    """True when the events saw far less time than the wall clock: the work ran on another stream.

    Python launch overhead alone can make the wall clock up to about 2x the events on small kernels, so only
    a gap of 4x counts.
    """
    return t.wall_ms is not None and t.ms < 0.25 * t.wall_ms
