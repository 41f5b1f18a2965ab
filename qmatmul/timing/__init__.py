"""Honest timing on a CUDA GPU: median time with the L2 flushed, bandwidth over the bytes that must move.

Everything here needs a CUDA GPU; callers check `torch.cuda.is_available()` first (the interpreter's
timings say nothing about a GPU, so nothing is timed there).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from qmatmul.timing import gpulock

__all__ = [
    "median_ms", "copy_bandwidth", "matmul_flops", "time_paths", "Timing", "time_it", "l2_bytes",
    "copies_needed", "graph_ms", "TwoWay", "time_two_ways", "step_us", "sync", "reason",
]  # fmt: skip


def sync(device: str) -> None:
    """Wait for the GPU's queued work where `device` is one (a timed run's clock stops only after it); else nothing."""
    if device == "cuda":
        torch.cuda.synchronize()


def median_ms(fn, *, warmup_ms: int = 25, rep_ms: int = 100) -> float:
    """Median time of fn() in ms. triton's do_bench times with CUDA events and clears the L2 between calls."""
    from triton.testing import do_bench

    with gpulock.exclusive():  # under the grader: nothing else runs on this GPU meanwhile
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


def time_it(label: str, fn, nbytes: int, flops: int = 0, with_copy_bw: bool = True) -> Timing:
    fn()
    torch.cuda.synchronize()
    return Timing(label, median_ms(fn), nbytes, flops, copy_bandwidth() if with_copy_bw else None)


# ----------------------------------------------------------------------------------------------------------
# Graph-timed: the kernel's own time, without the Python wrapper's host time


def l2_bytes(device: str = "cuda") -> int:
    """The GPU's L2 cache size in bytes (50 MB on an H100/H200, 6 MB on an A10, 4 MB on a T4)."""
    return int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20) or (64 << 20))


def copies_needed(nbytes: int, device: str = "cuda") -> int:
    """How many copies of an operand of nbytes to rotate so that together they exceed three L2s (at least 2):
    each call then reads its weights from device memory, not from what the previous call left in the L2."""
    return max(2, -(-3 * l2_bytes(device) // max(int(nbytes), 1)))


def capture(body, warm=None):
    """body() captured as one CUDA graph, after a warm-up call on a side stream (as torch.cuda.graphs asks: kernels
    compiled, memory allocated, lazy state set outside the capture). warm: the warm-up (default body itself).
    Returns (graph, what body returned during the capture). The one capture of the course's timings and grading."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        (warm or body)()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = body()
    return graph, got


@gpulock.exclusively
def graph_ms(fns, *, target_ms: float = 2.0, max_calls: int = 400, replays: int = 15) -> float:
    """Median time per call in ms under CUDA-graph replay.

    fns: a zero-argument function, or a list of them (one per copy of the weights). The graph holds calls
    fns[0](), fns[1](), ..., fns[0](), ... back to back (a multiple of len(fns), enough for about target_ms),
    so launch gaps shrink to the GPU's own and, with copies larger than the L2 together, nothing is served
    from the L2. Each function must be capturable: no host synchronization, no .item(), no new compilation
    (every function is run once first, which compiles its kernels). The median of `replays` replays, divided
    by the number of calls.
    """
    fns = list(fns) if isinstance(fns, (list, tuple)) else [fns]
    for fn in fns:  # compile, autotune, allocate outside the capture
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for fn in fns:
        fn()
    end.record()
    end.synchronize()
    per_call = max(start.elapsed_time(end) / len(fns), 1e-3)
    rounds = max(2, min(max_calls // len(fns), int(target_ms / per_call / len(fns)) + 1))

    def calls():
        for _ in range(rounds):
            for fn in fns:
                fn()

    graph, _ = capture(calls, warm=lambda: [fn() for fn in fns])
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del graph
    times.sort()
    return times[len(times) // 2] / (rounds * len(fns))


@dataclass
class TwoWay:
    """One path timed two ways: graph_ms (the kernel: CUDA-graph replay over rotating weight copies) and
    eager_ms (do_bench around the Python call: what one call costs without graphs). Either may be None, with
    the reason in graph_error / eager_error."""

    graph_ms: float | None
    eager_ms: float | None
    graph_error: str | None = None
    eager_error: str | None = None


def reason(exc: Exception) -> str:
    """An exception in one line for a table: its type and the first line of its message (160 characters)."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first}"[:160]


def time_two_ways(fns, *, eager_rep_ms: int = 40) -> TwoWay:
    """Time fns (one function, or one per weight copy) under graph replay and eagerly (do_bench on fns[0])."""
    fns = list(fns) if isinstance(fns, (list, tuple)) else [fns]
    fns[0]()
    torch.cuda.synchronize()
    result = TwoWay(None, None)
    try:
        result.eager_ms = median_ms(fns[0], warmup_ms=10, rep_ms=eager_rep_ms)
    except Exception as exc:  # noqa: BLE001 - reported in the table
        result.eager_error = reason(exc)
    try:
        result.graph_ms = graph_ms(fns)
    except Exception as exc:  # noqa: BLE001 - a path that cannot be captured is reported, not fatal
        result.graph_error = reason(exc)
        torch.cuda.synchronize()
    return result


@gpulock.exclusively
def step_us(step, *, replays: int = 20) -> tuple[float, float]:
    """(graph µs, eager µs) of one call of `step`, a whole decode step (many kernels, each reading its own weights):
    captured once as a CUDA graph and replayed, the median of `replays` replays (what a serving engine runs: the
    kernels and the GPU's own launch gaps); and called from Python, the median of as many calls, each synchronized
    (the wrappers' host time included). The step must be capturable (no host synchronization, no .item(), no new
    compilation: it is run once first)."""
    step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn) -> float:
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3

    eager = sorted(timed(step) for _ in range(replays))
    graph, _ = capture(step)
    graph.replay()
    torch.cuda.synchronize()
    graphed = sorted(timed(graph.replay) for _ in range(replays))
    del graph
    return graphed[replays // 2], eager[replays // 2]
