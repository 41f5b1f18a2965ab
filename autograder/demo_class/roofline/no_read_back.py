"""Counts the write of the dequantized weight but not the matmul reading it back.

expect test_linear_bytes: 3 /
expect test_floor: 2 /
expect test_naive: 0 / only half the round trip counted
expect[cpu] test_naive_measured: 0 / Performance not measured
expect[gpu] test_naive_measured: 0 / only half the round trip counted
"""


# %% ex3_naive
def naive_bytes(fmt: str, M: int, N: int, K: int, group_size: int = 128) -> int:
    fused = linear_bytes(fmt, M, N, K, group_size)
    if fmt == "bf16":
        return fused
    round_trip = 2 * N * K  # the dequantized weight, written
    if fmt == "fp8":
        round_trip += 2 * M * K
    return fused + round_trip


def naive_slowdown(
    fmt: str, M: int, N: int, K: int, bandwidth: float, flops_rate: float, group_size: int = 128
) -> float:
    nflops = linear_flops(M, N, K)
    t_naive, _ = floor_time(naive_bytes(fmt, M, N, K, group_size), nflops, bandwidth, flops_rate)
    t_fused, _ = floor_time(linear_bytes(fmt, M, N, K, group_size), nflops, bandwidth, flops_rate)
    return t_naive / t_fused
