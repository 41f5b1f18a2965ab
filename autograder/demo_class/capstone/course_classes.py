"""Adversarial: hands in the course's own classes: QuantLinear is capstone.ReferenceQuantLinear, and quantize_model
calls capstone.reference_quantize_model. Every number is right, and none of it is the learner's.

expect test_spearman: 2 /
expect test_quant_linear: 0 / the course's own class
expect test_quantize_model: 0 / quantize_model put a qmatmul.capstone.ReferenceQuantLinear
expect[cpu] test_stack_speed: 0 / Performance not measured
"""

# %% ex2_quant_linear
QuantLinear = capstone.ReferenceQuantLinear


# %% ex3_quantize_model
def quantize_model(model, fmt):
    return capstone.reference_quantize_model(model, fmt)
