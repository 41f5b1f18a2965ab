"""The product computed in numpy, reached by names in strings (pkgutil.resolve_name) that the source rules cannot
follow, then copied into the output by a real Triton kernel that loads and stores (so the compiler accepts it): before, full marks.
The op audit sees only a copy. But the values had to leave torch for numpy, and every route out of a tensor
(`np.asarray`, `.numpy()`, `.tolist()`, DLPack) is watched during a kernel exercise's call.

expect test_quantizer: 2 /
expect test_prefill: 0 / into numpy or Python
expect test_decode: 0 / into numpy or Python
expect test_decode_bandwidth: 0 /
"""

# %% ex2_prefill
import pkgutil

_asarray = pkgutil.resolve_name("numpy:asarray")
_product = pkgutil.resolve_name("numpy:matmul")
_back = pkgutil.resolve_name("torch:from_numpy")


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, M, N, stride_m, stride_n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m, n = offs // N, offs % N
    mask = offs < M * N
    tl.store(dst_ptr + m * stride_m + n * stride_n, tl.load(src_ptr + offs, mask=mask), mask=mask)


def w8a16_matmul(x, q, s, out=None):
    M, N, K, out = w8a16.prepare(x, q, s, out)
    w = _asarray(q).astype("float32") * _asarray(s)[:, None]
    y = _back(_product(_asarray(x.float()), w.T).astype("float32")).to(out.dtype).contiguous()
    _copy_kernel[(triton.cdiv(M * N, 1024),)](y, out, M, N, out.stride(0), out.stride(1), BLOCK=1024)
    return out


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    return w8a16_matmul(x, q, s, out)
