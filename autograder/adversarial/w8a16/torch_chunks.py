"""No matmul op and no weight-sized copy: a multiply-sum over chunks of K with plain torch ops, beside a
Triton kernel that does nothing (before: full marks; then the op audit named the torch ops; now Triton's
compiler, run on every kernel a graded call launches, finds that the kernel stores nothing, which is checked
first).

expect test_quantizer: 2 /
expect test_prefill: 0 / stores nothing
expect test_decode: 0 / stores nothing
expect test_decode_bandwidth: 0 /
"""


# %% ex2_prefill
@triton.jit
def _noop_kernel(y_ptr):
    pass


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    _noop_kernel[(1,)](out)
    acc = torch.zeros(M, N)
    for k0 in range(0, K, 16):
        xs = x[:, k0 : k0 + 16].float()
        for n0 in range(0, N, 16):
            ws = q[n0 : n0 + 16, k0 : k0 + 16].float()
            acc[:, n0 : n0 + 16] += (xs[:, None, :] * ws[None, :, :]).sum(-1)
    out.copy_(acc * s[None, :])
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out)
