"""The trusted grader's pieces: the worker runs the learner's code and only ever returns data; the trusted
side mirrors what a call did, survives crashes and hangs, and reads the learner's source for escapes."""

import ast
import importlib
import os
import sys

import nbformat
import pytest
import torch
from conftest import ROOT

from qmatmul import checks
from qmatmul.checks import CheckFailed
from qmatmul.grader import notebook, static, trusted
from qmatmul.grader.remote import RemoteFunction, Worker
from qmatmul.grader.results import RemoteObject

PROGRAM = [
    ("setup", notebook.QUIET_START),
    (
        "imports",
        "import torch\nimport triton\nimport triton.language as tl\nfrom qmatmul import checks, w8a16\n",
    ),
    (
        "learner",
        """
def add_one(x, out):
    out.copy_(x)  # a copy is a memory op: allowed
    return out

def other_buffer(x, out):
    return x.clone()

def scribble(x, out):
    x.zero_()
    out.data_ptr()
    return out

def past_n(x, out):
    full = torch.as_strided(out, (out.shape[0], out.shape[1] + 1), out.stride())
    full.fill_(1.0)
    return out

def gives_numpy(x):
    return x.numpy()

def boom(x):
    raise ValueError("boom at the learner's line")

def unfinished(x):
    raise NotImplementedError()

def crash(x):
    import ctypes
    ctypes.string_at(0)

def hang(x):
    import time
    time.sleep(120)

for _i in range(2):  # top-level set-up code of any shape runs as written
    try:
        import warnings
        warnings.warn("a warning costs nothing")
    finally:
        pass
with open("/dev/null") as _f:
    pass
""",
    ),
]


@pytest.fixture(scope="module")
def worker():
    w = Worker(PROGRAM, timeout=20)
    yield w
    w.close()


def test_a_call_returns_out_itself_and_its_writes(worker):
    x = torch.arange(6.0).reshape(2, 3)
    full = torch.full((2, 4), float("nan"))
    out = full[:, :3]
    y = RemoteFunction(worker, "add_one")(x, out=out)
    assert y.data_ptr() == out.data_ptr() and torch.equal(out, x)
    assert torch.isnan(full[:, 3]).all()


def test_a_fresh_tensor_is_not_out(worker):
    x = torch.ones(2, 3)
    y = RemoteFunction(worker, "other_buffer")(x, out=torch.empty(2, 3))
    assert torch.equal(y, x)
    assert y.data_ptr() != x.data_ptr()


def test_in_place_changes_and_writes_past_the_view_come_back(worker):
    x = torch.ones(2, 3)
    RemoteFunction(worker, "scribble")(x, out=torch.empty(2, 3))
    assert torch.equal(x, torch.zeros(2, 3))
    full = torch.full((2, 4), float("nan"))
    RemoteFunction(worker, "past_n")(torch.ones(2, 3), out=full[:, :3])
    assert not torch.isnan(full[:, 3]).any()


def test_results_that_are_not_plain_data_come_back_as_a_name(worker):
    y = RemoteFunction(worker, "gives_numpy")(torch.ones(3))
    assert isinstance(y, RemoteObject) and type(y).__name__ == "ndarray"


def test_errors_come_back_as_learner_errors(worker):
    with pytest.raises(CheckFailed, match="f raised ValueError: boom"):
        checks.call_learner(RemoteFunction(worker, "boom"), torch.ones(1), what="f")
    with pytest.raises(CheckFailed, match="not implemented yet"):
        checks.call_learner(RemoteFunction(worker, "unfinished"), torch.ones(1), what="f")
    with pytest.raises(CheckFailed, match="name 'nothing_here' is not defined"):
        checks.call_learner(RemoteFunction(worker, "nothing_here"), torch.ones(1), what="f")


def test_a_crash_and_a_hang_cost_only_their_call(worker):
    with pytest.raises(CheckFailed, match=r"crashed the process that ran it \(SIGSEGV\)"):
        RemoteFunction(worker, "crash")(torch.ones(1))
    with pytest.raises(CheckFailed, match="did not finish within 20 s"):
        RemoteFunction(worker, "hang")(torch.ones(1))
    y = RemoteFunction(worker, "add_one")(torch.ones(2), out=torch.empty(2))  # a new worker takes over
    assert torch.equal(y, torch.ones(2))


def test_a_reply_without_the_nonce_is_refused():
    """Code in the worker can write on the reply channel (its fd is in argv), but it cannot know the nonce."""
    forger = [("setup", notebook.QUIET_START), ("learner", (
        "import json, os, sys\n"
        "def forge(x):\n"
        "    os.write(int(sys.argv[2]), (json.dumps({'status': 'ok'}) + '\\n').encode())\n"
        "    return x\n"))]  # fmt: skip
    w = Worker(forger, timeout=20)
    try:
        with pytest.raises(CheckFailed, match="a reply the grader did not ask for"):
            RemoteFunction(w, "forge")(torch.ones(1))
    finally:
        w.close()


def test_a_worker_that_dies_while_defining_says_its_last_error_line():
    """A worker that exits while the notebook's definitions run (a package missing on the machine, say) costs the
    cells and says why in words: the exit status and the exception's last line, as a message only."""
    dying = [("setup", notebook.QUIET_START), ("learner", (
        "import os, sys\n"
        "print(\"ModuleNotFoundError: No module named 'IPython'\", file=sys.stderr, flush=True)\n"
        "os._exit(3)\n"))]  # fmt: skip
    w = Worker(dying, timeout=20)
    try:
        with pytest.raises(CheckFailed, match=r"died while defining them \(exit status 3; its last line: "
                           r"ModuleNotFoundError: No module named 'IPython'\)"):  # fmt: skip
            w.start()
    finally:
        w.close()


def test_another_active_virtualenv_does_not_reach_the_worker(tmp_path, monkeypatch):
    """Grading started from a shell with another virtualenv active (VIRTUAL_ENV): IPython, imported in the worker, put
    that venv's site-packages on the path and every notebook died on "jedi ... lies outside the course's environment"
    (a fresh clone's `make demo` run so, 2026-12-05). The worker is this interpreter's."""
    other = tmp_path / "other-venv"
    (other / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages").mkdir(
        parents=True
    )
    monkeypatch.setenv("VIRTUAL_ENV", str(other))
    program = [("setup", notebook.QUIET_START), ("learner", (
        "import sys\nimport IPython\nIPython.core.interactiveshell.InteractiveShell.instance()\n"
        "def seen():\n    return [p for p in sys.path if 'other-venv' in p]\n"))]  # fmt: skip
    w = Worker(program, timeout=60)
    try:
        assert RemoteFunction(w, "seen")() == []
    finally:
        w.close()


def test_the_audit_sees_torch_arithmetic_in_the_worker(worker):
    w = Worker(
        [
            *PROGRAM[:2],
            (
                "learner",
                "def chunked(x, out):\n    out.copy_((x * 2).sum(dim=1, keepdim=True))\n    return out\n",
            ),
        ],
        timeout=20,
    )
    try:
        _, ops, _ = w.call("chunked", (torch.ones(2, 3),), {"out": torch.empty(2, 1)}, audit=True)
        assert {"mul", "sum"} <= {op.name for op in ops}
        with pytest.raises(
            CheckFailed, match=r"computed with PyTorch outside your Triton kernel \(torch.mul, torch.sum\)"
        ):
            checks.assert_fused(ops, what="f", weight_shape=(5, 3))
    finally:
        w.close()


SOURCE = [
    ("imports", "import torch\nimport triton\nimport triton.language as tl\n", False),
    (
        "ex",
        """
@triton.jit
def k(x_ptr, y_ptr):
    tl.store(y_ptr, tl.load(x_ptr) @ tl.load(x_ptr))

def honest(x, out):
    k[(1,)](x, out)
    return out

def helper(x):
    return x.float() @ x.float().T

def via_helper(x, out):
    k[(1,)](x, out)
    out.copy_(helper(x))
    return out

def no_launch(x, out):
    return out.copy_(torch.matmul(x, x))
""",
        True,
    ),
]


def test_own_kernel_rules_read_the_source():
    src = static.parse(SOURCE)
    assert static.own_kernel_problems(src, "honest") == []
    assert static.own_kernel_problems(src, "k") == []
    assert any(
        "`@`" in p and "helper" in p or "return x.float() @" in p
        for p in static.own_kernel_problems(src, "via_helper")
    )
    problems = static.own_kernel_problems(src, "no_launch")
    assert problems[0].startswith("no_launch launches no @triton.jit kernel") and ".matmul" in problems[1]


def _lines(*lines: str, indent: str = "    ") -> str:
    return "".join(f"{indent}{line}\n" for line in lines)


_HOST = ("imports", _lines("import math", "import numpy as np", "import torch", "import triton",
                           "import triton.language as tl", "from qmatmul import w8a16", indent=""), False)  # fmt: skip
_KERNEL = _lines("@triton.jit", "def k(x_ptr, y_ptr, N, BLOCK: tl.constexpr):", "    tl.store(y_ptr, tl.load(x_ptr))",
                 "", indent="")  # fmt: skip


def _problems(code: str, name: str = "f") -> list[str]:
    return static.own_kernel_problems(static.parse([_HOST, ("ex", code, True)]), name)


def test_a_sources_answers_are_kept_and_each_caller_gets_its_own_copy():
    """static.per_source: the reading runs once per Source and name; a caller that adds to the list it got (as
    RemoteFunction.own_kernel_problems adds the escapes' line) changes nothing the next call is told."""
    src = static.parse([_HOST, ("ex", _lines("def f(x):", "    return x @ x", indent=""), True)])
    first = static.own_kernel_problems(src, "f")
    assert first and len(src.memo) == 1
    first.append("added by a caller")
    assert static.own_kernel_problems(src, "f") == first[:-1]
    assert static.validates(src, "f") is False and len(src.memo) == 2


LAUNCH_HELPERS = {  # helpers of the learner's that launch the kernel they are handed
    "a def": _lines("def _launch(kernel, grid, *args, **meta):", "    kernel[grid](*args, **meta)", indent=""),
    "a lambda": _lines("_launch = lambda kernel, grid, *a, **m: kernel[grid](*a, **m)", indent=""),
    "through another": _lines("def _go(kk, g, *a, **m):", "    kk[g](*a, **m)", "",
                              "def _launch(kernel, grid, *args, **meta):", "    _go(kernel, grid, *args, **meta)",
                              indent=""),
}  # fmt: skip


@pytest.mark.parametrize("helper", LAUNCH_HELPERS)
def test_a_launch_through_a_helper_is_a_launch(helper):
    """A wrapper that hands its kernel to a helper of its own that launches it launches its own kernel (before:
    "launches no @triton.jit kernel"); a helper that computes instead, or launches something else, does not."""
    wrapper = "\n" + _lines(
        "def f(x, out):", "    _launch(k, (1,), x, out, 4, BLOCK=16)", "    return out", indent=""
    )
    by_keyword = "\n" + _lines(
        "def f(x, out):", "    _launch(grid=(1,), kernel=k)", "    return out", indent=""
    )
    assert _problems(_KERNEL + LAUNCH_HELPERS[helper] + wrapper) == []
    assert _problems(_KERNEL + LAUNCH_HELPERS[helper] + by_keyword) == []
    computes = _lines(
        "def _launch(kernel, grid, x, out, *args, **meta):", "    out.copy_(torch.matmul(x, x))", indent=""
    )
    problems = _problems(_KERNEL + computes + wrapper)
    assert problems[0].startswith("f launches no @triton.jit kernel") and ".matmul" in problems[1], problems
    rebinds = _lines("def _launch(kernel, grid, *args, **meta):", "    kernel = print", "    kernel[grid](*args, **meta)",
                     indent="")  # fmt: skip
    assert _problems(_KERNEL + rebinds + wrapper)[0].startswith("f launches no @triton.jit kernel")


_BODY = _lines("def body(x_ptr, y_ptr, BLOCK: tl.constexpr):", "    a = tl.load(x_ptr + tl.arange(0, BLOCK))",
               "    tl.store(y_ptr, tl.dot(a, a))", "", indent="")  # fmt: skip


@pytest.mark.parametrize("form", ["triton.jit(body)", "triton.jit(do_not_specialize=['BLOCK'])(body)",
                                  "triton.autotune(configs=[], key=['BLOCK'])(triton.jit(body))"])  # fmt: skip
def test_a_kernel_made_by_calling_triton_jit_is_a_kernel(form):
    """`kern = triton.jit(body)` is a kernel and its body device code (before: no kernel launched, and tl.dot read
    as "PyTorch .dot on the host"); the wrapper's own host code is still read."""
    honest = _BODY + _lines(f"kern = {form}", "", "def f(x, out):", "    kern[(1,)](x, out, BLOCK=16)", "    return out",
                            indent="")  # fmt: skip
    assert _problems(honest) == []
    with_at = honest.replace("    return out\n", "    return out.copy_(x @ x)\n")
    assert any("`@`" in p for p in _problems(with_at)), with_at
    on_host = honest.replace(
        "    return out\n", "    body(x, out, 16)\n    return out\n"
    )  # the body run as Python
    assert any("(.dot) on the host" in p for p in _problems(on_host))
    rebound = honest.replace("\ndef f(", "\nkern = torch.matmul\n\ndef f(")  # bound to something else as well
    assert _problems(rebound)[0].startswith("f launches no @triton.jit kernel")


NUMPY_SIZES = {  # numpy and math on Python numbers, shapes and launch configurations: grid arithmetic
    "np.ceil of shapes": _lines("grid = (int(np.ceil(x.shape[0] / BLOCK)),)"),
    "prepare's sizes, a config": _lines("M, N, K, out = w8a16.prepare(x, q, s, out)",
                                        "cfg = w8a16.decode_config(M, N, K, x.device.type)",
                                        "grid = (int(np.ceil(N / cfg['BLOCK_N']) * np.ceil(M / 16)),)"),
    "a bound size": _lines("n = x.size(0) * x.stride(1) + len(q)", "n += 1", "grid = (int(np.prod((n, BLOCK))),)"),
    "math and a lambda": _lines("N = q.numel()", "grid = lambda meta: (math.ceil(np.log2(N + 1)),)"),
    "a loop over sizes": _lines("grid = (1,)", "for d in x.shape:", "    grid = (int(np.maximum(grid[0], d)),)"),
}  # fmt: skip
NUMPY_VALUES = {  # numpy on tensors, or on what could alias one
    "np.matmul of .numpy()": _lines("out.copy_(torch.as_tensor(np.matmul(x.numpy(), q.numpy())))"),
    "on a parameter": _lines("out[:] = torch.as_tensor(np.multiply(x, 2))"),
    "a parameter's default": _lines("out[:] = torch.as_tensor(_times_two(out, a=x))"),
    "an array written through torch": _lines("a = np.zeros(x.shape)", "torch.as_tensor(a).copy_(x)",
                                             "out[:] = torch.as_tensor(np.multiply(a, 2))"),
    "a config stored into": _lines("cfg = w8a16.decode_config(1, 2, 3, 'cpu')", "cfg['X'] = x",
                                   "out[:] = torch.as_tensor(np.multiply(cfg['X'], 2))"),
    "a list appended to": _lines("xs = [1]", "xs.append(x)", "out[:] = torch.as_tensor(np.multiply(xs[1], 2))"),
    "a stand-in's .shape": _lines("out[:] = torch.as_tensor(np.multiply(Box(x).shape, 2))"),
    "a namedtuple's shape": _lines("out[:] = torch.as_tensor(np.multiply(Pair(x, x).shape, 2))"),
    "a mock's .shape": _lines("from unittest.mock import MagicMock", "m = MagicMock()", "m.configure_mock(shape=x)",
                              "out[:] = torch.as_tensor(np.multiply(m.shape, 2))"),
    "a .shape set by a string": _lines("b = Plain()", "object.__setattr__(b, 'shape', x)",
                                       "out[:] = torch.as_tensor(np.multiply(b.shape, 2))"),
    "what numpy returns, called": _lines("out[:] = torch.as_tensor(np.vectorize(math.fabs)(x))"),
    "numpy as a value": _lines("f = np.multiply", "out[:] = torch.as_tensor(f(x, 2))"),
}  # fmt: skip
_NUMPY_HELPERS = _lines(
    "BLOCK = 64", "", "def _times_two(t, a=1):", "    return np.multiply(a, 2)", "",
    "class Box:", "    def __init__(self, t):", "        self.t = t", "", "    @property", "    def shape(self):",
    "        return self.t", "", "from collections import namedtuple", "Pair = namedtuple('Pair', 'shape other')", "",
    "class Plain:", "    pass", "", indent="",
)  # fmt: skip


@pytest.mark.parametrize("how", NUMPY_SIZES)
def test_numpy_on_sizes_is_grid_arithmetic(how):
    """numpy and math on Python numbers (before: any numpy in a wrapper was "computes with numpy")."""
    launch = _lines("k[grid](x, out, 4, BLOCK=16)", "return out")
    assert (
        _problems(_KERNEL + _NUMPY_HELPERS + "def f(x, q, s, out=None):\n" + NUMPY_SIZES[how] + launch) == []
    )


@pytest.mark.parametrize("how", NUMPY_VALUES)
def test_numpy_on_tensors_is_computing(how):
    code = _KERNEL + _NUMPY_HELPERS + "def f(x, q, s, out=None):\n" + _lines("k[(1,)](x, out, 4, BLOCK=16)")
    assert any(
        "computes with numpy" in p for p in _problems(code + NUMPY_VALUES[how] + _lines("return out"))
    ), how


def _checked(checks: str) -> str:
    return _KERNEL + _lines("def _keep(v):", "    return v < 0", "", "def f(x, q, s, out=None):", indent="") + _lines(
        "M, N, K, out = w8a16.prepare(x, q, s, out)") + checks + _lines("k[(1,)](x, out, N, BLOCK=16)", "return out")  # fmt: skip


CHECKS = {  # a comparison or reduction whose only use is to decide a raise
    "bool of any": _lines("if bool((s == 255).any()):", "    raise ValueError('NaN scale')"),
    "assert": _lines("assert not torch.isnan(x).any(), 'NaN in x'"),
    ".item() in the test and the message": _lines("if s.min().item() <= 0:",
                                                  "    raise ValueError(f'scale {s.min().item()}')"),
    "elif and a loop": _lines("for t in (x, s):", "    if t.isinf().any():", "        raise ValueError('inf')",
                              "    elif not t.isfinite().all():", "        raise ValueError('nan')"),
}  # fmt: skip
NOT_CHECKS = {  # ... and what only looks like one
    "the body computes": _lines("if s.abs().max().item() >= 0:", "    out.copy_(x)"),
    "a walrus keeps the value": _lines("if (v := s.max().item()) < 0:", "    raise ValueError('x')", "N = N + int(v)"),
    "a try catches the raise": _lines("try:", "    if bool((s == 3).any()):", "        raise ValueError('x')",
                                      "except ValueError:", "    N = 0"),
    "a test handing a value on": _lines("if _keep(s.max().item()):", "    raise ValueError('x')"),
}  # fmt: skip


@pytest.mark.parametrize("how", CHECKS)
def test_an_input_check_is_validation(how):
    """A wrapper may validate (course.md): `.item()` in a check's test is no reading of values, and the checks'
    own aten ops leave the audit (before: `.item()` was "reads tensor values", and eq, any and the verdict's read
    "computed with PyTorch outside your Triton kernel")."""
    src = static.parse([_HOST, ("ex", _checked(CHECKS[how]), True)])
    assert static.own_kernel_problems(src, "f") == []
    assert static.validates(src, "f")


@pytest.mark.parametrize("how", NOT_CHECKS)
def test_what_only_looks_like_an_input_check_is_not(how):
    src = static.parse([_HOST, ("ex", _checked(NOT_CHECKS[how]), True)])
    assert not static.validates(src, "f")
    if ".item()" in NOT_CHECKS[how] and how != "a try catches the raise":
        assert any(".item" in p for p in static.own_kernel_problems(src, "f")), how


def test_the_audit_lets_through_only_an_input_checks_ops():
    """static.without_validation_ops: a check's comparisons, reductions and the read of its scalar verdict leave
    the ops; a read of a value that no check produced, any arithmetic, and more than CHECK_OP_LIMIT stay."""
    from qmatmul.checks import OpRecord

    def op(name, shape, dtype="bool"):  # shape None: an op that returns no tensor (the read of a scalar)
        return OpRecord(
            name, [] if shape is None else [shape], [] if shape is None else [getattr(torch, dtype)]
        )

    check = [op("eq", (8,)), op("any", ()), op("_local_scalar_dense", None), op("min", (), "float32"),
             op("_local_scalar_dense", None), op("abs", (8,), "float32"), op("ne", (8,)), op("eq", (8,)),
             op("mul", (8,)), op("all", ())]  # fmt: skip
    assert static.without_validation_ops(check) == []
    read = [op("select", (), "float16"), op("_local_scalar_dense", None)]  # int(x[0, 0])
    arithmetic = [op("mul", (8,), "float32"), op("gt", (8,), "float32")]
    assert static.without_validation_ops(check + read + arithmetic) == read + arithmetic
    many = [op("eq", (8,))] * (static.CHECK_OP_LIMIT + 3)
    assert len(static.without_validation_ops(many)) == 3


def _with_an_added_cell(ex1: str | None, added: str) -> list:
    """The W8A16 solution with its quantizer cell replaced by `ex1` (deleted: None) and a cell the learner added
    after it, without nbgrader metadata."""
    nb = nbformat.read(ROOT / "solutions" / "w8a16" / "w8a16.ipynb", as_version=4)
    i = next(
        j for j, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "ex1_quantizer"
    )
    if ex1 is None:
        del nb.cells[i]
    else:
        nb.cells[i].source = ex1
    nb.cells.insert(i + (ex1 is not None), nbformat.v4.new_code_cell(added))
    return notebook.cells_of(nb)


_SCALES = _lines(
    "amax = w.abs().amax(dim=1)", "return torch.where(amax > 0, amax / 127, torch.ones_like(amax))"
)
_ROUND = _lines("return torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8), s")
ADDED_CELLS = {  # (the exercise's cell, None if deleted; the cell the learner added; the name it defines)
    "a helper": ("def quantize_int8_per_channel(w):\n" + _lines("w = w.float()", "s = _scales(w)") + _ROUND,
                 "def _scales(w):\n" + _SCALES, "_scales"),
    "the exercise's cell deleted": (None, "def quantize_int8_per_channel(w):\n" + _lines("w = w.float()")
                                    + _SCALES.replace("return ", "s = ") + _ROUND, "quantize_int8_per_channel"),
    "the exercise left unfilled": ("def quantize_int8_per_channel(w):\n" + _lines("# YOUR CODE HERE",
                                   "raise NotImplementedError()"), "def quantize_int8_per_channel(w):\n"
                                   + _lines("w = w.float()") + _SCALES.replace("return ", "s = ") + _ROUND,
                                   "quantize_int8_per_channel"),
    "an import": ("def quantize_int8_per_channel(w):\n" + _lines("w = w.float() * math.prod([1])", "s = _s(w)")
                  + _ROUND + "\ndef _s(w):\n" + _SCALES, "import math", "math"),
}  # fmt: skip


@pytest.mark.parametrize("case", ADDED_CELLS)
def test_a_name_defined_in_a_cell_the_learner_added_is_explained(case):
    """The grader runs the exercise cells and the locked ones, never cells the learner added: a name only such a
    cell defines is missing, and the message says where it is and what to do (before: a NameError, or "no cell
    binds it ... (exec? globals()?)")."""
    ex1, added, name = ADDED_CELLS[case]
    cells = _with_an_added_cell(ex1, added)
    where = next(c.index for c in cells if c.role == "plain" and c.source == added) + 1
    (verdict,) = trusted.grade(cells, only=["test_quantizer"], timeout=60)
    assert verdict.points == 0
    assert (
        f"`{name}` is defined in a cell you added (the notebook's cell {where} from the top"
        in verdict.message
    )
    assert "move it into the exercise's cell" in verdict.message


@pytest.mark.parametrize(
    "code,what",
    [("import threading", "imports threading"), ("import ctypes as c", "imports ctypes"),
     ("x = eval('1')", "calls eval()"), ("getattr(torch, name)", "not written out"),
     ("torch._C._DisableTorchDispatch()", "uses ._C"), ("checks.compare = print", "rebinds checks.compare"),
     ("import sys\nsys.modules['x'] = 1", "uses sys.modules"), ("import os\nos.write(3, b'')", "uses os.write"),
     ("f = (lambda: 0).__globals__", "uses .__globals__"), ("from torch.utils import cpp_extension", "imports torch.utils.cpp_extension"),
     ("torch.Tensor.any = lambda self: False", "rebinds torch.Tensor.any")],
)  # fmt: skip
def test_escapes_are_flagged_with_cell_and_line(code, what):
    src = static.parse(
        [("imports", "import torch\nfrom qmatmul import checks\n", False), ("ex1", code, True)]
    )
    assert any(what in f.describe() and f.cell == "ex1" for f in src.escapes), [
        f.describe() for f in src.escapes
    ]


def test_every_solution_is_clean():
    from conftest import ROOT

    for path in sorted(ROOT.glob("solutions/*/*.ipynb")):
        cells = notebook.read(path)
        src = trusted.learner_source(cells)
        assert src.escapes == [], (path, [f.describe() for f in src.escapes])


TIMED = [
    ("setup", notebook.QUIET_START),
    ("imports", "import torch\nfrom qmatmul import w8a16\n"),
    ("learner", (
        "def decode(x, q, s, out=None):\n"
        "    out.copy_(w8a16.reference(x, q, s))\n"
        "    return out\n\n"
        "def off_by_one(x, q, s, out=None):\n"
        "    out.copy_(w8a16.reference(x, q, s) + 1)\n"
        "    return out\n")),
]  # fmt: skip


@pytest.mark.parametrize("remote", [False, True])
def test_the_timing_protocol_checks_every_timed_output(remote, monkeypatch, capsys):
    """The protocol of qmatmul/checks/harness.py on the CPU (no graphs there: the eager batch only). QMATMUL_PROFILE=1
    says where the grading's seconds went."""
    from qmatmul.checks import harness

    monkeypatch.setenv(harness.PROFILE_ENV, "1")

    w = Worker(TIMED, timeout=60) if remote else None
    module = __import__("qmatmul.w8a16").w8a16
    if not remote:
        fns = {"decode": lambda x, q, s, out=None: out.copy_(module.reference(x, q, s)),
               "off_by_one": lambda x, q, s, out=None: out.copy_(module.reference(x, q, s) + 1)}  # fmt: skip
    try:
        get = (lambda n: RemoteFunction(w, n)) if remote else fns.get
        kw = dict(
            module="qmatmul.w8a16", N=48, K=64, M=2, out_dtype=torch.float16, nbytes=1 << 20, device="cpu"
        )
        t = harness.time_calls(get("decode"), what="decode", **kw)
        assert t.graph_ms is None and t.eager_ms > 0
        out = capsys.readouterr().out
        assert "rechecked in" in out and ("the outputs' hand-over took" in out) == remote, out
        with pytest.raises(CheckFailed, match=r"decode \(timed, eager\).*differ from the reference"):
            harness.time_calls(get("off_by_one"), what="decode", **kw)
    finally:
        if w is not None:
            w.close()


def test_the_fastest_timed_go_counts_and_is_the_one_checked(monkeypatch):
    """harness.TIMED_ROUNDS goes a mode, the fastest counts: a go slowed by something outside the kernel (here a
    sleep in the first timed go; on a shared host, a process waiting for a core) is not the figure. The go that
    counts is always checked: a function right and slow until its second timed go and fast and wrong from there
    loses the cell."""
    from qmatmul.checks import harness

    kw = dict(module="qmatmul.w8a16", N=48, K=64, M=2, out_dtype=torch.float16, nbytes=1 << 20, device="cpu")
    calls = harness.calls_for(kw["nbytes"], 1e12, out_bytes=2 * 48 * 2)
    calls -= calls % 2  # two weight copies on a CPU
    before_timing = 1 + calls  # prepare's first call and its untimed warm-up go
    learner = (
        "import time\n"
        "_n = [0]\n\n"
        "def slow_first(x, q, s, out=None):\n"
        "    _n[0] += 1\n"
        f"    if {before_timing} < _n[0] <= {before_timing + calls}:\n"
        "        time.sleep(0.001)\n"
        "    return out.copy_(w8a16.reference(x, q, s))\n\n"
        "def then_wrong(x, q, s, out=None):\n"
        "    _n[0] += 1\n"
        f"    if _n[0] <= {before_timing + calls}:\n"
        "        time.sleep(0.001)\n"
        "        return out.copy_(w8a16.reference(x, q, s))\n"
        "    return out.copy_(w8a16.reference(x, q, s) + 1)\n"
    )
    assert harness.TIMED_ROUNDS >= 2
    for name in ("slow_first", "then_wrong"):
        w = Worker([*TIMED[:2], ("learner", learner)], timeout=60)
        try:
            if name == "slow_first":
                assert harness.time_calls(RemoteFunction(w, name), what=name, **kw).eager_ms < 0.5
            else:
                with pytest.raises(
                    CheckFailed, match=r"then_wrong \(timed, eager\).*differ from the reference"
                ):
                    harness.time_calls(RemoteFunction(w, name), what=name, **kw)
        finally:
            w.close()


TIMED_MODULES = ["qmatmul.checks.w8a16", "qmatmul.checks.w4a16", "qmatmul.checks.fp8", "qmatmul.checks.mxfp4",
                 "qmatmul.checks.nvfp4", "qmatmul.checks.layouts_kernel"]  # fmt: skip


@pytest.mark.parametrize("module", TIMED_MODULES)
def test_the_recheck_batches_each_weight_copy_and_still_names_the_call(module, monkeypatch):
    """The recheck's references come one matmul per weight copy (harness.references), equal to one reference a call,
    chunked at REF_ELEMENTS; a single wrong call of a batch still fails, named by its index."""
    from qmatmul.checks import harness

    mod = importlib.import_module(module)
    M, N, K, calls, copies = 3, 32, 256, 10, 2
    weights = harness.weight_copies(module, N, K, 7, copies, "cpu")
    inputs = harness.inputs_for(module, M, K, 11, calls, "cpu")
    one_by_one = [mod.reference(*(t[i] for t in inputs), *weights[i % copies]) for i in range(calls)]
    monkeypatch.setattr(harness, "REF_ELEMENTS", 2 * M * N)  # chunks of two calls
    got = dict(harness.references(mod, inputs, weights, calls, M, N))
    assert sorted(got) == list(range(calls))
    for i in range(calls):
        torch.testing.assert_close(got[i], one_by_one[i], rtol=1e-5, atol=1e-5)
    outs = torch.stack(one_by_one).to(torch.float16)
    outs[7, 1, 5] += 1.0 + outs[7, 1, 5].abs()
    with pytest.raises(CheckFailed, match="call 7 of the timed batch"):
        for i, expected in harness.references(mod, inputs, weights, calls, M, N):
            checks.compare(outs[i], expected, what="x", rtol=checks.tolerance_for(torch.float16),
                           context=f" (call {i} of the timed batch)")  # fmt: skip


def test_a_timed_batch_hands_over_at_most_out_bytes_of_outputs():
    """FP8's prefill (a 64 MB output a call) timed 58 calls: 3.7 GB a mode handed over from the worker while the cell
    held the GPU alone (28 s on an H100) and eight notebooks' copies ran the GPU out of memory. A batch's outputs stay
    within OUT_BYTES; a decode keeps its ~50 ms batch."""
    from qmatmul.checks import fp8, harness

    M, N, K = fp8.PREFILL_SHAPE
    prefill = harness.calls_for(fp8.bytes_moved(M, N, K), 4.2e12, est_ms=1.2, out_bytes=M * N * 2)
    assert prefill == harness.MIN_CALLS and prefill * M * N * 2 <= harness.OUT_BYTES
    assert harness.calls_for(fp8.bytes_moved(M, N, K), 4.2e12, est_ms=1.2) == 42  # what the cap cut
    decode = harness.calls_for(28672 * 8192, 4.2e12, out_bytes=28672 * 2)
    assert decode == harness.calls_for(28672 * 8192, 4.2e12) > 100


STATEFUL = [
    *TIMED[:2],
    ("learner", (
        "from qmatmul.scaffold import fp8\n\n"
        "def decode(x, q, s, out=None):  # right only under the path the check forced\n"
        "    out.copy_(w8a16.reference(x, q, s) + (0 if fp8.FORCED_PATH == [False] else 1))\n"
        "    return out\n")),
]  # fmt: skip


def test_a_timed_batch_runs_under_the_state_the_checks_set():
    """The worker applies checks.WORKER_STATE before every op, timed batches included. It applied it to calls
    alone, so on the H200 FP8's timed batches ran the portable path that test_matmul had forced last (5-6x
    slower), and the correct student lost both speed cells through nbgrader (2026-12-02)."""
    from qmatmul import fp8
    from qmatmul.checks import harness

    w = Worker(STATEFUL, timeout=60)
    kw = dict(module="qmatmul.w8a16", N=48, K=64, M=2, out_dtype=torch.float16, nbytes=1 << 20, device="cpu")
    try:
        with fp8.use_path(False):
            assert harness.time_calls(RemoteFunction(w, "decode"), what="decode", **kw).eager_ms > 0
        with pytest.raises(CheckFailed, match=r"decode \(timed, eager\).*differ from the reference"):
            harness.time_calls(RemoteFunction(w, "decode"), what="decode", **kw)  # the state is gone again
    finally:
        w.close()


def test_a_scratch_line_beside_a_wrapper_is_not_its_code():
    """A wrapper's locals are its own: a scratch product bound to the same name elsewhere is not reached."""
    cells = [
        ("ex2", "import torch\nimport triton\n@triton.jit\ndef k(p):\n    pass\n", True),
        ("ex2b", "ref = torch.ones(2, 2) @ torch.ones(2, 2)\ndef f(x, out):\n    ref = out\n    k[(1,)](ref)\n    return ref\n", True),
    ]  # fmt: skip
    assert static.own_kernel_problems(static.parse(cells), "f") == []
    leaked = [cells[0], ("ex2b", "ref = torch.ones(2, 2) @ torch.ones(2, 2)\ndef f(x, out):\n    k[(1,)](out)\n    return ref\n", True)]  # fmt: skip
    assert static.own_kernel_problems(static.parse(leaked), "f")


def test_a_later_definition_replaces_an_earlier_one():
    """A learner who fixed a cell and ran it again is read as the kernel now runs."""
    first = ("In[1]", "import torch\ndef f(x, out):\n    return out.copy_(torch.matmul(x, x))\n", False)
    kernel = ("In[2]", "import triton\n@triton.jit\ndef k(p):\n    pass\n", False)
    fixed = ("In[3]", "def f(x, out):\n    k[(1,)](out)\n    return out\n", False)
    assert static.own_kernel_problems(static.parse([first, kernel, fixed]), "f") == []
    assert static.own_kernel_problems(static.parse([kernel, fixed, first]), "f")


@pytest.mark.parametrize("chapter", ["w8a16", "w4a16", "fp8", "mxfp4", "nvfp4"])
def test_the_timed_reference_stays_on_the_operands_device(chapter):
    """The trusted side rechecks every timed output (up to 800 calls of a 28672 x 8192 weight): a reference that
    copied its operands to the host took minutes a cell on the H200 (FP8, 2026-12-01). Meta tensors refuse any
    copy to the host, so a reference that makes one fails here."""
    import importlib

    from qmatmul import checks

    mod = importlib.import_module(f"qmatmul.{chapter}")
    N, K, M = 64, 256, 3
    g = checks.generator(0, "cpu")
    weights = [t.to("meta") if isinstance(t, torch.Tensor) else t for t in mod.timing_weights(N, K, g)]
    inputs = [t[0].to("meta") for t in mod.timing_inputs(M, K, g, 1)]
    y = mod.reference(*inputs, *weights)
    assert y.device.type == "meta" and tuple(y.shape) == (M, N)


@pytest.mark.parametrize("chapter", ["w8a16", "fp8"])
def test_timed_inputs_are_drawn_in_bounded_chunks_and_the_same_on_both_sides(chapter, monkeypatch):
    """harness.inputs_for: what the worker writes into its buffers inside the timed window equals what the trusted
    side regenerates for the references, chunked or not; each draw holds at most GEN_CHUNK elements."""
    import importlib

    from qmatmul import checks
    from qmatmul.checks import harness

    mod = importlib.import_module(f"qmatmul.{chapter}")
    M, K, n = 3, 40, 7
    whole = harness.inputs_for(mod.__name__, M, K, 11, n, "cpu")
    draws = []
    real = mod.timing_inputs
    monkeypatch.setattr(mod, "timing_inputs", lambda *a: draws.append(a[-1]) or real(*a))
    monkeypatch.setattr(harness, "GEN_CHUNK", 2 * M * K)
    chunked = harness.inputs_for(mod.__name__, M, K, 11, n, "cpu")
    buffers = tuple(torch.empty_like(t) for t in chunked)
    harness.inputs_for(mod.__name__, M, K, 11, n, "cpu", out=buffers)
    assert draws == [2, 2, 2, 1] * 2
    for a, b in zip(chunked, buffers, strict=True):
        assert a.shape == (n, *a.shape[1:]) and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
    assert [t.shape for t in whole] == [t.shape for t in chunked]
    if chapter == "fp8":
        xq = whole[0]
        assert xq.dtype == torch.float8_e4m3fn and not xq.float().isnan().any()
        codes = mod.timing_inputs(64, 64, checks.generator(3, "cpu"), 4)[0].view(torch.uint8)
        assert set((codes >> 3).unique().tolist()) == set(range(32))  # both signs, every exponent
        assert not torch.isnan(codes.view(torch.float8_e4m3fn).float()).any()


_COURSE = "from qmatmul import checks, w8a16\nimport torch\n"
_GIVEN = {"qmatmul.w8a16": {"prepare", "prefill_config", "decode_config", "QMAX"}}
HANDED_OVER = {  # every way found to hand an exercise to the course's own answer or to an oracle library
    "called": "def f(w):\n    return w8a16.quantize(w)\n",
    "imported": "from qmatmul.formats.w8a16 import quantize as q\ndef f(w):\n    return q(w)\n",
    "bound in a try": "try:\n    _q = w8a16.quantize\nexcept Exception:\n    pass\ndef f(w):\n    return _q(w)\n",
    "bound by a for": "for _q in [w8a16.quantize]:\n    pass\ndef f(w):\n    return _q(w)\n",
    "the module as a value": "m = w8a16\ndef f(w):\n    return m.quantize(w)\n",
    "getattr": "def f(w):\n    return getattr(w8a16, 'quantize')(w)\n",
    "qualified": "import qmatmul\ndef f(w):\n    return qmatmul.w8a16.quantize(w)\n",
    "a dotted import": "import qmatmul.formats.w8a16\ndef f(w):\n    return qmatmul.formats.w8a16.quantize(w)\n",
    "a default argument": "def f(w, _q=w8a16.quantize):\n    return _q(w)\n",
    "a global it assigns": "_q = w8a16.quantize\ndef f(w):\n    global _q\n    _q = _q\n    return _q(w)\n",
    "a lambda's global": "_q = w8a16.quantize\nf = lambda w: _q(w)\n",
    "torchao": "def f(w):\n    from torchao.prototype.mx_formats.mx_tensor import to_mx\n    return to_mx(w)\n",
    "exec": "exec('R = 1')\ndef f(w):\n    return R(w)\n",
    "a star import": "from qmatmul.formats.w8a16 import *\ndef f(w):\n    return quantize(w)\n",
    "globals": "globals()['R'] = 1\ndef f(w):\n    return R(w)\n",
    "sys.modules": "import sys\ndef f(w):\n    return sys.modules['qmatmul.w8a16'].quantize(w)\n",
    "a module attribute rebound": "torch.abs = w8a16.quantize\ndef f(w):\n    return torch.abs(w)\n",
    "setattr on a module": "_q = w8a16.quantize\nsetattr(torch, 'abs', _q)\ndef f(w):\n    return torch.abs(w)\n",
}
OWN_WORK = {  # what the chapter gives, and names of the course a graded function never reaches
    "given": "def f(x, q, s, out=None):\n    M, N, K, out = w8a16.prepare(x, q, s, out)\n    return w8a16.decode_config(M, N, K)\n",
    "given, imported": "from qmatmul.w8a16 import prepare\nimport qmatmul\ndef f(x, q, s, out=None):\n    qmatmul.w8a16.prepare(x, q, s, out)\n    return prepare(x, q, s, out)[3]\n",
    "given, by a dotted import": "import qmatmul.w8a16\ndef f(x, q, s, out=None):\n    return qmatmul.w8a16.prepare(x, q, s, out)[3]\n",
    "the reference, unreached": "ref = w8a16.quantize\ndef f(w):\n    return w.abs()\n",
    "setattr by a computed name": "def f(m, n):\n    setattr(m, n, 1)\n",
    "a rebinding elsewhere, not to an answer": "checks.fresh_seed = lambda: 1\ndef f(w):\n    return w.abs()\n",
    "an escape elsewhere": "import threading\ndef f(w):\n    return w.abs()\n",
    "a scratch comparison beside it": "q, s = w8a16.quantize(torch.ones(2, 2))\ndef f(w):\n    q = w.round()\n    s = w.abs()\n    return q, s\n",
    "a parameter named like a scratch result": "ref = w8a16.quantize\ndef f(w, ref=None):\n    return w if ref is None else ref\n",
    "a global set elsewhere": "def setup():\n    global CFG\n    CFG = 2\nsetup()\ndef f(w):\n    return w * CFG\n",
    "a star import": "from math import *\ndef f(w):\n    return w * pi\n",
    "an import inside": "def f(w):\n    import math\n    return w * math.pi\n",
    "a match": "def f(w):\n    match w.shape:\n        case (n, *rest):\n            return n, rest\n",
    "locals of every kind": "def f(w, *a, k=1, **kw):\n    try:\n        y = [v for v in w]\n    except ValueError as e:\n        raise e\n    def g(t):\n        return t\n    return g(y), a, k, kw\n",
}


@pytest.mark.parametrize("how", HANDED_OVER)
def test_a_graded_function_may_not_hand_its_work_to_the_course(how):
    """The course package is installed beside the learner's code, references and all: static.course_problems
    reads, from the submitted source, whether a graded function reaches any of it beyond the chapter's GIVEN."""
    src = static.parse([("imports", _COURSE, False), ("ex1", HANDED_OVER[how], True)])
    problems = static.course_problems(src, "f", _GIVEN, {"torch", "w8a16", "checks"})
    assert problems and "ex1" in problems[0], problems


@pytest.mark.parametrize("how", OWN_WORK)
def test_what_the_chapter_gives_costs_nothing(how):
    src = static.parse([("imports", _COURSE, False), ("ex1", OWN_WORK[how], True)])
    assert static.course_problems(src, "f", _GIVEN, {"torch", "w8a16", "checks"}) == []


def test_every_chapter_gives_what_its_solution_uses():
    """The solutions themselves reach nothing of the course beyond their chapter's GIVEN."""
    for chapter in ("roofline", "w8a16", "w4a16", "fp8", "mxfp4", "nvfp4", "layouts", "capstone"):
        cells = notebook.cells_of(
            nbformat.read(ROOT / "solutions" / chapter / f"{chapter}.ipynb", as_version=4)
        )
        ns = trusted.trusted_namespace(cells)
        given = static.given(ns)
        src = trusted.learner_source(cells)
        for cell in notebook.tests(cells):
            for name in {n.id for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Name)} & set(
                src.defs
            ):
                assert static.course_problems(src, name, given, set(ns)) == [], (chapter, name)


def test_on_a_gpu_the_worker_proves_its_own_kernels_and_under_the_interpreter_a_compile_worker_does(
    monkeypatch,
):
    """A GPU's worker runs its kernels compiled, so it answers the compile itself (no third process starting torch
    and running the cells again); under the interpreter its kernels are Python and the compile worker answers."""
    launch = {"name": "k", "args": {}}
    for gpu, interpret, itself in ((True, None, True), (True, "1", False), (False, None, False)):
        monkeypatch.setattr(torch.cuda, "is_available", lambda gpu=gpu: gpu)
        env = {"PATH": "/usr/bin"} | ({"TRITON_INTERPRET": interpret} if interpret else {})
        w = Worker(PROGRAM, env=env, timeout=20)
        asked = []
        monkeypatch.setattr(Worker, "_exchange", lambda self, job, what, timeout=None, asked=asked: asked.append(self)
                            or {"status": "ok", "stores": True})  # fmt: skip
        try:
            assert w.compiles_itself() is itself
            assert w._compile(launch, "k") is None
            assert (asked == [w]) is itself and (w.compiler is None) is itself
        finally:
            monkeypatch.undo()
            w.close()


BACKGROUND = [
    ("setup", notebook.QUIET_START),
    ("learner", (
        "import subprocess, sys, threading, time\n\n"
        "def _count(path):\n"
        "    n = 0\n"
        "    while True:\n"
        "        n += 1\n"
        "        with open(path, 'w') as f:\n"
        "            f.write(str(n))\n"
        "        time.sleep(0.005)\n\n"
        "threading.Thread(target=_count, args=('thread.txt',), daemon=True).start()\n"
        "_CHILD = ('import time\\nn = 0\\nwhile True:\\n    n += 1\\n    open(\"child.txt\", \"w\").write(str(n))\\n'\n"
        "          '    time.sleep(0.005)\\n')\n"
        "subprocess.Popen([sys.executable, '-c', _CHILD], start_new_session=True)\n\n"
        "def nap(s):\n"
        "    time.sleep(s)\n"
        "    return 0\n")),
]  # fmt: skip


@pytest.mark.parametrize("sandbox", [False, True], ids=["plain", "sandbox"])
def test_the_learners_process_runs_only_inside_its_jobs(sandbox, monkeypatch):
    """qmatmul/grader/freeze.py: a thread and a child process (in a session of its own) that the learner's code
    starts run while a job runs and make no progress between jobs; stopping the worker kills them. Left running,
    such code could put GPU work in another notebook's timed window, or keep working after its cell moved on."""
    import time

    from autograder import classroom
    from autograder import sandbox as sb
    from qmatmul.grader import freeze

    wrap, env = (), None
    if sandbox:
        if not classroom.sandbox_available():
            from conftest import skip_unless_required

            skip_unless_required(
                "bubblewrap with user namespaces is not available here", "QMATMUL_REQUIRE_SANDBOX"
            )
        wrap = [str(sb.SCRIPT)]
        env = {
            **os.environ,
            "QMATMUL_SANDBOX_HIDE": ":".join(sb.hidden()),
            "QMATMUL_SANDBOX_READ": ":".join(sb.shown()),
        }
    w = Worker(BACKGROUND, wrap=wrap, env=env, timeout=60)

    def counts():
        time.sleep(0.05)  # a write under way finishes (or stays stopped)
        return tuple(
            (w.scratch / name).read_text() if (w.scratch / name).exists() else ""
            for name in ("thread.txt", "child.txt")
        )

    try:
        for _ in range(40):  # a child interpreter starts slowly in a sandbox on a loaded machine
            RemoteFunction(w, "nap")(0.3)
            if all(counts()):
                break
        assert all(counts()), "the thread and the child ran while the jobs did"
        family = freeze.family(w.proc.pid)
        assert len(family) >= 2 and all(freeze.state(p) in ("T", "t", "Z", None) for p in family), family
        assert freeze.state(family[0]) in ("T", "t"), family
        before = counts()
        time.sleep(0.3)
        assert counts() == before, "between jobs the learner's thread and child process made progress"
        for _ in range(40):  # on a loaded machine a process may wait for a core through one short job
            RemoteFunction(w, "nap")(0.3)
            if all(int(b or 0) < int(a or 0) for a, b in zip(counts(), before, strict=True)):
                break
        assert all(int(b or 0) < int(a or 0) for a, b in zip(counts(), before, strict=True)), (
            "inside a job they run again"
        )
    finally:
        w.close()
    time.sleep(0.2)
    assert all(freeze.state(p) in (None, "Z") for p in family), (
        "closing the worker killed them, stopped or not"
    )


def test_the_notebooks_kernel_is_stopped_between_its_cells(monkeypatch, tmp_path):
    """nbhooks.ResilientExecute: the learner's kernel runs each code cell and is stopped between two of them
    (freeze.py), continued before the next; after the last code cell it runs on to its shutdown. A thread the first
    cell starts makes no progress while the kernel is stopped."""
    import time

    from qmatmul.grader import freeze, nbhooks

    calls, seen = [], []
    stop, cont = freeze.stop, freeze.cont

    def stopping(pid):
        calls.append("stop")
        stopped = stop(pid)
        time.sleep(0.3)
        seen.append(((tmp_path / "n.txt").read_text(), freeze.state(pid)))
        time.sleep(0.3)
        seen.append(((tmp_path / "n.txt").read_text(), freeze.state(pid)))
        return stopped

    monkeypatch.setattr(freeze, "stop", stopping)
    monkeypatch.setattr(freeze, "cont", lambda pid, stopped=(): calls.append("cont") or cont(pid, stopped))
    count = (
        "import threading, time\n"
        "def _count(n=0):\n"
        "    while True:\n"
        "        n += 1\n"
        f"        open({str(tmp_path / 'n.txt')!r}, 'w').write(str(n).rjust(9))\n"
        "        time.sleep(0.005)\n"
        "threading.Thread(target=_count, daemon=True).start()\n"
        "time.sleep(0.1)"
    )
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(count), nbformat.v4.new_markdown_cell("text"),
                                         nbformat.v4.new_code_cell("x = 1")])  # fmt: skip
    ex = nbhooks.ResilientExecute(timeout=60)
    ex.preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert calls == ["cont", "stop", "cont", "cont"], calls
    (a, state), (b, _) = seen
    assert state in ("T", "t") and a == b, seen
