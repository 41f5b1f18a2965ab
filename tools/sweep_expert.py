"""On a CUDA GPU: sweep the expert W4A16 decode kernels' launch configs beside the readable solution.

    python -m tools.sweep_expert [--out DIR] [--budget-s SECONDS]

Every config is checked against the reference on a fresh ragged problem before it is timed. Writes
sweep_expert.json (every timing) and prints the best config per shape and M.
"""

# ruff: noqa: B023 - every closure below is timed before the loop moves on

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="build/bench")
    parser.add_argument("--budget-s", type=float, default=420)
    parser.add_argument("--gemv-only", action="store_true", help="M = 1 GEMV kernels only")
    args = parser.parse_args(argv)

    import torch

    from qmatmul import checks, course, environment, timing, w4a16
    from qmatmul.kernels import expert

    env = environment.start()
    if not env.has_gpu:
        print("needs a CUDA GPU")
        return 1
    t_start = time.time()
    dtype = env.act_dtype
    copy_bw = timing.copy_bandwidth()
    print(f"{env.gpu_name} copy {copy_bw / 1e12:.2f} TB/s, {dtype}")
    rows = []
    g = checks.generator(0, "cuda")
    sol4 = course.load_notebook_code("w4a16", name="sweep_w4")

    def correct(fn, ref_fn, make):
        args_ = make()
        try:
            checks.compare(fn(*args_), ref_fn(*args_), what="sweep", rtol=checks.tolerance_for(dtype))
            return True
        except Exception as exc:  # noqa: BLE001 - a config that fails to compile or is wrong is recorded
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"

    def timed(tag, label, M, N, K, cfg, fn, nbytes, ok=True):
        if time.time() - t_start > args.budget_s:
            return None
        if ok is not True:
            rows.append(dict(tag=tag, label=label, M=M, N=N, K=K, cfg=cfg, error=ok))
            print(f"{tag} {label} M={M} {N}x{K} {cfg}: {ok}")
            return None
        try:
            fn()
            torch.cuda.synchronize()
            ms = timing.median_ms(fn, rep_ms=40)
        except Exception as exc:  # noqa: BLE001
            rows.append(dict(tag=tag, label=label, M=M, N=N, K=K, cfg=cfg, error=str(exc)[:120]))
            return None
        frac = nbytes / (ms * 1e-3) / copy_bw
        rows.append(dict(tag=tag, label=label, M=M, N=N, K=K, cfg=cfg, us=ms * 1e3, copy_frac=frac))
        return frac

    G = 128
    shapes = [(28672, 8192), (8192, 28672)]
    # W4A16
    for N, K in shapes:
        p, s, z = w4a16.random_packed(N, K, G, "cuda", g)
        tiny = w4a16.tinygemm_operands(p, s, z, G) if dtype == torch.bfloat16 else None
        for M in (1,) if args.gemv_only else (1, 4, 16):
            x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
            nb = w4a16.bytes_moved(M, N, K, G)
            timed("w4a16", "solution", M, N, K, None, lambda x=x: sol4.w4a16_decode(x, p, s, z, G), nb)
            if tiny is not None:
                timed("w4a16", "tinygemm", M, N, K, None, lambda x=x: torch._weight_int4pack_mm(x, *tiny), nb)

            def make(M=M):
                return w4a16.random_problem(M, 1000, 1024, G, dtype, "cuda", checks.generator(5))

            def ref4(x_, p_, s_, z_):
                return w4a16.reference(x_, p_, s_, z_, G)

            if M == 1:
                for bn, gpi, nw in itertools.product((8, 16, 32), (2, 4, 8), (1, 2, 4)):
                    cfg = dict(BLOCK_N=bn, GPI=gpi, num_warps=nw, num_stages=2)

                    def fn(x_, p_, s_, z_, cfg=cfg):
                        return expert.w4a16_gemv(x_, p_, s_, z_, G, **cfg)

                    ok = correct(fn, ref4, make)
                    timed("w4a16", "gemv", M, N, K, cfg, lambda x=x, fn=fn: fn(x, p, s, z), nb, ok)
            if M == 4 or args.gemv_only:
                continue
            # 2 warps for 32 columns: 5.17 SASS a weight against 6.16 with 4 (tools/sass.py, not yet timed).
            for bn, nw, ns in ((32, 4, 5), (32, 2, 5), (64, 2, 5), (32, 4, 3), (16, 2, 5), (16, 4, 5),
                               (64, 4, 5)):  # fmt: skip
                cfg = dict(BLOCK_M=16, BLOCK_N=bn, num_warps=nw, num_stages=ns)

                def fn(x_, p_, s_, z_, cfg=cfg):
                    return expert.w4a16_decode_tc(x_, p_, s_, z_, G, **cfg)

                ok = correct(fn, ref4, make)
                timed("w4a16", "tc", M, N, K, cfg, lambda x=x, fn=fn: fn(x, p, s, z), nb, ok)
                xh = x.to(torch.float16)
                timed("w4a16", "tc fp16", M, N, K, cfg, lambda xh=xh, fn=fn: fn(xh, p, s, z), nb)
            report(rows, "w4a16", M, N, K)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dump(out, expert, w4a16, dtype)
    meta = dict(gpu=env.gpu_name, versions=env.versions, torch=torch.__version__, copy_TBps=copy_bw / 1e12,
                date=time.strftime("%Y-%m-%d"), dtype=str(dtype))  # fmt: skip
    (out / "sweep_expert.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=1, default=str))
    print(f"done in {time.time() - t_start:.0f} s; wrote {out}/sweep_expert.json")
    return 0


def dump(out, expert, w4a16, dtype):
    """The PTX and TTGIR of each expert kernel at its default config, with a PTX opcode histogram."""
    import collections
    import re

    import torch

    from qmatmul import checks
    from qmatmul.kernels import splitk

    N, K, G = 28672, 8192, 128
    p, s, z = w4a16.random_packed(N, K, G, "cuda", checks.generator(2, "cuda"))
    words = expert.words_of(p)
    x = torch.randn(1, K, device="cuda").to(dtype)
    y = torch.empty(16, N, device="cuda", dtype=dtype)
    x16 = torch.randn(16, K, device="cuda").to(dtype)
    cfg = expert.gemv_config(N, K, "cuda")
    grid = (N // cfg["BLOCK_N"],)
    kernels = {
        "gemv": expert._w4_gemv_kernel[grid](x, words, s, z, y, N, K, 1, words.stride(0), s.stride(0), 1,
                                             GROUP=G, **cfg),
    }  # fmt: skip
    for name, xx in (("tc", x16), ("tc_fp16", x16.half())):
        tc = expert.tc_config(16, N, "cuda")
        yy = torch.zeros(16, N, device="cuda", dtype=xx.dtype)
        part, count = splitk.scratch("cuda", tc["SPLIT_K"], N, N // tc["BLOCK_N"])
        kernels[name] = expert._w4_tc_kernel[(N // tc["BLOCK_N"], tc["SPLIT_K"])](
            xx, words, s, z, yy, part, count, 16, N, K, xx.stride(0), 1, words.stride(0), s.stride(0), yy.stride(0),
            1, GROUP=G, **tc,
        )  # fmt: skip
    for name, k in kernels.items():
        for kind in ("ptx", "ttgir"):
            (out / f"{name}.{kind}").write_text(str(k.asm.get(kind, "")))
        ops = collections.Counter(re.findall(r"^\s+(?:@%p\d+ )?([a-z][\w.]*)", k.asm.get("ptx", ""), re.M))
        print(name, "regs", getattr(k, "n_regs", "?"), "spills", getattr(k, "n_spills", "?"),
              "PTX ops:", ", ".join(f"{o} {n}" for o, n in ops.most_common(14)))  # fmt: skip


def report(rows, tag, M, N, K):
    mine = [r for r in rows if r["tag"] == tag and r["M"] == M and r["N"] == N and r["K"] == K and "us" in r]
    by_label = {}
    for r in mine:
        if r["label"] not in by_label or r["copy_frac"] > by_label[r["label"]]["copy_frac"]:
            by_label[r["label"]] = r
    line = ", ".join(f"{lab} {100 * r['copy_frac']:.0f} % ({r['us']:.1f} µs)" for lab, r in by_label.items())
    print(f"{tag} M={M} {N}x{K}: {line}")
    for lab, r in by_label.items():
        if r["cfg"]:
            print(f"    best {lab}: {r['cfg']}")


if __name__ == "__main__":
    sys.exit(main())
