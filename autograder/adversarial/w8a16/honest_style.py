"""Honest kernels written differently from the solution: an lru_cache'd config helper, a grid lambda, keyword
launch arguments, a helper that allocates, and the decode wrapper calling the prefill one for M = 16. Full marks.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
"""

# %% ex2_prefill
import functools


@triton.jit
def w8a16_matmul_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    sxm,
    sxk,
    sqn,
    sqk,
    sym,
    syn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + rk
        a = tl.load(
            x_ptr + rm[:, None] * sxm + k[None, :] * sxk, mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0
        )
        b = tl.load(
            q_ptr + rn[None, :] * sqn + k[:, None] * sqk, mask=(rn[None, :] < N) & (k[:, None] < K), other=0
        )
        acc += tl.dot(a, b.to(a.dtype))
    scale = tl.load(s_ptr + rn, mask=rn < N, other=0.0)
    tl.store(
        y_ptr + rm[:, None] * sym + rn[None, :] * syn,
        (acc * scale[None, :]).to(y_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


@functools.cache
def _config(M, N, K, device):
    return w8a16.prefill_config(M, N, K, device)


def _allocate(x, N):
    return torch.empty((x.shape[0], N), dtype=x.dtype, device=x.device)


def w8a16_matmul(x, q, s, out=None):
    if out is None:
        out = _allocate(x, q.shape[0])
    M, N, K, out = w8a16.prepare(x, q, s, out)
    cfg = _config(M, N, K, x.device.type)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))  # noqa: E731
    w8a16_matmul_kernel[grid](x, q, s, out, M, N, K, *x.stride(), *q.stride(), *out.stride(), **cfg)
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    if x.shape[0] > 16:
        raise ValueError("at most 16 rows")
    return w8a16_matmul(x, q, s, out)
