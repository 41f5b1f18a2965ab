"""Three mistakes in three cells. spearman ranks by argsort alone, so tied values get different ranks; QuantLinear
adds the bias twice; quantize_model looks only at the model's direct children, and the Linears, several levels down,
are never found.

expect test_spearman: 0 / ties not averaged
expect test_quant_linear: 0 / bias added twice
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


# %% ex2_quant_linear
class QuantLinear(torch.nn.Module):
    def __init__(self, linear, fmt):
        super().__init__()
        self.fmt = fmt
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        stored = capstone.kernels(fmt).quantize(linear.weight.detach())
        self.names = [f"w{i}" for i in range(len(stored))]
        for name, t in zip(self.names, stored, strict=True):
            self.register_buffer(name, t.contiguous())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x):
        x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
        ks = capstone.kernels(self.fmt)
        kernel = ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill
        y = kernel(x2, *[self.get_buffer(n) for n in self.names])
        if self.bias is not None:
            y = y + 2 * self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


# %% ex3_quantize_model
def quantize_model(model, fmt):
    for name, child in model.named_children():
        if isinstance(child, torch.nn.Linear):
            model.register_module(name, QuantLinear(child, fmt))
    return model
