"""On a CUDA GPU: the Gluon W4A16 decode (qmatmul/mma_decode.py) per configuration, graph-timed beside the expert
Triton kernel and tinygemm, every configuration checked against the chapter's reference before and after timing.

    python tools/sweep_mma.py [--out DIR] [--budget-s SECONDS]

Writes sweep_mma.json (rows like tools/sweep_decode.py's) and prints each configuration's % of the copy bandwidth
at M = 1, 4 and 16 on the three decode shapes.
"""

# ruff: noqa: B023 - every closure below is timed before the loop moves on

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = [(28672, 8192), (8192, 28672), (8192, 8192)]
MS = (1, 4, 16)
SPLITS = (2, 4, 8, 16)
G = 128


def configs():
    """Every configuration the sweep times (each with every split of SPLITS): the shipped ones and their neighbours."""
    return [dict(R=r, num_warps=nw, X_SHARED=xs)
            for xs, nw, r in [(False, 4, 1), (False, 4, 2), (True, 4, 1), (True, 4, 2), (True, 8, 1)]]  # fmt: skip


def fp4_configs():
    """The fp4 kernel's configurations (each with every split of SPLITS)."""
    return [dict(R=r, num_warps=4, X_SHARED=xs) for xs, r in [(False, 1), (False, 2), (True, 1), (True, 2)]]


def check(fn, M, N, K, group, seed):
    import torch

    from qmatmul import checks, mma_decode, w4a16

    g = checks.generator(seed)
    x, p, s, z = w4a16.random_problem(M, N, K, group, torch.bfloat16, "cuda", g)
    y = fn(x, mma_decode.repack(p), s, z, group, N)
    checks.compare(
        y, w4a16.reference(x, p, s, z, group), what="mma decode", rtol=checks.tolerance_for(x.dtype)
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="build/bench")
    parser.add_argument("--budget-s", type=float, default=240)
    parser.add_argument("--format", default="w4a16", choices=("w4a16", "mxfp4", "nvfp4"))
    args = parser.parse_args(argv)
    if args.format != "w4a16":
        return sweep_fp4(args)

    import torch

    from qmatmul import bench, checks, expert, mma_decode, w4a16

    if not mma_decode.available():
        print("needs a CUDA GPU of sm_80 or newer and triton with Gluon")
        return 1
    t0 = time.time()
    copy_bw = bench.copy_bandwidth()
    g = checks.generator(0, "cuda")
    results = []
    problems = {}
    for N, K in SHAPES:
        problems[(N, K)] = []
        for _ in range(bench.copies_needed(N * K // 2)):
            p, s, z = w4a16.random_packed(N, K, G, "cuda", g)
            # the packed codes, the MMA kernel's repacked words, scales, zeros, tinygemm's operands
            problems[(N, K)].append((p, mma_decode.repack(p), s, z, w4a16.tinygemm_operands(p, s, z, G)))
    xs = {(M, K): torch.randn(M, K, device="cuda", generator=g).bfloat16() for M in MS for _, K in SHAPES}

    def timed(name, make, cfg=None, split=None):
        line = []
        for (N, K), ws in problems.items():
            for M in MS:
                x = xs[(M, K)]
                outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in ws]
                try:
                    ms = bench.graph_ms([make(x, w, o, N, K) for w, o in zip(ws, outs, strict=True)],
                                        target_ms=1.0, replays=7)  # fmt: skip
                except Exception as exc:  # noqa: BLE001
                    results.append(dict(name=name, cfg=cfg, split=split, N=N, K=K, M=M, error=str(exc)[:300]))
                    line.append(f"{N // 1024}k×{K // 1024}k/M{M}:ERR")
                    continue
                frac = w4a16.bytes_moved(M, N, K, G) / (ms * 1e-3) / copy_bw
                results.append(
                    dict(name=name, cfg=cfg, split=split, N=N, K=K, M=M, us=ms * 1e3, copy_frac=frac)
                )
                line.append(f"{N // 1024}k×{K // 1024}k/M{M}:{100 * frac:.0f}")
        return " ".join(line)

    print(f"copy {copy_bw / 1e12:.2f} TB/s", flush=True)
    print("expert Triton:", timed("expert", lambda x, w, o, N, K: lambda: expert.w4a16_decode(x, w[0], w[2], w[3], G,
                                                                                           out=o)), flush=True)  # fmt: skip
    print(
        "tinygemm:",
        timed("tinygemm", lambda x, w, o, N, K: lambda: torch._weight_int4pack_mm(x, *w[4])),
        flush=True,
    )
    for cfg in configs():
        for split in SPLITS:
            if time.time() - t0 > args.budget_s:
                print("budget spent")
                break
            c = dict(cfg, SPLIT_K=split)
            fn = lambda x, words, s, z, group, N, out=None: mma_decode.decode(
                x, words, s, z, group, N, out=out, **c
            )
            tag = f"mma {cfg} split={split}"
            try:
                for M, grp in ((1, 128), (5, 64), (16, 128)):
                    check(fn, M, 1000, 1024, grp, 10 + M)
            except Exception as exc:  # noqa: BLE001
                print(f"{tag}: FAILS ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})", flush=True)
                results.append(dict(name="mma", cfg=cfg, split=split, error=str(exc)[:300]))
                continue
            line = timed(
                "mma", lambda x, w, o, N, K: lambda: fn(x, w[1], w[2], w[3], G, N, out=o), cfg, split
            )
            try:
                for M, grp in ((1, 128), (16, 64)):
                    check(fn, M, 1000, 1024, grp, 20 + M)
                ok = ""
            except Exception:  # noqa: BLE001
                ok = "  WRONG AFTER TIMING"
            print(f"{tag}: {line}{ok}  [{time.time() - t0:.0f} s]", flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep_mma.json").write_text(
        json.dumps(dict(copy_TBps=copy_bw / 1e12, rows=results), indent=1)
    )
    print(f"done in {time.time() - t0:.0f} s")
    return 0


def sweep_fp4(args) -> int:
    """The fp4 kernel (qmatmul/mma_decode.py's decode_fp4) per configuration beside the expert Triton kernel."""
    import torch

    from qmatmul import bench, checks, expert, mma_decode, mxfp4, nvfp4

    if not mma_decode.available():
        print("needs a CUDA GPU of sm_80 or newer and triton with Gluon")
        return 1
    nv = args.format == "nvfp4"
    ch, block = (nvfp4, 16) if nv else (mxfp4, 32)
    triton_fn = expert.nvfp4_decode if nv else expert.mxfp4_decode
    t0 = time.time()
    copy_bw = bench.copy_bandwidth()
    g = checks.generator(0, "cuda")
    results, problems = [], {}
    for N, K in SHAPES:
        problems[(N, K)] = []
        for _ in range(bench.copies_needed(ch.bytes_moved(1, N, K))):
            w = ch.timing_weights(N, K, g)  # packed, scales (, the global scale)
            problems[(N, K)].append((w, mma_decode.repack_fp4(w[0], block)))
    xs = {(M, K): torch.randn(M, K, device="cuda", generator=g).bfloat16() for M in MS for _, K in SHAPES}

    def check_fp4(fn, M, seed):
        x, packed, *w = ch.random_problem(M, 1000, 1024, torch.bfloat16, "cuda", checks.generator(seed))
        y = fn(x, mma_decode.repack_fp4(packed, block), w[0], w[1] if nv else None, 1000)
        checks.compare(y, ch.reference(x, packed, *w), what="mma fp4", rtol=checks.tolerance_for(x.dtype))

    def timed(name, make, cfg=None, split=None):
        line = []
        for (N, K), ws in problems.items():
            for M in MS:
                x = xs[(M, K)]
                outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in ws]
                try:
                    ms = bench.graph_ms([make(x, w, o, N) for w, o in zip(ws, outs, strict=True)], target_ms=1.0,
                                        replays=7)  # fmt: skip
                except Exception as exc:  # noqa: BLE001
                    results.append(dict(name=name, cfg=cfg, split=split, N=N, K=K, M=M, error=str(exc)[:300]))
                    line.append(f"{N // 1024}k×{K // 1024}k/M{M}:ERR")
                    continue
                frac = ch.bytes_moved(M, N, K) / (ms * 1e-3) / copy_bw
                results.append(
                    dict(name=name, cfg=cfg, split=split, N=N, K=K, M=M, us=ms * 1e3, copy_frac=frac)
                )
                line.append(f"{N // 1024}k×{K // 1024}k/M{M}:{100 * frac:.0f}")
        return " ".join(line)

    print(f"{args.format}: copy {copy_bw / 1e12:.2f} TB/s", flush=True)
    print(
        "expert Triton:", timed("expert", lambda x, w, o, N: lambda: triton_fn(x, *w[0], out=o)), flush=True
    )
    for cfg in fp4_configs():
        for split in (4, 8, 16):
            if time.time() - t0 > args.budget_s:
                print("budget spent")
                break
            c = dict(cfg, SPLIT_K=split)
            fn = lambda x, words, s, gs, N, out=None: mma_decode.decode_fp4(x, words, s, gs, N, out=out, **c)
            tag = f"mma {args.format} {cfg} split={split}"
            try:
                for M in (1, 5, 16):
                    check_fp4(fn, M, 10 + M)
            except Exception as exc:  # noqa: BLE001
                print(f"{tag}: FAILS ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})", flush=True)
                results.append(dict(name="mma", cfg=cfg, split=split, error=str(exc)[:300]))
                continue
            line = timed("mma", lambda x, w, o, N: lambda: fn(x, w[1], w[0][1], w[0][2] if nv else None, N, out=o),
                         cfg, split)  # fmt: skip
            try:
                check_fp4(fn, 1, 21)
                check_fp4(fn, 16, 22)
                ok = ""
            except Exception:  # noqa: BLE001
                ok = "  WRONG AFTER TIMING"
            print(f"{tag}: {line}{ok}  [{time.time() - t0:.0f} s]", flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"sweep_mma_{args.format}.json").write_text(json.dumps(dict(copy_TBps=copy_bw / 1e12, rows=results),
                                                                      indent=1))  # fmt: skip
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
