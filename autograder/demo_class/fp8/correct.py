"""A correct submission: every solution cell as in solutions/fp8.

expect test_quantizer: 2 /
expect test_decoder: 1 /
expect test_matmul: 2 /
expect[cpu] test_prefill_speed: 0 / Performance not measured: no CUDA GPU
expect[gpu] test_prefill_speed: 1 /
expect test_decode: 1 /
expect[cpu] test_decode_bandwidth: 0 / Performance not measured: no CUDA GPU
expect[gpu] test_decode_bandwidth: 2 /
expect test_block_matmul: 1 /
"""
