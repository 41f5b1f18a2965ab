"""Adds the bias twice (once as if the kernel had not, once more).

The model's Linears have biases, so the quantized model's embeddings move away from the reference too.
expect test_spearman: 2 /
expect test_quant_linear: 0 / bias added twice
expect test_quantize_model: 0 / cosine similarity
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
        self.n_stored = len(stored)
        for i, t in enumerate(stored):
            self.register_buffer(f"w{i}", t.contiguous())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x):
        x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
        ks = capstone.kernels(self.fmt)
        kernel = ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill
        y = kernel(x2, *[getattr(self, f"w{i}") for i in range(self.n_stored)])
        if self.bias is not None:
            y = y + 2 * self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
