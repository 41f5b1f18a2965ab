"""Adversarial: a FusedQuantLinear that looks fused (it registers the concatenation's quantized tensors as buffers
and makes its one kernel call over all N) but keeps the Linears' 16-bit weights, concatenated, in a closure where no
attribute shows them, and returns torch.nn.functional.linear of those: the numbers of the unquantized layers, the
kernel's output thrown away, and layers no smaller than before. The census of weight-sized tensors left alive after
construction finds the copy; it earns nothing.

expect test_quant_linear: 3 /
expect test_fused_quant_linear: 0 / keeps a floating-point copy of the weights (a tensor kept outside the module
"""


# %% ex4_fused_quant_linear
class FusedQuantLinear(torch.nn.Module):
    def __init__(self, linears: list, fmt: str):
        super().__init__()
        self.fmt = fmt
        self.in_features = linears[0].in_features
        self.splits = [lin.out_features for lin in linears]
        self.out_features = sum(self.splits)
        weight = torch.cat([lin.weight.detach() for lin in linears])
        stored = capstone.kernels(fmt).quantize(weight)
        self.names = [f"w{i}" for i in range(len(stored))]
        for name, t in zip(self.names, stored, strict=True):
            self.register_buffer(name, t.contiguous())
        biases = [lin.bias for lin in linears]
        bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        self.register_buffer("bias", bias)
        weight16 = weight.half()  # the layers' own weights, 16-bit, where no attribute shows them
        self.dense = lambda: weight16

    def forward(self, x: torch.Tensor) -> tuple:
        ks = capstone.kernels(self.fmt)
        x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
        kernel = ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill
        kernel(x2, *[self.get_buffer(n) for n in self.names])  # launched, its output unused
        y = torch.nn.functional.linear(x2, self.dense().to(x2.dtype)).float()
        if self.bias is not None:
            y = y + self.bias
        y = y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        return torch.split(y, self.splits, dim=-1)
