"""Correlates the values instead of their ranks: Pearson's r, not Spearman's rho.

expect test_spearman: 0 / Pearson instead of Spearman
expect test_quant_linear: 3 /
expect test_quantize_model: 3 /
expect[cpu] test_stack_speed: 0 / Performance not measured
"""


# %% ex1_spearman
def spearman(a, b):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))
