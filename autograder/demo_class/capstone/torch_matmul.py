"""Stores the quantized weight as it should, then dequantizes it and multiplies with PyTorch: right numbers, none
of the exercise (no kernel of the format is ever called).

expect test_spearman: 2 /
expect test_quant_linear: 0 / computed the product with PyTorch
expect test_quantize_model: 0 / called the format's kernels 0 times
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
        stored = [self.get_buffer(n) for n in self.names]
        w = capstone.dequantized(self.fmt, stored).to(x.device)
        y = torch.nn.functional.linear(x.reshape(-1, self.in_features).float(), w)
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
