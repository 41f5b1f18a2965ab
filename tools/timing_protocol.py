"""How much does the trusted grader's timing protocol leave? The same solution kernels timed in process
(CUDA-graph replay and eager, qmatmul/harness.py) and through the protocol (the trusted side's clock around a
batch the worker runs), at the graded shapes. On a CUDA GPU:

    python tools/timing_protocol.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    from qmatmul import environment

    env = environment.start()
    from qmatmul import course, fp8, harness, w4a16, w8a16
    from qmatmul.grader import notebook, trusted
    from qmatmul.grader.remote import RemoteFunction, Worker

    problems = [
        ("w8a16", "w8a16_decode", w8a16, env.act_dtype, lambda M, N, K: w8a16.bytes_moved(M, N, K, 2)),
        ("w4a16", "w4a16_decode", w4a16, env.act_dtype, lambda M, N, K: w4a16.bytes_moved(M, N, K, w4a16.BANDWIDTH_GROUP)),
        ("fp8", "fp8_decode", fp8, fp8.out_dtype("cuda"), lambda M, N, K: fp8.bytes_moved(M, N, K)),
    ]  # fmt: skip
    rows = []
    for chapter, name, mod, out_dtype, nbytes in problems:
        cells = [
            c for nb in sorted((ROOT / "solutions" / chapter).glob("*.ipynb")) for c in notebook.read(nb)
        ]
        worker = Worker(notebook.program(cells), source=trusted.learner_source(cells))
        local = getattr(course.load_notebook_code(chapter, name=f"timing_{chapter}"), name)
        N, K = mod.BANDWIDTH_SHAPE
        try:
            for M in mod.BANDWIDTH_MS:
                kw = dict(
                    what=name, module=mod.__name__, N=N, K=K, M=M, out_dtype=out_dtype, nbytes=nbytes(M, N, K)
                )
                a = harness.time_calls(local, **kw)
                b = harness.time_calls(RemoteFunction(worker, name), **kw)
                row = dict(chapter=chapter, M=M, N=N, K=K, local_graph_us=a.graph_ms * 1e3 if a.graph_ms else None,
                           remote_graph_us=b.graph_ms * 1e3 if b.graph_ms else None, local_eager_us=a.eager_ms * 1e3,
                           remote_eager_us=b.eager_ms * 1e3, copy_tbs=a.copy_bw / 1e12,
                           local_graph_frac=a.fraction_of_copy, remote_frac=b.fraction_of_copy)  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
        finally:
            worker.close()
    print(f"\n{env.gpu_name}, torch {env.versions['torch']}, triton {env.versions['triton']}")
    print(
        "chapter  M   in-process graph   protocol graph   in-process eager   protocol eager   (µs per call)"
    )
    for r in rows:
        print(f"{r['chapter']:7} {r['M']:3} {r['local_graph_us'] or 0:12.1f} {r['remote_graph_us'] or 0:16.1f} "
              f"{r['local_eager_us']:16.1f} {r['remote_eager_us']:16.1f}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(dict(env=env.describe(), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
