"""Counts the packed weights, activations and output, but not the scales (W4A16 keeps its zero points).

naive_bytes reuses linear_bytes, so exercise 3 inherits the mistake, and the report says where it came from.
expect test_linear_bytes: 0 / forgot the scales
expect test_floor: 2 /
expect test_naive: 0 / carried over from exercise 1 (forgot the scales)
expect[cpu] test_naive_measured: 0 / Performance not measured
expect[gpu] test_naive_measured: 0 / carried over from exercise 1 (forgot the scales)
e2e: true
"""


# %% ex1_linear_bytes
def linear_bytes(fmt: str, M: int, N: int, K: int, group_size: int = 128) -> int:
    acts, out = 2 * M * K, 2 * M * N
    if fmt == "bf16":
        return 2 * N * K + acts + out
    if fmt == "w8a16":
        return N * K + acts + out
    if fmt == "w4a16":
        return N * K // 2 + N * (K // group_size) + acts + out
    if fmt == "fp8":
        return N * K + M * K + out
    if fmt in ("mxfp4", "nvfp4"):
        return N * K // 2 + acts + out
    raise ValueError(f"unknown format {fmt!r}")
