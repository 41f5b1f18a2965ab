"""Keeps the quantized tensors in a plain list attribute: model.to(device) and state_dict() never see them.

expect test_spearman: 2 /
expect test_quant_linear: 0 / not among the module's buffers
expect test_quantize_model: 0 / quantized weight among its buffers
expect[cpu] test_stack_speed: 0 / Performance not measured
"""


# %% ex2_quant_linear
class QuantLinear(torch.nn.Module):
    def __init__(self, linear, fmt):
        super().__init__()
        self.fmt = fmt
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.stored = list(capstone.kernels(fmt).quantize(linear.weight.detach()))
        self.bias = None if linear.bias is None else linear.bias.detach().clone()

    def forward(self, x):
        x2 = x.reshape(-1, self.in_features).to(capstone.act_dtype(x.device))
        ks = capstone.kernels(self.fmt)
        kernel = ks.decode if x2.shape[0] <= capstone.DECODE_MAX_M else ks.prefill
        y = kernel(x2, *self.stored)
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
