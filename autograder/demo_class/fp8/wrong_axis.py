"""Row scales on the wrong axes in the decode kernel (sx along the columns, sw along the rows), and a decoder
that forgets the exponent bias (bias 7 read as fp16's 15).

expect test_quantizer: 2 /
expect test_decoder: 0 / exponent bias not corrected
expect test_matmul: 0 / exponent bias not corrected
expect test_decode: 0 / row scale on the wrong axis
expect test_decode_bandwidth: 0 /
expect test_block_matmul: 0 / exponent bias not corrected
"""


# %% ex2_decoder
@triton.jit
def e4m3_to_fp16(b):
    h = b.to(tl.uint16)
    bits = ((h & 0x80) << 8) | ((h & 0x7F) << 7)
    v = bits.to(tl.float16, bitcast=True)  # wrong: 2^8 too small (bias 15 instead of 7)
    return tl.where((h & 0x7F) == 0x7F, float("nan"), v).to(tl.float16)


@triton.jit
def decode_e4m3_kernel(b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    b = tl.load(b_ptr + offs, mask=offs < n, other=0)
    tl.store(y_ptr + offs, e4m3_to_fp16(b), mask=offs < n)


def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    y = torch.empty(codes.shape, dtype=torch.float16, device=codes.device)
    decode_e4m3_kernel[(triton.cdiv(codes.numel(), 256),)](codes, y, codes.numel(), BLOCK=256)
    return y


# %% ex4_decode
@triton.jit
def fp8_decode_kernel(
    x_ptr,
    sx_ptr,
    w_ptr,
    sw_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    stride_yn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FP8_DOT: tl.constexpr,
):
    pid_n = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
            mask=(offs_m[:, None] < M) & (k[None, :] < K),
            other=0,
        )
        w = tl.load(
            w_ptr + offs_n[None, :] * stride_wn + k[:, None] * stride_wk,
            mask=(offs_n[None, :] < N) & (k[:, None] < K),
            other=0,
        )
        # the native path everywhere, so only the scales are wrong here
        acc = tl.dot(x.to(tl.float8e4nv, bitcast=True), w.to(tl.float8e4nv, bitcast=True), acc)
    sx = tl.load(sx_ptr + offs_n, mask=offs_n < N, other=0.0)  # wrong: sx is per row m
    sw = tl.load(sw_ptr + offs_m, mask=offs_m < M, other=0.0)  # wrong: sw is per column n
    tl.store(
        y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn,
        (acc * sw[:, None] * sx[None, :]).to(y_ptr.dtype.element_ty),
        mask=(offs_m[:, None] < M) & (offs_n[None, :] < N),
    )


def fp8_decode(xq, sx, wq, sw, out=None):
    M, N, K, sx, sw, out = fp8.prepare(xq, sx, wq, sw, out)
    cfg = fp8.decode_config(M, N, K, xq.device.type)
    x8, w8 = xq.view(torch.uint8), wq.view(torch.uint8)
    fp8_decode_kernel[(triton.cdiv(N, cfg["BLOCK_N"]),)](
        x8,
        sx,
        w8,
        sw,
        out,
        M,
        N,
        K,
        x8.stride(0),
        x8.stride(1),
        w8.stride(0),
        w8.stride(1),
        out.stride(0),
        out.stride(1),
        **cfg,
    )
    return out
