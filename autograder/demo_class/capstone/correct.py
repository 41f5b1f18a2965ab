"""A correct submission: every solution cell as in solutions/capstone.

expect test_spearman: 2 /
expect test_quant_linear: 3 /
expect test_quantize_model: 3 /
expect[cpu] test_stack_speed: 0 / Performance not measured: no CUDA GPU
expect[gpu] test_stack_speed: 2 /
"""
