"""How much does the trusted grader's timing protocol leave? The same solution kernels timed in process
(CUDA-graph replay and eager, qmatmul/checks/harness.py) and through the protocol (the trusted side's clock around a
batch the worker runs), at the graded shapes. On a CUDA GPU:

    python -m tools.timing_protocol [--json PATH] [--only fp8_matmul,w8a16_decode]
    python -m tools.timing_protocol --phases      # what the window holds besides the kernels, phase by phase
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json")
    parser.add_argument("--only", help="comma-separated functions, e.g. fp8_matmul (default: every row)")
    parser.add_argument("--phases", action="store_true", help="time the window's own phases, no kernel")
    args = parser.parse_args(argv)
    from qmatmul import environment

    env = environment.start()
    if args.phases:
        return phases(args.json)
    from qmatmul import course, fp8, w4a16, w8a16
    from qmatmul.checks import harness
    from qmatmul.grader import notebook, trusted
    from qmatmul.grader.remote import RemoteFunction, Worker

    M, N, K = fp8.PREFILL_SHAPE
    # chapter, function, module, output dtype, bytes(M, N, K), (N, K), the Ms, a call's estimated ms (None: from
    # the bytes). The last row is the one timed prefill cell, FP8's, at its graded shape and batch (its check passes
    # twice torch._scaled_mm's time, about 1 ms).
    problems = [
        ("w8a16", "w8a16_decode", w8a16, env.act_dtype, lambda M, N, K: w8a16.bytes_moved(M, N, K, 2),
         w8a16.BANDWIDTH_SHAPE, w8a16.BANDWIDTH_MS, None),
        ("w4a16", "w4a16_decode", w4a16, env.act_dtype, lambda M, N, K: w4a16.bytes_moved(M, N, K, w4a16.BANDWIDTH_GROUP),
         w4a16.BANDWIDTH_SHAPE, w4a16.BANDWIDTH_MS, None),
        ("fp8", "fp8_decode", fp8, fp8.out_dtype("cuda"), fp8.bytes_moved, fp8.BANDWIDTH_SHAPE, fp8.BANDWIDTH_MS, None),
        ("fp8", "fp8_matmul", fp8, fp8.out_dtype("cuda"), fp8.bytes_moved, (N, K), (M,), 1.0),
    ]  # fmt: skip
    if args.only:
        problems = [p for p in problems if p[1] in args.only.split(",")]
    rows = []
    for chapter, name, mod, out_dtype, nbytes, (N, K), Ms, est_ms in problems:
        cells = notebook.read_folder(ROOT / "solutions" / chapter)
        worker = Worker(notebook.program(cells), source=trusted.learner_source(cells))
        local = getattr(course.load_notebook_code(chapter, name=f"timing_{chapter}"), name)
        try:
            for M in Ms:
                kw = dict(what=name, module=mod.__name__, N=N, K=K, M=M, out_dtype=out_dtype, nbytes=nbytes(M, N, K),
                          est_ms=est_ms)  # fmt: skip
                a = harness.time_calls(local, **kw)
                b = harness.time_calls(RemoteFunction(worker, name), **kw)
                row = dict(chapter=chapter, kernel=name, M=M, N=N, K=K, local_graph_us=a.graph_ms * 1e3 if a.graph_ms else None,
                           remote_graph_us=b.graph_ms * 1e3 if b.graph_ms else None, local_eager_us=a.eager_ms * 1e3,
                           remote_eager_us=b.eager_ms * 1e3, copy_tbs=a.copy_bw / 1e12,
                           local_graph_frac=a.fraction_of_copy, remote_frac=b.fraction_of_copy)  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            worker.close()
    print(f"\n{env.gpu_name}, torch {env.versions['torch']}, triton {env.versions['triton']}")
    print(
        "kernel          M   in-process graph   protocol graph   in-process eager   protocol eager   (µs per call)"
    )
    for r in rows:
        print(f"{r['kernel']:14} {r['M']:4} {r['local_graph_us'] or 0:12.1f} {r['remote_graph_us'] or 0:16.1f} "
              f"{r['local_eager_us']:16.1f} {r['remote_eager_us']:16.1f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(dict(env=env.describe(), rows=rows), indent=1))
    return 0


def phases(json_path: str | None) -> int:
    """The work a timed go does besides the learner's calls (qmatmul/checks/harness.py), each phase alone, at the graded
    shapes and batch sizes: the input draw, the outputs' checksum. Best of three, milliseconds."""
    import time

    import torch

    from qmatmul import fp8, w8a16
    from qmatmul.checks import harness

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def best_ms(fn) -> float:
        fn()
        times = []
        for _ in range(3):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
        return min(times)

    rows = []
    M, N, K = fp8.PREFILL_SHAPE
    (N8, K8), calls8 = w8a16.BANDWIDTH_SHAPE, harness.MAX_CALLS
    for what, mod, m, n, k, calls in [
        ("fp8 prefill", fp8, M, N, K, 50),
        ("w8a16 decode", w8a16, 16, N8, K8, calls8),
    ]:
        bufs = tuple(torch.empty_like(t) for t in harness.inputs_for(mod.__name__, m, k, 0, calls, device))
        outs = torch.empty(calls, m, n, dtype=torch.bfloat16, device=device)
        draw = best_ms(lambda: harness.inputs_for(mod.__name__, m, k, 1, calls, device, out=bufs))  # noqa: B023
        checksum = best_ms(lambda: harness.outputs_checksum(outs))  # noqa: B023
        rows.append(dict(what=what, M=m, N=n, K=k, calls=calls, draw_ms=draw, checksum_ms=checksum,
                         per_call_us=(draw + checksum) / calls * 1e3))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    if json_path:
        Path(json_path).write_text(json.dumps(dict(phases=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
