"""Switches torch's dispatch modes off around a torch matmul, so the op audit records nothing (before: full
marks).

expect test_quantizer: 2 /
expect test_prefill: 0 / does not compute in a Triton kernel of your own
expect test_decode: 0 / does not compute in a Triton kernel of your own
expect test_decode_bandwidth: 0 /
"""


# %% ex2_prefill
@triton.jit
def _noop_kernel(y_ptr):
    pass


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    _noop_kernel[(1,)](out)
    with torch._C._DisableTorchDispatch():
        out.copy_((x.float() @ (q.float() * s[:, None]).T).to(out.dtype))
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out)
