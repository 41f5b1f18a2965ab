"""A decorator of its own named `jit` makes a plain Python function look like a Triton kernel to a reading of the
source (before: the function counted as kernel code, so nothing it called was read, and a numpy product scored
full marks). Launched like a kernel through an object with __getitem__, it never reaches Triton: the grader
observes the launches a call makes, and there are none.

expect test_quantizer: 2 /
expect test_prefill: 0 / Triton kernel
expect test_decode: 0 / Triton kernel
expect test_decode_bandwidth: 0 /
"""

# %% ex2_prefill
import numpy as np


class jit:  # noqa: N801 - it poses as triton.jit
    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return self.fn


@jit
def w8a16_kernel(x, q, s, out):
    y = np.asarray(x.float()).dot((np.asarray(q).astype(np.float32) * np.asarray(s)[:, None]).T)
    np.asarray(out)[...] = y.astype(np.asarray(out).dtype)


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    w8a16_kernel[(1,)](x, q, s, out)
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out)
