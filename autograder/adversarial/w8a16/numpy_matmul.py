"""Computes the product with numpy (invisible to torch's op audit) beside a Triton kernel that does nothing
(before: full marks).

expect test_quantizer: 2 /
expect test_prefill: 0 / computes with numpy
expect test_decode: 0 / computes with numpy
expect test_decode_bandwidth: 0 /
"""

# %% ex2_prefill
import numpy as np


@triton.jit
def _noop_kernel(y_ptr):
    pass


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    _noop_kernel[(1,)](out)
    w = np.asarray(q.cpu()).astype(np.float32) * np.asarray(s.cpu())[:, None]
    y = np.asarray(x.float().cpu()).dot(w.T)
    out.copy_(torch.from_numpy(y))
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out)
