"""Adversarial: quantizes, registers the buffers and multiplies with the kernels, as it should, and also keeps a
16-bit copy of every weight where no attribute shows it (in a closure). Its outputs are right; its model is no
smaller than before. It must earn nothing for either exercise.

expect test_spearman: 2 /
expect test_quant_linear: 0 / keeps a floating-point copy of the weight (a tensor kept outside the module
expect test_quantize_model: 0 / floating-point copies of the Linear weights
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
        backup = linear.weight.detach().half()
        self.original = lambda: backup

    def forward(self, x):
        x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
        ks = capstone.kernels(self.fmt)
        kernel = ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill
        y = kernel(x2, *[self.get_buffer(n) for n in self.names])
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
