"""A real @triton.jit kernel whose body calls a plain Python helper that computes the product in numpy and
writes the output through a numpy view: under Triton's interpreter a kernel's body runs as Python, and the static
reading does not follow what a kernel body calls (before: full marks on prefill and decode). Triton's compiler,
which the grader runs on every kernel a graded call launches, refuses the helper.

expect test_quantizer: 2 /
expect test_prefill: 0 / compiler accepts
expect test_decode: 0 / compiler accepts
expect test_decode_bandwidth: 0 /
"""

# %% ex2_prefill
import numpy as np

_CALL = {}


def _host_product():
    x, q, s, out = _CALL["x"], _CALL["q"], _CALL["s"], _CALL["out"]
    y = np.asarray(x.float()).dot((np.asarray(q).astype(np.float32) * np.asarray(s)[:, None]).T)
    np.asarray(out)[...] = y.astype(np.asarray(out).dtype)
    return 0


@triton.jit
def _product_kernel(y_ptr, BLOCK: tl.constexpr):
    _host_product()


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    _CALL.update(x=x, q=q, s=s, out=out)
    _product_kernel[(1,)](out, BLOCK=16)
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out)
