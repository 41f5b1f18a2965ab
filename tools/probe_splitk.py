"""Probe (device): does splitting K lift W8A16 / FP8 decode where N is short?

    python tools/probe_splitk.py [--out DIR]

Times, graph-replayed over weight copies: cuBLAS bf16 GEMVs whose weights hold as many bytes as the int8 ones
(the ceiling of a 64 MB read), the chapters' solutions, and split-K GEMVs (partials reduced by the last program
of each column strip, or by a second launch).
"""

# ruff: noqa: B023

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@triton.jit
def splitk_gemv_kernel(
    x_ptr, w_ptr, sx_ptr, sw_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    FP8: tl.constexpr, LAST: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    span = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K  # each program's share of K, whole steps
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(pid_k * span, tl.minimum(pid_k * span + span, K), BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)  # fmt: skip
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0)  # fmt: skip
        if FP8:
            acc = tl.dot(x.to(tl.float8e4nv, bitcast=True), w.to(tl.float8e4nv, bitcast=True), acc)
        else:
            acc = tl.dot(x, w.to(x.dtype), acc)
    m_ok, n_ok = offs_m < M, offs_n < N
    part = part_ptr + offs_m[:, None] * N + offs_n[None, :]
    if SPLIT_K > 1:
        tl.store(part + pid_k * BLOCK_M * N, acc, mask=n_ok[None, :])
        if not LAST:
            return
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel")
        if arrived != SPLIT_K - 1:
            return
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in range(SPLIT_K):
            acc += tl.load(part + j * BLOCK_M * N, mask=n_ok[None, :], other=0.0, cache_modifier=".cg")
        tl.store(count_ptr + pid_n, 0)
    sw = tl.load(sw_ptr + offs_n, mask=n_ok, other=0.0)
    if FP8:
        acc = acc * tl.load(sx_ptr + offs_m, mask=m_ok, other=0.0)[:, None]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             (acc * sw[None, :]).to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])  # fmt: skip


@triton.jit
def reduce_kernel(part_ptr, sx_ptr, sw_ptr, y_ptr, M, N, stride_ym, stride_yn, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr, FP8: tl.constexpr):  # fmt: skip
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok, n_ok = offs_m < M, offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for j in range(SPLIT_K):
        acc += tl.load(part_ptr + j * BLOCK_M * N + offs_m[:, None] * N + offs_n[None, :], mask=n_ok[None, :])
    sw = tl.load(sw_ptr + offs_n, mask=n_ok, other=0.0)
    if FP8:
        acc = acc * tl.load(sx_ptr + offs_m, mask=m_ok, other=0.0)[:, None]
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
             (acc * sw[None, :]).to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])  # fmt: skip


_SCRATCH = {}


def scratch(device, split, block_m, N, n_blocks):
    import torch

    key = (str(device), split, block_m, N, n_blocks)
    if key not in _SCRATCH:
        _SCRATCH[key] = (torch.empty(split * block_m * N, dtype=torch.float32, device=device),
                         torch.zeros(n_blocks, dtype=torch.int32, device=device))  # fmt: skip
    return _SCRATCH[key]


def splitk(x, w, sx, sw, out, *, BLOCK_N, BLOCK_K, SPLIT_K, LAST=True, fp8=False, num_warps=4, num_stages=3):
    M, K = x.shape
    N = w.shape[0]
    n_blocks = triton.cdiv(N, BLOCK_N)
    part, count = scratch(x.device, SPLIT_K, 16, N, n_blocks)
    splitk_gemv_kernel[(n_blocks, SPLIT_K)](
        x, w, sx if sx is not None else sw, sw, out, part, count, M, N, K,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=16, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SPLIT_K=SPLIT_K, FP8=fp8, LAST=LAST,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    if SPLIT_K > 1 and not LAST:
        reduce_kernel[(triton.cdiv(N, 128),)](
            part, sx if sx is not None else sw, sw, out, M, N, out.stride(0), out.stride(1),
            BLOCK_M=16, BLOCK_N=128, SPLIT_K=SPLIT_K, FP8=fp8, num_warps=4,
        )  # fmt: skip
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="build/bench")
    parser.add_argument("--cpu", action="store_true", help="check the kernels in the interpreter only")
    parser.add_argument("--parts", default="ceiling,splitk")
    parser.add_argument("--formats", default="w8a16,fp8")
    args = parser.parse_args(argv)
    import torch

    from qmatmul import bench, checks, course, fp8, w8a16

    if args.cpu:
        g = checks.generator(1)
        for split, last in ((1, True), (3, True), (3, False)):
            x, q, s = w8a16.random_problem(5, 70, 1000, torch.float16, "cpu", g)
            y = splitk(x, q, None, s, torch.empty(5, 70, dtype=torch.float16), BLOCK_N=32, BLOCK_K=64,
                       SPLIT_K=split, LAST=last)  # fmt: skip
            checks.compare(y, w8a16.reference(x, q, s), what=f"split {split} last {last}",
                           rtol=checks.tolerance_for(torch.float16))  # fmt: skip
            print("ok", split, last)
        return 0

    dtype = torch.bfloat16
    sols = {f: course.load_notebook_code(f, name=f"probe_{f}") for f in ("w8a16", "fp8")}
    copy_bw = bench.copy_bandwidth()
    print(f"copy {copy_bw / 1e12:.2f} TB/s", flush=True)
    g = checks.generator(0, "cuda")
    rows = []

    def timed(tag, M, N, K, nbytes, fns):
        try:
            ms = bench.graph_ms(fns, target_ms=1.0, replays=9)
        except Exception as exc:  # noqa: BLE001
            print(f"{tag:60} M={M:2} {N}x{K}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            rows.append(dict(tag=tag, M=M, N=N, K=K, error=str(exc)[:300]))
            return
        frac = nbytes / (ms * 1e-3) / copy_bw
        print(f"{tag:60} M={M:2} {N}x{K}: {ms * 1e3:7.1f} us {100 * frac:5.1f} %", flush=True)
        rows.append(dict(tag=tag, M=M, N=N, K=K, us=ms * 1e3, copy_frac=frac))

    # The ceiling: cuBLAS bf16 GEMVs whose weights hold the bytes a format's weight holds at each decode shape,
    # the rows cut (same K) or the columns (same N).
    if "ceiling" in args.parts:
        from qmatmul import w4a16

        for N, K in ((28672, 8192), (8192, 28672), (8192, 8192)):
            for fmt, nbytes in (
                ("8-bit", w8a16.bytes_moved(1, N, K)),
                ("4-bit", w4a16.bytes_moved(1, N, K, 128)),
            ):
                for n, k in ((round(nbytes / (2 * K) / 64) * 64, K), (N, round(nbytes / (2 * N) / 64) * 64)):
                    ws = [torch.randn(n, k, device="cuda", generator=g).to(dtype)
                          for _ in range(bench.copies_needed(2 * n * k))]  # fmt: skip
                    for M in (1, 16):
                        x = torch.randn(M, k, device="cuda", generator=g).to(dtype)
                        timed(f"cuBLAS bf16, the bytes of {fmt} {N}x{K}", M, n, k, 2 * n * k + 2 * M * (n + k),
                              [lambda w=w: x @ w.T for w in ws])  # fmt: skip
                    del ws
    if "splitk" not in args.parts:
        rows_out(args, copy_bw, rows)
        return 0

    splits = [(64, 512, 2, True, 4, 3), (64, 512, 2, False, 4, 3), (64, 256, 2, True, 4, 4),
              (64, 256, 2, False, 4, 4), (64, 512, 4, True, 4, 3), (64, 512, 4, False, 4, 3)]  # fmt: skip
    for fmt in args.formats.split(","):
        mod, sol = (w8a16, sols["w8a16"]) if fmt == "w8a16" else (fp8, sols["fp8"])
        for N, K in ((8192, 8192), (8192, 28672)):
            if fmt == "w8a16":
                ws = [w8a16.timing_weights(N, K, g) for _ in range(bench.copies_needed(N * K))]
            else:
                ws = [fp8._timing_problem(1, N, K, g)[2:] for _ in range(bench.copies_needed(N * K))]
            for M in (1, 16):
                nb = mod.bytes_moved(M, N, K)
                out = torch.empty(M, N, dtype=dtype, device="cuda")
                if fmt == "w8a16":
                    x = torch.randn(M, K, device="cuda", generator=g).to(dtype)
                    timed("solution w8a16_decode", M, N, K, nb, [lambda w=w: sol.w8a16_decode(x, *w, out=out)
                                                                   for w in ws])  # fmt: skip
                    ref = w8a16.reference(x, *ws[0]).float()
                else:
                    xq, sx = fp8._timing_problem(M, 1, K, g)[:2]
                    timed("solution fp8_decode", M, N, K, nb, [lambda w=w: sol.fp8_decode(xq, sx, *w, out=out)
                                                                 for w in ws])  # fmt: skip
                    ref = fp8.reference(xq, sx, *ws[0]).float()
                for bn, bk, split, last, nw, ns in splits:
                    cfg = dict(BLOCK_N=bn, BLOCK_K=bk, SPLIT_K=split, LAST=last, num_warps=nw, num_stages=ns,
                               fp8=fmt == "fp8")  # fmt: skip
                    if fmt == "w8a16":
                        args_ = [(x, q, None, s) for q, s in ws]
                    else:
                        args_ = [(xq.view(torch.uint8), wq.view(torch.uint8), sx, sw) for wq, sw in ws]
                    try:
                        y = splitk(*args_[0], torch.empty_like(out), **cfg)
                        bad = checks.mismatch(y.float(), ref, checks.tolerance_for(dtype)).sum().item()
                    except Exception as exc:  # noqa: BLE001
                        print(f"{fmt} {cfg}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                        continue
                    tag = f"{fmt} split {bn}x{bk} S={split} {'last' if last else 'two'} w{nw} s{ns}"
                    if bad:
                        tag += f" WRONG {bad}"
                    timed(tag, M, N, K, nb, [lambda a=a: splitk(*a, out, **cfg) for a in args_])
                    y = splitk(*args_[1], torch.empty_like(out), **cfg)  # after timing: counters reset?
                    ref1 = (
                        w8a16.reference(x, *ws[1]) if fmt == "w8a16" else fp8.reference(xq, sx, *ws[1])
                    ).float()
                    bad1 = checks.mismatch(y.float(), ref1, checks.tolerance_for(dtype)).sum().item()
                    if bad1:
                        print(f"   after timing: {bad1} wrong", flush=True)
                        rows[-1]["wrong_after"] = bad1
            del ws
    rows_out(args, copy_bw, rows)
    return 0


def rows_out(args, copy_bw, rows):
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "probe_splitk.json").write_text(
        json.dumps(dict(date=time.ctime(), copy=copy_bw, rows=rows), indent=1)
    )


if __name__ == "__main__":
    sys.exit(main())
