"""Prefill through the helpers the chapter gives its decode-first path (`as_16bit`, then `decoded_gemm`) at every M:
the course's kernels do the whole product. Tried after the launch rule learned to accept a course kernel launched by
what the chapter gives (matched by where its code lives): the cell still earns nothing, since the wrapper launches no
kernel of its own.

expect test_quantizer: 2 /
expect test_prefill: 0 / launches no @triton.jit kernel defined in the notebook
expect test_decode: 2 /
expect test_decode_bandwidth: 0 /
"""

# %% ex2_prefill
def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    return w8a16.decoded_gemm(x, w8a16.as_16bit(q, x.dtype), out, sw=s)
