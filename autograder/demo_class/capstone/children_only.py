"""Looks only at the model's direct children: the Linears, several levels down, are never found.

expect test_spearman: 2 /
expect test_quant_linear: 3 /
expect test_quantize_model: 0 / replaced 0 of the model's 37 nn.Linear layers
expect[cpu] test_stack_speed: 0 / Performance not measured
"""


# %% ex3_quantize_model
def quantize_model(model, fmt):
    for name, child in model.named_children():
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, QuantLinear(child, fmt))
    return model
