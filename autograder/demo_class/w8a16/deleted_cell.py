"""A learner who deleted the decode exercise's cell: its tests fail by name, everything else is graded.

expect test_quantizer: 2 /
expect test_prefill: 3 /
expect test_decode: 0 / NameError: name 'w8a16_decode' is not defined
expect[gpu] test_decode_bandwidth: 0 / NameError
e2e: true
"""
# %% ex3_decode
# (this cell was deleted)
