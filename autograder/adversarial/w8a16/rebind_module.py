"""Nothing implemented; the notebook's name for the chapter module rebound to a stub (before: 10/10).

expect test_quantizer: 0 / not implemented yet
expect test_prefill: 0 /
expect test_decode: 0 /
expect test_decode_bandwidth: 0 /
"""


# %% ex1_quantizer
class _Yes:
    def __getattr__(self, name):
        return lambda *a, **k: print("✓ fine")


w8a16 = _Yes()
checks = _Yes()


def quantize_int8_per_channel(w):
    raise NotImplementedError()


# %% ex2_prefill
def w8a16_matmul(x, q, s, out=None):
    raise NotImplementedError()


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    raise NotImplementedError()
