"""The naive path as PyTorch users write it (the module's nvfp4.naive): decode the whole weight into a 16-bit
tensor in memory, then a PyTorch matmul. Right numbers; the checks name the PyTorch matmul, and on a GPU the
bandwidth cell measures how far it is from fused.

expect test_quantizer: 3 /
expect test_prefill: 0 / the naive dequantize-then-matmul path
expect test_decode: 0 / the naive dequantize-then-matmul path
expect test_decode_bandwidth: 0 /
"""


# %% ex2_prefill
def nvfp4_matmul(x, packed, scales, g, out=None):
    M, N, K, out = nvfp4.prepare(x, packed, scales, g, out)
    return out.copy_(nvfp4.naive(x, packed, scales, g))


# %% ex3_decode
def nvfp4_decode(x, packed, scales, g, out=None):
    return nvfp4_matmul(x, packed, scales, g, out=out)
