"""Launch configurations: the tiles each kernel takes on each class of GPU, and the rule that picks a class.

The chapters' config functions (qmatmul/scaffold/) and the course's kernels read the shared tiles here.
"""

from __future__ import annotations

import torch

# Before sm_80 (a T4) Triton has no tensor-core tl.dot (from 3.2 on: triton-lang/triton#5066): it multiplies with
# FMAs, in float32, and takes the weight tile through shared memory as float32 (BLOCK_N x BLOCK_K x 4 bytes, within
# a T4's 64 KB). Compiled for sm_75 on a CPU (tools/sass.py --fit, docs/gpu-fit.md), a BLOCK_K of 32 is what keeps
# the kernels from spilling registers: the H200's decode tiles need 128 KB there (W8A16) or spill 1600 registers a
# step (MXFP4, NVFP4, FP8).
FMA_DECODE = dict(BLOCK_M=16, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=1)
FMA_TILED = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=1)
# Triton's interpreter on the CPU (every chapter's config functions off a GPU): it prefers few, large programs.
INTERPRETER_DECODE = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=1)
INTERPRETER_TILED = dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64, num_warps=4, num_stages=1)


def gemm_config(device, grouped: bool = False) -> dict:
    """Tiles of the plain Triton GEMM (`qmatmul.kernels.gemm.matmul_kernel`) that the 4-bit chapters' wrappers run from
    DEQUANTIZE_FIRST_M rows on, once the weight is decoded, where the TMA GEMM cannot run: Hopper's 227 KB of shared
    memory takes three stages of 128 x 256 x 64 (144 KB); from sm_80 on 128 x 128 x 32 (48 KB); a T4 the FMA tiles
    (128 x 128 spilled 8000 registers there, tools/sass.py). grouped (W4A16: each step's product scaled before it is
    added, so two accumulators live at once): 64 x 128 x 32, which spills nothing on sm_80, 90 and 100 where those
    tiles spilled 92-460 registers (compiled here, docs/gpu-fit.md)."""
    device = torch.device(device)
    if device.type != "cuda":
        return dict(FMA_TILED)  # never run: the wrappers decode first only on a GPU
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 0):
        return dict(FMA_TILED)
    if grouped:
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)
    if cap == (9, 0):
        return dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=3)


def fma_dot(device: str) -> bool:
    """True on a CUDA GPU without tensor cores for Triton's tl.dot (older than sm_80): the FMA_* tiles apply."""
    return device == "cuda" and torch.cuda.get_device_capability() < (8, 0)


# The 4-bit decode kernels have no K masks, so their BLOCK_K must divide K. It is never below 64, two scale blocks a
# step or more: on the H200 (Triton 3.6, 2026-12-01) NVFP4's decode kernel gave wrong results on 99 % of the elements
# at BLOCK_K = 16 (K = 176, one e4m3 scale a step), where the interpreter and every tile of 128 or more were right.
MIN_DECODE_BLOCK_K = 64
