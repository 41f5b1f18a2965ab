"""An honest split decode that adds the parts itself instead of calling the given w8a16.finish: its own workspace
store, counter and ordered sum through part_ptr and count_ptr (before: never tried; the checks name a kernel that
stores its own part, so this one must still earn everything). Full marks.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
"""


# %% ex3_decode
@triton.jit
def w8a16_decode_kernel(
    x_ptr, q_ptr, s_ptr, y_ptr, part_ptr, count_ptr, M, N, K,
    stride_xm, stride_xk, stride_qn, stride_qk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
):
    # The grid is (strips of N, slices of K): program (pid_n, pid_k) sums slice pid_k of K for its strip's columns,
    # and w8a16.finish stores y (SPLIT_K = 1) or adds the strip's parts.
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    lo, hi = w8a16.k_slice(K, BLOCK_K, SPLIT_K, pid_k)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(lo, hi, BLOCK_K):
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
    s = tl.load(s_ptr + offs_n, mask=offs_n < N, other=0.0)
    y = y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn
    y_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = acc * s[None, :]
    if SPLIT_K == 1:
        tl.store(y, acc.to(y_ptr.dtype.element_ty), mask=y_mask)
    else:
        part = part_ptr + offs_m[:, None] * N + offs_n[None, :]
        tl.store(part + pid_k * BLOCK_M * N, acc, mask=y_mask)
        tl.debug_barrier()
        if tl.atomic_add(count_ptr + pid_n, 1, sem="acq_rel") == SPLIT_K - 1:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for j in range(SPLIT_K):
                total += tl.load(part + j * BLOCK_M * N, mask=y_mask, other=0.0, cache_modifier=".cg")
            tl.store(y, total.to(y_ptr.dtype.element_ty), mask=y_mask)
            tl.store(count_ptr + pid_n, 0)


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
