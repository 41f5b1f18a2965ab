"""Rebuilding a module from its registered tensors, and the census of the weight-sized tensors it keeps.

Every forward that is graded runs on a module rebuilt from its registered tensors (qmatmul/capstone/drivers.py says
how): the state of the module built on the real weights (state_of), loaded in place into the learner's class built
again on a decoy (load_state), and the words the checks name that rebuild with.
"""

from __future__ import annotations

import torch
from torch import nn

from qmatmul import checks

REBUILT_ON = "built again on an nn.Linear of the same shape with other weights"
OTHER_THAN_BUFFERS = ("Keep the quantized weight (and the bias) in register_buffer and compute only from the buffers: "
                      "the nn.Linear it was built from, or a copy of its weight kept anywhere else (a closure, a "
                      "global, a plain attribute), is not part of the layer that state_dict() saves and "
                      "model.to(device) moves")  # fmt: skip


def not_rebuilt(
    name: str, why: str, subject: str, each: str = "every layer of a shape, whatever its weights"
):
    """The failure of a check whose learner's class does not take the state of the module built on the real weights
    (`why`: load_state's reason): what is graded (`subject`), and what to register."""
    return checks.CheckFailed(f"your {name}'s buffers do not rebuild it: {why}. {subject}: register the same buffers "
                              f"(names, dtypes, shapes) for {each}")  # fmt: skip


BUILT: list = []  # the modules built on the real weights, alive until a rebuild in the same process is done


def how_rebuilt(fn, fresh: bool, on: str = REBUILT_ON) -> str:
    """How the module graded was made, in the words the checks' messages use."""
    where = ", in a process of its own" if fresh and checks.is_remote(fn) else ""
    return f"{on} and given the first one's buffers and parameters (as load_state_dict does){where}"


def fresh_process(fn, fresh: bool) -> None:
    """Under the trusted grader, for a rebuild in a fresh worker: stop this one. The next call starts a new one,
    which runs the notebook's cells again and holds nothing that the learner's code kept from the calls before.

    One fresh worker per graded cell (a start costs about 1.6 s on a 2-core CPU: 0.9 s to start and run the cells,
    0.7 s more for the first call): the hidden check of a cell rebuilds in a fresh worker, the visible one in the
    worker that built the module (the first modules kept alive meanwhile: no id is reused). That one defeats a
    closure, an attribute or a global keyed by the module; only a fresh process defeats a copy found again from
    the buffers themselves, and a cell passes only if its hidden check does, on every format. In the learner's
    own notebook every rebuild is in-process."""
    if fresh and checks.is_remote(fn):
        fn.worker.stop()


def state_of(module: nn.Module) -> dict:
    """name -> tensor of every parameter and buffer of a module (non-persistent buffers too): what rebuilds it."""
    state = {n: p.detach() for n, p in module.named_parameters()}
    state.update({n: b.detach() for n, b in module.named_buffers()})
    return state


def _describe_tensor(t: torch.Tensor) -> str:
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)}"


def load_state(module: nn.Module, state: dict) -> str | None:
    """Copy `state` (from state_of of the module built on the real weights) into the module rebuilt on a decoy, in
    place, as load_state_dict(strict=True) would. None, or why it does not fit, in words."""
    mine = state_of(module)
    missing, extra = sorted(set(state) - set(mine)), sorted(set(mine) - set(state))
    if missing or extra:
        said = [f"lacks {', '.join(missing[:4])}"] if missing else []
        said += [f"has {', '.join(extra[:4])}, which the first did not"] if extra else []
        return "built again, it " + " and ".join(said)
    for name, t in state.items():
        own = mine[name]
        if own.dtype != t.dtype or tuple(own.shape) != tuple(t.shape):
            return f"{name} is {_describe_tensor(t)} in the first and {_describe_tensor(own)} built again"
    try:
        with torch.no_grad():
            for name, t in state.items():
                mine[name].copy_(t.to(mine[name].device))
    except Exception as exc:  # noqa: BLE001 - a buffer that cannot be written in place (an expanded view, say)
        return f"its tensors could not be loaded in place ({type(exc).__name__}: {str(exc)[:200]})"
    return None


def state_arg(tensors: dict, prefix: str) -> dict:
    """The tensors a build driver returned under `prefix`, as the state to hand the rebuild (copies: the call's
    arguments are written back after it, and these stay the trusted side's)."""
    return {k[len(prefix) :]: v.clone() for k, v in tensors.items() if k.startswith(prefix)}


def differs(a, b, rtol: float) -> bool:
    """Do two outputs of the same computation differ (beyond rtol; NaN and inf equal to themselves)?"""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or tuple(a.shape) != tuple(b.shape):
        return True
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    return bool((checks.mismatch(a, b, rtol) & ~same).any())


def _float_tensors(module: nn.Module):
    """(where, tensor) of the floating-point tensors a module holds: parameters, buffers, attributes (in lists,
    tuples and dicts too, a few levels deep)."""
    seen = [(f"parameter {n}", p) for n, p in module.named_parameters()]
    seen += [(f"buffer {n}", b) for n, b in module.named_buffers()]

    def walk(where, v, depth):
        if isinstance(v, torch.Tensor):
            seen.append((where, v))
        elif depth < 3 and isinstance(v, (list, tuple)):
            for i, t in enumerate(v):
                walk(f"{where}[{i}]", t, depth + 1)
        elif depth < 3 and isinstance(v, dict):
            for k, t in v.items():
                walk(f"{where}[{k!r}]", t, depth + 1)
        elif depth < 3 and hasattr(v, "__dict__") and not isinstance(v, (nn.Module, type)):
            for k, t in vars(v).items():
                walk(f"{where}.{k}", t, depth + 1)

    internal = set(vars(nn.Module()))  # _parameters, _buffers, _modules, hooks: named_* above read those
    for n, v in vars(module).items():
        if n not in internal:
            walk(f"attribute self.{n}", v, 0)
    return [(w, t) for w, t in seen if t.is_floating_point()]


def weight_sized(shapes) -> dict:
    """id -> tensor of every 16- or 32-bit tensor alive in this process whose last two dimensions are one of the
    (N, K) `shapes`, either way round."""
    import gc

    want = {tuple(sorted(s)) for s in shapes}
    gc.collect()
    found = {}
    for o in gc.get_objects():
        kind = type(o)  # not isinstance: that asks some objects for their __class__
        if (kind is torch.Tensor or kind is nn.Parameter) and o.is_floating_point() and o.element_size() >= 2:
            if tuple(sorted(o.shape[-2:])) in want:
                found[id(o)] = o
    return found


def weight_copies(module: nn.Module, N: int, K: int) -> list:
    """[where, dtype, shape] of each 16- or 32-bit tensor of a weight's size that the module holds."""
    return [[w, str(t.dtype).removeprefix("torch."), list(t.shape)] for w, t in _float_tensors(module)
            if t.element_size() >= 2 and t.numel() >= N * K]  # fmt: skip


def born_since(alive_before: dict, shapes, exclude=()) -> list:
    """[dtype, shape] of each weight-sized tensor made since the census `alive_before` and still alive anywhere (a
    copy kept in a closure or a global); `exclude`: the grader's own."""
    mine = {id(t) for t in exclude}
    return [[str(t.dtype).removeprefix("torch."), list(t.shape)] for i, t in weight_sized(shapes).items()
            if i not in alive_before and i not in mine]  # fmt: skip


def course_class(module_name: str) -> bool:
    """A class of the course's or of a library's (not one the learner's notebook defined)."""
    return module_name.split(".")[0] in ("qmatmul", "torch")
