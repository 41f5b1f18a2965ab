"""A decode wrapper that crashes the process (a segfault standing in for an illegal memory access).

The grader runs kernel checks in a process of their own: the other exercises keep their points, and the
class goes on to the next student.
expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 0 / crashed the process that ran it (SIGSEGV)
expect[gpu] test_decode_bandwidth: 0 / crashed the process
e2e: true
"""


# %% ex3_decode
def w8a16_decode(x, q, s, out=None):
    import ctypes

    ctypes.string_at(0)  # reads address 0: the process dies with SIGSEGV
    return out
