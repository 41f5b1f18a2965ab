"""A call's results on the trusted side: the worker's copies of the arguments written back into the caller's tensors
(storage and all), a result that is one of them mapped to the caller's own tensor, anything that is not plain data a
RemoteObject, and the ops' dtypes read back from their names.
"""

from __future__ import annotations

import torch

__all__ = ["RemoteObject", "torch_dtype", "write_back", "map_result"]


class RemoteObject:
    """A value the worker returned that is not plain data (its type name is all that came back)."""

    def __repr__(self):
        return f"<{type(self).__name__} returned by your code>"


def _unsupported(type_name: str) -> RemoteObject:
    name = type_name if type_name.isidentifier() else "object"
    return type(name, (RemoteObject,), {})()


def torch_dtype(name: str):
    """The torch dtype a name the worker sent stands for (uint8 where torch has no dtype of that name)."""
    d = getattr(torch, str(name), None)
    return d if isinstance(d, torch.dtype) else torch.uint8


def write_back(originals, copies) -> None:
    """Write the worker's view of each tensor argument back into the caller's tensor, whole storage included."""
    for orig, copy in zip(originals, copies, strict=False):
        if isinstance(orig, torch.Tensor) and isinstance(copy, torch.Tensor):
            src, dst = copy.untyped_storage(), orig.untyped_storage()
            if src.nbytes() == dst.nbytes():
                dst.copy_(src.to(dst.device) if src.device != dst.device else src)


def map_result(value, originals, copies):
    """The worker's result as the caller sees it: a tensor that shares an argument's storage becomes a view of the
    caller's own tensor (a result that is `out` is the caller's `out`), a value that is not plain data a RemoteObject."""
    if isinstance(value, torch.Tensor):
        ptr = value.untyped_storage().data_ptr()
        for orig, copy in zip(originals, copies, strict=False):
            if (
                isinstance(orig, torch.Tensor)
                and isinstance(copy, torch.Tensor)
                and copy.untyped_storage().data_ptr() == ptr
            ):
                view = torch.empty(0, dtype=value.dtype, device=orig.device)
                return view.set_(orig.untyped_storage(), value.storage_offset(), value.size(), value.stride())
        return value
    if isinstance(value, dict) and set(value) == {"__unsupported__"}:
        return _unsupported(str(value["__unsupported__"]))
    if isinstance(value, (tuple, list)):
        return type(value)(map_result(v, originals, copies) for v in value)
    if isinstance(value, dict):
        return {k: map_result(v, originals, copies) for k, v in value.items()}
    return value
