"""The course's own Linear replacements: the reference QuantLinear (what the graded exercises are compared with), the
16-bit baseline, and the bytes a model's Linear weights take."""

from __future__ import annotations

import torch
from torch import nn

from qmatmul.capstone.model import linear_names
from qmatmul.capstone.registry import DECODE_MAX_M, kernels
from qmatmul.capstone.runtime import act_dtype


class ReferenceQuantLinear(nn.Module):
    """The course's QuantLinear: what the graded exercises are compared with."""

    def __init__(self, linear: nn.Linear, fmt: str):
        super().__init__()
        self.fmt, self.in_features, self.out_features = fmt, linear.in_features, linear.out_features
        stored = kernels(fmt).quantize(linear.weight.detach())
        self.n_stored = len(stored)
        for i, t in enumerate(stored):
            self.register_buffer(f"w{i}", t.contiguous())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x):
        x2 = x.reshape(-1, self.in_features).to(act_dtype(x.device))
        ks = kernels(self.fmt)
        fn = ks.decode if x2.shape[0] <= DECODE_MAX_M else ks.prefill
        y = fn(x2, *[getattr(self, f"w{i}") for i in range(self.n_stored)])
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def reference_quantize_model(model: nn.Module, fmt: str, cls=ReferenceQuantLinear) -> nn.Module:
    for name in linear_names(model):
        parent, _, child = name.rpartition(".")
        holder = model.get_submodule(parent) if parent else model
        setattr(holder, child, cls(model.get_submodule(name), fmt))
    return model


def weight_bytes(model: nn.Module) -> tuple[int, int]:
    """(bytes, weights) of the model's Linear weights: QuantLinear buffers (scales and zeros included, bias
    excluded), or nn.Linear weights at their dtype."""
    total = count = 0
    for m in model.modules():
        if type(m) is nn.Linear:
            total += m.weight.numel() * m.weight.element_size()
            count += m.weight.numel()
        elif hasattr(m, "in_features") and hasattr(m, "out_features") and not isinstance(m, nn.Linear):
            total += sum(
                b.numel() * b.element_size() for n, b in m.named_buffers(recurse=False) if n != "bias"
            )
            count += m.in_features * m.out_features
    return total, count


class Dense16Linear(nn.Module):
    """The 16-bit baseline: the weight in the activations' 16-bit type, PyTorch's matmul."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        dtype = act_dtype(linear.weight.device)
        self.register_buffer("weight16", linear.weight.detach().to(dtype))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x):
        y = torch.nn.functional.linear(x.to(self.weight16.dtype), self.weight16).float()
        return (y + self.bias if self.bias is not None else y).to(x.dtype)


def dense16(model: nn.Module) -> nn.Module:
    return reference_quantize_model(model, None, cls=lambda lin, _: Dense16Linear(lin))
