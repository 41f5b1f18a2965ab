"""A correct submission: every solution cell as in solutions/roofline.

expect test_linear_bytes: 3 /
expect test_floor: 2 /
expect test_naive: 2 /
expect[cpu] test_naive_measured: 0 / Performance not measured: no CUDA GPU
expect[gpu] test_naive_measured: 1 /
"""
