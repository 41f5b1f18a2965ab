"""The decoder exercise answered by torch's own e4m3 conversion (codes.view(float8_e4m3fn).to(float16)) with the
values then copied through a Triton kernel, so that a kernel is launched and stores every output (before: full
marks, the decoder cell recorded no ops). The decoder's call is now audited like every kernel exercise, and an op
that reads float8 values and writes a wider float is torch decoding the format.

expect test_quantizer: 2 /
expect test_decoder: 0 / let PyTorch decode float8_e4m3fn values
expect test_matmul: 2 /
expect test_decode: 1 /
expect test_block_matmul: 1 /
"""


# %% ex2_decoder: replace
def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes -> float16 values, through your e4m3_to_fp16."""
    y = torch.empty(codes.shape, dtype=torch.float16, device=codes.device)
    decode_e4m3_kernel[(triton.cdiv(codes.numel(), 256),)](codes, y, codes.numel(), BLOCK=256)
    return y


# %% with
@triton.jit
def _copy_kernel(v_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(v_ptr + offs, mask=offs < n), mask=offs < n)


def decode_e4m3(codes: torch.Tensor) -> torch.Tensor:
    v = codes.view(torch.float8_e4m3fn).to(torch.float16)
    y = torch.empty(codes.shape, dtype=torch.float16, device=codes.device)
    _copy_kernel[(triton.cdiv(codes.numel(), 256),)](v, y, codes.numel(), BLOCK=256)
    return y
