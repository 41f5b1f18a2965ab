"""Takes the smaller of the memory and math times as the floor: every decode layer looks compute-bound.

naive_slowdown reuses floor_time, so it is wrong too (the ratio of two math times is 1). On a GPU the measured
naive path never beats a floor that low, so the measured cell keeps its point: a floor far too low is no use,
but it is not beaten.
expect test_linear_bytes: 3 /
expect test_floor: 0 / min instead of max
expect test_naive: 0 / naive_slowdown
expect[gpu] test_naive_measured: 1 /
"""


# %% ex2_floor
def linear_flops(M: int, N: int, K: int) -> int:
    return 2 * M * N * K


def intensity(nbytes: float, nflops: float) -> float:
    return nflops / nbytes


def floor_time(nbytes: float, nflops: float, bandwidth: float, flops_rate: float) -> tuple[float, str]:
    t_memory = nbytes / bandwidth
    t_math = nflops / flops_rate
    return min(t_memory, t_math), ("memory" if t_memory >= t_math else "compute")
