"""Launches a Triton kernel that does nothing and computes the product with the course's reference in
another thread, where the op audit's dispatch mode does not reach (before: full marks as a "Triton kernel").

expect test_quantizer: 2 /
expect test_prefill: 0 / imports threading
expect test_decode: 0 / imports threading
expect test_decode_bandwidth: 0 /
"""

# %% ex2_prefill
import threading


@triton.jit
def _noop_kernel(y_ptr):
    pass


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    _noop_kernel[(1,)](out)
    t = threading.Thread(target=lambda: out.copy_(w8a16.reference(x, q, s)))
    t.start()
    t.join()
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out)
