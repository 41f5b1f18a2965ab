"""Checks shared by every chapter: run a learner's function safely, compare with a reference, explain.

A failed check raises `CheckFailed` (an AssertionError, so nbgrader marks the cell down) whose first line
is a one-line verdict and whose following lines say what differs, where, by how much, and which known
mistake the output matches, if any.
"""

from __future__ import annotations

import contextlib
import math
import secrets
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from qmatmul.checks import traffic
from qmatmul.checks.mistakes import Mistake, known_mistakes, lazily, matches
from qmatmul.grader import static

__all__ = [
    # failures
    "CheckFailed", "NotMeasured", "LearnerError", "STRICT", "not_measured", "AUTOGRADE_ENV",
    # the worker's side of a check
    "WORKER_STATE", "WORKER_CONTEXTS", "worker_context", "forcing", "is_remote", "fresh_seed", "generator",
    # running the learner's code
    "call_learner", "learner_error_message", "is_unfilled", "where_raised", "compile_summary",
    # which torch operations it ran
    "MATMUL_OPS", "MEMORY_OPS", "OpRecord", "LOW_PRECISION", "WIDE_FLOATS", "OpRecorder", "run_audited",
    "require_own_kernel", "assert_fused",
    # comparing outputs
    "comparable_bits", "snapshot", "verify_kernel_result", "tolerance_for", "Mistake", "known_mistakes", "lazily",
    "index_ranges", "where_2d",
    "mismatch", "compare", "check_finite", "passed",
]  # fmt: skip


class CheckFailed(AssertionError):
    """A check found a wrong answer. str(exc) is the report shown to the learner."""


class NotMeasured(CheckFailed):
    """A performance check that cannot measure here (no CUDA GPU): it awards nothing, and says so."""


class LearnerError(Exception):
    """An exception the learner's code raised in the worker process, as the trusted side received it."""

    def __init__(self, type_name: str, message: str, *, unfilled: bool = False, where: str = "",
                 compile_summary: str = ""):  # fmt: skip
        super().__init__(message)
        self.type_name, self.unfilled, self.where, self.compile_summary = (
            type_name,
            unfilled,
            where,
            compile_summary,
        )


# Set by the trusted grader (and the course's own tools): a check that cannot measure raises NotMeasured, which
# scores 0. In a learner's notebook a performance cell only says so, so that Run All goes on to the end.
STRICT = False


def not_measured(message: str) -> None:
    """A performance check that cannot measure here: raise NotMeasured when grading, else say it and go on."""
    if STRICT:
        raise NotMeasured(message)
    print(f"not measured here: {message}")


# Set (to "1") in the environment of the notebook kernel that nbgrader runs before the trusted grading: a cell
# that awards nothing and takes long (the capstone's measurements) may skip itself there.
AUTOGRADE_ENV = "QMATMUL_AUTOGRADE"


# Module state the learner's scaffolding reads (e.g. which FP8 path the configs choose): "module:attribute" ->
# value. The trusted grader sends it with every call, so the worker's scaffolding sees what the check set.
WORKER_STATE: dict = {}


# Context managers the worker enters around each call ("module:name", instantiated there): a check that grades
# under a dispatch mode (FP8's non-saturating casts) sets it for the learner's process, where the casts run.
WORKER_CONTEXTS: list = []


@contextlib.contextmanager
def worker_context(spec: str):
    WORKER_CONTEXTS.append(spec)
    try:
        yield
    finally:
        WORKER_CONTEXTS.remove(spec)


@contextlib.contextmanager
def forcing(stack: list, key: str, value):
    """For the block, a scaffold's config functions choose `value` (FP8's path, W8A16's K split), pushed on its
    `stack` of forced choices here and, under `key` ("module:attribute" of that stack), in the worker."""
    stack.append(value)
    WORKER_STATE[key] = list(stack)
    try:
        yield
    finally:
        stack.pop()
        WORKER_STATE[key] = list(stack)


def is_remote(fn) -> bool:
    """True for the trusted grader's stand-in for a learner's function (it runs in the worker process)."""
    return bool(getattr(fn, "__qmatmul_remote__", False))


def fresh_seed() -> int:
    """A seed no learner can predict: hidden tests draw new inputs at every grading."""
    return secrets.randbits(31)


def generator(seed: int, device: str = "cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


# ----------------------------------------------------------------------------------------------------------
# Running the learner's code


def call_learner(fn: Callable, *args, what: str, **kwargs):
    """Call fn; turn an exception into a CheckFailed whose first line says what happened, in words.

    Under Triton's interpreter a kernel the call launches runs guarded (traffic.guard): a load or store outside
    every tensor of its launch is not performed, so an unmasked store cannot take the process (the learner's
    notebook) with it; a store held back so fails the check, by kernel argument and edge."""
    guarded = traffic.available() and not is_remote(fn) and not traffic.active()
    with traffic.guard() if guarded else contextlib.nullcontext() as seen:
        result = _call_learner(fn, *args, what=what, **kwargs)
    if guarded and seen.outside.stores:
        _raise_outside(what, traffic.Outside(0, seen.outside.stores, seen.where({"store"})))
    return result


def _call_learner(fn: Callable, *args, what: str, **kwargs):
    try:
        return fn(*args, **kwargs)
    except CheckFailed:
        raise
    except LearnerError as exc:
        raise CheckFailed(learner_error_message(exc, what)) from None
    except (ValueError, TypeError) as exc:
        if is_unfilled(exc):
            raise CheckFailed(_unfilled_message(what)) from exc
        raise CheckFailed(f"{what} raised {type(exc).__name__}: {exc}{where_raised(exc)}") from exc
    except Exception as exc:  # noqa: BLE001 - any failure of the learner's code is reported, not re-thrown
        if is_unfilled(exc):
            raise CheckFailed(_unfilled_message(what)) from exc
        name = type(exc).__name__
        text = str(exc).strip().splitlines()
        first = text[0] if text else ""
        if "CompilationError" in name:
            raise CheckFailed(f"{what}: the Triton kernel did not compile: {compile_summary(exc)}") from exc
        if "illegal memory access" in str(exc) or "unspecified launch failure" in str(exc):
            raise CheckFailed(
                f"{what} faulted on the GPU ({first}). Usually an unmasked load or store past the end of "
                "a tensor. The CUDA context is now unusable: restart the kernel before running more cells."
            ) from exc
        raise CheckFailed(f"{what} raised {name}: {first}{where_raised(exc)}") from exc


def learner_error_message(exc: LearnerError, what: str) -> str:
    if exc.unfilled:
        return _unfilled_message(what)
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if "CompilationError" in exc.type_name:
        return f"{what}: the Triton kernel did not compile: {exc.compile_summary or first[:300]}"
    if "illegal memory access" in str(exc) or "unspecified launch failure" in str(exc):
        return (f"{what} faulted on the GPU ({first}). Usually an unmasked load or store past the end of a "
                "tensor. It ran in a process of its own: the other exercises keep their points.")  # fmt: skip
    return f"{what} raised {exc.type_name}: {first[:500]}{exc.where}"


def is_unfilled(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, NotImplementedError) or "NotImplementedError" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _unfilled_message(what: str) -> str:
    return f"{what} is not implemented yet: fill in the cell marked `YOUR CODE HERE` and run it again."


def where_raised(exc: BaseException) -> str:
    """The last frame of the learner's own code (a notebook cell), if any."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "ipython-input" in f.filename]
    frames = frames or [
        f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith("/tmp/ipykernel")
    ]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at `{(f.line or '').strip()}`)"


def compile_summary(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln.strip()[:300]
    return (lines[-1] if lines else type(exc).__name__)[:300]


# ----------------------------------------------------------------------------------------------------------
# Which torch operations did the learner's function run?

MATMUL_OPS = {
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot", "vdot", "einsum",
    "tensordot", "_scaled_mm", "_int_mm", "_addmm_activation", "_weight_int8pack_mm", "_weight_int4pack_mm",
    "_weight_int4pack_mm_for_cpu", "convolution", "_convolution",
}  # fmt: skip


# The aten ops a kernel wrapper (and Triton's interpreter, which copies arguments) may run: allocation, views,
# copies and dtype conversions. Any other op computes, and a kernel exercise computes in its kernel.
MEMORY_OPS = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "full", "full_like", "new_full", "fill_", "zero_", "view", "_unsafe_view", "reshape",
    "as_strided", "t", "transpose", "permute", "expand", "slice", "select", "unsqueeze", "squeeze", "contiguous",
    "clone", "copy_", "_to_copy", "to", "detach", "alias", "lift_fresh", "lift_fresh_copy", "_reshape_alias",
    "unbind", "split", "split_with_sizes", "chunk", "narrow", "view_as", "resize_", "set_", "_copy_from",
    "_copy_from_and_resize", "is_same_size", "unfold", "flatten", "unflatten", "movedim", "swapaxes", "_conj",
    "resolve_conj", "resolve_neg", "record_stream", "empty_permuted", "view_as_real", "view_as_complex",
}  # fmt: skip


@dataclass
class OpRecord:
    name: str
    shapes: list  # output shapes
    dtypes: list  # output dtypes
    inputs: list = field(default_factory=list)  # the dtypes of its tensor arguments


# The formats the course teaches, as torch stores them: an op that reads one of these and writes a wider float is
# torch decoding the format, which a kernel exercise leaves to its kernel.
LOW_PRECISION = {
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
                 "float4_e2m1fn_x2")
    if hasattr(torch, name)
}  # fmt: skip
WIDE_FLOATS = {torch.float16, torch.bfloat16, torch.float32, torch.float64}


class OpRecorder(TorchDispatchMode):
    """Records each aten op dispatched inside it (ops: OpRecord, its output shapes and dtypes, its inputs' dtypes)."""

    def __init__(self):
        super().__init__()
        self.ops: list[OpRecord] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outs = out if isinstance(out, (tuple, list)) else (out,)
        tensors = [o for o in outs if isinstance(o, torch.Tensor)]
        flat = [
            a
            for arg in (*args, *(kwargs or {}).values())
            for a in (arg if isinstance(arg, list | tuple) else [arg])
        ]
        inputs = [a.dtype for a in flat if isinstance(a, torch.Tensor)]
        self.ops.append(
            OpRecord(
                func._overloadpacket.__name__,
                [tuple(t.shape) for t in tensors],
                [t.dtype for t in tensors],
                inputs,
            )  # fmt: skip
        )
        return out


def run_audited(fn: Callable, *args, what: str, **kwargs):
    """Run fn(*args) while recording every aten operation it dispatches. Returns (result, ops).

    In the interpreter it also fails when the kernel loads or stores outside every tensor argument: a mask
    that lets an edge through can go unseen in the output (the other operand is masked to 0) and still
    fault on a GPU.
    """
    if is_remote(fn):
        require_own_kernel(fn, what=what)
        try:
            result, ops, outside = fn.audited(*args, what=what, **kwargs)
        except LearnerError as exc:
            raise CheckFailed(learner_error_message(exc, what)) from None
        _raise_outside(what, outside)
        _raise_format_casts(what, ops)
        return result, _less_input_checks(fn, ops)
    recorder = OpRecorder()
    tensors = {
        f"argument {i}": a for i, a in enumerate([*args, *kwargs.values()]) if isinstance(a, torch.Tensor)
    }
    watch = traffic.available() and all(t.device.type == "cpu" for t in tensors.values())
    # In the learner's process nothing outside the tensors is loaded or stored (the notebook outlives the mistake).
    with (
        recorder,
        traffic.count(tensors, withhold=traffic.KINDS) if watch else contextlib.nullcontext() as seen,
    ):
        result = call_learner(fn, *args, what=what, **kwargs)
    if watch:
        _raise_outside(what, seen.outside)
    _raise_format_casts(what, recorder.ops)
    return result, _less_input_checks(fn, recorder.ops)


def _less_input_checks(fn, ops: list) -> list:
    """A wrapper may validate: when the source shows its input checks only decide a raise (static.validates),
    their comparisons, any/all and the verdict's read into Python leave the ops (static.without_validation_ops)."""
    src = fn.worker.source if is_remote(fn) else _notebook_source()
    if src is None or not static.validates(src, getattr(fn, "__name__", "")):
        return ops
    return static.without_validation_ops(ops)


def _raise_format_casts(what: str, ops) -> None:
    """Fail when torch itself decoded a course format (an op read float8 or float4 values and wrote a wider
    float): the decode is the kernel's work, whatever the wrapper called it through."""
    for op in ops:
        narrow = sorted({str(d).removeprefix("torch.") for d in op.inputs if d in LOW_PRECISION})
        if narrow and any(d in WIDE_FLOATS for d in op.dtypes):
            raise CheckFailed(
                f"{what} let PyTorch decode {', '.join(narrow)} values ({op.name}): torch's own conversion of the "
                "format computed what your kernel should. Pass the codes to your kernel and decode them there."
            )


def _raise_outside(what: str, outside) -> None:
    """Fail on accesses outside every tensor: outside is (loads, stores) or traffic.Outside (loads, stores, where),
    as the worker's reply carries it."""
    loads, stores, *where = outside
    if loads or stores:
        detail = "".join(f"\n{line}" for line in "\n".join(where).splitlines() if line)
        raise CheckFailed(
            f"{what} accessed memory outside its tensors ({loads} loads, {stores} stores): a mask lets through "
            f"elements past an edge (k >= K, n >= N or m >= M).{detail}\nThe output may still look right, because "
            "the other operand is masked to 0, but on a GPU such an access can fault. Mask every load and store."
        )


def _notebook_source() -> static.Source | None:
    """The running notebook's executed cells (IPython's In), parsed; None outside a notebook."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        return None
    history = list(shell.user_ns.get("In", [])) if shell is not None else []
    return static.parse([(f"In[{i}]", src, False) for i, src in enumerate(history)]) if history else None


def _notebook_kernel_problems(name: str) -> list[str]:
    """own_kernel_problems for a function of the running notebook, read from its executed cells (IPython's
    In); nothing outside a notebook. Escapes are the trusted grader's to flag: the setup cell has some."""
    src = _notebook_source()
    if src is None or not name.isidentifier():
        return []
    return static.own_kernel_problems(src, name)


def require_own_kernel(fn, *, what: str) -> None:
    """Fail unless `fn` computes in a Triton kernel of the notebook's own, as read from the submitted source.

    The trusted grader decides this from the notebook file, which the learner's code cannot change. A wrapper
    may validate, allocate and launch; every multiply-add belongs to the kernel."""
    if is_remote(fn):
        problems = fn.own_kernel_problems()
    else:  # in the learner's own notebook: the same reading of the cells the kernel has run
        problems = _notebook_kernel_problems(getattr(fn, "__name__", ""))
    if problems:
        raise CheckFailed(
            f"{what} does not compute in a Triton kernel of your own, so this cell earns nothing: "
            + "; ".join(problems[:4])
        )


def assert_fused(
    ops: Sequence[OpRecord], *, what: str, weight_shape: tuple[int, int], allowed_shapes: Sequence[tuple] = ()
) -> None:
    """Fail when the learner computed with a PyTorch matmul or built a full-precision copy of the weights.

    allowed_shapes: shapes of the call's own floating-point arguments (x, out). The interpreter copies those,
    so a tensor of as many elements (in any shape: a flattened x) is not taken for a weight copy (choose test
    shapes where the counts differ).
    """
    used = sorted({op.name for op in ops if op.name in MATMUL_OPS})
    if used:
        raise CheckFailed(
            f"{what} computed the product with PyTorch ({', '.join('torch.' + u for u in used)}) instead of "
            "your Triton kernel: the exercise is to fuse the dequantization into the kernel's tl.dot."
        )
    n, k = weight_shape
    for op in ops:
        for shape, dtype in zip(op.shapes, op.dtypes, strict=False):
            if (  # as many floating-point values as the weights, in any shape (a flat [N*K] copy too)
                dtype.is_floating_point
                and math.prod(shape) >= n * k
                and math.prod(shape) not in {math.prod(a) for a in allowed_shapes}
            ):
                raise CheckFailed(
                    f"{what} materialized a dequantized copy of the weights ({op.name} made a "
                    f"{str(dtype).replace('torch.', '')} tensor of shape {list(shape)}): this is the naive "
                    "dequantize-then-matmul path, which moves the weights through memory three times. "
                    "Dequantize tiles in registers inside the kernel instead."
                )

    computed = sorted({op.name for op in ops if op.name not in MEMORY_OPS})
    if computed:
        raise CheckFailed(
            f"{what} computed with PyTorch outside your Triton kernel ({', '.join('torch.' + u for u in computed)}): "
            "a wrapper may check shapes, allocate and launch; the arithmetic belongs in the kernel."
        )


# ----------------------------------------------------------------------------------------------------------
# Comparing outputs


def comparable_bits(t: torch.Tensor) -> torch.Tensor:
    """A view torch.equal can compare (fp8 and other one-byte floats as their bytes)."""
    return t.view(torch.uint8) if t.is_floating_point() and t.element_size() == 1 else t


def snapshot(inputs: dict) -> dict:
    """Copies of a call's tensor inputs, to prove afterwards that the call left them untouched."""
    return {k: comparable_bits(v).clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}


def verify_kernel_result(
    y, ops, *, what: str, inputs: dict, before: dict, out: torch.Tensor, full: torch.Tensor,
    weight_shape: tuple[int, int], dtype: torch.dtype, expected: torch.Tensor, mistakes=(), ctx: str = "",
) -> None:  # fmt: skip
    """Everything the course checks about one call of a learner's matmul kernel.

    Fused (no torch matmul, no weight-sized copy), wrote into and returned `out`, in x's dtype, equal to
    `expected` (the output was NaN-filled: unwritten elements are located; known mistakes are named), nothing
    written below row M or past column N of `full` (the larger buffer `out` is a view of), and the inputs left
    untouched.
    """
    floats = [t.shape for t in inputs.values() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    assert_fused(ops, what=what, weight_shape=weight_shape, allowed_shapes=[*floats, out.shape])
    if not isinstance(y, torch.Tensor):
        raise CheckFailed(f"{what} must return the output tensor, got {type(y).__name__}{ctx}")
    if y.data_ptr() != out.data_ptr():
        raise CheckFailed(f"{what} must write into and return the `out` it was given{ctx}")
    if y.dtype != dtype:
        raise CheckFailed(f"{what} returned {y.dtype}; the output must be {dtype}{ctx}")
    compare(y, expected, what=what, rtol=tolerance_for(dtype), poisoned=True, context=ctx, mistakes=mistakes)
    n, m = weight_shape[0], out.shape[0]
    below = ~torch.isnan(full[m:].float())
    if below.any():
        rows = below.any(dim=1).nonzero().flatten()
        raise CheckFailed(
            f"{what} stored past the last row of the output: rows m = {m + int(rows[0])}..{m + int(rows[-1])} of "
            f"an output with M = {m} rows (into the memory after it). Mask the output store with offs_m < M{ctx}"
        )
    if not torch.isnan(full[:m, n:].float()).all():
        raise CheckFailed(f"{what} wrote past column N of the output (into its neighbour's memory){ctx}")
    for name, t in inputs.items():
        if isinstance(t, torch.Tensor) and not torch.equal(comparable_bits(t), before[name]):
            raise CheckFailed(f"{what} modified its input {name} in place{ctx}")


def tolerance_for(dtype: torch.dtype) -> float:
    """Relative tolerance for an output stored in `dtype` (two units in its last place)."""
    return {torch.float16: 2.0**-9, torch.bfloat16: 2.0**-6, torch.float32: 2.0**-18}.get(dtype, 2.0**-6)


def index_ranges(indices: Sequence[int], limit: int = 6) -> str:
    spans, start, prev = [], None, None
    for i in indices:
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            spans.append((start, prev))
            start = prev = i
    if start is not None:
        spans.append((start, prev))
    text = ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in spans[:limit])
    return text + (f" and {len(spans) - limit} more ranges" if len(spans) > limit else "")


def where_2d(bad: torch.Tensor, names=("rows", "columns")) -> str:
    rows = torch.nonzero(bad.any(dim=1)).flatten().tolist()
    cols = torch.nonzero(bad.any(dim=0)).flatten().tolist()
    n_rows, n_cols = bad.shape
    parts = []
    if len(rows) < n_rows:
        parts.append(f"{names[0]} {index_ranges(rows)} of 0..{n_rows - 1}")
    if len(cols) < n_cols:
        parts.append(f"{names[1]} {index_ranges(cols)} of 0..{n_cols - 1}")
    if not parts:
        return f"in every {names[0][:-1]} and every {names[1][:-1]}"
    return "only in " + " and ".join(parts)


def mismatch(got: torch.Tensor, expected: torch.Tensor, rtol: float) -> torch.Tensor:
    """Boolean mask of elements outside atol + rtol·|expected|, with atol = rtol · rms(expected)."""
    g, e = got.double(), expected.double()
    atol = rtol * e.pow(2).mean().sqrt().clamp_min(1e-30)
    return ~((g - e).abs() <= atol + rtol * e.abs()) | ~torch.isfinite(g)


def compare(
    got: torch.Tensor,
    expected: torch.Tensor,
    *,
    what: str,
    rtol: float,
    mistakes: Sequence[Mistake] | Callable[[], Sequence[Mistake]] = (),
    poisoned: bool = False,
    context: str = "",
) -> None:
    """Raise CheckFailed with a report unless got ≈ expected elementwise (NaN never passes)."""
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what} returned {type(got).__name__}, not a torch.Tensor")
    if tuple(got.shape) != tuple(expected.shape):
        raise CheckFailed(
            f"{what} returned shape {list(got.shape)}, expected {list(expected.shape)}{context}"
        )
    if got.device != expected.device:
        got, expected = got.cpu(), expected.cpu()
    # Decided where the tensors are: only a report copies them to the host. On the H200, FP8's timed prefill
    # recheck (about 120 outputs of 4096 x 8192) compared on the host took most of the cell's 72 s.
    bad = mismatch(got.detach(), expected.detach(), rtol)
    if not bad.any():
        return
    got_c, exp_c, bad = got.detach().cpu(), expected.detach().cpu(), bad.cpu()
    total, n_bad = bad.numel(), int(bad.sum())
    nan = torch.isnan(got_c.float())
    lines = []
    if poisoned and bool(nan.all()):
        headline = f"{what} wrote nothing into the output buffer (every element is still NaN){context}"
        lines.append("The check fills it with NaN: a kernel that adds into it (tl.atomic_add) instead of storing "
                     "leaves NaN too.")  # fmt: skip
    elif poisoned and bool(nan.any()):
        headline = f"{what} left {int(nan.sum())} of {total} output elements unwritten{context}"
        if got_c.dim() == 2:
            lines.append(f"Unwritten (still the NaN the buffer was filled with): {where_2d(nan)}.")
        lines.append("Check the grid covers every tile and the store mask lets every valid element through.")
    else:
        headline = f"{what}: {n_bad} of {total} elements ({100 * n_bad / total:.3g} %) differ from the reference{context}"
    if int(nan.sum()) < n_bad:
        inf = torch.isinf(got_c.float()) & bad
        if inf.any():  # an infinite error has no size: say where the infinities are, not a "largest error"
            idx = int(inf.flatten().nonzero()[0])
            loc = [int(i) for i in torch.unravel_index(torch.tensor(idx), got_c.shape)]
            lines.append(
                f"The output holds {int(inf.sum())} infinite values (the first at {loc}: got "
                f"{float(got_c.flatten()[idx]):.6g}, expected {float(exp_c.flatten()[idx]):.6g}): an overflow, or a "
                "division where the format multiplies (by a scale of 0, or by the reciprocal's reciprocal)."
            )
        else:
            err = (got_c.double() - exp_c.double()).abs()
            err = torch.where(bad & ~nan, err, torch.zeros_like(err))
            idx = int(err.flatten().argmax())
            loc = [int(i) for i in torch.unravel_index(torch.tensor(idx), got_c.shape)]
            lines.append(
                f"Largest error {float(err.flatten()[idx]):.4g} at {loc}: got {float(got_c.flatten()[idx]):.6g}, "
                f"expected {float(exp_c.flatten()[idx]):.6g} (tolerance {rtol:.2g} relative)."
            )
        if got_c.dim() == 2:
            lines.append(f"Wrong elements lie {where_2d(bad & ~nan)}.")
    for m in known_mistakes(mistakes):
        if matches(got_c, m.output, lambda a, b: mismatch(a, b, rtol)):
            lines.insert(0, f"This matches a known mistake: {m.name}. {m.explanation}")
            break
    raise CheckFailed("\n".join([headline, *lines]))


def check_finite(t: torch.Tensor, *, what: str) -> None:
    if t.is_floating_point() and not torch.isfinite(t).all():
        n = int((~torch.isfinite(t)).sum())
        raise CheckFailed(f"{what} contains {n} NaN or infinite values")


def passed(message: str) -> None:
    """Print a short success line (a check that passes says what it checked)."""
    print(f"✓ {message}")
