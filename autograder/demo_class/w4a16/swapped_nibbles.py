"""Puts element 2i in the high nibble, in the packer and (consistently) in both kernels.

Round trips through their own code would look right; against the course's layout every check names the swap.
expect test_quantizer: 0 / swapped nibbles
expect test_prefill: 0 / swapped nibbles
expect test_decode: 0 / swapped nibbles
expect test_decode_bandwidth: 0 /
e2e: true
"""


# %% ex1_quantizer
def quantize_int4(w: torch.Tensor, group_size: int = 128):
    N, K = w.shape
    wg = w.float().reshape(N, K // group_size, group_size)
    lo = wg.amin(dim=2).clamp(max=0)
    hi = wg.amax(dim=2).clamp(min=0)
    scale = (hi - lo) / 15
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = torch.round(-lo / scale).clamp(0, 15)
    q = (torch.round(wg / scale[..., None]) + zero[..., None]).clamp(0, 15).to(torch.uint8).reshape(N, K)
    packed = (q[:, 0::2] << 4) | q[:, 1::2]  # wrong: element 2i in the high nibble
    return packed, scale, zero.to(torch.uint8)


# %% ex2_prefill
@triton.jit
def w4a16_matmul_kernel(
    x_ptr,
    p_ptr,
    s_ptr,
    z_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_pn,
    stride_pj,
    stride_sn,
    stride_sg,
    stride_ym,
    stride_yn,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    # scales and zeros share one layout [N, K/G]: stride_sn, stride_sg serve both.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_K // 2)  # byte columns of one K block
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        j = k0 // 2 + offs_j
        p = tl.load(
            p_ptr + offs_n[None, :] * stride_pn + j[:, None] * stride_pj, mask=offs_n[None, :] < N, other=0
        )
        grp = k0 // GROUP
        s = tl.load(s_ptr + offs_n * stride_sn + grp * stride_sg, mask=offs_n < N, other=0.0)
        z = tl.load(z_ptr + offs_n * stride_sn + grp * stride_sg, mask=offs_n < N, other=0).to(tl.int32)
        x_rows = x_ptr + offs_m[:, None] * stride_xm
        x_even = tl.load(x_rows + (2 * j)[None, :] * stride_xk, mask=offs_m[:, None] < M, other=0.0)
        x_odd = tl.load(x_rows + (2 * j + 1)[None, :] * stride_xk, mask=offs_m[:, None] < M, other=0.0)
        w_low = ((p >> 4).to(tl.int32) - z[None, :]).to(
            x_even.dtype
        )  # wrong: swapped  # exact: an integer in -15..15
        w_high = ((p & 0xF).to(tl.int32) - z[None, :]).to(x_even.dtype)
        part = tl.dot(x_even, w_low)
        part = tl.dot(x_odd, w_high, part)
        acc += part * s[None, :]
    tl.store(
        y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
        acc.to(y_ptr.dtype.element_ty),
        mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
    )


def w4a16_matmul(x, packed, scales, zeros, group_size, out=None):
    M, N, K, out = w4a16.prepare(x, packed, scales, zeros, group_size, out)
    cfg = w4a16.prefill_config(M, N, K, group_size, x.device.type)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]), triton.cdiv(N, cfg["BLOCK_N"]))
    w4a16_matmul_kernel[grid](
        x,
        packed,
        scales,
        zeros,
        out,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        packed.stride(0),
        packed.stride(1),
        scales.stride(0),
        scales.stride(1),
        out.stride(0),
        out.stride(1),
        GROUP=group_size,
        **cfg,
    )
    return out


# %% ex3_decode
@triton.jit
def w4a16_decode_kernel(
    x_ptr,
    p_ptr,
    s_ptr,
    z_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_pn,
    stride_pj,
    stride_sn,
    stride_sg,
    stride_ym,
    stride_yn,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_n = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, BLOCK_K // 2)
    x_rows = x_ptr + offs_m[:, None] * stride_xm
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        j = k0 // 2 + offs_j
        p = tl.load(
            p_ptr + offs_n[None, :] * stride_pn + j[:, None] * stride_pj, mask=offs_n[None, :] < N, other=0
        )
        grp = k0 // GROUP
        s = tl.load(s_ptr + offs_n * stride_sn + grp * stride_sg, mask=offs_n < N, other=0.0)
        z = tl.load(z_ptr + offs_n * stride_sn + grp * stride_sg, mask=offs_n < N, other=0).to(tl.int32)
        x_even = tl.load(x_rows + (2 * j)[None, :] * stride_xk, mask=offs_m[:, None] < M, other=0.0)
        x_odd = tl.load(x_rows + (2 * j + 1)[None, :] * stride_xk, mask=offs_m[:, None] < M, other=0.0)
        w_low = ((p >> 4).to(tl.int32) - z[None, :]).to(x_even.dtype)  # wrong: swapped
        w_high = ((p & 0xF).to(tl.int32) - z[None, :]).to(x_even.dtype)
        part = tl.dot(x_even, w_low)
        part = tl.dot(x_odd, w_high, part)
        acc += part * s[None, :]
    tl.store(
        y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
        acc.to(y_ptr.dtype.element_ty),
        mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
    )


def w4a16_decode(x, packed, scales, zeros, group_size, out=None):
    M, N, K, out = w4a16.prepare(x, packed, scales, zeros, group_size, out)
    if M > 16:
        raise ValueError(f"w4a16_decode takes at most 16 rows, got M = {M}: use w4a16_matmul")
    cfg = w4a16.decode_config(M, N, K, group_size, x.device.type)
    grid = (triton.cdiv(N, cfg["BLOCK_N"]),)
    w4a16_decode_kernel[grid](
        x,
        packed,
        scales,
        zeros,
        out,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        packed.stride(0),
        packed.stride(1),
        scales.stride(0),
        scales.stride(1),
        out.stride(0),
        out.stride(1),
        GROUP=group_size,
        **cfg,
    )
    return out
