"""Honest kernels whose wrappers size their grids with numpy on Python numbers, `np.ceil(N / cfg["BLOCK_N"])`
(before: any numpy in a wrapper was read as computing with numpy, and both kernel cells earned nothing). numpy
applied to tensors is still refused (numpy_matmul). Full marks.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
"""


# %% ex2_prefill: replace
def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    if M >= DEQUANTIZE_FIRST_M and w8a16.decode_first(x, out):  # large M: convert once, then a plain GEMM
        return w8a16.decoded_gemm(x, w8a16.as_16bit(q, x.dtype), out, sw=s)
    cfg = w8a16.prefill_config(M, N, K, x.device.type)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
    w8a16_matmul_kernel[grid](
        x, q, s, out, M, N, K,
        x.stride(0), x.stride(1), q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        GROUP_M=8, **cfg,
    )
    return out


# %% with
import numpy as np


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    if M >= DEQUANTIZE_FIRST_M and w8a16.decode_first(x, out):  # large M: convert once, then a plain GEMM
        return w8a16.decoded_gemm(x, w8a16.as_16bit(q, x.dtype), out, sw=s)
    cfg = w8a16.prefill_config(M, N, K, x.device.type)
    tiles = np.ceil(M / cfg["BLOCK_M"]) * np.ceil(N / cfg["BLOCK_N"])
    grid = (int(tiles),)
    w8a16_matmul_kernel[grid](
        x,
        q,
        s,
        out,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        GROUP_M=8,
        **cfg,
    )
    return out


# %% ex3_decode: replace
def w8a16_decode(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    if M > 16:
        raise ValueError(f"w8a16_decode takes at most 16 rows, got M = {M}: use w8a16_matmul")
    cfg = w8a16.decode_config(M, N, K, x.device.type)
    grid = (triton.cdiv(N, cfg["BLOCK_N"]), cfg["SPLIT_K"])
    parts, counts = w8a16.split_scratch(x.device, cfg["SPLIT_K"], N, grid[0])
    w8a16_decode_kernel[grid](
        x, q, s, out, parts, counts, M, N, K,
        x.stride(0), x.stride(1), q.stride(0), q.stride(1), out.stride(0), out.stride(1),
        **cfg,
    )
    return out


# %% with
def w8a16_decode(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    if M > 16:
        raise ValueError(f"w8a16_decode takes at most 16 rows, got M = {M}: use w8a16_matmul")
    cfg = w8a16.decode_config(M, N, K, x.device.type)
    grid = (int(np.ceil(q.shape[0] / cfg["BLOCK_N"])), int(np.int64(cfg["SPLIT_K"])))
    parts, counts = w8a16.split_scratch(x.device, cfg["SPLIT_K"], N, grid[0])
    w8a16_decode_kernel[grid](
        x,
        q,
        s,
        out,
        parts,
        counts,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        **cfg,
    )
    return out
