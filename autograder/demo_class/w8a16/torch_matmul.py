"""Dequantizes the weights and calls torch.matmul: right numbers, none of the exercise.

expect test_quantizer: 2 /
expect test_prefill: 0 / the product with PyTorch
expect test_decode: 0 / the product with PyTorch
expect test_decode_bandwidth: 0 /
"""


# %% ex2_prefill
def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    out.copy_(torch.matmul(x, (q.to(x.dtype) * s[:, None].to(x.dtype)).T))
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    out.copy_(torch.matmul(x, (q.to(x.dtype) * s[:, None].to(x.dtype)).T))
    return out
