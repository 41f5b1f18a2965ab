"""Sweep the chapters' solution decode kernels' launches at a Llama-3-8B block's layer shapes (CUDA GPU).

    python -m tools.sweep_layers [--chapters w8a16,...] [--ms 1,16] [--compile-only] [--out DIR]

Each chapter's solution wrapper asks its config function (qmatmul.<chapter>.decode_config, and W4A16's
decode_split) for the launch; here those are replaced, one candidate at a time, and the solution's decode is
graph-timed over rotating weight copies (none served from the L2) at every layer shape of tools/decode_step.py
(the seven Linears and the fused q/k/v and gate/up). Every candidate's output is checked against the reference at
each shape before it is timed. --compile-only runs each candidate once per shape (to fill Triton's cache from
several processes at once). Writes sweep_layers_<chapter>.json to --out: per shape and M, every candidate's µs
and % of the copy bandwidth, best first.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
from pathlib import Path

import torch

from tools.decode_step import BLOCK, FUSED, layer_bytes

SHAPES = list(dict.fromkeys([*BLOCK.values(), *FUSED.values()]))


def candidates(chapter: str) -> list[dict]:
    """The launches tried: BLOCK_M is 16 (all M rows in one program); W4A16's BLOCK_K is its group."""
    if chapter == "w4a16":
        return [dict(BLOCK_M=16, BLOCK_N=n, BLOCK_K=128, num_warps=w, num_stages=st, split=sp)
                for n, w, st, sp in itertools.product((16, 32, 64), (4,), (3, 4, 5), (1, 2, 4, 8))]  # fmt: skip
    if chapter in ("mxfp4", "nvfp4"):
        return [dict(BLOCK_M=16, BLOCK_N=n, BLOCK_K=k, num_warps=4, num_stages=st)
                for n, k, st in itertools.product((16, 32, 64), (128, 256, 512), (2, 3, 4))]  # fmt: skip
    # W8A16's and FP8's decodes unsplit, as swept on 2026-12-05 (their K split: tools/sweep_gemv.py)
    extra = {"FP8_DOT": True, "split": 1} if chapter == "fp8" else {"SPLIT_K": 1}
    return [dict(BLOCK_M=16, BLOCK_N=n, BLOCK_K=k, num_warps=w, num_stages=st, **extra)
            for n, k, w, st in itertools.product((32, 64, 128), (128, 256, 512, 1024), (4, 8), (3, 4))
            if not (w == 8 and n * k < 64 * 512)]  # fmt: skip


@contextlib.contextmanager
def launched_with(chapter: str, cand: dict):
    """The chapter's config functions answer `cand` inside the block (the solution module calls them through the
    facade, qmatmul.<chapter>)."""
    import importlib

    facade = importlib.import_module(f"qmatmul.{chapter}")
    cfg = {k: v for k, v in cand.items() if k != "split"}
    saved = {
        name: getattr(facade, name) for name in ("decode_config", "decode_split") if hasattr(facade, name)
    }
    facade.decode_config = lambda *a, **k: dict(cfg)
    if "split" in cand:
        facade.decode_split = lambda *a, **k: cand["split"]
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(facade, name, fn)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chapters", default="w8a16,w4a16,fp8,mxfp4,nvfp4")
    parser.add_argument("--ms", default="1,16")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--out", default="build/sweep_layers")
    args = parser.parse_args(argv)

    from qmatmul import checks, course, environment, timing
    from tools.decode_step import paths

    env = environment.start()
    if not env.has_gpu:
        print("tools.sweep_layers needs a CUDA GPU")
        return 1
    dtype = env.act_dtype
    copy_bw = None if args.compile_only else timing.copy_bandwidth()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ms = [int(m) for m in args.ms.split(",")]
    for chapter in args.chapters.split(","):
        sol = {chapter: course.load_notebook_code(chapter, name=f"sweep_{chapter}")}
        path = next(p for p in paths(sol, dtype) if p.label.startswith(f"solution {chapter}_decode"))
        g = checks.generator(0, "cuda")
        results = []
        for N, K in SHAPES:
            nbytes1 = layer_bytes(path.fmt, 1, N, K)
            copies = 1 if args.compile_only else timing.copies_needed(nbytes1)
            states = [path.make(N, K, g) for _ in range(copies)]
            for M in ms:
                x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
                want = path.reference(x, states[0]).float()
                rows = []
                for cand in candidates(chapter):
                    with launched_with(chapter, cand):
                        try:
                            y = path.call(x, states[0])
                            checks.compare(y.float(), want, what="out", rtol=4 * checks.tolerance_for(dtype))
                            if args.compile_only:
                                continue
                            t = timing.graph_ms(
                                [lambda s=s, x=x, p=path: p.call(x, s) for s in states], target_ms=1.0
                            )
                        except Exception as exc:  # noqa: BLE001 - a candidate that fails is listed, not timed
                            rows.append(
                                dict(
                                    cand=cand,
                                    error=str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__,
                                )
                            )
                            continue
                    nb = layer_bytes(path.fmt, M, N, K)
                    rows.append(dict(cand=cand, us=t * 1e3, copy_frac=nb / (t * 1e-3) / copy_bw))
                rows.sort(key=lambda r: r.get("us", 1e9))
                results.append(dict(N=N, K=K, M=M, rows=rows))
                if rows and "us" in rows[0]:
                    best = rows[0]
                    print(f"{chapter} {N}x{K} M={M}: best {best['cand']} {best['us']:.1f} µs "
                          f"{100 * best['copy_frac']:.0f} % of copy; errors {sum('error' in r for r in rows)}",
                          flush=True)  # fmt: skip
            del states
            torch.cuda.empty_cache()
        if not args.compile_only:
            meta = dict(
                gpu=env.gpu_name, torch=torch.__version__, versions=env.versions, copy_TBps=copy_bw / 1e12
            )
            (out / f"sweep_layers_{chapter}.json").write_text(
                json.dumps(dict(meta=meta, results=results)) + "\n"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
