"""A correct submission: every solution cell as in solutions/w4a16.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 2 /
expect[cpu] test_decode_bandwidth: 0 / Performance not measured: no CUDA GPU
expect[gpu] test_decode_bandwidth: 3 /
expect test_unpack_magic: 1 /
expect test_from_gptq: 1 /
"""
