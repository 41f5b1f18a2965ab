"""The naive path: dequantize the whole weight into memory, then an fp16 Triton matmul of their own.

The numbers are right, but the weight crosses memory three times; the checks name the materialized copy.
expect test_quantizer: 2 /
expect test_prefill: 0 / naive dequantize-then-matmul
expect test_decode: 0 / naive dequantize-then-matmul
expect test_decode_bandwidth: 0 /
e2e: true
"""


# %% ex2_prefill
@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(
            a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
            mask=(offs_m[:, None] < M) & (k[None, :] < K),
            other=0.0,
        )
        b = tl.load(
            b_ptr + offs_n[None, :] * K + k[:, None], mask=(offs_n[None, :] < N) & (k[:, None] < K), other=0.0
        )
        acc = tl.dot(a, b, acc)
    tl.store(
        c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
    )


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    w = q.to(x.dtype) * s[:, None].to(x.dtype)  # the whole weight, dequantized into memory
    grid = (triton.cdiv(M, 32), triton.cdiv(N, 64))
    matmul_kernel[grid](
        x,
        w,
        out,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK_M=32,
        BLOCK_N=64,
        BLOCK_K=64,
    )
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out=out)
