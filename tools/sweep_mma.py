"""On a CUDA GPU: the Gluon MMA decodes (qmatmul/kernels/mma_decode.py) per configuration, graph-timed beside the expert
Triton kernel (and tinygemm for W4A16), every configuration checked against the chapter's reference before and after
timing.

    python -m tools.sweep_mma [--format w4a16|mxfp4|nvfp4] [--out DIR] [--budget-s SECONDS]
                              [--one-row | --small-m | --waves | --regcap]

--one-row times M = 1 only, the fp4 formats' block-diagonal kernel (DIAG) beside the per-lane one; --small-m the same
at M = 1, 2 and 4 (NVFP4: 1 and 2, where its steps of 64 values hold 8 / M blocks), NB and MP as the kernel's wrapper
chooses them; --waves W4A16 at M = 1 and 4 with K split 6-8 ways, with and without a register cap; --regcap W4A16
at M = 16 as shipped (x through shared memory, two tiles a warp, K split 2 and 8 ways) with and without a cap of 96
registers (five programs an SM where 124 registers fit four: `python -m tools.sass --waves`).

Writes sweep_mma.json (W4A16) or sweep_mma_<format>.json (rows like tools/sweep_decode.py's) and prints each
configuration's % of the copy bandwidth at M = 1, 4 and 16 on the three decode shapes.
"""

# ruff: noqa: B023 - every closure below is timed before the loop moves on

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SHAPES = [(28672, 8192), (8192, 28672), (8192, 8192)]
MS = (1, 4, 16)
SPLITS = (2, 4, 8, 16)
G = 128


def configs():
    """Every configuration the sweep times (each with every split of SPLITS): the shipped ones and their neighbours."""
    return [dict(R=r, num_warps=nw, X_SHARED=xs)
            for xs, nw, r in [(False, 4, 1), (False, 4, 2), (True, 4, 1), (True, 4, 2), (True, 8, 1)]]  # fmt: skip


def fp4_configs(one_row: bool = False, small_m: bool = False):
    """The fp4 kernel's configurations (each with every split of FP4_SPLITS); one_row: M = 1's, the block-diagonal
    kernel's among them; small_m: M = 1-4's, the block-diagonal kernel's steps as decode_fp4 chooses them."""
    if small_m:  # maxnreg 72: seven programs of 4 warps an SM, one wave of 896 at 28672 x 8192
        return [
            dict(R=2, num_warps=4, DIAG=True, maxnreg=72),
            *(dict(R=r, num_warps=4, DIAG=d, X_SHARED=False) for d in (True, False) for r in (1, 2)),
        ]
    if one_row:
        return [dict(R=r, num_warps=4, DIAG=True, NB=nb) for r in (1, 2) for nb in (4, 8)] + [
            dict(R=r, num_warps=4, DIAG=False, X_SHARED=False) for r in (1, 2)
        ]
    return [dict(R=r, num_warps=4, X_SHARED=xs) for xs, r in [(False, 1), (False, 2), (True, 1), (True, 2)]]


FP4_SPLITS = (4, 8, 16)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="build/bench")
    parser.add_argument("--budget-s", type=float, default=240)
    parser.add_argument("--format", default="w4a16", choices=("w4a16", "mxfp4", "nvfp4"))
    parser.add_argument("--one-row", action="store_true", help="M = 1 only (the fp4 block-diagonal kernel)")
    parser.add_argument("--small-m", action="store_true", help="M = 1, 2, 4 (the fp4 block-diagonal kernel)")
    parser.add_argument("--waves", action="store_true", help="W4A16 at M = 1, 4: x per lane, one tile a warp, K split "
                        "6-8 ways, with and without a cap of 64 registers (eight programs an SM)")  # fmt: skip
    parser.add_argument("--regcap", action="store_true", help="W4A16 at M = 16 as shipped, with and without a cap "
                        "of 96 registers (five programs an SM instead of four)")  # fmt: skip
    args = parser.parse_args(argv)
    ms_timed = (1,) if args.one_row else (1, 4) if args.waves else (16,) if args.regcap else MS
    if args.small_m:
        ms_timed = (1, 2) if args.format == "nvfp4" else (1, 2, 4)
    # checked at the Ms timed, else at M = 1, 5, 16 before timing and 1, 16 after
    narrow = args.one_row or args.small_m or args.waves or args.regcap
    checked_before = [(m, 128) for m in ms_timed] if narrow else [(1, 128), (5, 64), (16, 128)]
    checked_after = [(m, 128) for m in ms_timed] if narrow else [(1, 128), (16, 64)]

    import torch

    from qmatmul import checks, mxfp4, nvfp4, timing, w4a16
    from qmatmul.kernels import expert, mma_decode

    if not mma_decode.available():
        print("needs a CUDA GPU of sm_80 or newer and triton with Gluon")
        return 1
    t0 = time.time()
    copy_bw = timing.copy_bandwidth()
    g = checks.generator(0, "cuda")
    results = []
    fp4 = args.format != "w4a16"
    ch = {"w4a16": w4a16, "mxfp4": mxfp4, "nvfp4": nvfp4}[args.format]
    block = 16 if ch is nvfp4 else 32

    def weights(N, K):  # (the chapter's operands, the MMA kernel's words, [tinygemm's operands])
        if fp4:
            w = ch.timing_weights(N, K, g)  # packed, scales (, the global scale)
            return w, mma_decode.repack_fp4(w[0], block)
        p, s, z = w4a16.random_packed(N, K, G, "cuda", g)
        return (p, s, z), mma_decode.repack(p), w4a16.tinygemm_operands(p, s, z, G)

    def bytes_moved(M, N, K):
        return ch.bytes_moved(M, N, K) if fp4 else w4a16.bytes_moved(M, N, K, G)

    problems = {
        (N, K): [weights(N, K) for _ in range(timing.copies_needed(bytes_moved(1, N, K)))] for N, K in SHAPES
    }
    xs = {
        (M, K): torch.randn(M, K, device="cuda", generator=g).bfloat16() for M in ms_timed for _, K in SHAPES
    }

    def timed(name, make, cfg=None, split=None):
        """make(x, weights, out, N) -> a call; graph-timed on every shape and M, a line of % of copy."""
        line = []
        for (N, K), ws in problems.items():
            for M in ms_timed:
                x = xs[(M, K)]
                outs = [torch.empty(M, N, dtype=torch.bfloat16, device="cuda") for _ in ws]
                try:
                    ms = timing.graph_ms([make(x, w, o, N) for w, o in zip(ws, outs, strict=True)], target_ms=1.0,
                                        replays=7)  # fmt: skip
                except Exception as exc:  # noqa: BLE001
                    results.append(dict(name=name, cfg=cfg, split=split, N=N, K=K, M=M, error=str(exc)[:300]))
                    line.append(f"{N // 1024}k×{K // 1024}k/M{M}:ERR")
                    continue
                frac = bytes_moved(M, N, K) / (ms * 1e-3) / copy_bw
                results.append(
                    dict(name=name, cfg=cfg, split=split, N=N, K=K, M=M, us=ms * 1e3, copy_frac=frac)
                )
                line.append(f"{N // 1024}k×{K // 1024}k/M{M}:{100 * frac:.0f}")
        return " ".join(line)

    def check(call, M, seed, group=G):
        """call(x, the chapter's operands, N) against the chapter's reference on a ragged problem."""
        gen = checks.generator(seed)
        if fp4:
            x, *w = ch.random_problem(M, 1000, 1024, torch.bfloat16, "cuda", gen)
        else:
            x, *w = w4a16.random_problem(M, 1000, 1024, group, torch.bfloat16, "cuda", gen)
        ref = ch.reference(x, *w) if fp4 else w4a16.reference(x, *w, group)
        checks.compare(call(x, w, 1000, group), ref, what="mma decode", rtol=checks.tolerance_for(x.dtype))

    print(f"{args.format}: copy {copy_bw / 1e12:.2f} TB/s", flush=True)
    if fp4:
        triton_fn = expert.nvfp4_decode if ch is nvfp4 else expert.mxfp4_decode
        print(
            "expert Triton:",
            timed("expert", lambda x, w, o, N: lambda: triton_fn(x, *w[0], out=o)),
            flush=True,
        )
    else:
        print("expert Triton:", timed("expert", lambda x, w, o, N: lambda: expert.w4a16_decode(x, *w[0], G, out=o)),
              flush=True)  # fmt: skip
        print("tinygemm:", timed("tinygemm", lambda x, w, o, N: lambda: torch._weight_int4pack_mm(x, *w[2])),
              flush=True)  # fmt: skip
    if args.regcap:
        w4_configs = [dict(R=2, num_warps=4, X_SHARED=True, **c) for c in ({}, {"maxnreg": 96})]
    else:
        w4_configs = [dict(R=1, num_warps=4, X_SHARED=False, **c) for c in ({}, {"maxnreg": 64})]
    w4_splits = (6, 7, 8) if args.waves else (2, 8) if args.regcap else SPLITS
    w4_sweep = w4_configs if args.waves or args.regcap else configs()
    for cfg in fp4_configs(args.one_row, args.small_m) if fp4 else w4_sweep:
        for split in ((2, *FP4_SPLITS) if args.one_row else FP4_SPLITS) if fp4 else w4_splits:
            if time.time() - t0 > args.budget_s:
                print("budget spent")
                break
            c = dict(cfg, SPLIT_K=split)
            if fp4:  # the operands: (packed, scales[, global scale]); the words; N
                gs = (lambda w: w[2]) if ch is nvfp4 else (lambda w: None)
                run = lambda x, w, words, N, out=None, G=G: mma_decode.decode_fp4(x, words, w[1], gs(w), N, out=out,
                                                                                  **c)  # fmt: skip
                repack = lambda p: mma_decode.repack_fp4(p, block)
            else:  # (packed, scales, zeros)
                run = lambda x, w, words, N, out=None, G=G: mma_decode.decode(x, words, w[1], w[2], G, N, out=out,
                                                                              **c)  # fmt: skip
                repack = mma_decode.repack
            call = lambda x, w, N, group: run(x, w, repack(w[0]), N, G=group)
            tag = f"mma {args.format} {cfg} split={split}"
            try:
                for M, group in checked_before:
                    check(call, M, 10 + M, group)
            except Exception as exc:  # noqa: BLE001
                print(f"{tag}: FAILS ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})", flush=True)
                results.append(dict(name="mma", cfg=cfg, split=split, error=str(exc)[:300]))
                continue
            line = timed("mma", lambda x, w, o, N: lambda: run(x, w[0], w[1], N, out=o), cfg, split)
            try:
                for M, group in checked_after:
                    check(call, M, 20 + M, group)
                ok = ""
            except Exception:  # noqa: BLE001
                ok = "  WRONG AFTER TIMING"
            print(f"{tag}: {line}{ok}  [{time.time() - t0:.0f} s]", flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = "sweep_mma.json" if not fp4 else f"sweep_mma_{args.format}.json"
    (out_dir / name).write_text(json.dumps(dict(copy_TBps=copy_bw / 1e12, rows=results), indent=1))
    print(f"done in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
