"""A decode kernel that loads far outside its tensors: the process running it dies (a segfault in Triton's
interpreter, an illegal memory access on a GPU).

The grader runs the student's code in a process of its own: the other exercises keep their points, and the
class goes on to the next student.
expect test_quantizer: 2 /
expect test_prefill: 3 /
expect[cpu] test_decode: 0 / crashed the process that ran it (SIGSEGV)
expect[gpu] test_decode: 0 / faulted on the GPU
expect[gpu] test_decode_bandwidth: 0 /
e2e: true
"""


# %% ex3_decode
@triton.jit
def w8a16_decode_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    y_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_qn,
    stride_qk,
    stride_ym,
    stride_yn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    v = tl.load(q_ptr + 1_000_000_000_000)  # no mask, no bound: far past the end of q
    tl.store(y_ptr, v.to(y_ptr.dtype.element_ty))


def w8a16_decode(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    w8a16_decode_kernel[(1,)](
        x,
        q,
        s,
        out,
        M,
        N,
        K,
        x.stride(0),
        x.stride(1),
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK_M=16,
        BLOCK_N=64,
        BLOCK_K=128,
    )
    return out
