"""Always calls the prefill kernel, even for the 1 to 16 rows the decode kernel is made for.

The numbers are right (the prefill kernel handles any M), so the model-level exercise keeps its points; the
module check names the missing dispatch.
expect test_spearman: 2 /
expect test_quant_linear: 0 / ran the prefill kernel for M = 5 rows
expect test_quantize_model: 3 /
expect[cpu] test_stack_speed: 0 / Performance not measured
"""


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
        y = capstone.kernels(self.fmt).prefill(x2, *[self.get_buffer(n) for n in self.names])
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
