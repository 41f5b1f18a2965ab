"""On a CUDA GPU: the 4-bit readable decode kernels (W4A16, MXFP4, NVFP4), old and candidate, graph-timed.

    python -m tools.sweep_decode [--out DIR] [--budget-s SECONDS] [--formats w4a16,mxfp4,nvfp4]

Candidates keep the notebooks' kernel signatures; split-K runs as a second grid axis (tl.num_programs(1) > 1:
atomic adds into a zeroed float32 buffer, then one copy into out). Every (kernel, config) is checked against the
fp32 reference on fresh ragged inputs before timing (M = 1 and 16) and again after. Graph-timed over rotating
weight copies (qmatmul.timing.graph_ms). Writes sweep_decode.json and prints the best per shape and M.
"""

# ruff: noqa: B023 - every closure below is timed before the loop moves on

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import triton
import triton.language as tl

from qmatmul.kernels import splitk
from qmatmul.kernels.expert import (  # the kernels this sweep shares
    block_scales,
    fp4_lanes_tile,
    in_order,
    w4_lanes_tile,
)

ROOT = Path(__file__).resolve().parent.parent

SHAPES = [(28672, 8192), (8192, 28672), (8192, 8192)]


def split_k(launch, out, n_blocks: int, split: int):
    """launch(grid, y) over (n_blocks, split) programs: y is out when K is not split, else a zeroed float32 buffer the
    candidates add into with atomics, copied to out after (three launches; the expert kernels add their parts in one:
    qmatmul/kernels/splitk.py)."""
    import torch

    y = out if split == 1 else torch.zeros(out.shape, dtype=torch.float32, device=out.device)
    launch((n_blocks, split), y)
    if split != 1:
        out.copy_(y)
    return out


# ---------------------------------------------------------------------------------------------------------
# Candidate W4A16 kernels (the notebook's signature)


@triton.jit
def w4_join(
    x_ptr, p_ptr, s_ptr, z_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_pn, stride_pj, stride_sn, stride_sg, stride_ym, stride_yn,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    FOLD: tl.constexpr, MAGIC: tl.constexpr = False,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_K // 2)
    offs_k = tl.arange(0, BLOCK_K)
    lo, hi = splitk.k_slice(K, BLOCK_K, tl.num_programs(1), pid_k)
    n_ok = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk,
                    mask=offs_m[:, None] < M, other=0.0)  # fmt: skip
        p = tl.load(p_ptr + offs_n[:, None] * stride_pn + (k0 // 2 + offs_j)[None, :] * stride_pj,
                    mask=n_ok[:, None], other=0)  # fmt: skip
        grp = k0 // GROUP
        s = tl.load(s_ptr + offs_n * stride_sn + grp * stride_sg, mask=n_ok, other=0.0)
        z = tl.load(z_ptr + offs_n * stride_sn + grp * stride_sg, mask=n_ok, other=0)
        q = tl.reshape(tl.join(p & 0xF, p >> 4), (BLOCK_N, BLOCK_K))
        if FOLD:
            part = tl.dot(x, tl.trans(q.to(x.dtype)))
            x_sum = tl.sum(x.to(tl.float32), axis=1)
            acc += part * s[None, :] - x_sum[:, None] * (z.to(tl.float32) * s)[None, :]
        elif MAGIC:
            # the code in a 16-bit float's mantissa (bf16 128 + q, fp16 1024 + q), minus (magic + z): exact
            if x_ptr.dtype.element_ty == tl.bfloat16:
                f = (q.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)
                w = f - (z.to(tl.float32) + 128.0).to(tl.bfloat16)[:, None]
            else:
                f = (q.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True)
                w = f - (z.to(tl.float32) + 1024.0).to(tl.float16)[:, None]
            acc += tl.dot(x, tl.trans(w)) * s[None, :]
        else:
            w = (q.to(tl.int32) - z.to(tl.int32)[:, None]).to(x.dtype)
            acc += tl.dot(x, tl.trans(w)) * s[None, :]
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m[:, None] < M) & n_ok[None, :]
    if tl.num_programs(1) == 1:
        tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
    else:
        tl.atomic_add(y, acc, mask=y_mask, sem="relaxed")


@triton.jit
def _nibbles(words):
    """int32 words [R, C] -> their nibbles [R, 8 C] in order: nibble i (bits 4i..4i+3) of word j is element 8j + i."""
    q0, q1, q2, q3 = words & 0xF, (words >> 4) & 0xF, (words >> 8) & 0xF, (words >> 12) & 0xF
    q4, q5, q6, q7 = (words >> 16) & 0xF, (words >> 20) & 0xF, (words >> 24) & 0xF, (words >> 28) & 0xF
    return in_order(q0, q1, q2, q3, q4, q5, q6, q7)


@triton.jit
def w4_words(
    x_ptr, p_ptr, s_ptr, z_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_pn, stride_pj, stride_sn, stride_sg, stride_ym, stride_yn,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    LANES: tl.constexpr = False, SWAP: tl.constexpr = False,
):  # fmt: skip
    """w4_join with the packed weight read as int32 words (p_ptr: packed.view(torch.int32), [N, K / 8]) and the
    16-bit float's magic number: element 8j + i of a row is nibble i (bits 4i..4i+3) of its word j. With LANES,
    two nibbles an integer operation (one in each 16-bit half of a word)."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_K // 8)  # word columns of one K block
    offs_k = tl.arange(0, BLOCK_K)
    lo, hi = splitk.k_slice(K, BLOCK_K, tl.num_programs(1), pid_k)
    n_ok = offs_n < N
    # bf16 128 + q is 0x4300 | q, fp16 1024 + q is 0x6400 | q: the code lands in the mantissa, no conversion.
    if x_ptr.dtype.element_ty == tl.bfloat16:
        MAGIC: tl.constexpr = 0x4300
        BASE: tl.constexpr = 128.0
    else:
        MAGIC: tl.constexpr = 0x6400
        BASE: tl.constexpr = 1024.0
    if SWAP:  # y^T = w x^T: the weights as the MMA's first operand
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk,
                    mask=offs_m[:, None] < M, other=0.0)  # fmt: skip
        words = tl.load(p_ptr + offs_n[:, None] * stride_pn + (k0 // 8 + offs_j)[None, :] * stride_pj,
                        mask=n_ok[:, None], other=0)  # fmt: skip
        grp = k0 // GROUP
        s = tl.load(s_ptr + offs_n * stride_sn + grp * stride_sg, mask=n_ok, other=0.0)
        z = tl.load(z_ptr + offs_n * stride_sn + grp * stride_sg, mask=n_ok, other=0)
        if LANES:  # the expert kernel's tile (qmatmul/kernels/expert.py): what is measured here is what ships
            w = w4_lanes_tile(words, z, x_ptr.dtype.element_ty)
        else:
            q = _nibbles(words)
            f = (q | MAGIC).to(tl.int16).to(x_ptr.dtype.element_ty, bitcast=True)  # BASE + q, exactly
            w = f - (z.to(tl.float32) + BASE).to(x_ptr.dtype.element_ty)[:, None]  # q - z, exactly
        if SWAP:
            acc += tl.dot(w, tl.trans(x)) * s[:, None]
        else:
            acc += tl.dot(x, tl.trans(w)) * s[None, :]  # the group's scale on its partial sum
    if SWAP:
        acc = tl.trans(acc)
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m[:, None] < M) & n_ok[None, :]
    if tl.num_programs(1) == 1:
        tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
    else:
        tl.atomic_add(y, acc, mask=y_mask, sem="relaxed")


# ---------------------------------------------------------------------------------------------------------
# Candidate MXFP4 / NVFP4 kernels (the notebooks' signatures; NVFP4 adds g_ptr)


@triton.jit
def _fp4_tile(x_ptr, p_ptr, s_ptr, offs_m, offs_n, M, N, k0, stride_xm, stride_xk, stride_pn, stride_pk,
              stride_sn, stride_sk, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SB: tl.constexpr,
              NV: tl.constexpr):  # fmt: skip
    offs_b = tl.arange(0, BLOCK_K // 2)
    offs_s = tl.arange(0, BLOCK_K // SB)
    offs_k = tl.arange(0, BLOCK_K)
    n_ok = offs_n[:, None] < N
    x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk,
                mask=offs_m[:, None] < M, other=0.0)  # fmt: skip
    p = tl.load(
        p_ptr + offs_n[:, None] * stride_pn + (k0 // 2 + offs_b)[None, :] * stride_pk, mask=n_ok, other=0
    )
    e = tl.load(
        s_ptr + offs_n[:, None] * stride_sn + (k0 // SB + offs_s)[None, :] * stride_sk, mask=n_ok, other=0
    )
    c = tl.reshape(tl.join(p & 0xF, p >> 4), (BLOCK_N, BLOCK_K)).to(tl.int32)
    v = (((c & 0x7) << 9) | ((c & 0x8) << 12)).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
    scale = block_scales(e.to(tl.int32), NV, 16384.0)  # the e2m1 values above are 2^-14 too small
    w = tl.reshape(tl.reshape(v, (BLOCK_N, BLOCK_K // SB, SB)) * scale[:, :, None], (BLOCK_N, BLOCK_K))
    return x, w.to(x.dtype)


@triton.jit
def fp4_join(
    x_ptr, p_ptr, s_ptr, g_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_pn, stride_pk, stride_sn, stride_sk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SB: tl.constexpr, NV: tl.constexpr,
):  # fmt: skip
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    lo, hi = splitk.k_slice(K, BLOCK_K, tl.num_programs(1), pid_k)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        x, w = _fp4_tile(x_ptr, p_ptr, s_ptr, offs_m, offs_n, M, N, k0, stride_xm, stride_xk, stride_pn,
                         stride_pk, stride_sn, stride_sk, BLOCK_N, BLOCK_K, SB, NV)  # fmt: skip
        acc = tl.dot(x, tl.trans(w), acc)
    if NV:
        acc = acc * tl.load(g_ptr)
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if tl.num_programs(1) == 1:
        tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
    else:
        tl.atomic_add(y, acc, mask=y_mask, sem="relaxed")


@triton.jit
def fp4_words(
    x_ptr, p_ptr, s_ptr, g_ptr, y_ptr, M, N, K,
    stride_xm, stride_xk, stride_pn, stride_pk, stride_sn, stride_sk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SB: tl.constexpr, NV: tl.constexpr,
    HALF: tl.constexpr = True, LANES: tl.constexpr = False, SWAP: tl.constexpr = False,
):  # fmt: skip
    """fp4_join with the packed weight read as int32 words (p_ptr: packed.view(torch.int32), [N, K / 8]; element
    8j + i is nibble i of word j) and, with HALF, decoded in the activations' 16-bit type: e2m1's bits placed in a
    bf16 (fp16) are its value times 2^-126 (2^-14), 0.5 a subnormal; one multiply restores it, one more scales it,
    both exact (an e2m1 times an e8m0 or e4m3 scale has at most 6 significant bits). Without HALF, the notebook's
    fp16-then-float32 decode."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_K // 8)
    offs_s = tl.arange(0, BLOCK_K // SB)
    offs_k = tl.arange(0, BLOCK_K)
    n_ok = offs_n[:, None] < N
    DT: tl.constexpr = x_ptr.dtype.element_ty
    if DT == tl.bfloat16:
        SHIFT: tl.constexpr = 6  # e2m1's exponent and mantissa at bf16's bits 8-7 and 6
        UNDO: tl.constexpr = 2.0**126
    else:
        SHIFT: tl.constexpr = 9  # at fp16's bits 11-10 and 9
        UNDO: tl.constexpr = 2.0**14
    lo, hi = splitk.k_slice(K, BLOCK_K, tl.num_programs(1), pid_k)
    if SWAP:  # y^T = w x^T: the weights as the MMA's first operand
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + (k0 + offs_k)[None, :] * stride_xk,
                    mask=offs_m[:, None] < M, other=0.0)  # fmt: skip
        words = tl.load(p_ptr + offs_n[:, None] * stride_pn + (k0 // 8 + offs_j)[None, :] * stride_pk,
                        mask=n_ok, other=0)  # fmt: skip
        e = tl.load(s_ptr + offs_n[:, None] * stride_sn + (k0 // SB + offs_s)[None, :] * stride_sk,
                    mask=n_ok, other=0).to(tl.int32)  # fmt: skip
        if LANES:  # nibbles i and i + 4 decoded together, then joined into K order (the expert kernel's tile)
            w = fp4_lanes_tile(words, e, DT, SB, NV)
        elif HALF:
            c = _nibbles(words)
            v = (((c & 0x7) << SHIFT) | ((c & 0x8) << 12)).to(tl.int16).to(DT, bitcast=True)
            v = v * tl.full((1, 1), UNDO, DT)  # the e2m1 value, exactly
            w = tl.reshape(v, (BLOCK_N, BLOCK_K // SB, SB)) * block_scales(e, NV, 1.0).to(DT)[:, :, None]
        else:
            c = _nibbles(words)
            v = (
                (((c & 0x7) << 9) | ((c & 0x8) << 12))
                .to(tl.uint16)
                .to(tl.float16, bitcast=True)
                .to(tl.float32)
            )
            w = tl.reshape(v, (BLOCK_N, BLOCK_K // SB, SB)) * (block_scales(e, NV, 1.0) * 16384.0)[:, :, None]
        w = tl.reshape(w, (BLOCK_N, BLOCK_K)).to(DT)
        if SWAP:
            acc = tl.dot(w, tl.trans(x), acc)
        else:
            acc = tl.dot(x, tl.trans(w), acc)
    if SWAP:
        acc = tl.trans(acc)
    if NV:
        acc = acc * tl.load(g_ptr)
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if tl.num_programs(1) == 1:
        tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
    else:
        tl.atomic_add(y, acc, mask=y_mask, sem="relaxed")


# ---------------------------------------------------------------------------------------------------------
# Launchers


def w4_launcher(kernel_kind, sol, w4a16, cfg, split, fold=True, magic=False):
    import torch

    def fn(x, packed, scales, zeros, G, out=None):
        M, N, K, out = w4a16.prepare(x, packed, scales, zeros, G, out)
        c = dict(cfg, BLOCK_K=min(cfg.get("BLOCK_K", G), G))
        p = packed
        if kernel_kind == "old":
            kern, extra = sol.w4a16_decode_kernel, {}
        elif kernel_kind in WORD_KERNELS:  # int32 words: K a multiple of 8 (rows 4-byte aligned)
            kern, extra, p = w4_words, word_flags(kernel_kind, "w4a16"), packed.view(torch.int32)
        else:
            kern, extra = w4_join, dict(FOLD=fold, MAGIC=magic)

        def launch(grid, y):
            kern[grid](x, p, scales, zeros, y, M, N, K, x.stride(0), x.stride(1), p.stride(0),
                       p.stride(1), scales.stride(0), scales.stride(1), y.stride(0), y.stride(1),
                       GROUP=G, **c, **extra)  # fmt: skip

        return split_k(launch, out, triton.cdiv(N, c["BLOCK_N"]), split if kernel_kind != "old" else 1)

    return fn


def fp4_launcher(kernel_kind, sol, mod, cfg, split, nv):
    import torch

    def fn(x, packed, scales, *rest, out=None):
        if nv:
            g = rest[0]
            M, N, K, out = mod.prepare(x, packed, scales, g, out)
        else:
            g = scales  # unused
            M, N, K, out = mod.prepare(x, packed, scales, out)

        def launch(grid, y):
            args = (x, packed, scales) + ((g,) if nv else ()) + (y, M, N, K, x.stride(0), x.stride(1),
                    packed.stride(0), packed.stride(1), scales.stride(0), scales.stride(1), y.stride(0),
                    y.stride(1))  # fmt: skip
            if kernel_kind == "old":
                kern = sol.nvfp4_decode_kernel if nv else sol.mxfp4_decode_kernel
                kern[grid](*args, **cfg)
            elif kernel_kind in WORD_KERNELS:  # int32 words [N, K / 8]
                p = packed.view(torch.int32)
                full = (x, p, scales, g, y, M, N, K, x.stride(0), x.stride(1), p.stride(0), p.stride(1),
                        scales.stride(0), scales.stride(1), y.stride(0), y.stride(1))  # fmt: skip
                flags = word_flags(kernel_kind, "nvfp4" if nv else "mxfp4")
                fp4_words[grid](*full, **cfg, SB=16 if nv else 32, NV=nv, **flags)
            else:
                full = (x, packed, scales, g, y) + args[4 + nv :]
                fp4_join[grid](*full, **cfg, SB=16 if nv else 32, NV=nv)

        return split_k(launch, out, triton.cdiv(N, cfg["BLOCK_N"]), split if kernel_kind != "old" else 1)

    return fn


# ---------------------------------------------------------------------------------------------------------


# The int32-word candidates, the fewest SASS a weight (tools/sass.py --sweep) near the top, as (name, BLOCK_N, BLOCK_K,
# num_warps, num_stages, split-K factors); W4A16's BLOCK_K is the group (128).
# Counts compiled by triton 3.9 here (tools/sass.py --sweep); triton 3.6, the H200's, counts within 0.5 of them
# (W4A16 3.9-4.6, MXFP4 4.9-5.6, NVFP4 5.4-6.2) and spills 10 in W4A16's 128-column, 2-warp lanes tile only.
W4_WORDS = [
    # Second GPU round (after the first put lanes at 128 x 128, 4 warps, split 4 best: 39 / 36 / 31 %, short of
    # the SASS prediction): deeper pipelines and more warps, since the count no longer limits. BLOCK_K stays one
    # group (one scale vector a step).
    ("lanes", 128, 128, 4, 4, (2, 4)),
    ("lanes", 128, 128, 4, 6, (2, 4)),
    ("lanes", 64, 128, 4, 6, (2, 4)),
    ("lanes", 128, 128, 8, 4, (2, 4)),
    ("lanes", 256, 128, 8, 3, (2, 4)),
    ("lanes-swap", 128, 128, 4, 4, (4,)),
    ("lanes-swap", 128, 128, 2, 3, (1, 2, 4)),  # 3.67
    ("lanes", 128, 128, 2, 3, (1, 2, 4)),  # 3.80
    ("lanes-swap", 128, 128, 4, 3, (1, 2, 4)),  # 3.90, wgmma
    ("lanes", 64, 128, 2, 4, (1, 2)),  # 4.30
    ("lanes-swap", 64, 128, 2, 4, (1, 2)),  # 3.99
    ("lanes", 128, 128, 4, 3, (1, 2, 4)),  # 4.26
    ("lanes-swap", 256, 128, 4, 3, (2, 4)),  # 3.57, wgmma
    ("lanes", 256, 128, 4, 3, (2, 4)),  # 3.85
    ("words", 64, 128, 2, 4, (1, 2)),  # 5.97
]
FP4_WORDS = [  # SASS a weight, MXFP4 / NVFP4
    # Second GPU round (the first's best: lanes 64 x 256, 4 warps, 3 stages, split 2: 42 / 40 / 33 % MXFP4):
    # deeper pipelines and longer K steps.
    ("lanes", 64, 256, 4, 4, (1, 2, 4)),
    ("lanes", 64, 256, 4, 5, (2, 4)),
    ("lanes", 64, 512, 4, 3, (1, 2, 4)),
    ("lanes", 32, 512, 4, 4, (1, 2, 4)),
    ("lanes", 128, 256, 4, 3, (2, 4)),
    ("lanes", 128, 256, 8, 3, (2, 4)),
    ("lanes", 64, 256, 8, 4, (2, 4)),
    ("lanes", 128, 128, 2, 4, (1, 2, 4)),  # 5.08 / 5.66
    ("lanes-swap", 128, 128, 2, 4, (1, 2, 4)),  # 4.84 / 5.41
    ("lanes", 128, 128, 4, 4, (1, 2)),  # 5.38 / 5.74
    ("lanes-swap", 64, 128, 2, 4, (1, 2)),  # 5.15 (2 spills) / 5.59
    ("lanes-swap", 128, 128, 4, 4, (1, 2)),  # 5.36 / 5.78, wgmma
    ("lanes", 64, 128, 2, 4, (1, 2)),  # 5.52 / 5.88
    ("lanes", 64, 256, 4, 3, (1, 2)),  # 5.46 / 6.04
    ("words", 64, 256, 4, 3, (1, 2)),  # 8.34 / 8.74
]
WORD_KERNELS = ("words", "words32", "lanes", "lanes-swap")


def word_flags(name, fmt):
    """The constexprs of an int32-word candidate: LANES (two nibbles an integer operation), SWAP (the weights as
    the MMA's first operand) and, for MXFP4 / NVFP4, HALF (decoded in the 16-bit type, not through float32)."""
    flags = dict(LANES=name.startswith("lanes"), SWAP=name.endswith("-swap"))
    return flags if fmt == "w4a16" else flags | dict(HALF=name != "words32")


def candidates(fmt):
    """(name, kind, cfg, split) to time."""
    out = []
    if fmt == "w4a16":
        # Fourth round, first: int32 words and the bf16 magic number (w4_words), two nibbles an integer operation
        # (lanes) or one (words): 3.6-4.3 SASS a weight against the shipped kernel's 8.72 (tools/sass.py --sweep).
        for name, bn, bk, nw, ns, splits in W4_WORDS:
            for split in splits:
                cfg = dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
                out.append((name, name, cfg, split))
        # First, in one run: the shipped kernel ("sub", 32 columns, 4 warps, 4 stages) beside the changes that
        # cut the loop's SASS per weight (tools/sass.py, docs/perf-notes.md third round): the bf16 magic number
        # (8.72 -> 7.72), 64 columns with 2 warps (6.97), 128 columns with 4 warps (6.88); split-K for the short-N
        # shapes. Earlier rounds' candidates follow.
        for name, bn, nw, ns in [("sub", 32, 4, 4), ("magic", 32, 4, 4), ("sub", 64, 2, 4), ("magic", 64, 2, 4),
                                 ("sub", 128, 4, 4), ("magic", 128, 4, 3), ("sub", 64, 2, 6)]:  # fmt: skip
            for split in (1, 2, 4):
                out.append((name, name, dict(BLOCK_M=16, BLOCK_N=bn, num_warps=nw, num_stages=ns), split))
        for bn, nw, ns in [(128, 8, 3), (64, 4, 4), (32, 4, 6), (16, 4, 6)]:
            out.append(("old", "old", dict(BLOCK_M=16, BLOCK_N=bn, num_warps=nw, num_stages=ns), 1))
        for bn, nw, ns in [
            (64, 4, 4),
            (32, 4, 4),
            (32, 4, 6),
            (16, 4, 6),
            (128, 8, 3),
            (32, 2, 6),
            (16, 2, 8),
        ]:
            for split in (1, 2, 4):
                out.append(("fold", "fold", dict(BLOCK_M=16, BLOCK_N=bn, num_warps=nw, num_stages=ns), split))
        for bn, nw, ns in [(32, 4, 4), (32, 4, 6), (16, 4, 6)]:
            for split in (1, 2):
                out.append(("sub", "sub", dict(BLOCK_M=16, BLOCK_N=bn, num_warps=nw, num_stages=ns), split))
    else:
        # Fourth round, first: int32 words decoded in bf16 (fp4_words), two nibbles an integer operation (lanes)
        # or one (words): 4.8-6.0 SASS a weight against the shipped kernels' 11.32 (MXFP4) and 12.94 (NVFP4).
        for name, bn, bk, nw, ns, splits in FP4_WORDS:
            for split in splits:
                cfg = dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
                out.append((name, name, cfg, split))
        for bn, bk, nw, ns in [(128, 256, 4, 3), (64, 256, 4, 3), (32, 256, 4, 4), (16, 256, 4, 4)]:
            out.append(
                ("old", "old", dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns), 1)
            )
        for bn, bk, nw, ns in [
            (64, 256, 4, 3),
            (32, 256, 4, 4),
            (32, 128, 4, 6),
            (16, 256, 4, 4),
            (64, 128, 4, 4),
            (32, 512, 4, 3),
            (16, 512, 2, 4),
            (32, 256, 2, 4),
        ]:
            for split in (1, 2, 4):
                out.append(("join", "join", dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns),
                            split))  # fmt: skip
    return out


def sass_spec(fmt, name, cfg):
    """(kernel name, constexprs, pointer types) of candidate `name` at cfg as its launcher calls it with bf16
    activations at 28672 x 8192 (BLOCK_K as the launcher picks it): for tools/sass.py --sweep. None for "old"
    (the notebook's kernel: tools/sass.py's own rows)."""
    if name == "old":
        return None
    c = dict(cfg)
    if fmt == "w4a16":
        types = {"x_ptr": "*bf16", "p_ptr": "*u8", "s_ptr": "*fp32", "z_ptr": "*u8", "y_ptr": "*bf16"}
        c |= dict(GROUP=128, BLOCK_K=min(c.get("BLOCK_K", 128), 128))
        if name in WORD_KERNELS:
            return "w4_words", c | word_flags(name, fmt), types | {"p_ptr": "*i32"}
        return "w4_join", c | dict(FOLD=name == "fold", MAGIC=name == "magic"), types
    types = {"x_ptr": "*bf16", "p_ptr": "*u8", "s_ptr": "*u8", "g_ptr": "*fp32", "y_ptr": "*bf16"}
    c |= dict(SB=16 if fmt == "nvfp4" else 32, NV=fmt == "nvfp4")
    if name in WORD_KERNELS:
        return "fp4_words", c | word_flags(name, fmt), types | {"p_ptr": "*i32"}
    return "fp4_join", c, types


def problem(fmt, mods, N, K, g, device="cuda"):
    import torch

    if fmt == "w4a16":
        return mods[fmt].random_packed(N, K, 128, device, g)
    if fmt == "mxfp4":
        return mods[fmt].timing_weights(N, K, g)
    p, s, _ = mods[fmt].timing_weights(N, K, g)
    return p, s, torch.full((1,), 1e-3, device=device)


def make_fn(fmt, mods, sols, name, cfg, split):
    kind = name if name == "old" or name in WORD_KERNELS else "join"
    if fmt == "w4a16":
        f = w4_launcher(kind, sols[fmt], mods[fmt], cfg, split, fold=name == "fold", magic=name == "magic")
        return lambda x, w, out=None: f(x, *w, 128, out=out)
    f = fp4_launcher(kind, sols[fmt], mods[fmt], cfg, split, fmt == "nvfp4")
    return lambda x, w, out=None: f(x, *w, out=out)


def check(fmt, mods, fn, M, dtype, seed, device="cuda", N=1008, K=2048):
    """fn against the fp32 reference on a fresh ragged problem (N = 1008: ragged against every BLOCK_N, and a
    multiple of 16, so compiled as the timed shapes are)."""
    import torch

    from qmatmul import checks

    mod = mods[fmt]
    g = checks.generator(seed)  # the modules draw on the CPU and move the tensors
    if fmt == "w4a16":
        x, p, s, z = mod.random_problem(M, N, K, 128, dtype, device, g)
        w, ref = (p, s, z), mod.reference(x, p, s, z, 128)
    elif fmt == "mxfp4":
        x, p, s = mod.random_problem(M, N, K, dtype, device, g)
        w, ref = (p, s), mod.reference(x, p, s)
    else:
        x, p, s, gg = mod.random_problem(M, N, K, dtype, device, g)
        w, ref = (p, s, gg), mod.reference(x, p, s, gg)
    out = torch.full((M, N), float("nan"), dtype=dtype, device=device)
    y = fn(x, w, out=out)
    checks.compare(y, ref, what="sweep", rtol=checks.tolerance_for(dtype), poisoned=True)


# ---------------------------------------------------------------------------------------------------------
# Launch-config sweeps of the notebooks' own kernels (the module's *_config patched for each config)


def config_sweeps():
    """(tag, chapter, solution function, config function, configs, timed (M, N, K) list)."""
    dec = [(N, K) for N, K in SHAPES]
    pre = [(M, 8192, 8192) for M in (2048, 4096)]
    w8d = [
        dict(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
        for bn, bk, nw, ns in [
            (64, 256, 4, 3),
            (64, 512, 4, 4),
            (32, 512, 4, 4),
            (32, 256, 4, 5),
            (128, 256, 4, 3),
            (128, 512, 8, 3),
            (64, 256, 4, 5),
            (64, 512, 4, 3),
            (32, 512, 2, 5),
            (64, 1024, 8, 3),
            (32, 1024, 4, 3),
            (32, 512, 4, 6),
            (64, 512, 8, 4),
            (32, 1024, 8, 4),
        ]
    ]
    f8d = [dict(c, FP8_DOT=True) for c in w8d]
    pre_cfgs = [
        (128, 128, 64, 4, 3),
        (128, 256, 64, 8, 3),
        (128, 128, 128, 4, 3),
        (128, 256, 128, 8, 3),
        (256, 128, 64, 8, 3),
        (128, 128, 128, 8, 4),
    ]
    pcf = [
        dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=nw, num_stages=ns)
        for bm, bn, bk, nw, ns in pre_cfgs
    ]
    return [
        (
            "w8a16 decode",
            "w8a16",
            "w8a16_decode",
            "decode_config",
            w8d,
            [(M, N, K) for N, K in dec for M in (1, 16)],
        ),
        (
            "fp8 decode",
            "fp8",
            "fp8_decode",
            "decode_config",
            f8d,
            [(M, N, K) for N, K in dec for M in (1, 16)],
        ),
        ("w8a16 prefill", "w8a16", "w8a16_matmul", "prefill_config", pcf, pre),
        ("w4a16 prefill", "w4a16", "w4a16_matmul", "prefill_config", pcf, pre),
        ("mxfp4 prefill", "mxfp4", "mxfp4_matmul", "prefill_config", pcf + [dict(pcf[3], BLOCK_K=256)], pre),
    ]


def config_problem(chapter, mods, M, N, K, dtype, g, device="cuda"):
    """(args for the solution function after x, x-like first argument, reference or None)."""
    import torch

    mod = mods[chapter]
    if chapter == "w8a16":
        q = torch.randint(-127, 128, (N, K), dtype=torch.int8, device=device, generator=g)
        return (q, torch.rand(N, device=device, generator=g) * 1e-3 + 1e-4)
    if chapter == "fp8":
        return mod.timing_problem(1, N, K, g)[2:]
    if chapter == "w4a16":
        return (*mod.random_packed(N, K, 128, device, g), 128)
    return mod.timing_weights(N, K, g)


def config_x(chapter, mods, M, K, dtype, g):
    import torch

    if chapter == "fp8":
        return mods["fp8"].timing_problem(M, 1, K, g)[:2]
    return (torch.randn(M, K, device="cuda", generator=g).to(dtype),)


def config_check(chapter, mods, fn, M, N, K, dtype, device="cuda"):
    from qmatmul import checks

    mod = mods[chapter]
    g = checks.generator(9)
    if chapter == "fp8":
        mod.recheck(fn, "sweep", M, N, K, checks.generator(9, "cuda"))
        return
    if chapter == "w4a16":
        x, p, s, z = mod.random_problem(M, N, K, 128, dtype, device, g)
        y, ref = fn(x, p, s, z, 128), mod.reference(x, p, s, z, 128)
    else:
        x, *w = mod.random_problem(M, N, K, dtype, device, g)
        y, ref = fn(x, *w), mod.reference(x, *w)
    checks.compare(y, ref, what="sweep", rtol=checks.tolerance_for(dtype))


def run_config_sweeps(mods, sols, dtype, copy_bw, cublas, budget_s, results, warm=None, only=""):
    import torch

    from qmatmul import checks, timing

    t0 = time.time()
    g = checks.generator(0, "cuda")
    jobs = [(tag, ch, fname, cname, cfg, timed) for tag, ch, fname, cname, cfgs, timed in config_sweeps()
            for cfg in cfgs if only in tag]  # fmt: skip
    if warm is not None:
        i, n = warm
        jobs = jobs[i::n]
    problems = {}
    for tag, ch, fname, cname, cfg, timed in jobs:
        if warm is None and time.time() - t0 > budget_s:
            print("config sweeps: budget spent")
            break
        mod = mods[ch]
        fn = getattr(sols[ch], fname)
        original = getattr(mod, cname)
        setattr(mod, cname, lambda *a, cfg=cfg, **k: dict(cfg))
        try:
            decode = "decode" in tag
            try:
                for M in (1, 16) if decode else (304,):
                    config_check(ch, mods, fn, M, 1008, 2048, dtype)
            except Exception as exc:  # noqa: BLE001
                if warm is None:
                    print(f"{tag} {cfg}: FAILS ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})")
                    results.append(dict(sweep=tag, cfg=cfg, error=str(exc)[:200]))
                continue
            if warm is not None:
                continue
            line = []
            for M, N, K in timed:
                key = (ch, N, K)
                if key not in problems:
                    problems.clear()
                    torch.cuda.empty_cache()
                    nb = N * K if ch in ("w8a16", "fp8") else N * K // 2
                    problems[key] = [
                        config_problem(ch, mods, M, N, K, dtype, g) for _ in range(timing.copies_needed(nb))
                    ]
                ws = problems[key]
                xa = config_x(ch, mods, M, K, dtype, g)
                try:
                    ms = timing.graph_ms([lambda w=w: fn(*xa, *w) for w in ws], target_ms=1.0, replays=7)
                except Exception as exc:  # noqa: BLE001
                    results.append(dict(sweep=tag, cfg=cfg, M=M, N=N, K=K, error=str(exc)[:200]))
                    continue
                row = dict(sweep=tag, cfg=cfg, M=M, N=N, K=K, us=ms * 1e3)
                if decode:
                    nb = mod.bytes_moved(M, N, K)
                    row["copy_frac"] = nb / (ms * 1e-3) / copy_bw
                    line.append(f"{N // 1024}k×{K // 1024}k/M{M}:{100 * row['copy_frac']:.0f}")
                else:
                    row["cublas_frac"] = 2 * M * N * K / (ms * 1e-3) / cublas
                    line.append(f"M{M}:{100 * row['cublas_frac']:.0f}%cuBLAS")
                results.append(row)
            try:
                for M in (1, 16) if decode else (304,):
                    config_check(ch, mods, fn, M, 1008, 2048, dtype)
                ok = ""
            except Exception:  # noqa: BLE001
                ok = "  WRONG AFTER TIMING"
            print(f"{tag} {cfg}: {' '.join(line)}{ok}  [{time.time() - t0:.0f} s]", flush=True)
        finally:
            setattr(mod, cname, original)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="build/bench")
    parser.add_argument("--budget-s", type=float, default=300)
    parser.add_argument("--formats", default="w4a16,mxfp4,nvfp4")
    parser.add_argument("--configs-s", type=float, default=90, help="seconds for the config sweeps (0: none)")
    parser.add_argument("--configs", default="", help="only the config sweeps whose tag contains this")
    parser.add_argument(
        "--warm", default="", help="i/n: only compile (through the checks) every n-th candidate"
    )
    parser.add_argument("--workers", type=int, default=min(12, max(1, (os.cpu_count() or 2) - 2)))
    args = parser.parse_args(argv)
    if not args.warm and args.workers > 1:
        # Triton compiles one kernel at a time per process: fill its on-disk cache from several processes first.
        import subprocess

        t = time.time()
        procs = [subprocess.Popen([sys.executable, "-m", "tools.sweep_decode", "--warm", f"{i}/{args.workers}",
                                   "--formats", args.formats, "--configs-s", str(args.configs_s), "--configs",
                                   args.configs], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for i in range(args.workers)]  # fmt: skip
        for proc in procs:
            try:
                proc.wait(timeout=max(1, 85 - (time.time() - t)))
            except subprocess.TimeoutExpired:
                proc.kill()
        print(f"compiled in {args.workers} processes: {time.time() - t:.0f} s", flush=True)

    import torch

    from qmatmul import checks, course, environment, fp8, mxfp4, nvfp4, timing, w4a16, w8a16

    env = environment.start()
    if not env.has_gpu:
        print("needs a CUDA GPU")
        return 1
    t0 = time.time()
    dtype = env.act_dtype
    mods = dict(w4a16=w4a16, mxfp4=mxfp4, nvfp4=nvfp4, w8a16=w8a16, fp8=fp8)
    sols = {f: course.load_notebook_code(f, name=f"sweep_{f}") for f in mods}
    if not args.warm:
        copy_bw = timing.copy_bandwidth()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    g = checks.generator(0, "cuda")
    formats = [f for f in args.formats.split(",") if f]
    per_format = args.budget_s / max(1, len(formats))
    if args.warm:
        i, n = (int(v) for v in args.warm.split("/"))
        jobs = [(fmt, c) for fmt in formats for c in candidates(fmt)]
        for fmt, (name, _, cfg, split) in jobs[i::n]:
            fn = make_fn(fmt, mods, sols, name, cfg, split)
            for M in (1, 16):
                try:
                    check(fmt, mods, fn, M, dtype, 7)
                except Exception:  # noqa: BLE001 - reported by the timing pass
                    pass
        if args.configs_s > 0:
            run_config_sweeps(mods, sols, dtype, None, None, 0, [], warm=(i, n), only=args.configs)
        return 0
    for fmt in formats:
        t_fmt = time.time()
        weights = {}
        for N, K in SHAPES:
            nb = mods[fmt].bytes_moved(1, N, K) if fmt != "w4a16" else w4a16.bytes_moved(1, N, K, 128)
            weights[(N, K)] = [problem(fmt, mods, N, K, g) for _ in range(timing.copies_needed(nb))]
        xs = {
            (M, K): torch.randn(M, K, device="cuda", generator=g).to(dtype)
            for M in (1, 16)
            for _, K in SHAPES
        }
        for name, _, cfg, split in candidates(fmt):
            if time.time() - t_fmt > per_format:
                print(f"{fmt}: budget spent, skipping the rest")
                break
            fn = make_fn(fmt, mods, sols, name, cfg, split)
            tag = f"{fmt} {name} {cfg} split={split}"
            try:
                for M in (1, 16):
                    check(fmt, mods, fn, M, dtype, 100 + M)
            except Exception as exc:  # noqa: BLE001
                print(f"{tag}: FAILS ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})")
                results.append(dict(fmt=fmt, name=name, cfg=cfg, split=split, error=str(exc)[:200]))
                continue
            for (N, K), ws in weights.items():
                for M in (1, 16):
                    x = xs[(M, K)]
                    outs = [torch.empty(M, N, dtype=dtype, device="cuda") for _ in ws]
                    try:
                        ms = timing.graph_ms([lambda w=w, o=o: fn(x, w, out=o) for w, o in zip(ws, outs, strict=True)],
                                            target_ms=1.0, replays=7)  # fmt: skip
                    except Exception as exc:  # noqa: BLE001
                        results.append(dict(fmt=fmt, name=name, cfg=cfg, split=split, N=N, K=K, M=M,
                                            error=str(exc)[:200]))  # fmt: skip
                        continue
                    nb = mods[fmt].bytes_moved(M, N, K) if fmt != "w4a16" else w4a16.bytes_moved(M, N, K, 128)
                    frac = nb / (ms * 1e-3) / copy_bw
                    results.append(dict(fmt=fmt, name=name, cfg=cfg, split=split, N=N, K=K, M=M, us=ms * 1e3,
                                        copy_frac=frac))  # fmt: skip
            ok = True
            try:
                for M in (1, 16):
                    check(fmt, mods, fn, M, dtype, 200 + M)
            except Exception:  # noqa: BLE001
                ok = False
            mine = [r for r in results if r.get("name") == name and r.get("cfg") == cfg and r.get("split") == split
                    and r.get("fmt") == fmt and "us" in r]  # fmt: skip
            line = " ".join(
                f"{r['N'] // 1024}k×{r['K'] // 1024}k/M{r['M']}:{100 * r['copy_frac']:.0f}" for r in mine
            )
            print(
                f"{tag}: {line}{'' if ok else '  WRONG AFTER TIMING'}  [{time.time() - t0:.0f} s]", flush=True
            )
            for r in mine:
                r["recheck"] = ok
        del weights
        torch.cuda.empty_cache()
        (out_dir / "sweep_decode.json").write_text(
            json.dumps(dict(copy_TBps=copy_bw / 1e12, rows=results), indent=1)
        )
    if args.configs_s > 0:
        configs = []
        run_config_sweeps(
            mods,
            sols,
            dtype,
            copy_bw,
            timing.matmul_flops(dtype=dtype),
            args.configs_s,
            configs,
            only=args.configs,
        )
        results += configs
        (out_dir / "sweep_decode.json").write_text(
            json.dumps(dict(copy_TBps=copy_bw / 1e12, rows=results), indent=1)
        )
    print("\nbest worst-case (min over shapes and M) per format and kernel:")
    for fmt in formats:
        by = {}
        for r in results:
            if r.get("fmt") != fmt or "us" not in r:
                continue
            key = (r["name"], json.dumps(r["cfg"]), r["split"])
            by.setdefault(key, []).append(r["copy_frac"])
        for name in dict.fromkeys(k[0] for k in by):  # every kernel timed, in candidates() order
            keys = [k for k in by if k[0] == name and len(by[k]) == 2 * len(SHAPES)]
            if keys:
                best = max(keys, key=lambda k: min(by[k]))
                print(f"  {fmt} {name}: {best[1]} split={best[2]} worst {100 * min(by[best]):.0f} %")
    print(f"done in {time.time() - t0:.0f} s; wrote {out_dir}/sweep_decode.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
