"""Own kernel: does a graded wrapper launch a kernel defined in the notebook (`@triton.jit`, or Gluon's `@gluon.jit`),
and does the host code it reaches stay clear of PyTorch/numpy arithmetic (matmuls, `@`, `.tolist()`, `.item()`,
numpy)?"""

from __future__ import annotations

import ast

from qmatmul.grader.static.input_checks import find_input_checks
from qmatmul.grader.static.sizes import HOST_MODULES, Sizes
from qmatmul.grader.static.source import Source, added_cell_note, per_source, reached_statements
from qmatmul.grader.static.syntax import (
    bound_names,
    global_loads,
    param_names,
    parent_map,
    root_name,
    scoped_nodes,
    source_line,
)

__all__ = ["HOST_ARITHMETIC_ATTRS", "COURSE_PATHS", "READS_VALUES", "NO_KERNEL", "own_kernel_problems"]


# Host code reached from a kernel wrapper must leave the arithmetic to the kernel.
HOST_ARITHMETIC_ATTRS = {
    "matmul", "mm", "bmm", "baddbmm", "addbmm", "addmm", "mv", "addmv", "dot", "vdot", "einsum", "tensordot",
    "linear", "_scaled_mm", "_int_mm", "_weight_int8pack_mm", "_weight_int4pack_mm", "conv1d", "conv2d",
    "tolist", "item", "numpy", "from_numpy", "frombuffer", "inner", "outer", "kron", "chain_matmul",
    "multi_dot",
}  # fmt: skip
# The course's own host paths, which a kernel exercise must not call for its result.
COURSE_PATHS = {
    "naive": "the naive dequantize-then-matmul path", "reference": "the grading reference",
    "dequantize": "a full dequantization of the weights", "scaled_mm": "torch._scaled_mm",
}  # fmt: skip
READS_VALUES = {"tolist", "item", "numpy", "from_numpy", "frombuffer"}
# Why a wrapper fails when it launches no kernel of the notebook's: Triton's and Gluon's kernels both count. (The
# first words are those the graded corpus expects, autograder/adversarial/w8a16/given_path_everywhere.py.)
NO_KERNEL = "launches no @triton.jit kernel defined in the notebook (nor a @gluon.jit one)"


def _function(src: Source, name: str) -> ast.AST | None:
    """The plain function (def or `name = lambda ...`) a name is bound to, when that is its only binding."""
    binds = src.defs.get(name, [])
    if len(binds) != 1 or name in src.jit:
        return None
    node = binds[0][1]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Lambda):
        return node.value
    return None


def _launching_params(src: Source, name: str, seen: frozenset = frozenset()) -> set[str]:
    """The parameters of the notebook's function `name` that it launches as kernels: `kernel[grid](...)` with
    `kernel` a parameter it never rebinds, itself or through another such helper it hands the parameter to."""
    fn = _function(src, name)
    if fn is None or name in seen:
        return set()
    params = param_names(fn)
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    free = set(params) - bound_names(body)
    out = set()
    for sub in (s for b in body for s in ast.walk(b)):
        if not isinstance(sub, ast.Call):
            continue
        if isinstance(sub.func, ast.Subscript) and isinstance(sub.func.value, ast.Name):
            if sub.func.value.id in free:
                out.add(sub.func.value.id)
        elif isinstance(sub.func, ast.Name) and sub.func.id in src.defs and sub.func.id not in free:
            passed = _passed(src, sub, seen | {name})
            out |= {p for p in passed if p in free}
    return out


def _passed(src: Source, call: ast.Call, seen: frozenset = frozenset()) -> set[str]:
    """The names a call of one of the notebook's functions hands to parameters that function launches."""
    fn = _function(src, call.func.id)
    if fn is None:
        return set()
    launching = _launching_params(src, call.func.id, seen)
    positional = [*fn.args.posonlyargs, *fn.args.args]
    out = set()
    for i, arg in enumerate(call.args):
        if any(isinstance(a, ast.Starred) for a in call.args[: i + 1]):
            break
        if i < len(positional) and positional[i].arg in launching and isinstance(arg, ast.Name):
            out.add(arg.id)
    for kw in call.keywords:
        if kw.arg in launching and isinstance(kw.value, ast.Name):
            out.add(kw.value.id)
    return out


def _added_notes(src: Source, nodes) -> list[str]:
    """added_cell_note for each name the statements read from the module's namespace that no cell the grader runs
    binds, but a cell it does not run defines."""
    missing = set().union(*(global_loads(node) for _, node in nodes)) - set(src.defs) - set(src.modules)
    return [added_cell_note(n, src.added[n]) for n in sorted(missing & set(src.added))]


@per_source
def own_kernel_problems(src: Source, name: str) -> list[str]:
    """Why `name` does not compute in a Triton (or Gluon) kernel of the notebook's own ([] when it does).

    A wrapper may validate (an input check's `.item()` is no reading of values: find_input_checks), compute sizes with numpy
    or math (`np.ceil(N / BLOCK)`: Sizes) and launch its kernel itself or through a helper it hands the kernel
    to (`_launch(kernel, grid, ...)`); a kernel may be `@triton.jit`, `@gluon.jit` or `kernel = triton.jit(body)`
    (`gluon.jit(body)`): Source.jit, a decorator read through the cells' imports to triton."""
    if name in src.jit:
        return []
    if name not in src.defs:
        return []  # not defined: calling it fails with its own message
    nodes, reached = reached_statements(src, name, scoped=True)
    host = [(label, node) for label, node in nodes if getattr(node, "name", None) not in src.jit]
    sizes = Sizes(src, host)
    checks = find_input_checks(src, host, sizes)
    problems = []
    launches = set()
    text = dict((label, s) for label, s, _ in src.cells)
    for label, node in host:
        parents = parent_map(node)
        for sub, scopes in scoped_nodes(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Subscript):
                base = root_name(sub.func.value)
                if base in src.jit:
                    launches.add(base)
            elif (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in src.defs
                  and sizes.scope_of(sub.func.id, scopes) is None):  # fmt: skip
                launches |= _passed(src, sub) & src.jit  # _launch(kernel, grid, ...)
            line = f"`{source_line(text[label], sub)}` (cell {label})"
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.MatMult):
                problems.append(f"it computes the product with PyTorch's `@` on the host: {line}")
            elif (
                isinstance(sub, ast.Attribute)
                and sub.attr in COURSE_PATHS
                and src.modules.get(root_name(sub) or "", "").startswith("qmatmul")
            ):
                problems.append(f"it calls the course's {ast.unparse(sub)}, {COURSE_PATHS[sub.attr]}: {line}")
            elif isinstance(sub, ast.Attribute) and sub.attr in READS_VALUES:
                if not (sub.attr in {"item", "tolist"} and id(sub) in checks.inside and checks.certified):
                    problems.append(f"it reads tensor values into Python (.{sub.attr}): {line}")
            elif isinstance(sub, ast.Attribute) and sub.attr in HOST_ARITHMETIC_ATTRS:
                problems.append(f"it computes the product with PyTorch (.{sub.attr}) on the host: {line}")
            elif isinstance(sub, ast.Name) and src.modules.get(sub.id, "").split(".")[0] in HOST_MODULES:
                if not sizes.numpy_call(sub, scopes, parents):
                    problems.append(f"it computes with numpy: {line}")
    if not launches:
        problems.insert(0, f"{name} {NO_KERNEL}")
        problems[1:1] = _added_notes(src, host)
    return sorted(set(problems), key=problems.index)
