"""Applies the per-channel scale along the rows of the output (s[offs_m]) instead of its columns.

expect test_quantizer: 2 /
expect test_prefill: 0 / scale on the wrong axis
expect test_decode: 0 / scale on the wrong axis
expect test_decode_bandwidth: 0 /
"""


# %% ex2_prefill
@triton.jit
def w8a16_matmul_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_qn,
    stride_qk,
    stride_ym,
    stride_yn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
            mask=(offs_m[:, None] < M) & (k[None, :] < K),
            other=0.0,
        )
        q = tl.load(
            q_ptr + offs_n[None, :] * stride_qn + k[:, None] * stride_qk,
            mask=(offs_n[None, :] < N) & (k[:, None] < K),
            other=0,
        )
        acc = tl.dot(x, q.to(x.dtype), acc)
    s = tl.load(s_ptr + offs_m, mask=offs_m < M, other=0.0)  # wrong: s is indexed by n
    y = acc * s[:, None]
    tl.store(
        y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
        y.to(y_ptr.dtype.element_ty),
        mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
    )


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    cfg = w8a16.prefill_config(M, N, K, x.device.type)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
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
        **cfg,
    )
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    cfg = w8a16.decode_config(M, N, K, x.device.type)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
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
        **cfg,
    )
    return out
