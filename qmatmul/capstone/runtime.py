"""Where the capstone runs: the activations' 16-bit type, the default device, and whether the autograder runs it."""

from __future__ import annotations

import torch

from qmatmul import environment


def act_dtype(device) -> torch.dtype:
    """The activations' 16-bit type: bf16 on sm_80+, fp16 on older GPUs and in the interpreter."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0):
        return torch.bfloat16
    return torch.float16


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


autograding = environment.autograding  # the notebook's long ungraded cells skip under the autograder
