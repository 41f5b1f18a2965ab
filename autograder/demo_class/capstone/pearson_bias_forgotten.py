"""Two mistakes in two cells. spearman correlates the values instead of their ranks (Pearson's r, not Spearman's
rho); QuantLinear forgets the bias: y = x W^T, where nn.Linear computes x W^T + b. The model's Linears have
biases, so the quantized model's embeddings move away from the reference too.

expect test_spearman: 0 / Pearson instead of Spearman
expect test_quant_linear: 0 / bias forgotten
expect test_quantize_model: 0 / cosine similarity
expect[cpu] test_stack_speed: 0 / Performance not measured
"""


# %% ex1_spearman
def spearman(a, b):
    a, b = torch.as_tensor(a).double(), torch.as_tensor(b).double()
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


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
            y = y  # the bias: never added
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
