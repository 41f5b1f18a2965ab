"""Two mistakes in two cells. spearman ranks by argsort alone, so tied values get different ranks; quantize_model
looks only at the model's direct children, and the Linears, several levels down, are never found.

expect test_spearman: 0 / ties not averaged
expect test_quant_linear: 3 /
expect test_quantize_model: 0 / replaced 0 of the model's 37 nn.Linear layers
expect[cpu] test_stack_speed: 0 / Performance not measured
"""


# %% ex1_spearman
def spearman(a, b):
    def ranks(v):
        v = torch.as_tensor(v).double()
        r = torch.empty_like(v)
        r[torch.argsort(v, stable=True)] = torch.arange(1, len(v) + 1, dtype=torch.float64)
        return r

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


# %% ex3_quantize_model
def quantize_model(model, fmt):
    for name, child in model.named_children():
        if isinstance(child, torch.nn.Linear):
            setattr(model, name, QuantLinear(child, fmt))
    return model
