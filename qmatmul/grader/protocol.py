"""The timing protocol of qmatmul/checks/harness.py, trusted side: prepare the timed problem in the worker, time
its goes by this process's clock (each in the GPU's exclusive window), fetch and check the outputs of the go that
counts. The worker only runs (qmatmul/grader/worker.py's bench_prepare, bench_go, bench_fetch)."""

from __future__ import annotations

import contextlib
import secrets
import time

import torch

from qmatmul import checks
from qmatmul.checks import CheckFailed, LearnerError, harness
from qmatmul.grader.files import read_tensor


def bench(worker, name: str, *, module: str, N: int, K: int, M: int, calls: int, copies: int, seed: int,
          out_dtype: str, what: str, window=contextlib.nullcontext):  # fmt: skip
    """The timing protocol of qmatmul/checks/harness.py, trusted side: returns (graph_ms, eager_ms, outputs by
    mode, the seed each mode's inputs came from). The clock is this process's; the worker only runs.
    `window()` is entered around each timed go (harness.py: the GPU's exclusive lock)."""
    prep = {"op": "bench_prepare", "name": name, "module": module, "N": N, "K": K, "M": M, "calls": calls,
            "copies": copies, "seed": seed, "out_dtype": out_dtype}  # fmt: skip
    t_prepare = time.perf_counter()
    reply = worker._exchange(prep, what)
    t_prepare, t_fetch = time.perf_counter() - t_prepare, 0.0
    try:
        worker._raise_for(reply, name)
    except LearnerError as exc:
        raise CheckFailed(checks.learner_error_message(exc, what)) from None
    rtt = []
    for _ in range(5):
        worker._exchange({"op": "ping"}, what)
        rtt.append(worker.last_exchange_s)
    times, outs, seeds = {}, {}, {}
    # where the worker keeps the batch (worker.py's bench_prepare)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for mode in ("graph", "eager") if reply.get("graph") else ("eager",):
        # harness.TIMED_ROUNDS goes, each on fresh inputs; the fastest counts, and each new fastest is fetched
        # and checked before the next go overwrites its outputs, so the go that counts is always checked.
        for _ in range(harness.TIMED_ROUNDS):
            go_seed = secrets.randbits(31)
            with window():
                done = worker._exchange({"op": "bench_go", "mode": mode, "seed": go_seed}, what)
            # from sending the go to its answer: the continue and stop of the worker's processes stay out
            elapsed = worker.last_exchange_s
            try:
                worker._raise_for(done, name)
            except LearnerError as exc:
                raise CheckFailed(checks.learner_error_message(exc, what)) from None
            ms = max(elapsed - min(rtt), 1e-7) * 1e3 / calls
            if mode in times and ms >= times[mode]:
                continue
            outs.pop(mode, None)  # the slower go's outputs, freed before the next are read
            t_fetch -= time.perf_counter()
            got = _fetch_outputs(worker, what, (calls, M, N), out_dtype, device)
            t_fetch += time.perf_counter()
            if str(harness.outputs_checksum(got)) != done.get("checksum"):
                raise CheckFailed(
                    f"{what}: the process running your code said the timed batch was done before its outputs "
                    "were (the outputs handed over afterwards differ from those it answered with): flagged for "
                    "your instructor"
                )
            times[mode], outs[mode], seeds[mode] = ms, got, go_seed
    if harness.profiling():
        print(f"profile {what}: the worker prepared (weights, buffers, first call, graph, warm-up) in "
              f"{t_prepare:.1f} s; the outputs' hand-over took {t_fetch:.1f} s")  # fmt: skip
    return times.get("graph"), times.get("eager"), outs, seeds


def _fetch_outputs(worker, what: str, shape: tuple, out_dtype: str, device: str) -> torch.Tensor:
    """The timed batch's outputs, handed over through a file of this grading's own folder."""
    path = worker.dir / f"outs-{secrets.token_hex(8)}.pt"
    worker._exchange({"op": "bench_fetch", "result": str(path)}, what)
    try:
        return read_tensor(path, shape, getattr(torch, out_dtype), device)
    except Exception as exc:  # noqa: BLE001
        raise CheckFailed(f"{what}: its timed outputs could not be read ({type(exc).__name__})") from None
    finally:
        path.unlink(missing_ok=True)
