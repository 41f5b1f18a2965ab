"""The smoke kernel of the setup cell. Import only after `environment.start()` chose the interpreter."""

import triton
import triton.language as tl


@triton.jit
def dot_kernel(x_ptr, w_ptr, y_ptr, K, BLOCK: tl.constexpr):
    """y[16, 16] = x[16, K] @ w[K, 16], with K a runtime loop bound."""
    r = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        x = tl.load(x_ptr + r[:, None] * K + (k0 + r)[None, :])
        w = tl.load(w_ptr + (k0 + r)[:, None] * BLOCK + r[None, :])
        acc = tl.dot(x, w, acc)
    tl.store(y_ptr + r[:, None] * BLOCK + r[None, :], acc)
