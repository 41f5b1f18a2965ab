"""On a CUDA GPU: candidate weight-only prefill kernels (W8A16, W4A16, MXFP4, NVFP4), the 4-bit decode kernels with
and without the masked K tail, and the FP8 128 x 128 block-scaled kernel's tiles, graph-timed in one process.

    python -m tools.sweep_prefill [--out DIR] [--parts prefill,decode,fp8block] [--formats w8a16,w4a16,mxfp4,nvfp4]
    python -m tools.sweep_prefill --parts fp8acc     FP8 prefill: Hopper's fp8 accumulation, imprecise or promoted
    python -m tools.sweep_prefill --parts fp8tma     FP8 prefill: a persistent TMA candidate, promoted or not
    python -m tools.sweep_prefill --parts gemmtma    qmatmul.kernels.gemm's TMA GEMMs: bf16 (decoded weights), FP8 row, block
    python -m tools.sweep_prefill --parts gemmgroup  qmatmul.kernels.gemm's group-scaled TMA GEMM (W4A16's integers q - z)
    python -m tools.sweep_prefill --parts w4tma      W4A16 decoded first: the group-scaled GEMM plain and swapped
    python -m tools.sweep_prefill --parts fp8row     the expert FP8 row-wise TMA GEMM, plain and swapped
    python -m tools.sweep_prefill --parts w8split    W8A16 prefill taken apart: conversion, GEMM, scales, paths

Prefill candidates, each with the weight read as it lies ([BLOCK_N, BLOCK_K(/2)] rows) and dequantized once per K
step for a BLOCK_M of 128-256 rows:
  fused      acc[BM, BN] += x · wᵀ  (the dequantized tile is tl.dot's second operand)
  fused-swap acc[BN, BM] += w · xᵀ  (the dequantized tile is the first operand: on Hopper the wgmma can take it
             from registers, so it need not pass through shared memory)
  floor      a Triton dequantize kernel writes W in bf16, then a Triton tl.dot GEMM: the honest floor
beside cuBLAS bf16 and each chapter's naive path (torch dequantize, then cuBLAS). Every candidate is checked
against the fp32 reference on a small ragged problem before timing and compared with the naive path's output at
the timed shape. Writes sweep_prefill.json to --out and prints a table last.
"""

# ruff: noqa: B023 - every closure below is timed before the loop moves on

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import triton
import triton.language as tl

from qmatmul.kernels.gemm import grouped_tile, tutorial_matmul  # the course's GEMMs, timed here too

ROOT = Path(__file__).resolve().parent.parent

FMTS = {"w8a16": 0, "w4a16": 1, "mxfp4": 2, "nvfp4": 3}


@triton.jit
def _fp4_tile(p_ptr, s_ptr, offs_n, k0, N, stride_pn, stride_pk, stride_sn, stride_sk, SB: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """MXFP4 (SB = 32, E8M0 scales) or NVFP4 (SB = 16, e4m3 scales) tile, float32. No K mask: BLOCK_K divides K."""
    n_ok = offs_n[:, None] < N
    kb = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    p = tl.load(p_ptr + offs_n[:, None] * stride_pn + kb[None, :] * stride_pk, mask=n_ok, other=0)
    ks = k0 // SB + tl.arange(0, BLOCK_K // SB)
    e = tl.load(s_ptr + offs_n[:, None] * stride_sn + ks[None, :] * stride_sk, mask=n_ok, other=0).to(
        tl.int32
    )
    c = tl.reshape(tl.join(p & 0xF, p >> 4), (BLOCK_N, BLOCK_K)).to(tl.int32)
    v = (((c & 0x7) << 9) | ((c & 0x8) << 12)).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    if SB == 32:
        scale = (e << 23).to(tl.float32, bitcast=True) * 16384.0
    else:
        bits = ((e & 0x7F) << 7) | ((e & 0x80) << 8)
        scale = bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32) * (256.0 * 16384.0)
    return tl.reshape(tl.reshape(v, (BLOCK_N, BLOCK_K // SB, SB)) * scale[:, :, None], (BLOCK_N, BLOCK_K))


@triton.jit
def _weight_tile(p_ptr, s_ptr, z_ptr, offs_n, k0, N, K, stride_pn, stride_pk, stride_sn, stride_sk,
                 FMT: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 DT: tl.constexpr, FULL: tl.constexpr):  # fmt: skip
    """The [BLOCK_N, BLOCK_K] weight tile at k0 in DT, with no K mask (BLOCK_K divides K). W8A16: codes only (the
    row scale goes on the output); FULL: with the W8A16 row scale too (for the floor's dequantize kernel)."""
    n_ok = offs_n[:, None] < N
    if FMT == 0:
        k = k0 + tl.arange(0, BLOCK_K)
        q = tl.load(p_ptr + offs_n[:, None] * stride_pn + k[None, :] * stride_pk, mask=n_ok, other=0)
        if FULL:
            s = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0.0)
            w = (q.to(tl.float32) * s[:, None]).to(DT)
        else:
            w = q.to(DT)
    elif FMT == 1:  # BLOCK_K divides GROUP: one scale and zero per row
        kb = k0 // 2 + tl.arange(0, BLOCK_K // 2)
        p = tl.load(p_ptr + offs_n[:, None] * stride_pn + kb[None, :] * stride_pk, mask=n_ok, other=0)
        grp = k0 // GROUP
        s = tl.load(s_ptr + offs_n * stride_sn + grp * stride_sk, mask=offs_n < N, other=0.0)
        z = tl.load(z_ptr + offs_n * stride_sn + grp * stride_sk, mask=offs_n < N, other=0)
        q = tl.reshape(tl.join(p & 0xF, p >> 4), (BLOCK_N, BLOCK_K))
        w = ((q.to(tl.int32) - z.to(tl.int32)[:, None]).to(tl.float32) * s[:, None]).to(DT)
    elif FMT == 2:
        w = _fp4_tile(
            p_ptr, s_ptr, offs_n, k0, N, stride_pn, stride_pk, stride_sn, stride_sk, 32, BLOCK_N, BLOCK_K
        )
        w = w.to(DT)
    else:
        w = _fp4_tile(
            p_ptr, s_ptr, offs_n, k0, N, stride_pn, stride_pk, stride_sn, stride_sk, 16, BLOCK_N, BLOCK_K
        )
        w = w.to(DT)
    return w


@triton.jit
def fused_kernel(
    x_ptr, p_ptr, s_ptr, z_ptr, g_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_pn, stride_pk, stride_sn, stride_sk, stride_ym, stride_yn,
    FMT: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SWAP: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    if SWAP:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk, mask=offs_m[:, None] < M,
                    other=0.0)  # fmt: skip
        w = _weight_tile(p_ptr, s_ptr, z_ptr, offs_n, k0, N, K, stride_pn, stride_pk, stride_sn, stride_sk,
                         FMT, GROUP, BLOCK_N, BLOCK_K, x.dtype, False)  # fmt: skip
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc)
        else:
            acc = tl.dot(x, tl.trans(w), acc)
    if SWAP:
        acc = tl.trans(acc)
    if FMT == 0:
        s = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc * s[None, :]
    if FMT == 3:
        acc = acc * tl.load(g_ptr)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc.to(y_ptr.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))  # fmt: skip


@triton.jit
def dequant_kernel(
    p_ptr, s_ptr, z_ptr, w_ptr, N, K, stride_pn, stride_pk, stride_sn, stride_sk, stride_wn, stride_wk,
    FMT: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    k0 = tl.program_id(1) * BLOCK_K
    w = _weight_tile(p_ptr, s_ptr, z_ptr, offs_n, k0, N, K, stride_pn, stride_pk, stride_sn, stride_sk,
                     FMT, GROUP, BLOCK_N, BLOCK_K, w_ptr.dtype.element_ty, True)  # fmt: skip
    k = k0 + tl.arange(0, BLOCK_K)
    tl.store(w_ptr + offs_n[:, None] * stride_wn + k[None, :] * stride_wk, w,
             mask=(offs_n[:, None] < N) & (k[None, :] < K))  # fmt: skip


def unpack(fmt, w):
    """(p, s, z, g, group) from a chapter's weight tuple."""
    import torch

    if fmt == "w8a16":
        q, s = w
        return q, s, q, s, 0
    if fmt == "w4a16":
        p, s, z, G = w
        return p, s, z, s, G
    if fmt == "mxfp4":
        p, s = w
        return p, s, p, s, 32
    p, s, g = w
    return p, s, p, g.to(torch.float32), 16


def fused(fmt, x, w, cfg, swap):
    import torch

    p, s, z, g, G = unpack(fmt, w)
    M, K = x.shape
    N = p.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    if fmt == "w4a16":
        bk = min(bk, G)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    fused_kernel[grid](
        x, p, s, z, g, y, M, N, K, x.stride(0), x.stride(1), p.stride(0), p.stride(1),
        s.stride(0), s.stride(1) if s.dim() == 2 else 0, y.stride(0), y.stride(1),
        FMT=FMTS[fmt], GROUP=max(G, 1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SWAP=swap,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return y


def dequantize(fmt, w, dtype, out=None):
    import torch

    p, s, z, g, G = unpack(fmt, w)
    N = p.shape[0]
    K = p.shape[1] if fmt == "w8a16" else 2 * p.shape[1]
    out = torch.empty((N, K), dtype=dtype, device=p.device) if out is None else out
    bn, bk = 64, (min(128, G) if fmt == "w4a16" else 128)
    dequant_kernel[(triton.cdiv(N, bn), triton.cdiv(K, bk))](
        p, s, z, out, N, K, p.stride(0), p.stride(1), s.stride(0), s.stride(1) if s.dim() == 2 else 0,
        out.stride(0), out.stride(1), FMT=FMTS[fmt], GROUP=max(G, 1), BLOCK_N=bn, BLOCK_K=bk, num_warps=4,
    )  # fmt: skip
    return out


def gemm(x, wd, g, cfg, tensor_scale):
    import torch

    M, K = x.shape
    N = wd.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    tutorial_matmul(x, wd, y, g=g if tensor_scale else None, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=cfg["BLOCK_K"],
                    num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])  # fmt: skip
    return y


def floor(fmt, x, w, cfg, scratch=None):
    wd = dequantize(fmt, w, x.dtype, scratch)
    _, _, _, g, _ = unpack(fmt, w)
    return gemm(x, wd, g, cfg, fmt == "nvfp4")


def small_problem(fmt, mods, M, N, K, dtype, device, gen):
    m = mods[fmt]
    if fmt == "w4a16":
        x, p, s, z = m.random_problem(M, N, K, 128, dtype, device, gen)
        return x, (p, s, z, 128)
    if fmt == "w8a16":
        x, q, s = m.random_problem(M, N, K, dtype, device, gen)
        return x, (q, s)
    if fmt == "mxfp4":
        x, p, s = m.random_problem(M, N, K, dtype, device, gen)
        return x, (p, s)
    x, p, s, g = m.random_problem(M, N, K, dtype, device, gen)
    return x, (p, s, g)


def rel_err(out, ref):
    return float((out.float() - ref.float()).norm() / ref.float().norm())


CFG = [  # BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages
    (128, 128, 64, 4, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 128, 8, 3), (128, 256, 128, 8, 2),
]  # fmt: skip
CFG_SWAP = [(128, 128, 64, 4, 3), (256, 128, 64, 8, 3), (128, 256, 64, 8, 3), (256, 128, 128, 8, 3)]
CFG_GEMM = [(128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 64, 4, 4), (256, 128, 64, 8, 3)]


def as_cfg(t):
    return dict(BLOCK_M=t[0], BLOCK_N=t[1], BLOCK_K=t[2], num_warps=t[3], num_stages=t[4])


def timed(fns):
    """graph_ms, or do_bench on fns[0] where the path cannot be captured (the fp4 naive paths copy a table)."""
    import torch

    from qmatmul import timing

    try:
        return timing.graph_ms(fns)
    except Exception:  # noqa: BLE001
        torch.cuda.synchronize()
        return timing.median_ms(fns[0])


def crossover_part(formats, mods, sols, dtype, cublas, results):
    """The notebooks' prefill wrappers (fused below DEQUANTIZE_FIRST_M, dequantize + GEMM from it) against the
    fused kernel and the floor at M = 256 ... 4096, and the floor's GEMM tiles, N = K = 8192."""
    import torch

    from qmatmul import checks

    gen = checks.generator(0, "cuda")
    N = K = 8192
    fused_cfg = as_cfg((256, 128, 64, 8, 3))
    for fmt in formats:
        m, sol = mods[fmt], sols.get(fmt)
        ws = [m.timing_weights(N, K, gen) for _ in range(2)]
        scratch = [torch.empty(N, K, dtype=dtype, device="cuda") for _ in range(2)]
        variants = [("fused 256x128x64", lambda x, w, i: fused(fmt, x, w, fused_cfg, fmt == "w8a16"))]
        variants += [
            (f"floor {t}", lambda x, w, i, t=t: floor(fmt, x, w, as_cfg(t), scratch[i])) for t in CFG_GEMM
        ]
        if sol is not None:
            variants.append(("notebook", lambda x, w, i: getattr(sol, f"{fmt}_matmul")(x, *w)))
        for name, fn in variants:
            for M in (256, 512, 1024, 2048, 4096):
                x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
                try:
                    ms = timed([lambda w=w, i=i: fn(x, w, i) for i, w in enumerate(ws)])
                    err = rel_err(fn(x, ws[0], 0), m.naive(x, *ws[0]))
                except Exception as exc:  # noqa: BLE001
                    results.append(dict(part="crossover", fmt=fmt, variant=name, M=M, error=str(exc)[:200]))
                    print(f"crossover {fmt} {name} M={M}: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
                frac = 2 * M * N * K / (ms * 1e-3) / cublas
                results.append(dict(part="crossover", fmt=fmt, variant=name, M=M, us=ms * 1e3, cublas_frac=frac,
                                    err_vs_naive=err))  # fmt: skip
                print(
                    f"crossover {fmt:6} {name:30} M={M:5}: {ms * 1e3:8.0f} us {100 * frac:4.0f} % cuBLAS err {err:.1e}"
                )


def prefill_part(formats, mods, dtype, cublas, results, quick):
    import torch

    from qmatmul import checks, timing

    gen = checks.generator(0, "cuda")
    N = K = 8192
    Ms = (2048,) if quick else (2048, 4096)
    dense = [torch.randn(N, K, device="cuda", generator=gen).to(dtype) for _ in range(2)]
    for M in Ms:
        x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
        ms = timing.graph_ms([lambda w=w: x @ w.T for w in dense])
        results.append(dict(part="prefill", fmt="dense", variant="cuBLAS", M=M, us=ms * 1e3,
                            cublas_frac=2 * M * N * K / (ms * 1e-3) / cublas))  # fmt: skip
        print(f"prefill M={M} cuBLAS {ms * 1e3:.0f} us")
    for fmt in formats:
        m = mods[fmt]
        ws = [m.timing_weights(N, K, gen) for _ in range(2)]
        scratch = [torch.empty(N, K, dtype=dtype, device="cuda") for _ in range(2)]
        variants = [("naive", None, lambda x, w, i: m.naive(x, *w))]
        variants += [(f"fused {t}", t, lambda x, w, i, t=t: fused(fmt, x, w, as_cfg(t), False)) for t in CFG]
        variants += [
            (f"swap {t}", t, lambda x, w, i, t=t: fused(fmt, x, w, as_cfg(t), True)) for t in CFG_SWAP
        ]
        variants += [(f"floor {t}", t, lambda x, w, i, t=t: floor(fmt, x, w, as_cfg(t), None if i is None else scratch[i]))
                     for t in CFG_GEMM]  # fmt: skip
        variants += [("dequant only", None, lambda x, w, i: dequantize(fmt, w, dtype, scratch[i]))]
        for name, _t, fn in variants:
            small = None
            if name != "naive":
                try:  # a small ragged problem against the fp32 reference
                    xs, wsm = small_problem(fmt, mods, 304, 1040, 768, dtype, "cuda", checks.generator(1))
                    if name != "dequant only":
                        small = rel_err(fn(xs, wsm, None), m.reference(xs, *wsm))
                except Exception as exc:  # noqa: BLE001 - too much shared memory, say
                    results.append(dict(part="prefill", fmt=fmt, variant=name, error=str(exc)[:200]))
                    print(f"prefill {fmt} {name}: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
            for M in Ms:
                x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
                try:
                    ms = timed([lambda w=w, i=i: fn(x, w, i) for i, w in enumerate(ws)])
                except Exception as exc:  # noqa: BLE001
                    results.append(dict(part="prefill", fmt=fmt, variant=name, M=M, error=str(exc)[:200]))
                    print(f"prefill {fmt} {name} M={M}: {type(exc).__name__}: {str(exc)[:120]}")
                    continue
                err = None
                if name not in ("naive", "dequant only"):
                    err = rel_err(fn(x, ws[0], 0), m.naive(x, *ws[0]))
                frac = 2 * M * N * K / (ms * 1e-3) / cublas
                results.append(dict(part="prefill", fmt=fmt, variant=name, M=M, us=ms * 1e3, cublas_frac=frac,
                                    err_small=small, err_vs_naive=err))  # fmt: skip
                print(f"prefill {fmt:6} {name:32} M={M}: {ms * 1e3:8.0f} us {100 * frac:4.0f} % cuBLAS "
                      f"err {small} / {err}")  # fmt: skip


def decode_part(formats, mods, sols, dtype, copy_bw, results):
    """The notebooks' decode kernels, graph-timed on the three shapes; sols maps (fmt, version) to a module."""
    import torch

    from qmatmul import checks, timing

    gen = checks.generator(0, "cuda")
    for (fmt, version), sol in sols.items():
        m = mods[fmt]
        fn = getattr(sol, f"{fmt}_decode")
        for N, K in [(28672, 8192), (8192, 28672), (8192, 8192)]:
            ws = [m.timing_weights(N, K, gen) for _ in range(timing.copies_needed(m.bytes_moved(1, N, K)))]
            for M in (1, 16):
                x = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
                ms = timing.graph_ms([lambda w=w: fn(x, *w) for w in ws])
                frac = m.bytes_moved(M, N, K) / (ms * 1e-3) / copy_bw
                xs, wsm = small_problem(fmt, mods, M, 1000, 768 + 256, dtype, "cuda", checks.generator(2))
                err = rel_err(fn(xs, *wsm), m.reference(xs, *wsm))
                results.append(dict(part="decode", fmt=fmt, version=version, N=N, K=K, M=M, us=ms * 1e3,
                                    copy_frac=frac, err=err))  # fmt: skip
                print(
                    f"decode {fmt:6} {version:8} {N:6}x{K:<6} M={M:<3} {ms * 1e3:7.1f} us {100 * frac:4.0f} % copy err {err:.1e}"
                )


def fp8block_part(mods, sols, scaled_mm_rowwise, results):

    from qmatmul import checks, timing

    fp8, sol = mods["fp8"], sols["fp8"]
    gen = checks.generator(3)
    original = fp8.block_config
    N = K = 8192
    for M in (2048, 4096):
        xq, sx, wq, sw = fp8.random_block_problem(M, N, K, "cuda", gen)  # a CPU generator: it draws there
        wq2 = wq.clone()
        ref = scaled_mm_rowwise(M)
        for bm, bn, nw, ns in [(128, 128, 4, 4), (128, 128, 8, 3), (128, 128, 8, 4), (128, 256, 8, 3),
                               (64, 128, 4, 4), (128, 64, 4, 4), (256, 128, 8, 3)]:  # fmt: skip
            cfg = dict(
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=fp8.SCALE_BLOCK, FP8_DOT=True, num_warps=nw, num_stages=ns
            )
            fp8.block_config = lambda *a, cfg=cfg, **k: cfg
            try:
                ms = timing.graph_ms([lambda w=w: sol.fp8_block_matmul(xq, sx, w, sw) for w in (wq, wq2)])
                # checked on a small ragged problem: block_reference runs in float64 on the CPU
                small = fp8.random_block_problem(200, 384, 640, "cuda", checks.generator(4))
                err = rel_err(sol.fp8_block_matmul(*small).cpu(), fp8.block_reference(*small))
            except Exception as exc:  # noqa: BLE001
                results.append(dict(part="fp8block", M=M, cfg=cfg, error=str(exc)[:200]))
                print(f"fp8 block M={M} {cfg}: {type(exc).__name__}")
                continue
            results.append(dict(part="fp8block", M=M, cfg=cfg, us=ms * 1e3, scaled_mm_frac=ref / ms, err=err))
            print(f"fp8 block M={M} {bm}x{bn} w{nw} s{ns}: {ms * 1e3:7.0f} us {100 * ref / ms:4.0f} % of _scaled_mm "
                  f"rowwise, err {err}")  # fmt: skip
    fp8.block_config = original


# The FP8 solution's native tl.dot, which promotes the tensor cores' partial sums to the fp32 accumulator every
# BLOCK_K elements, and the same product without that (on sm_90 Triton's fp8 tl.dot then accumulates in reduced
# precision over all of K: triton's CUDA backend sets max_num_imprecise_acc_default = 2**30 for capability 90).
FP8_PROMOTE = ",\n                         max_num_imprecise_acc=BLOCK_K)"
FP8_ACC = {"imprecise": ")", "promoted": FP8_PROMOTE, "promoted128": FP8_PROMOTE.replace("BLOCK_K", "128")}
# (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) timed for each accumulation
FP8_ACC_TILES = [
    (128, 128, 128, 4, 4),
    (128, 128, 128, 8, 4),
    (256, 128, 128, 8, 3),
    (256, 128, 128, 8, 4),
    (128, 256, 128, 8, 3),
    (128, 128, 256, 8, 3),
    (256, 128, 64, 8, 4),
    (256, 128, 128, 4, 3),
]


def fp8acc_variants() -> dict:
    """{name: the FP8 solution module with that accumulation} (the interpreter runs them too: the sweep's test)."""
    from qmatmul import course

    cell = course.solution_source("ex3_matmul")
    assert FP8_PROMOTE in cell, "the FP8 solution's tl.dot changed: update FP8_PROMOTE"
    return {name: course.load_notebook_code("fp8", {"ex3_matmul": cell.replace(FP8_PROMOTE, tail)},
                                            name=f"sweep_fp8_{name}")
            for name, tail in FP8_ACC.items()}  # fmt: skip


def fp8acc_part(mods, scaled_mm_rowwise, results, seeds=(1, 2, 3)):
    """FP8 per-row prefill at 4096 x 8192 x 8192 (the graded shape): each accumulation's verdict in the visible check,
    then at each of FP8_ACC_TILES graph-timed against torch._scaled_mm rowwise, with the elements outside the bf16
    tolerance on the graded inputs, per seed."""
    import torch

    from qmatmul import checks, timing

    fp8 = mods["fp8"]
    M, N, K = fp8.PREFILL_SHAPE
    ref = scaled_mm_rowwise(M, N, K)
    original = fp8.prefill_config
    for name, sol in fp8acc_variants().items():
        fp8.prefill_config = original
        try:  # the visible check holds the case that exposes reduced-precision accumulation
            fp8.check_matmul(sol.fp8_matmul)
            verdict = "passes"
        except Exception as exc:  # noqa: BLE001
            verdict = f"{type(exc).__name__}: {exc}"
        results.append(dict(part="fp8acc", acc=name, visible_check=verdict[:600]))
        print(f"fp8 acc {name}: visible check {verdict[:400]}")
        for bm, bn, bk, nw, ns in FP8_ACC_TILES:
            if name == "promoted128" and bk <= 128:
                continue  # the same kernel as "promoted"
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, FP8_DOT=True, num_warps=nw, num_stages=ns)
            fp8.prefill_config = lambda *a, cfg=cfg, **k: cfg
            try:
                problems = [fp8.timing_problem(M, N, K, checks.generator(s, "cuda")) for s in seeds]
                out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
                ms = timing.graph_ms([lambda p=p: sol.fp8_matmul(*p, out=out) for p in problems[:2]])
                bad = [int(checks.mismatch(sol.fp8_matmul(*p).float().cpu(), fp8.reference(*p).cpu(),
                                      checks.tolerance_for(torch.bfloat16)).sum())
                       for p in problems]  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                results.append(dict(part="fp8acc", acc=name, cfg=cfg, error=str(exc)[:200]))
                print(f"fp8 acc {name} {cfg}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            results.append(
                dict(part="fp8acc", acc=name, cfg=cfg, us=ms * 1e3, scaled_mm_frac=ref / ms, bad=bad)
            )
            print(f"fp8 acc {name:11} {bm}x{bn}x{bk} w{nw} s{ns}: {ms * 1e3:7.0f} us {100 * ref / ms:4.0f} % of "
                  f"_scaled_mm rowwise, elements outside the tolerance per seed {bad}")  # fmt: skip
    fp8.prefill_config = original


# The FP8 prefill on Hopper of qmatmul/kernels/expert.py (fp8_matmul_tma): a persistent grid fed by TMA, partial sums
# promoted every BLOCK_K or not (PROMOTE), four tiles.
FP8_TMA_TILES = [(128, 128, 128, 8, 3), (128, 128, 128, 8, 4), (256, 128, 128, 8, 3), (128, 128, 256, 8, 3)]


def fp8tma_part(mods, scaled_mm_rowwise, results, seeds=(1, 2, 3)):
    """The TMA candidate at 4096 x 8192 x 8192, promoted and not: the accumulation case's wrong outputs, then each
    tile graph-timed against torch._scaled_mm rowwise, with the wrong outputs on the graded inputs per seed."""
    import torch

    from qmatmul import checks, timing
    from qmatmul.kernels import expert

    fp8 = mods["fp8"]
    M, N, K = fp8.PREFILL_SHAPE
    ref = scaled_mm_rowwise(M, N, K)
    tol = checks.tolerance_for(torch.bfloat16)
    for promote in (True, False):
        for bm, bn, bk, nw, ns in FP8_TMA_TILES:
            cfg = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, PROMOTE=promote, num_warps=nw, num_stages=ns)

            def fn(*p, out=None, cfg=cfg):
                return expert.fp8_matmul_tma(*p, out=out, **cfg)

            try:
                case = fp8.accumulation_problem(128, 128, 8192, "cuda")
                acc_bad = int(checks.mismatch(fn(*case), fp8.reference(*case), tol).sum())
                problems = [fp8.timing_problem(M, N, K, checks.generator(s, "cuda")) for s in seeds]
                out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
                ms = timing.graph_ms([lambda p=p: fn(*p, out=out) for p in problems[:2]])
                bad = [int(checks.mismatch(fn(*p), fp8.reference(*p), tol).sum()) for p in problems]
            except Exception as exc:  # noqa: BLE001
                results.append(dict(part="fp8tma", cfg=cfg, error=str(exc)[:200]))
                print(f"fp8 tma {cfg}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            results.append(dict(part="fp8tma", cfg=cfg, us=ms * 1e3, scaled_mm_frac=ref / ms, bad=bad,
                                accumulation_case_bad=acc_bad))  # fmt: skip
            print(f"fp8 tma {'promoted' if promote else 'imprecise':9} {bm}x{bn}x{bk} w{nw} s{ns}: {ms * 1e3:7.0f} us "
                  f"{100 * ref / ms:4.0f} % of _scaled_mm rowwise, wrong per seed {bad}, accumulation case {acc_bad}")  # fmt: skip


# qmatmul.kernels.gemm.tma_kernel's tiles: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, FLATTEN)
GEMM_TMA_TILES = [(128, 256, 64, 8, 3, False), (128, 256, 64, 8, 4, False), (128, 256, 64, 8, 3, True),
                  (256, 128, 64, 8, 3, False), (128, 128, 64, 8, 4, False), (128, 128, 64, 4, 4, False)]  # fmt: skip
FP8_ROW_TILES = [(256, 128, 128, 8, 3, False), (256, 128, 128, 8, 4, False), (256, 128, 128, 8, 3, True),
                 (128, 256, 128, 8, 3, False)]  # fmt: skip
FP8_BLOCK_TILES = [(128, 128, 128, 8, 3, False), (128, 128, 128, 8, 4, False), (256, 128, 128, 8, 3, False),
                   (128, 256, 128, 8, 3, False), (128, 128, 128, 4, 4, False), (256, 128, 128, 8, 3, True)]  # fmt: skip


def tma_tiles(t) -> dict:
    """A row of the *_TILES lists above as tma_matmul's keyword arguments: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages,
    flatten[, extras]), extras e.g. {"SWAP": True, "PER_SM": 2}."""
    bm, bn, bk, nw, ns, fl, *extras = t
    return dict(
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns, FLATTEN=fl, **(extras or [{}])[0]
    )


# A shape no tile divides (M and N ragged against every tile; K a multiple of 128, so one W4A16 group a K step, but not
# of 256). The timed shapes are multiples of every tile: a sixth-round candidate passed there and was wrong here.
RAGGED = (300, 1000, 768)


def ragged_mismatches(fn, x, w, ref) -> int:
    """How many outputs of fn(x, w, out) miss the course's tolerance against ref, the float32 product."""
    import torch

    from qmatmul import checks

    out = torch.full((x.shape[0], ref.shape[1]), float("nan"), dtype=x.dtype, device=x.device)
    return int(checks.mismatch(fn(x, w, out), ref, checks.tolerance_for(x.dtype)).sum())


def time_gemms(part, M, runs, x, ws, out, ref, cublas, results, ragged=None):
    """Each (label, fn(x, w, out)) of runs: checked against the float32 product ref on ws[0] and, with ragged =
    (x, w, ref) at the RAGGED shape, counted for wrong outputs there; then graph-timed over the weights ws against
    cuBLAS's time. A run that fails is recorded with its error."""
    import torch

    from qmatmul import timing

    for label, fn in runs:
        try:
            err = rel_err(fn(x, ws[0], torch.empty_like(out)).float(), ref)
            bad = None if ragged is None else ragged_mismatches(fn, *ragged)
            ms = timing.graph_ms([lambda w=w: fn(x, w, out) for w in ws])
        except Exception as exc:  # noqa: BLE001
            results.append(dict(part=part, M=M, label=label, error=str(exc)[:300]))
            print(f"{part} M={M} {label}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        results.append(dict(part=part, M=M, label=label, us=ms * 1e3, cublas_frac=cublas / ms, err=err,
                            ragged_bad=bad))  # fmt: skip
        wrong = "" if not bad else f"  WRONG at {RAGGED}: {bad} outputs"
        print(
            f"{part} M={M} {label:60} {ms * 1e3:7.0f} us {100 * cublas / ms:4.0f} % of cuBLAS err {err:.1e}{wrong}"
        )


def group_problem(M, N, K, G, device, gen):
    """x [M, K] bf16, a weight of integers -15..15 [N, K] as bf16 and float32 scales [N, K / G], and the float32
    product of x with the scaled weight: the group-scaled GEMM's inputs (W4A16's q - z and its scales)."""
    import torch

    x = torch.randn(M, K, device=device, generator=gen).to(torch.bfloat16)
    q = torch.randint(-15, 16, (N, K), device=device, generator=gen).to(torch.bfloat16)
    s = torch.rand(N, K // G, device=device, generator=gen) * 0.01
    return x, (q, s), x.float() @ (q.float() * s.repeat_interleave(G, dim=1)).T


def gemmtma_part(mods, scaled_mm_rowwise, results, seeds=(1, 2, 3)):
    """qmatmul.kernels.gemm's GEMMs at M = 2048 and 4096, N = K = 8192, graph-timed: the 4-bit chapters' decoded-weight GEMM
    (bf16; the TMA kernel at each of GEMM_TMA_TILES and the tutorial's matmul_kernel) against cuBLAS; the expert FP8
    row-wise and block-scaled TMA GEMMs against torch._scaled_mm row-wise, with their wrong outputs per seed."""
    import torch

    from qmatmul import checks, timing
    from qmatmul.kernels import configs, gemm

    fp8 = mods["fp8"]
    N = K = 8192
    Mr, Nr, Kr = RAGGED
    gen = checks.generator(Mr, "cuda")
    xr = torch.randn(Mr, Kr, device="cuda", generator=gen, dtype=torch.bfloat16)
    wr = torch.randn(Nr, Kr, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
    ragged = (xr, wr, xr.float() @ wr.float().T)
    for M in (2048, 4096):
        gen = checks.generator(M, "cuda")
        x = torch.randn(M, K, device="cuda", generator=gen, dtype=torch.bfloat16)
        ws = [torch.randn(N, K, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02 for _ in range(2)]
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        ref = x.float() @ ws[0].float().T
        cublas = timing.graph_ms([lambda w=w: torch.matmul(x, w.T, out=out) for w in ws])
        results.append(dict(part="gemmtma", M=M, label="cuBLAS bf16", us=cublas * 1e3, cublas_frac=1.0))
        print(f"gemm M={M} cuBLAS {cublas * 1e3:7.0f} us")

        runs = [("matmul_kernel " + str(configs.gemm_config(x.device)), gemm.tutorial_matmul)]
        runs += [
            (f"tma {t}", lambda x, w, out, t=t: gemm.tma_matmul(x, w, out, **tma_tiles(t)))
            for t in GEMM_TMA_TILES
        ]
        runs += [("decoded_gemm (as shipped)", gemm.decoded_gemm)]
        time_gemms("gemmtma", M, runs, x, ws, out, ref, cublas, results, ragged=ragged)
        for kind, tiles in (("row", FP8_ROW_TILES), ("block", FP8_BLOCK_TILES)):
            fp8_tma_tiles(fp8, kind, tiles, M, scaled_mm_rowwise, results, seeds)


def fp8_tma_tiles(fp8, kind, tiles, M, scaled_mm_rowwise, results, seeds=(1, 2, 3), N=8192, K=8192):
    """The expert FP8 row-wise or block-scaled TMA GEMM at each of tiles, M x N x K, graph-timed against
    torch._scaled_mm row-wise, with its wrong outputs per seed."""
    import torch

    from qmatmul import checks, timing
    from qmatmul.kernels import expert

    tol = checks.tolerance_for(torch.bfloat16)
    fn_ = expert.fp8_matmul_tma if kind == "row" else expert.fp8_block_matmul_tma
    rowwise = scaled_mm_rowwise(M)
    make = fp8.timing_problem if kind == "row" else fp8.timing_block_problem
    problems = [make(M, N, K, checks.generator(s, "cuda")) for s in seeds]
    refs = [(fp8.reference if kind == "row" else block_reference_fp32)(*p) for p in problems]
    for t in tiles:
        try:
            o = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
            ms = timing.graph_ms([lambda p=p: fn_(*p, out=o, **tma_tiles(t)) for p in problems[:2]])
            bad = [
                int(checks.mismatch(fn_(*p, **tma_tiles(t)), r, tol).sum())
                for p, r in zip(problems, refs, strict=True)
            ]
        except Exception as exc:  # noqa: BLE001
            results.append(dict(part="gemmtma", M=M, label=f"fp8 {kind} {t}", error=str(exc)[:300]))
            print(f"fp8 {kind} M={M} {t}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        results.append(dict(part="gemmtma", M=M, label=f"fp8 {kind} {t}", us=ms * 1e3,
                            scaled_mm_frac=rowwise / ms, bad=bad))  # fmt: skip
        print(f"fp8 {kind:5} M={M} {str(t):36} {ms * 1e3:7.0f} us {100 * rowwise / ms:4.0f} % of _scaled_mm "
              f"rowwise, wrong per seed {bad}")  # fmt: skip


# Sixth round: FP8 row-wise swapped (acc[n, m]: each warp group one m64n256 wgmma a k-step where the plain 256 x 128
# tile issues two m64n128): 72-83 % against the plain tile's 79-86 % (sweep 8). Then the launch order's group of rows.
FP8_ROW_SWAP_TILES = [(256, 128, 128, 8, 3, False), (256, 128, 128, 8, 3, False, {"GROUP_M": 4}),
                      (256, 128, 128, 8, 3, False, {"GROUP_M": 16}), (256, 128, 128, 8, 3, False, {"GROUP_M": 32}),
                      (128, 256, 128, 8, 3, False, {"SWAP": True})]  # fmt: skip


def fp8row_part(mods, scaled_mm_rowwise, results):
    """fp8_tma_tiles at FP8_ROW_SWAP_TILES, M = 2048, 4096 and 8192."""
    for M in (2048, 4096, 8192):
        fp8_tma_tiles(mods["fp8"], "row", FP8_ROW_SWAP_TILES, M, scaled_mm_rowwise, results)


# qmatmul.kernels.gemm.tma_kernel's group-scaled mode (W4A16's q - z with a scale per column and 128-wide group of K)
# Sixth round: the swapped tile (acc[n, m], the group's scales two a thread where the plain tile loads 32 with their
# address arithmetic: 178 against 265 SASS a step, compiled here) and two programs an SM, whose MMAs and scalings
# may interleave where one program's cannot.
SWAP, SWAP2 = {"SWAP": True}, {"SWAP": True, "PER_SM": 2}
GROUP_TMA_TILES = [(128, 128, 128, 8, 3, False), (128, 128, 128, 8, 3, False, SWAP),
                   (128, 128, 128, 8, 3, False, {"SWAP": True, "GROUP_M": 4}),
                   (128, 128, 128, 8, 3, False, {"SWAP": True, "GROUP_M": 16}), (128, 128, 128, 8, 3, True, SWAP),
                   (128, 128, 64, 8, 4, False, SWAP), (256, 64, 128, 8, 2, False, SWAP),
                   (128, 64, 128, 4, 2, False, SWAP2), (128, 64, 64, 4, 4, False, SWAP2)]  # fmt: skip


def gemmgroup_part(results, G=128):
    """decoded_gemm's group-scaled TMA GEMM at M = 2048 and 4096, N = K = 8192, against cuBLAS on bf16 weights and
    the same kernel without the scales, graph-timed, each checked against the fp32 product first (and at RAGGED)."""
    import torch

    from qmatmul import checks, timing
    from qmatmul.kernels import gemm

    N = K = 8192
    ragged = group_problem(*RAGGED, G, "cuda", checks.generator(RAGGED[0], "cuda"))
    for M in (2048, 4096):
        gen = checks.generator(M, "cuda")
        x, w0, ref = group_problem(M, N, K, G, "cuda", gen)
        ws = [w0, group_problem(1, N, K, G, "cuda", gen)[1]]
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        cublas = timing.graph_ms([lambda w=w: torch.matmul(x, w[0].T, out=out) for w in ws])
        plain = timing.graph_ms([lambda w=w: gemm.tma_matmul(x, w[0], out) for w in ws])
        results.append(dict(part="gemmgroup", M=M, label="cuBLAS bf16", us=cublas * 1e3))
        results.append(
            dict(part="gemmgroup", M=M, label="tma, no scales", us=plain * 1e3, cublas_frac=cublas / plain)
        )
        print(f"group M={M} cuBLAS {cublas * 1e3:.0f} us, tma without scales {plain * 1e3:.0f} us")
        runs = [(f"group {t}", lambda x, w, o, t=t: gemm.tma_matmul(x, w[0], o, sw=w[1], scales=gemm.GROUP_SCALES,
                                                                     group=G, **tma_tiles(t))) for t in GROUP_TMA_TILES]  # fmt: skip
        time_gemms("gemmgroup", M, runs, x, ws, out, ref, cublas, results, ragged=ragged)


def cublas_beside(part, M, K, dense, gen, results):
    """x [M, K] and out [M, N] in bf16, and cuBLAS's graph-timed ms on the bf16 weights dense, recorded as part's row."""
    import torch

    from qmatmul import timing

    x = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
    out = torch.empty(M, dense[0].shape[0], device="cuda", dtype=torch.bfloat16)
    cublas = timing.graph_ms([lambda d=d: torch.matmul(x, d.T, out=out) for d in dense])
    results.append(dict(part=part, M=M, label="cuBLAS bf16", us=cublas * 1e3))
    print(f"{part} M={M} cuBLAS {cublas * 1e3:.0f} us")
    return x, out, cublas


def w4tma_part(mods, results, sols):
    """W4A16 prefill at M = 2048 and 4096, N = K = 8192, G = 128: the solution's decode-first path as shipped, and
    the integers q - z decoded then multiplied by the group-scaled GEMM unswapped and swapped, against cuBLAS on bf16
    weights, graph-timed, each checked against the reference first. (The sixth round also timed the packed codes fed
    to tma_kernel as they lie, q - z made in registers: 37-48 %, against 67-68 % decoded first; commit a62863b.)"""
    import torch

    from qmatmul import checks
    from qmatmul.kernels import gemm

    w4, sol = mods["w4a16"], sols["w4a16"]
    N = K = 8192
    gen = checks.generator(9, "cuda")
    ws = [w4.timing_weights(N, K, gen) for _ in range(2)]
    dense = [torch.randn(N, K, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2)]
    Mr, Nr, Kr = RAGGED
    wr = (*w4.random_packed(Nr, Kr, 128, "cuda", gen), 128)
    xr = torch.randn(Mr, Kr, device="cuda", generator=gen).to(torch.bfloat16)
    ragged = (xr, wr, w4.reference(xr, *wr).float())
    for M in (2048, 4096):
        x, out, cublas = cublas_beside("w4tma", M, K, dense, gen, results)
        ref = w4.reference(x, *ws[0]).float()
        runs = [("solution w4a16_matmul (as shipped)", lambda x, w, o: sol.w4a16_matmul(x, *w, out=o))]
        # decode first, then the group-scaled GEMM at its shipped tiles, plain or swapped
        for swap in (False, True):
            cfg = dict(gemm.tma_config(x.dtype, gemm.GROUP_SCALES, x.device), SWAP=swap)
            runs.append((f"decode first, group GEMM {cfg}", lambda x, w, o, cfg=cfg: gemm.tma_matmul(
                x, sol.w4a16_integers(w[0], w[2], w[3], x.dtype), o, sw=w[1], scales=gemm.GROUP_SCALES, group=w[3],
                **cfg)))  # fmt: skip
        time_gemms("w4tma", M, runs, x, ws, out, ref, cublas, results, ragged=ragged)


W8_COLUMN_TILES = [(128, 256, 64, 8, 3, False), (128, 256, 64, 8, 3, False, {"SWAP": True}), (256, 128, 64, 8, 3, False),
                   (128, 256, 64, 8, 4, False), (128, 128, 64, 8, 4, False)]  # fmt: skip


def fused_w8(w8, sol, x, q, s, out):
    """The chapter's fused prefill kernel at any M (its wrapper's launch without the decode-first branch)."""
    M, N, K = x.shape[0], q.shape[0], x.shape[1]
    cfg = w8.prefill_config(M, N, K, x.device.type)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    sol.w8a16_matmul_kernel[grid](x, q, s, out, M, N, K, x.stride(0), x.stride(1), q.stride(0), q.stride(1),
                                  out.stride(0), out.stride(1), GROUP_M=8, **cfg)  # fmt: skip
    return out


def w8split_part(mods, results, sols):
    """W8A16 prefill at M = 2048, 4096 and 8192, N = K = 8192, taken apart: the int8 -> bf16 conversion alone (torch's
    and gemm.as_16bit), the TMA GEMM on the converted weight without and with the column scales (W8_COLUMN_TILES),
    the expert (conversion, then the GEMM), the chapter's solution as committed and its fused kernel alone, and the
    naive path, against cuBLAS on bf16 weights, graph-timed over two weight copies; each checked first."""
    import torch

    from qmatmul import checks, timing
    from qmatmul.kernels import gemm

    w8, sol = mods["w8a16"], sols["w8a16"]
    N = K = 8192
    gen = checks.generator(8, "cuda")
    ws = [w8.timing_weights(N, K, gen) for _ in range(2)]
    dense = [q.to(torch.bfloat16) for q, _ in ws]

    for label, fn in (("torch q.to(bf16)", lambda i: ws[i][0].to(torch.bfloat16)),
                      ("gemm.as_16bit", lambda i: gemm.as_16bit(ws[i][0], torch.bfloat16))):  # fmt: skip
        assert torch.equal(fn(0), dense[0])
        ms = timing.graph_ms([lambda i=i: fn(i) for i in range(2)])
        results.append(
            dict(part="w8split", M=0, label=label, us=ms * 1e3, GBps=3 * N * K / (ms * 1e-3) / 1e9)
        )
        print(f"w8split {label:40} {ms * 1e3:7.1f} us")
    for M in (2048, 4096, 8192):
        x, out, cublas = cublas_beside("w8split", M, K, dense, gen, results)
        ref = w8.reference(x, *ws[0]).float()
        runs = [
            ("naive", lambda x, w, o: w8.naive(x, *w)),
            ("solution w8a16_matmul (as committed)", lambda x, w, o: sol.w8a16_matmul(x, *w, out=o)),
            ("fused kernel", lambda x, w, o: fused_w8(w8, sol, x, *w, o)),
            ("GEMM on bf16 codes, no scales", lambda x, w, o: gemm.tma_matmul(x, dense[0 if w is ws[0] else 1], o)),
        ]  # fmt: skip
        runs += [(f"GEMM on bf16 codes, column scales {t}", lambda x, w, o, t=t: gemm.tma_matmul(
            x, dense[0 if w is ws[0] else 1], o, sw=w[1], scales=gemm.COLUMN_SCALES, **tma_tiles(t)))
            for t in W8_COLUMN_TILES]  # fmt: skip
        time_gemms("w8split", M, runs, x, ws, out, ref, cublas, results)


def block_reference_fp32(xq, sx, wq, sw):
    """fp8.block_reference on the GPU in float32 (its float64 on the CPU takes minutes at 4096 x 8192 x 8192)."""

    M, K = xq.shape
    N = wq.shape[0]
    x = xq.float() * sx.repeat_interleave(128, 1)[:, :K]
    w = wq.float() * sw.repeat_interleave(128, 0)[:N].repeat_interleave(128, 1)[:, :K]
    return x @ w.T


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="build/bench")
    parser.add_argument(
        "--parts", default="prefill,decode,fp8block", help="also: crossover, fp8acc, fp8tma, gemmtma"
    )
    parser.add_argument("--formats", default="w8a16,w4a16,mxfp4,nvfp4")
    parser.add_argument("--quick", action="store_true", help="prefill at M = 2048 only")
    parser.add_argument(
        "--old-cells", help="JSON {chapter: {grade_id: source}}: earlier cells to time beside"
    )
    args = parser.parse_args(argv)

    import importlib

    import torch

    from qmatmul import course, environment, timing

    env = environment.start()
    if not env.has_gpu:
        print("sweep_prefill needs a CUDA GPU")
        return 1
    formats = args.formats.split(",")
    parts = args.parts.split(",")
    dtype = env.act_dtype
    copy_bw, cublas = timing.copy_bandwidth(), timing.matmul_flops(dtype=dtype)
    print(f"{env.gpu_name} · torch {torch.__version__} · triton {triton.__version__} · copy "
          f"{copy_bw / 1e12:.2f} TB/s · cuBLAS {cublas / 1e12:.0f} TFLOP/s")  # fmt: skip
    mods = {f: importlib.import_module(f"qmatmul.{f}") for f in [*formats, "fp8"]}
    results: list = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    def save():
        meta = dict(gpu=env.gpu_name, torch=torch.__version__, triton=triton.__version__, date=time.strftime("%F"),
                    copy_TBps=copy_bw / 1e12, cublas_TFLOPs=cublas / 1e12)  # fmt: skip
        (out / "sweep_prefill.json").write_text(json.dumps(dict(meta=meta, results=results), indent=1))

    if "crossover" in parts:
        nb = {f: course.load_notebook_code(f, name=f"cross_{f}") for f in formats}
        crossover_part(formats, mods, nb, dtype, cublas, results)
        save()
    if "prefill" in parts:
        prefill_part(formats, mods, dtype, cublas, results, args.quick)
        save()
    print(f"[{time.time() - t0:.0f} s]")
    if "decode" in parts:
        four = [f for f in formats if f != "w8a16"]
        sols = {(f, "now"): course.load_notebook_code(f, name=f"sweep_{f}") for f in four}
        if args.old_cells:  # {chapter: {grade_id: source}}: the cells as they were, timed in the same run
            old = json.loads(Path(args.old_cells).read_text())
            sols.update({(f, "before"): course.load_notebook_code(f, old[f], name=f"sweep_{f}_old")
                         for f in four if f in old})  # fmt: skip
        decode_part(formats, mods, sols, dtype, copy_bw, results)
        save()
    print(f"[{time.time() - t0:.0f} s]")
    gen = torch.Generator("cuda").manual_seed(5)

    def rowwise_ms(M, N=8192, K=8192):
        a = torch.randn(M, K, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        b = torch.randn(N, K, device="cuda", generator=gen).to(torch.float8_e4m3fn)
        sa, sb = torch.ones(M, 1, device="cuda"), torch.ones(1, N, device="cuda")
        return timing.graph_ms(lambda: torch._scaled_mm(a, b.T, sa, sb, out_dtype=torch.bfloat16))

    if "fp8block" in parts:
        sols = {"fp8": course.load_notebook_code("fp8", name="sweep_fp8")}
        fp8block_part(mods, sols, rowwise_ms, results)
        save()
    if "fp8acc" in parts:
        fp8acc_part(mods, rowwise_ms, results)
        save()
    if "fp8tma" in parts:
        fp8tma_part(mods, rowwise_ms, results)
        save()
    if "gemmtma" in parts:
        gemmtma_part(mods, rowwise_ms, results)
        save()
    if "gemmgroup" in parts:
        gemmgroup_part(results)
        save()
    if "w4tma" in parts:
        w4tma_part(mods, results, {"w4a16": course.load_notebook_code("w4a16", name="sweep_w4a16")})
        save()
    if "fp8row" in parts:
        fp8row_part(mods, rowwise_ms, results)
        save()
    if "w8split" in parts:
        w8split_part(mods, results, {"w8a16": course.load_notebook_code("w8a16", name="sweep_w8a16")})
        save()
    print(f"[{time.time() - t0:.0f} s] wrote {out}/sweep_prefill.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
