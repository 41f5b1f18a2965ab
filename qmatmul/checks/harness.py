"""Timing a learner's kernel that the grader cannot trust: the one harness every performance cell uses.

A chapter describes its timed problem (a module with timing_weights(N, K, g), timing_inputs(M, K, g, n) and
reference(*inputs, *weights)); `time_calls` times the learner's function on it and checks every timed output.

In the learner's own notebook (a local function) it times in process, two ways: the kernel under CUDA-graph
replay over weight copies that together exceed the L2 (the kernel's time), and eagerly around the Python call
(what one call costs without graphs).

Under the trusted grader (a function that runs in the worker) the trusted side times, the worker only runs:
  prepare  the worker builds the weight copies from a seed (both sides can), allocates per-call input and output
           buffers and may capture the calls in a CUDA graph (host overhead stays out);
  go       the trusted side sends a fresh seed and starts its clock; the worker fills every input from that seed
           (so nothing could be computed before), runs the batch, synchronizes its whole device and answers
           with the sum of the outputs' bits; the clock stops when the answer arrives;
  fetch    the worker hands over every output; the trusted side checks that the sum matches (an answer sent
           before the work was done cannot) and compares each output with the reference on the inputs it
           regenerates from the same seed.
Each go is a timed window: under the grader it holds the GPU's lock exclusively (qmatmul/timing/gpulock.py), so no
other grader's work runs on this GPU meanwhile; prepare and fetch run on the GPU but time nothing, and hold it
shared (as the test cell around them does), so they never run beside another grader's go either.
Time per call = (go-to-answer - an empty round trip) / calls, the fastest of TIMED_ROUNDS goes a mode, each on fresh
inputs; each go that is the fastest so far is fetched and checked before the next overwrites its outputs, so the
go that counts is one whose outputs were checked. What remains in the window besides the kernels:
one input fill, one reduction over the outputs and the round trip's jitter. Measured on the H200 with 20 ms
batches (tools/timing_protocol.py, docs/grading-h200.md): the protocol read 3-13 % more time per call than
in-process graph replay of the same kernel; with the ~50 ms batches below, 3-9 % (always against the learner).
At prefill the input fill is as big as the kernel's own input: drawn in float32 at once, it made FP8's prefill
read 36 % of torch._scaled_mm through the protocol where the notebook read 58 % (2026-12-02). So inputs_for draws
in chunks, straight in the timed dtype; the chapters' timing_inputs keep their draws to one or two passes, the
checksum sums 64-bit words, and the outputs' NaN fill happens after each fetch, outside the window.
"""

from __future__ import annotations

import importlib
import math
import os
import secrets
import time
from dataclasses import dataclass

import torch

from qmatmul import checks, timing
from qmatmul.checks import CheckFailed
from qmatmul.timing import gpulock

__all__ = [
    "BATCH_MS", "MAX_CALLS", "MIN_CALLS", "OUT_BYTES", "TIMED_ROUNDS", "GEN_CHUNK", "PROFILE_ENV", "profiling", "Timed",
    "calls_for", "weight_copies", "inputs_for", "outputs_checksum", "time_calls", "not_on_cpu", "check_bandwidth",
]  # fmt: skip

BATCH_MS = 50.0  # aim for a timed batch about this long: the fixed cost of the protocol shrinks with it
MAX_CALLS = 400
MIN_CALLS = 8
# A batch's outputs, every one of them handed over and checked, at most this many bytes. FP8's prefill (a 64 MB
# output a call) timed 58 calls: 3.7 GB a mode went through a file from the worker to the trusted side, 28 s of
# hand-over while the cell held the GPU alone, and eight notebooks' copies at once ran the GPU out of memory
# (H100, 2026-12-06, docs/parallel-grading.md). Capped, a prefill batch is MIN_CALLS calls (about 6 ms): the
# per-call costs inside the window (input fill, checksum) keep their share, only the round trip's jitter grows.
OUT_BYTES = 512 << 20
# Timed goes a mode: the host is shared with the other graders, and a worker or a grader waiting for a core adds its
# wait to the go (the round trip wakes each once). Eight notebooks at a time on one H100 (2026-12-06), FP8's capped
# prefill batch (8 calls, about 6 ms) read the same correct kernel at 40-45 % of torch._scaled_mm in one run and
# 45-48 % in another; a descheduled go only ever reads slower, so the fastest go is the kernel's time.
TIMED_ROUNDS = 3
GEN_CHUNK = 1 << 25  # inputs_for draws at most this many elements at once (one prefill call's [4096, 8192])
REF_ELEMENTS = 1 << 27  # the recheck's reference outputs at a time (float32: 512 MB)
# QMATMUL_PROFILE=1: each timed problem also prints where its grading's seconds went (building the weights, the
# worker's part, the recheck), for an instructor asking why a chapter grades slowly. Never a verdict.
PROFILE_ENV = "QMATMUL_PROFILE"


def timed_profile(
    label: str, calls: int, modes: int, copies: int, built: float, timed: float, rechecked: float
) -> str:
    """QMATMUL_PROFILE=1's line for one timed problem (tools/parallel_grading.py reads it)."""
    return (
        f"profile {label}: {calls} calls x {modes} modes, {copies} weight copies built in {built:.1f} s, timed "
        f"(prepare, batches, hand-over) in {timed:.1f} s, rechecked in {rechecked:.1f} s"
    )


def profiling() -> bool:
    """QMATMUL_PROFILE=1: the grader says where its seconds went (never a verdict)."""
    return os.environ.get(PROFILE_ENV) == "1"


@dataclass
class Timed:
    label: str
    M: int
    nbytes: int
    graph_ms: float | None  # per call, CUDA-graph replay (None when the calls could not be captured)
    eager_ms: float | None  # per call, eager Python calls
    copy_bw: float

    @property
    def ms(self) -> float:
        return self.graph_ms if self.graph_ms is not None else self.eager_ms

    @property
    def fraction_of_copy(self) -> float:
        return self.nbytes / (self.ms * 1e-3) / self.copy_bw

    def describe(self) -> str:
        parts = []
        for name, ms in (("graph replay", self.graph_ms), ("eager", self.eager_ms)):
            if ms is not None:
                frac = self.nbytes / (ms * 1e-3) / self.copy_bw
                parts.append(f"{name} {ms * 1e3:.1f} µs = {frac:.0%} of copy")
        return f"{self.label}: " + ", ".join(parts) + f" (copy {self.copy_bw / 1e12:.2f} TB/s measured here)"


def _module(name: str):
    return importlib.import_module(name)


def calls_for(nbytes: int, copy_bw: float, est_ms: float | None = None, out_bytes: int = 0) -> int:
    """Calls in one batch: about BATCH_MS of work, a call estimated at `est_ms` or at a third of the copy
    bandwidth; at most OUT_BYTES of outputs (one call's: `out_bytes`), and never fewer than MIN_CALLS."""
    est_ms = est_ms or nbytes / (copy_bw / 3) * 1e3
    calls = min(MAX_CALLS, math.ceil(BATCH_MS / max(est_ms, 1e-3)))
    if out_bytes:
        calls = min(calls, OUT_BYTES // out_bytes)
    return max(MIN_CALLS, calls)


def weight_copies(module: str, N: int, K: int, seed: int, copies: int, device: str) -> list[tuple]:
    mod = _module(module)
    out = []
    for c in range(copies):
        g = checks.generator(seed + c, device)
        out.append(tuple(mod.timing_weights(N, K, g)))
    return out


def inputs_for(
    module: str, M: int, K: int, seed: int, n: int, device: str, out: tuple | None = None
) -> tuple:
    """The n timed inputs drawn from `seed`, written into `out` (the per-call buffers) when given.

    Drawn GEN_CHUNK elements at a time, so the draw's temporaries stay small: at prefill (M = 4096) one call's
    input alone is 2^25 elements, and a batch drawn at once in fp32 held tens of GB inside the timed window.
    Both sides call this with the same arguments, so both see the same inputs."""
    mod, g = _module(module), checks.generator(seed, device)
    step = max(1, GEN_CHUNK // (M * K))
    parts = []
    for i in range(0, n, step):
        got = mod.timing_inputs(M, K, g, min(step, n - i))
        if out is None:
            parts.append(got)
        else:
            for dst, src in zip(out, got, strict=True):
                dst[i : i + len(src)].copy_(src)
    if out is not None:
        return out
    return parts[0] if len(parts) == 1 else tuple(torch.cat(ts) for ts in zip(*parts, strict=True))


def outputs_checksum(outs: torch.Tensor) -> int:
    """The sum of the outputs' bits, as 64-bit words where they divide into them, else bytes (a wrapping sum, the
    same in any order): known only to whoever has the outputs. Summed as int16 into an int64, 50 prefill outputs
    took 8.4 ms of the timed window on the H200, a fifth of the kernels' time (2026-12-02)."""
    flat = outs.contiguous().view(-1).view(torch.uint8)
    words = flat.view(torch.int64) if flat.numel() % 8 == 0 else flat
    return int(words.sum(dtype=torch.int64))


def time_calls(fn, *, what: str, module: str, N: int, K: int, M: int, out_dtype: torch.dtype, nbytes: int,
               seed: int | None = None, device: str = "cuda", est_ms: float | None = None) -> Timed:  # fmt: skip
    """Time fn(*inputs, *weights, out=out) at one M, check every timed output, and return both figures."""
    seed = checks.fresh_seed() if seed is None else seed
    copy_bw = timing.copy_bandwidth() if device == "cuda" else 1e12
    copies = timing.copies_needed(nbytes, device) if device == "cuda" else 2
    calls = calls_for(nbytes, copy_bw, est_ms, out_bytes=M * N * out_dtype.itemsize)
    calls -= calls % copies
    label = f"{what} M={M}, N={N}, K={K}"
    mod = _module(module)
    t0 = time.perf_counter()
    weights = weight_copies(module, N, K, seed, copies, device)
    t1 = time.perf_counter()
    if checks.is_remote(fn):
        from qmatmul.grader import protocol

        graph_ms, eager_ms, outs_by_mode, go_seeds = protocol.bench(
            fn.worker, fn.__name__, module=module, N=N, K=K, M=M, calls=calls, copies=copies, seed=seed,
            out_dtype=str(out_dtype).removeprefix("torch."), what=what, window=gpulock.exclusive,
        )  # fmt: skip
    else:
        graph_ms, eager_ms, outs_by_mode, go_seeds = _local(
            fn, module, weights, N, K, M, calls, out_dtype, device, what
        )
    t2 = time.perf_counter()
    for mode, outs in outs_by_mode.items():
        inputs = inputs_for(module, M, K, go_seeds[mode], calls, device)
        for i, expected in references(mod, inputs, weights, calls, M, N):
            checks.compare(outs[i], expected, what=f"{what} (timed, {mode})", rtol=checks.tolerance_for(out_dtype),
                           poisoned=True, context=f" (call {i} of the timed batch, M={M}, N={N}, K={K})")  # fmt: skip
    if profiling():
        print(
            timed_profile(label, calls, len(outs_by_mode), copies, t1 - t0, t2 - t1, time.perf_counter() - t2)
        )
    return Timed(label, M, nbytes, graph_ms, eager_ms, copy_bw)


def references(mod, inputs: tuple, weights: list[tuple], calls: int, M: int, N: int):
    """(call, its fp32 reference) for every timed call: the calls that share a weight copy in one reference matmul
    (a chapter's reference treats rows independently: each row of x, with its scale, gives one row of y), at most
    REF_ELEMENTS outputs at a time. One reference a call decoded the whole weight 400 times a batch."""
    copies, step = len(weights), max(1, REF_ELEMENTS // (M * N))
    for c in range(copies):
        idx = list(range(c, calls, copies))
        for j in range(0, len(idx), step):
            part = idx[j : j + step]
            rows = tuple(t[part].flatten(0, 1) for t in inputs)
            expected = mod.reference(*rows, *weights[c]).view(len(part), M, N)
            yield from zip(part, expected, strict=True)


def _local(fn, module, weights, N, K, M, calls, out_dtype, device, what):
    """In-process timing for a learner's own notebook: graph replay and eager, both over fresh inputs."""
    copies = len(weights)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    outs = torch.empty((calls, M, N), dtype=out_dtype, device=device)
    go_seeds, results, times = {}, {}, {}
    buffers = tuple(t.clone() for t in inputs_for(module, M, K, 0, calls, device))

    def run(i):
        return fn(*(t[i] for t in buffers), *weights[i % copies], out=outs[i])

    checks.call_learner(run, 0, what=what)
    sync()
    graph = None
    try:
        if not cuda:
            raise RuntimeError("no CUDA graphs without a GPU")
        graph, _ = timing.capture(lambda: [run(i) for i in range(calls)], warm=lambda: run(1))
    except Exception as exc:  # noqa: BLE001 - not capturable: the eager figure stands alone
        if cuda:
            print(
                f"{what}: the calls could not be captured in a CUDA graph ({type(exc).__name__}); eager only"
            )
        graph = None
        sync()
    modes = ("graph", "eager") if graph is not None else ("eager",)
    for mode in [*modes, *modes]:  # the first round of each mode warms up, the second is timed
        go_seeds[mode] = secrets.randbits(31)
        inputs_for(module, M, K, go_seeds[mode], calls, device, out=buffers)
        outs.fill_(float("nan"))
        sync()
        t0 = time.perf_counter()
        if mode == "graph":
            graph.replay()
        else:
            for i in range(calls):
                checks.call_learner(run, i, what=what)
        sync()
        times[mode] = (time.perf_counter() - t0) * 1e3 / calls
        results[mode] = outs.clone()
    return times.get("graph"), times.get("eager"), results, go_seeds


def not_on_cpu(what: str, threshold: float):
    """What a performance cell says without a CUDA GPU (it awards nothing: checks.not_measured)."""
    return checks.not_measured(
        "Performance not measured: no CUDA GPU here (the interpreter's timings say nothing about a GPU). This "
        f"cell awards its points only on a GPU, where {what} must reach {threshold:.0%} of the copy bandwidth."
    )


def check_bandwidth(fn, *, what: str, module: str, N: int, K: int, Ms, out_dtype, nbytes, threshold: float,
                    hint: str, seed: int | None = None) -> list[Timed]:  # fmt: skip
    """A decode kernel's performance cell: at every M, at least `threshold` of the copy bandwidth."""
    checks.require_own_kernel(fn, what=what)
    seed = checks.fresh_seed() if seed is None else seed
    results = []
    for M in Ms:
        t = time_calls(fn, what=what, module=module, N=N, K=K, M=M, out_dtype=out_dtype, nbytes=nbytes(M),
                        seed=seed + M)  # fmt: skip
        print(t.describe())
        results.append(t)
    worst = min(results, key=lambda t: t.fraction_of_copy)
    if worst.fraction_of_copy < threshold:
        raise CheckFailed(
            f"{what} reaches {worst.fraction_of_copy:.0%} of the copy bandwidth at {worst.label}; it must reach "
            f"{threshold:.0%}. {hint}"
        )
    checks.passed(
        f"{what}: at least {worst.fraction_of_copy:.0%} of the copy bandwidth (threshold {threshold:.0%})"
    )
    return results
