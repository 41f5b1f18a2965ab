"""Adversarial: QuantLinear is an nn.Linear subclass that keeps the float weight and multiplies with F.linear; the
quantize_model that swaps it in finds no plain nn.Linear left, and its model's embeddings are those of the
unquantized model (within 0.999 of the W8A16 reference's). It must earn nothing for either exercise.

expect test_spearman: 2 /
expect test_quant_linear: 0 / keeps a floating-point copy of the weight (parameter weight
expect test_quantize_model: 0 / is still an nn.Linear
expect[cpu] test_stack_speed: 0 / Performance not measured
"""


# %% ex2_quant_linear
class QuantLinear(torch.nn.Linear):
    def __init__(self, linear, fmt):
        super().__init__(linear.in_features, linear.out_features, bias=linear.bias is not None)
        self.fmt = fmt
        with torch.no_grad():
            self.weight.copy_(linear.weight)
            if linear.bias is not None:
                self.bias.copy_(linear.bias)
