"""The naive path as PyTorch users write it (the module's fp8.naive): dequantize x and the weight into 16-bit
tensors in memory, then a PyTorch matmul. Right numbers; the checks name the PyTorch matmul, and on a GPU the
bandwidth cell measures how far it is from fused.

expect test_quantizer: 2 /
expect test_decoder: 1 /
expect test_matmul: 0 / the naive dequantize-then-matmul path
expect test_decode: 0 / the naive dequantize-then-matmul path
expect test_decode_bandwidth: 0 /
expect[gpu] test_prefill_speed: 0 /
expect test_block_matmul: 1 /
"""


# %% ex3_matmul
def fp8_matmul(xq, sx, wq, sw, out=None):
    M, N, K, sx, sw, out = fp8.prepare(xq, sx, wq, sw, out)
    return out.copy_(fp8.naive(xq, sx, wq, sw, out.dtype))


# %% ex4_decode
def fp8_decode(xq, sx, wq, sw, out=None):
    return fp8_matmul(xq, sx, wq, sw, out=out)
