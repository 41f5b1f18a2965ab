"""What the trusted side reads in the learner's source, which their code cannot switch off.

Two questions, answered from the submitted cells (never from the learner's process):
  * escapes: constructs that could hide work from the worker's op audit, forge its replies or rewrite the
    grader's view of the process (threads, ctypes, dynamic code, frame introspection, monkeypatching, fd-level
    I/O). None is needed by any exercise; each is flagged with its cell and line for the instructor, and a
    kernel exercise graded while one is present earns nothing.
  * own kernel: does a graded wrapper launch a `@triton.jit` kernel defined in the notebook, and does the host
    code it reaches stay clear of PyTorch/numpy arithmetic (matmuls, `@`, `.tolist()`, `.item()`, numpy)?
"""

from __future__ import annotations

import ast
import builtins
import types
from dataclasses import dataclass, field

ESCAPE_MODULES = {
    "ctypes", "cffi", "threading", "_thread", "multiprocessing", "concurrent", "subprocess", "signal",
    "importlib", "builtins", "gc", "inspect", "faulthandler", "code", "codeop", "marshal", "types", "runpy",
    "numba", "cupy", "jax", "pycuda", "cuda", "asyncio", "sched", "pty", "mmap", "resource", "ptrace",
}  # fmt: skip
ESCAPE_CALLS = {"exec", "eval", "compile", "__import__", "globals", "locals", "vars", "breakpoint"}
NAME_CALLS = {"getattr", "setattr", "delattr", "hasattr"}  # flagged when the attribute name is not a literal
ESCAPE_ATTRS = {
    "_C", "_python_dispatch", "_disable_current_modes", "_DisableTorchDispatch", "cpp_extension", "library",
    "_dynamo", "tb_frame", "f_back", "f_locals", "f_globals", "f_code", "f_builtins", "gi_frame", "cr_frame",
    "ag_frame", "__globals__", "__code__", "__closure__", "__builtins__", "__dict__", "__class__",
    "__subclasses__", "__mro__", "__bases__", "__getattribute__", "__import__", "__loader__", "__spec__",
    "__func__", "__wrapped__", "_getframe", "settrace", "setprofile", "addaudithook", "meta_path",
    "path_hooks", "__stdout__", "__stderr__",
}  # fmt: skip
SYS_ATTRS = {
    "modules"
}  # reading sys.stdout is fine; rebinding it is caught as a rebind of a module attribute
OS_ATTRS = {
    "write", "writev", "dup", "dup2", "fdopen", "fork", "forkpty", "system", "popen", "kill", "killpg",
    "setsid", "setpgid", "setpgrp", "_exit", "pipe", "pipe2", "open", "execv", "execve", "execl", "execle",
    "execlp", "execvp", "execvpe", "spawnv", "spawnve", "spawnl", "posix_spawn", "posix_spawnp", "abort",
    "environ",
}  # fmt: skip
# os calls that write, signal or end processes but bring no value back into the learner's function (the channel
# forgers and detached processes of the corpus): flagged, yet not a way to fetch a hidden answer (course_problems).
OS_NO_VALUE = {"write", "writev", "dup", "dup2", "fork", "forkpty", "setsid", "setpgid", "setpgrp", "kill",
               "killpg", "_exit", "abort"}  # fmt: skip
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
# Libraries that compute a course format's answer in one call (the tests' own oracles): no exercise uses them.
ANSWER_LIBRARIES = {"torchao", "ml_dtypes"}
READS_VALUES = {"tolist", "item", "numpy", "from_numpy", "frombuffer"}
HOST_MODULES = {"numpy", "np", "math_np", "scipy"}


@dataclass
class Finding:
    cell: str
    line: int
    code: str
    what: str
    # False where it cannot fetch a hidden answer: setattr/delattr/hasattr by a computed name, OS_NO_VALUE
    reads: bool = True

    def describe(self) -> str:
        return f"cell {self.cell}, line {self.line}: `{self.code}` ({self.what})"


@dataclass
class Source:
    """The learner's cells, parsed. `defs` maps each top-level name to the statements that bind it."""

    cells: list[tuple[str, str, ast.Module | None]]  # (label, source, tree)
    defs: dict = field(default_factory=dict)  # name -> list of (label, node)
    jit: set = field(default_factory=set)  # names bound to @triton.jit functions (or to triton.jit(f))
    # kernel -> the functions `kernel = triton.jit(f)` wraps
    kernel_bodies: dict = field(default_factory=dict)
    modules: dict = field(default_factory=dict)  # alias -> module name, from the cells' imports
    escapes: list = field(default_factory=list)  # Findings in the learner's own cells
    unparsable: list = field(default_factory=list)  # labels of cells that are not Python
    learners: set = field(default_factory=set)  # labels of the learner's own cells
    globals: set = field(default_factory=set)  # names a function declares `global` (it may bind them)
    star_imports: bool = False  # a cell imports `*` from a module
    course_stars: list = field(default_factory=list)  # (label, line) of each `from qmatmul... import *`
    # name -> where a cell the grader does not run defines it (notebook.added_definitions), for the messages
    added: dict = field(default_factory=dict)


def _python(src: str) -> str:
    """IPython magics and shell escapes turned into plain Python (as the notebook kernel runs them)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(src)
    except Exception:  # noqa: BLE001 - without IPython the source is read as it is
        return src


def _is_jit(node: ast.AST) -> bool:
    for dec in getattr(node, "decorator_list", []):
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name in {"jit", "autotune", "heuristics"}:
            return True
    return False


def _triton_decorator(node: ast.AST, modules: dict) -> bool:
    """`triton.jit`, `triton.autotune`, `triton.heuristics` (or the name imported from triton)."""
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    root = _root(node) if isinstance(node, (ast.Attribute, ast.Name)) else None
    return name in {"jit", "autotune", "heuristics"} and modules.get(root or "", "").split(".")[0] == "triton"


def _jit_wrapped(value: ast.AST | None, modules: dict) -> str | None:
    """The function a `triton.jit(f)`, `triton.jit(...)(f)` or `triton.autotune(...)(triton.jit(f))` call wraps."""
    if not isinstance(value, ast.Call) or len(value.args) != 1:
        return None
    f = value.func
    direct = _triton_decorator(f, modules)
    if not direct and not (
        isinstance(f, ast.Call) and not value.keywords and _triton_decorator(f.func, modules)
    ):
        return None
    inner = value.args[0]
    return inner.id if isinstance(inner, ast.Name) else _jit_wrapped(inner, modules)


def _line(src: str, node: ast.AST) -> str:
    lines = src.splitlines()
    n = getattr(node, "lineno", 1) - 1
    return lines[n].strip()[:120] if 0 <= n < len(lines) else ""


def parse(cells: list[tuple[str, str, bool]]) -> Source:
    """cells: (label, source, is_learners) in notebook order; escapes are looked for in the learner's cells."""
    out = Source(cells=[])
    for label, src, learners in cells:
        py = _python(src)
        try:
            tree = ast.parse(py)
        except SyntaxError:
            out.cells.append((label, py, None))
            if learners:
                out.unparsable.append(label)
            continue
        out.cells.append((label, py, tree))
        if learners:
            out.learners.add(label)
        # the cell's imports first: `k = triton.jit(f)` may follow `import triton`
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    out.modules[a.asname or a.name.split(".")[0]] = a.name
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    out.modules[a.asname or a.name] = f"{node.module}.{a.name}"
                    out.star_imports |= a.name == "*"
                    if a.name == "*" and node.module.split(".")[0] == "qmatmul" and learners:
                        out.course_stars.append((label, node.lineno))
            elif isinstance(node, ast.Global):
                out.globals.update(node.names)
        for node in tree.body:
            names, wrapped = [], None
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
                if _is_jit(node):
                    out.jit.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                if (
                    not isinstance(node, ast.AugAssign)
                    and len(targets) == 1
                    and isinstance(targets[0], ast.Name)
                ):
                    wrapped = _jit_wrapped(node.value, out.modules)  # `kernel = triton.jit(body)`
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                names = sorted(_bound([node]))  # for, while, if, try, with: whatever they bind, as they run
            for n in names:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    out.defs[n] = [(label, node)]  # a later def replaces an earlier one, as when it runs
                    out.kernel_bodies.pop(n, None)
                    if not _is_jit(node):
                        out.jit.discard(n)
                else:
                    out.defs.setdefault(n, []).append((label, node))
                    if wrapped:
                        out.jit.add(n)
                        out.kernel_bodies.setdefault(n, set()).add(wrapped)
                    else:  # bound to something else as well: not read as a kernel (its bindings are followed)
                        out.jit.discard(n)
                        out.kernel_bodies.pop(n, None)
        if learners:
            out.escapes += _escapes(label, py, tree, out.modules)
    return out


def _bound(statements: list) -> set[str]:
    """Names the statements bind in their own scope (assignment and loop targets, `as` and match names,
    definitions, imports), not those bound inside the functions and classes they define."""
    names, todo = set(), list(statements)
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
            continue
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            names.add(n.name)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            names.add(n.rest)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
        todo.extend(ast.iter_child_nodes(n))
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _escapes(label: str, src: str, tree: ast.Module, known: dict) -> list[Finding]:
    found = []
    module_aliases = dict(known)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                module_aliases[a.asname or a.name.split(".")[0]] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                module_aliases[a.asname or a.name] = f"{node.module}.{a.name}"

    def add(node, what, reads=True):
        found.append(Finding(label, getattr(node, "lineno", 0), _line(src, node), what, reads))

    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom):
                mods += [f"{node.module}.{a.name}" for a in node.names]
            for m in mods:
                parts = set(m.split("."))
                if parts & ESCAPE_MODULES or parts & {"_C", "cpp_extension", "_python_dispatch", "library"}:
                    add(node, f"imports {m}")
                    break
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ESCAPE_CALLS:
                add(node, f"calls {node.func.id}()")
            elif node.func.id in NAME_CALLS and (
                len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)
            ):
                add(
                    node,
                    f"{node.func.id}() with an attribute name that is not written out",
                    node.func.id == "getattr",
                )
        elif isinstance(node, ast.Attribute):
            base = _root(node)
            mod = module_aliases.get(base, base)
            if node.attr in ESCAPE_ATTRS:
                add(node, f"uses .{node.attr}")
            elif mod == "sys" and node.attr in SYS_ATTRS:
                add(node, f"uses sys.{node.attr}")
            elif mod == "os" and node.attr in OS_ATTRS - {"environ"}:
                add(node, f"uses os.{node.attr}", node.attr not in OS_NO_VALUE)
        elif isinstance(node, ast.Name) and node.id in {"__builtins__", "__loader__", "__spec__"}:
            add(node, f"uses {node.id}")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and _root(t) in module_aliases:
                    add(
                        node,
                        f"rebinds {ast.unparse(t)} (an attribute of the module {module_aliases[_root(t)]})",
                    )
    return found


def _reached(
    src: Source, name: str, scoped: bool = False, device: bool = False
) -> tuple[list[tuple[str, ast.AST]], set[str]]:
    """The top-level statements a function reaches through names bound in the notebook (itself included).
    scoped: follow only the names a statement reads from the module's namespace (_global_loads), so that a
    scratch line `ref = x @ w.T` beside a function whose own `ref` is a local is not reached.
    device: also the functions a `kernel = triton.jit(f)` wraps (device code, as a decorated kernel's own
    definition is: read for the course's names, never followed further)."""
    seen, todo, nodes, bodies = set(), [name], [], set()
    while todo:
        n = todo.pop()
        if n in seen or n not in src.defs:
            continue
        seen.add(n)
        for label, node in src.defs[n]:
            nodes.append((label, node))
            if n in src.jit:
                continue  # device code: Triton's rules, not the host's
            names = (
                _global_loads(node) if scoped else {s.id for s in ast.walk(node) if isinstance(s, ast.Name)}
            )
            todo += [m for m in names if m in src.defs and m not in seen]
        for body in sorted(src.kernel_bodies.get(n, ())) if device and n in src.jit else ():
            if body in src.jit:
                todo.append(body)
            elif body in src.defs and body not in bodies:  # read as device code; as host code only if named
                bodies.add(body)
                nodes += src.defs[body]
    return nodes, seen


def _scoped(node: ast.AST, scopes: tuple = ()):
    """(sub-node, the functions and lambdas it sits in, innermost last) for every node under `node`. A function's
    decorators and defaults belong to the scope that defines it; its body to its own."""
    yield node, scopes
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        outer = [*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults]
        for child in outer:
            if child is not None:
                yield from _scoped(child, scopes)
        for child in node.body if isinstance(node.body, list) else [node.body]:
            yield from _scoped(child, (*scopes, node))
        return
    for child in ast.iter_child_nodes(node):
        yield from _scoped(child, scopes)


def _parents(node: ast.AST) -> dict:
    return {child: parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)}


def _params(fn: ast.AST) -> list[str]:
    a = fn.args
    return [x.arg for x in [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs,
                            *([a.kwarg] if a.kwarg else [])]]  # fmt: skip


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
    params = _params(fn)
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    free = set(params) - _bound(body)
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


# -- sizes: what host code may hand numpy, and what an input check may read -------------------------------------
# Tensor metadata: attributes and methods that answer with sizes, types and places, never with a tensor's values.
META_ATTRS = {"shape", "ndim", "dtype", "device", "itemsize", "is_cuda", "layout"}
META_METHODS = {"size", "numel", "dim", "stride", "element_size", "nelement", "ndimension", "is_contiguous",
                "storage_offset", "get_device", "data_ptr"}  # fmt: skip
# What a class of the learner's would define to make such a read carry a tensor's values.
META_HOOKS = META_ATTRS | META_METHODS | {
    "__len__", "__index__", "__int__", "__float__", "__getattr__", "__getattribute__", "__get__", "__set_name__",
    "__class_getitem__",
}  # fmt: skip
# Builtins whose result, from sizes, is a number, a string or a tuple (nothing that could alias an array).
SCALAR_BUILTINS = {"int", "float", "bool", "str", "complex", "len", "hash"}
SIZE_BUILTINS = {"min", "max", "abs", "round", "sum", "pow", "divmod", "tuple", "range"}
TRITON_SIZES = {"cdiv", "next_power_of_2", "constexpr"}
NUMPY_CONSTANTS = {"pi", "e", "inf", "nan", "newaxis", "euler_gamma", "float16", "float32", "float64", "int8",
                   "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool_", "intp"}  # fmt: skip
# The course's given calls that answer with sizes: prepare's first three results are M, N, K (every chapter), a
# launch configuration is a dict of numbers.
COURSE_SIZES = {"prepare": 3, "prepare_block": 3}
DICT_READS = {"get", "keys", "values", "items"}


# Tensor methods whose keywords (dtype=, device=, size=) say what to allocate or convert to.
TENSOR_METHODS = {"to", "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "type", "cuda", "view",
                  "reshape", "expand", "clone", "contiguous", "empty_like", "zeros_like"}  # fmt: skip
# Calls that make no object of the learner's design: the libraries the course uses, printing, warnings.
_PLAIN_CALLEES = {"torch", "triton", "math", "qmatmul", "warnings", "logging", *HOST_MODULES}


def _metadata_trusted(src: Source, nodes) -> bool:
    """Does tensor metadata read as sizes in this code? Not where the learner's code defines an attribute of such
    a name itself (a class member, an attribute store, a field named in a string or a keyword of a constructor:
    namedtuple, type(), argparse.Namespace), as a stand-in object whose `.shape` is a tensor would."""
    for _, node in nodes:
        messages = {
            id(n) for s in ast.walk(node) if isinstance(s, (ast.Raise, ast.Assert)) for n in ast.walk(s)
        }
        for sub in ast.walk(node):
            if isinstance(sub, ast.ClassDef):
                for stmt in sub.body:
                    stored = {
                        n.id
                        for n in ast.walk(stmt)
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                    }
                    names = {getattr(stmt, "name", None)} | stored
                    if names & META_HOOKS:
                        return False
            elif (
                isinstance(sub, ast.Attribute)
                and not isinstance(sub.ctx, ast.Load)
                and sub.attr in META_HOOKS
            ):
                return False
            elif isinstance(sub, ast.Call) and id(sub) not in messages:  # an error's message defines nothing
                root, f = _root(sub.func), sub.func
                if root in src.modules and src.modules[root].split(".")[0] in _PLAIN_CALLEES:
                    continue
                if isinstance(f, ast.Name) and (
                    f.id in {"print", "isinstance", "len", "range"}
                    or all(
                        isinstance(n, (ast.FunctionDef, ast.ClassDef))
                        for _, n in src.defs.get(f.id, [(None, None)])
                    )
                ):
                    continue  # the learner's own functions and classes are read where they are defined
                tensor_method = (
                    isinstance(f, ast.Attribute) and root not in src.modules and f.attr in TENSOR_METHODS
                )
                if any(k.arg in META_HOOKS for k in sub.keywords) and not tensor_method:
                    return False  # argparse.Namespace(shape=t), mock.configure_mock(shape=t)
                for arg in [*sub.args, *(k.value for k in sub.keywords)]:
                    for c in ast.walk(arg):
                        if isinstance(c, ast.Constant) and isinstance(c.value, str):
                            if set(c.value.replace(",", " ").split()) & META_HOOKS:
                                return False
    return True


class _Sizes:
    """Which expressions of the host code are sizes: numbers, strings and tuples built from literals, tensor
    metadata (`x.shape[0]`, `x.size(1)`, `x.numel()`), module constants, the sizes prepare returns and the launch
    configurations, and names bound only to such values, never to a tensor, a parameter, or anything derived from
    a tensor's values. `inline`: the value is consumed where it is made (an argument of numpy or of int()), so a
    fresh array or list built from sizes counts too; bound to a name, only what cannot alias an array does."""

    def __init__(self, src: Source, nodes):
        self.src = src
        self.meta = _metadata_trusted(src, nodes)
        self._final: dict = {}
        self._progress: dict = {}
        self._parents: dict = {}
        self.globals = self._module()

    # -- names ------------------------------------------------------------------------------------------------
    def _locals(self, fn) -> set[str]:
        body = fn.body if isinstance(fn.body, list) else [fn.body]
        declared = {g for b in body for n in ast.walk(b) if isinstance(n, (ast.Global, ast.Nonlocal))
                    for g in n.names}  # fmt: skip
        return (set(_params(fn)) | _bound(body)) - declared

    def _scope_of(self, name: str, scopes: tuple):
        for i in range(len(scopes) - 1, -1, -1):
            if name in self._locals(scopes[i]):
                return scopes[: i + 1]
        return None

    def name(self, name: str, scopes: tuple) -> bool:
        where = self._scope_of(name, scopes)
        if where is None:
            return name in self.globals
        return name in self._local(where)

    def _local(self, scopes: tuple) -> set[str]:
        fn = scopes[-1]
        if id(fn) in self._final:
            return self._final[id(fn)]
        if id(fn) in self._progress:
            return self._progress[id(fn)]
        body = fn.body if isinstance(fn.body, list) else [fn.body]
        binds = _bindings(body)
        nonlocal_ = {g for b in body for n in ast.walk(b) if isinstance(n, ast.Nonlocal) for g in n.names}
        clean = {n for n in self._locals(fn) - set(_params(fn)) - nonlocal_ if binds.get(n)}
        self._progress[id(fn)] = clean
        self._fixpoint(clean, binds, scopes)
        del self._progress[id(fn)]
        if not self._progress:  # no enclosing scope still provisional: final
            self._final[id(fn)] = clean
        return clean

    def _module(self) -> set[str]:
        stmts = [s for _, _, tree in self.src.cells if tree is not None for s in tree.body]
        binds = _bindings(stmts)
        clean = {n for n in binds if binds[n] and n not in self.src.globals}
        self.globals = clean
        self._fixpoint(clean, binds, ())
        return clean

    def _fixpoint(self, clean: set, binds: dict, scopes: tuple) -> None:
        """Drop the names with a binding that is not a size, until none is left to drop (the largest set)."""
        changed = True
        while changed:
            changed = False
            for n in sorted(clean):
                if not all(self._binding(b, scopes, n) for b in binds[n]):
                    clean.discard(n)
                    changed = True

    def _binding(self, bind, scopes: tuple, name: str) -> bool:
        if bind is None:
            return False
        kind = bind[0]
        if kind == "expr":
            return self.clean(bind[1], scopes) or (
                self._dict(bind[1], scopes) and self._dict_uses(name, scopes)
            )
        if kind == "elem":  # M, N, K, out = w8a16.prepare(...); M, K = x.shape; a, b = cfg (its keys)
            inner, i = bind[1], bind[2]
            if inner[0] == "expr":
                e = inner[1]
                return i < self._course_sizes(e, scopes) or self.clean(e, scopes) or self._dict(e, scopes)
            return self._binding(inner, scopes, "")
        if kind == "iter":
            it = bind[1]
            if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
                return all(self.clean(e, scopes) for e in it.elts)
            return self.clean(it, scopes)
        if kind == "aug":
            node = bind[1]
            return (
                not isinstance(node.op, ast.MatMult)
                and self.name(name, scopes)
                and self.clean(node.value, scopes)
            )
        return False

    def _course_sizes(self, e: ast.AST, scopes: tuple) -> int:
        """How many of a call's first results are sizes: 3 for the chapter's prepare (M, N, K, ...)."""
        if not isinstance(e, ast.Call):
            return 0
        path = self.module_path(e.func, scopes) or ""
        if path.split(".")[0] != "qmatmul":
            return 0
        return COURSE_SIZES.get(path.rsplit(".", 1)[-1], 0)

    def _dict(self, e: ast.AST, scopes: tuple) -> bool:
        """A dict of sizes: a launch configuration of the course's (`w8a16.prefill_config(M, N, K, device)`), a
        dict literal or dict() of sizes, or one that unpacks such a dict."""
        if isinstance(e, ast.Call):
            args = [*e.args, *(k.value for k in e.keywords)]
            path = self.module_path(e.func, scopes) or ""
            if path.split(".")[0] == "qmatmul" and path.endswith("config"):
                return all(self.clean(a, scopes, inline=True) for a in args)
            if isinstance(e.func, ast.Name) and e.func.id == "dict" and self._builtin("dict", scopes):
                return all(self.clean(a, scopes) or self._dict_value(a, scopes) for a in args)
            return False
        if isinstance(e, ast.Dict):
            return all(
                (self.clean(k, scopes) and self.clean(v, scopes))
                if k is not None
                else self._dict_value(v, scopes)
                for k, v in zip(e.keys, e.values, strict=True)
            )
        return False

    def _dict_value(self, e: ast.AST, scopes: tuple) -> bool:
        return self._dict(e, scopes) or (isinstance(e, ast.Name) and self.name(e.id, scopes))

    def _dict_uses(self, name: str, scopes: tuple) -> bool:
        """A dict of sizes bound to `name` stays one: it is only read (`cfg["BLOCK_M"]`, `**cfg`, `cfg.get(...)`,
        `"k" in cfg`, len, iteration), never stored into, handed on or aliased."""
        where = self._scope_of(name, scopes)
        roots = [where[-1]] if where else [tree for _, _, tree in self.src.cells if tree is not None]
        for root in roots:
            parents = self._parents.setdefault(id(root), _parents(root))
            for n in ast.walk(root):
                if not (isinstance(n, ast.Name) and n.id == name):
                    continue
                if isinstance(n.ctx, ast.Store):
                    continue
                if isinstance(n.ctx, ast.Del):
                    return False
                p = parents.get(n)
                ok = (
                    (isinstance(p, ast.Subscript) and p.value is n and isinstance(p.ctx, ast.Load))
                    or (isinstance(p, ast.keyword) and p.arg is None)
                    or (isinstance(p, ast.Dict) and any(k is None and v is n
                                                        for k, v in zip(p.keys, p.values, strict=True)))
                    or (isinstance(p, ast.Compare) and n in p.comparators
                        and all(isinstance(o, (ast.In, ast.NotIn)) for o in p.ops))
                    or (isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "len")
                    or (isinstance(p, (ast.For, ast.comprehension)) and p.iter is n)
                    or (isinstance(p, ast.Attribute) and p.attr in DICT_READS
                        and isinstance(parents.get(p), ast.Call) and parents[p].func is p)
                )  # fmt: skip
                if not ok:
                    return False
        return True

    # -- expressions ------------------------------------------------------------------------------------------
    def _builtin(self, name: str, scopes: tuple) -> bool:
        return (
            self._scope_of(name, scopes) is None
            and name not in self.src.defs
            and name not in self.src.modules
            and hasattr(builtins, name)
        )

    def module_path(self, e: ast.AST, scopes: tuple) -> str | None:
        """`numpy.ceil` for `np.ceil` (and for `ceil` imported from numpy): the dotted path of a module's
        attribute, when the name it starts from is an import nothing else rebinds."""
        attrs = []
        while isinstance(e, ast.Attribute):
            attrs.append(e.attr)
            e = e.value
        if not isinstance(e, ast.Name) or e.id not in self.src.modules or e.id in self.src.defs:
            return None
        if self._scope_of(e.id, scopes) is not None:
            return None
        return ".".join([self.src.modules[e.id], *reversed(attrs)])

    def clean(self, e: ast.AST | None, scopes: tuple, inline: bool = False) -> bool:
        if e is None or isinstance(e, ast.Constant):
            return True
        if isinstance(e, ast.Name):
            return isinstance(e.ctx, ast.Load) and self.name(e.id, scopes)
        if isinstance(e, ast.Attribute):
            path = self.module_path(e, scopes)
            if path is not None:  # torch.float16, math.pi, w8a16.QMAX; of numpy, its constants and dtypes
                top = path.split(".")[0]
                return top in {"torch", "triton", "math", "qmatmul"} or (
                    top in HOST_MODULES and e.attr in NUMPY_CONSTANTS
                )
            if e.attr in META_ATTRS and self.meta:
                return True
            return self.clean(e.value, scopes)  # x.dtype.itemsize, x.device.type
        if isinstance(e, ast.Subscript):
            return self.clean(e.value, scopes, inline) and self.clean(e.slice, scopes)
        if isinstance(e, ast.Slice):
            return all(self.clean(p, scopes) for p in (e.lower, e.upper, e.step))
        if isinstance(e, ast.BinOp):
            return not isinstance(e.op, ast.MatMult) and all(
                self.clean(v, scopes, inline) for v in (e.left, e.right)
            )
        if isinstance(e, ast.UnaryOp):
            return self.clean(e.operand, scopes, inline)
        if isinstance(e, ast.BoolOp):
            return all(self.clean(v, scopes, inline) for v in e.values)
        if isinstance(e, ast.Compare):
            return all(self.clean(v, scopes, inline) for v in (e.left, *e.comparators))
        if isinstance(e, ast.IfExp):
            return self.clean(e.test, scopes) and all(
                self.clean(v, scopes, inline) for v in (e.body, e.orelse)
            )
        if isinstance(e, (ast.Tuple, ast.Starred, ast.NamedExpr, ast.FormattedValue, ast.JoinedStr)):
            parts = {
                ast.Tuple: lambda: e.elts,
                ast.Starred: lambda: [e.value],
                ast.NamedExpr: lambda: [e.value],
                ast.FormattedValue: lambda: [e.value, e.format_spec],
                ast.JoinedStr: lambda: e.values,
            }
            return all(self.clean(v, scopes, inline) for v in parts[type(e)]())  # fmt: skip
        if isinstance(e, (ast.List, ast.Set)):
            return inline and all(self.clean(v, scopes, inline) for v in e.elts)
        if isinstance(e, ast.Dict):
            return inline and self._dict(e, scopes)
        if isinstance(e, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return inline and self.clean(e.elt, scopes, True) and self._generators(e.generators, scopes)
        if isinstance(e, ast.Call):
            return self._call(e, scopes, inline)
        return False

    def _generators(self, generators, scopes: tuple) -> bool:
        return all(
            self.clean(g.iter, scopes, True) and all(self.clean(c, scopes) for c in g.ifs) for g in generators
        )

    def _call(self, e: ast.Call, scopes: tuple, inline: bool) -> bool:
        f, args = e.func, [*e.args, *(k.value for k in e.keywords)]
        path = self.module_path(f, scopes)
        if path is None and isinstance(f, ast.Attribute):  # a method of a value
            if f.attr in META_METHODS and self.meta:
                return True  # x.size(0), x.stride(1), x.numel()
            if f.attr in DICT_READS:  # cfg.get("BLOCK_M", 64) of a dict of sizes
                return self.clean(f.value, scopes) and all(self.clean(a, scopes) for a in args)
            return False
        if path is not None:
            top, last = path.split(".")[0], path.rsplit(".", 1)[-1]
            if not all(self.clean(a, scopes, inline=True) for a in args):
                return False
            if top == "math" or (top == "triton" and last in TRITON_SIZES):
                return True
            return inline and (top in HOST_MODULES or (top == "qmatmul" and self._dict(e, scopes)))
        if isinstance(f, ast.Name) and self._builtin(f.id, scopes):
            if f.id == "len" and self.meta:
                return True
            if f.id in SCALAR_BUILTINS:
                return all(self.clean(a, scopes, inline=True) for a in args)
            if f.id in SIZE_BUILTINS:
                return all(self.clean(a, scopes, inline) for a in args)
        return False

    def numpy_call(self, name: ast.Name, scopes: tuple, parents: dict) -> bool:
        """Is this use of numpy arithmetic on sizes (a grid's `np.ceil(N / BLOCK)`), not on a tensor's values?
        A call on sizes, and any call of what it returns (`np.vectorize(f)(...)`, `.reshape(...)`) on sizes too;
        or one of numpy's constants and dtypes."""
        top, attrs = _chain(name, parents)
        call = parents.get(top)
        if not (isinstance(call, ast.Call) and call.func is top):
            return bool(attrs) and attrs[-1] in NUMPY_CONSTANTS
        cur = top
        while isinstance(parents.get(cur), (ast.Call, ast.Attribute)):
            p = parents[cur]
            if isinstance(p, ast.Call) and p.func is cur:
                if not all(
                    self.clean(a, scopes, inline=True) for a in [*p.args, *(k.value for k in p.keywords)]
                ):
                    return False
            elif not (isinstance(p, ast.Attribute) and p.value is cur):
                break
            cur = p
        return True


def _bindings(stmts: list) -> dict[str, list]:
    """name -> how each statement binds it in the statements' own scope: ("expr", value), ("elem", binding, i) for
    the i-th element of what is unpacked, ("iter", iterable) for a loop's target, ("aug", node), or None (a
    parameter, an import, a def, `with ... as`, `except ... as`: not a size)."""
    out: dict[str, list] = {}

    def target(t, value):
        if isinstance(t, ast.Name):
            out.setdefault(t.id, []).append(value)
        elif isinstance(t, (ast.Tuple, ast.List)):
            starred = any(isinstance(e, ast.Starred) for e in t.elts)
            v = value[1] if value is not None and value[0] == "expr" else None
            if (not starred and isinstance(v, (ast.Tuple, ast.List)) and len(v.elts) == len(t.elts)
                    and not any(isinstance(e, ast.Starred) for e in v.elts)):  # fmt: skip
                for te, ve in zip(t.elts, v.elts, strict=True):
                    target(te, ("expr", ve))
            else:
                for i, te in enumerate(t.elts):
                    target(te, None if starred or value is None else ("elem", value, i))
        elif isinstance(t, ast.Starred):
            target(t.value, None)

    todo = list(stmts)
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Assign):
            for t in n.targets:
                target(t, ("expr", n.value))
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            target(n.target, ("expr", n.value))
        elif isinstance(n, ast.AugAssign):
            if isinstance(n.target, ast.Name):
                out.setdefault(n.target.id, []).append(("aug", n))
        elif isinstance(n, ast.NamedExpr):
            target(n.target, ("expr", n.value))
        elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
            target(n.target, ("iter", n.iter))
        elif isinstance(n, ast.withitem) and n.optional_vars is not None:
            for v in ast.walk(n.optional_vars):
                if isinstance(v, ast.Name):
                    out.setdefault(v.id, []).append(None)
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            out.setdefault(n.name, []).append(None)
        elif isinstance(n, ast.MatchMapping) and n.rest:
            out.setdefault(n.rest, []).append(None)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            for a in n.names:
                out.setdefault((a.asname or a.name).split(".")[0], []).append(None)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(n.name, []).append(None)
            todo += [
                *n.decorator_list,
                *getattr(n, "bases", []),
                *(getattr(n, "args", None) and n.args.defaults or []),
            ]
            continue
        elif isinstance(n, ast.Lambda):
            continue
        todo += list(ast.iter_child_nodes(n))
    return out


# -- input checks: a wrapper may validate ------------------------------------------------------------------------
# What an input check's test may call: reductions and comparisons of tensors, their metadata, reading the verdict.
CHECK_CALLS = {"any", "all", "isnan", "isinf", "isfinite", "isposinf", "isneginf", "eq", "ne", "lt", "le", "gt",
               "ge", "min", "max", "amin", "amax", "abs", "item", "tolist", "equal", "isclose", "allclose",
               "logical_not", "logical_and", "logical_or", "float", "double", "half", "to", "view", "reshape",
               "flatten", "contiguous", "detach", "cpu"} | META_METHODS  # fmt: skip
CHECK_BUILTINS = {"bool", "len", "isinstance", "any", "all", "int", "float", "abs", "min", "max", "tuple"}
# Where host code may compare tensors or read their values into Python (a test, a comparison, int(t), .item()):
# outside an input check, none may be there for the check's own aten ops to be let through (validates).
READ_ATTRS = CHECK_CALLS - META_METHODS - {"float", "double", "half", "to", "view", "reshape", "flatten",
                                           "contiguous", "detach", "cpu"} | {
    "greater", "less", "greater_equal", "less_equal", "not_equal", "aminmax", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_not", "bitwise_xor", "is_nonzero", "index", "count", "remove", "__bool__", "__index__",
    "__int__", "__float__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__",
    "__and__", "__or__", "__invert__", "__xor__",
}  # fmt: skip
TYPE_TESTS = {"isinstance", "issubclass", "callable", "hasattr"}
READ_BUILTINS = {"bool", "int", "float", "complex", "min", "max", "any", "all", "sorted", "sum", "round", "abs",
                 "range", "divmod", "pow", "hex", "oct", "bin", "chr", "format", "str", "repr", "print", "ord",
                 "iter", "next", "map", "filter", "getattr"}  # fmt: skip


@dataclass
class _Checks:
    inside: set  # ids of the nodes inside an input check's test or a raise statement
    tests: int  # how many input checks
    certified: (
        bool  # no other place in the code reads a tensor's values, and no try can catch a check's raise
    )


def _checks(src: Source, nodes, sizes: _Sizes) -> _Checks:
    """The input checks of host code: `if <test>: raise ...` (the body a raise alone) and `assert <test>`, whose
    test only compares, reduces and reads tensors (no walrus, no lambda, no call of the learner's). A check's
    verdict only decides whether the call ends: values it reads reach nothing else, so long as no `try` (or a
    `with` of anything but torch's or triton's) could catch the raise."""
    inside, tests, certified = set(), 0, True
    check_methods = not any(
        isinstance(s, ast.FunctionDef) and s.name in CHECK_CALLS
        for _, node in nodes for c in ast.walk(node) if isinstance(c, ast.ClassDef) for s in c.body
    )  # fmt: skip
    for _, node in nodes:
        for sub, scopes in _scoped(node):
            test = None
            if isinstance(sub, ast.If) and len(sub.body) == 1 and isinstance(sub.body[0], ast.Raise):
                test = sub.test
            elif isinstance(sub, ast.Assert):
                test = sub.test
            if test is not None and check_methods and _pure_test(test, sizes, scopes):
                tests += not sizes.clean(test, scopes, inline=True)  # a check of sizes alone runs no aten op
                inside |= {id(n) for n in ast.walk(test)}
            if isinstance(sub, (ast.Raise, ast.Assert)):  # what a raise evaluates ends the call
                parts = [getattr(sub, a, None) for a in ("exc", "cause", "msg")]
                inside |= {id(n) for part in parts if part is not None for n in ast.walk(part)}
            if isinstance(sub, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                certified = False
            elif isinstance(sub, (ast.With, ast.AsyncWith)) and not all(
                (sizes.module_path(i.context_expr.func if isinstance(i.context_expr, ast.Call) else i.context_expr,
                                   scopes) or "").split(".")[0] in {"torch", "triton"}
                for i in sub.items
            ):  # fmt: skip
                certified = False
    for _, node in nodes:
        for sub, scopes in _scoped(node):
            if (
                id(sub) not in inside
                and id(getattr(sub, "test", None)) not in inside
                and _reads(sub, sizes, scopes)
            ):
                certified = False
    return _Checks(inside, tests, certified)


def _pure_test(test: ast.AST, sizes: _Sizes, scopes: tuple) -> bool:
    for n in ast.walk(test):
        if isinstance(n, (ast.NamedExpr, ast.Lambda, ast.Yield, ast.YieldFrom, ast.Await)):
            return False
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute):
                path = sizes.module_path(f, scopes)
                if f.attr not in CHECK_CALLS or (
                    path is not None and path.split(".")[0] not in {"torch", "math"}
                ):
                    return False
            elif not (isinstance(f, ast.Name) and f.id in CHECK_BUILTINS and sizes._builtin(f.id, scopes)):
                return False
    return True


def _reads(sub: ast.AST, sizes: _Sizes, scopes: tuple) -> bool:
    """Could this node compare tensors or read their values into Python (outside an input check)?"""

    def fine(v) -> bool:
        """No tensor's truth: a size, a comparison or a combination of them (each judged where it stands), a
        type test, or the verdict of a given course call (`w8a16.decode_first(x, out)`)."""
        if isinstance(v, ast.BoolOp):
            return all(fine(e) for e in v.values)
        if isinstance(v, ast.UnaryOp) and isinstance(v.op, ast.Not):
            return fine(v.operand)
        if isinstance(v, ast.Compare) or sizes.clean(v, scopes, inline=True):
            return True
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in TYPE_TESTS:
            return sizes._builtin(v.func.id, scopes)
        return isinstance(v, ast.Call) and (sizes.module_path(v.func, scopes) or "").startswith("qmatmul.")

    def unclean(*values):
        return any(v is not None and not fine(v) for v in values)

    if isinstance(sub, ast.Compare):
        operands = [sub.left, *sub.comparators]
        return not all(isinstance(o, (ast.Is, ast.IsNot)) for o in sub.ops) and not all(
            sizes.clean(v, scopes, inline=True) for v in operands
        )
    if isinstance(sub, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        return unclean(sub.test)
    if isinstance(sub, ast.BoolOp):
        return unclean(*sub.values)
    if isinstance(sub, ast.UnaryOp) and isinstance(sub.op, ast.Not):
        return unclean(sub.operand)
    if isinstance(sub, ast.comprehension):
        return unclean(*sub.ifs)
    if isinstance(sub, ast.FormattedValue):
        return unclean(sub.value)
    if isinstance(sub, ast.Attribute):
        return sub.attr in READ_ATTRS
    if isinstance(sub, ast.Call):
        args = [*sub.args, *(k.value for k in sub.keywords)]
        if (
            isinstance(sub.func, ast.Name)
            and sub.func.id in READ_BUILTINS
            and sizes._builtin(sub.func.id, scopes)
        ):
            if sub.func.id == "getattr":
                return (
                    len(sub.args) < 2
                    or not isinstance(sub.args[1], ast.Constant)
                    or sub.args[1].value in READ_ATTRS
                )
            return unclean(*args)
        path = sizes.module_path(sub.func, scopes)
        if path is not None and path.split(".")[0] not in {"torch", "triton", "qmatmul", *HOST_MODULES}:
            return unclean(*args)  # math.floor(t), operator.index(t), struct.pack("f", t)
    return False


def validates(src: Source, name: str) -> bool:
    """Does `name` (a kernel wrapper) check its inputs, with nothing else in the host code it reaches that could
    compare tensors or read their values, and nothing that could catch a check's raise? Then the aten ops of those
    checks are let through the audit (without_validation_ops): a wrapper may validate."""
    if name in src.jit or name not in src.defs:
        return False
    nodes = [(label, node) for label, node in _reached(src, name, scoped=True)[0]
             if getattr(node, "name", None) not in src.jit]  # fmt: skip
    found = _checks(src, nodes, _Sizes(src, nodes))
    return found.certified and found.tests > 0


# The aten ops an input check runs: comparisons and predicates (bool results; isfinite is abs, ne, eq and a bool
# mul), any/all, min/max to a scalar, and the read of a scalar verdict into Python just after one of them.
CHECK_BOOL_OPS = {"eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "isposinf", "isneginf", "any",
                  "all", "logical_not", "logical_and", "logical_or", "logical_xor", "bitwise_not", "bitwise_and",
                  "bitwise_or", "mul"}  # fmt: skip
CHECK_SCALAR_OPS = {"min", "max", "amin", "amax", "aminmax", "equal"}
CHECK_READ_OPS = {"_local_scalar_dense", "is_nonzero"}
# At most this many of them in one call (a loop of checks over a few tensors stays far below): whatever the source
# reading missed, a check's ops read too few values to stand in for a kernel's work.
CHECK_OP_LIMIT = 64


def without_validation_ops(ops: list) -> list:
    """The audit's ops (OpRecord: name, output shapes, output dtypes) less those of input checks, for a function
    that validates: comparisons and predicates with bool results, abs, reductions to a scalar, and reading a
    scalar into Python right after one of those; at most CHECK_OP_LIMIT of them. Anything else stays."""
    kept, dropped, scalar_before = [], 0, False
    for op in ops:
        bools = bool(op.dtypes) and all(str(d).removeprefix("torch.") == "bool" for d in op.dtypes)
        scalar = bool(op.shapes) and all(tuple(s) == () for s in op.shapes)
        check = (
            (op.name in CHECK_BOOL_OPS and bools)
            or op.name == "abs"
            or (op.name in CHECK_SCALAR_OPS and (scalar or not op.shapes))
            or (op.name in CHECK_READ_OPS and scalar_before)
        )
        if check and dropped < CHECK_OP_LIMIT:
            dropped += 1
            scalar_before = scalar and op.name not in CHECK_READ_OPS
            continue
        kept.append(op)
        scalar_before = False
    return kept


def added_cell_note(name: str, where: str) -> str:
    """Why a name the learner defined is missing when the grader runs their functions."""
    return (
        f"`{name}` is defined in a cell you added ({where}); the grader runs only the exercise cells (those with "
        "YOUR CODE HERE) and the notebook's own locked cells: move it into the exercise's cell"
    )


def _added_notes(src: Source, nodes) -> list[str]:
    """added_cell_note for each name the statements read from the module's namespace that no cell the grader runs
    binds, but a cell it does not run defines."""
    missing = set().union(*(_global_loads(node) for _, node in nodes)) - set(src.defs) - set(src.modules)
    return [added_cell_note(n, src.added[n]) for n in sorted(missing & set(src.added))]


def own_kernel_problems(src: Source, name: str) -> list[str]:
    """Why `name` does not compute in a Triton kernel of the notebook's own ([] when it does).

    A wrapper may validate (an input check's `.item()` is no reading of values: _checks), compute sizes with numpy
    or math (`np.ceil(N / BLOCK)`: _Sizes) and launch its kernel itself or through a helper it hands the kernel
    to (`_launch(kernel, grid, ...)`); a kernel may be `@triton.jit` or `kernel = triton.jit(body)`."""
    if name in src.jit:
        return []
    if name not in src.defs:
        return []  # not defined: calling it fails with its own message
    nodes, reached = _reached(src, name, scoped=True)
    host = [(label, node) for label, node in nodes if getattr(node, "name", None) not in src.jit]
    sizes = _Sizes(src, host)
    checks = _checks(src, host, sizes)
    problems = []
    launches = set()
    text = dict((label, s) for label, s, _ in src.cells)
    for label, node in host:
        parents = _parents(node)
        for sub, scopes in _scoped(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Subscript):
                base = _root(sub.func.value)
                if base in src.jit:
                    launches.add(base)
            elif (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in src.defs
                  and sizes._scope_of(sub.func.id, scopes) is None):  # fmt: skip
                launches |= _passed(src, sub) & src.jit  # _launch(kernel, grid, ...)
            line = f"`{_line(text[label], sub)}` (cell {label})"
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.MatMult):
                problems.append(f"it computes the product with PyTorch's `@` on the host: {line}")
            elif (
                isinstance(sub, ast.Attribute)
                and sub.attr in COURSE_PATHS
                and src.modules.get(_root(sub) or "", "").startswith("qmatmul")
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
        problems.insert(0, f"{name} launches no @triton.jit kernel defined in the notebook")
        problems[1:1] = _added_notes(src, host)
    return sorted(set(problems), key=problems.index)


def _chain(node: ast.AST, parents: dict) -> tuple[ast.AST, list[str]]:
    """The outermost attribute access a name starts (`w8a16.prepare` for the name `w8a16`) and its attributes."""
    attrs = []
    while isinstance(parents.get(node), ast.Attribute) and parents[node].value is node:
        node = parents[node]
        attrs.append(node.attr)
    return node, attrs


def _given(path: list[str], given: dict) -> bool:
    """Does the dotted path pass through a name the chapter gives (a prefix module and its next part)?"""
    return any(path[i] in given.get(".".join(path[:i]), ()) for i in range(1, len(path)))


def given(namespace: dict) -> dict[str, set[str]]:
    """What the chapter hands the learner's code of the course package: the GIVEN of each module in the namespace
    (the release's imports; module -> names). The rest of `qmatmul` is the exercises' answers (course_problems)."""
    out: dict[str, set[str]] = {}
    for value in namespace.values():
        if isinstance(value, types.ModuleType):
            for module, names in getattr(value, "GIVEN", {}).items():
                out.setdefault(module, set()).update(names)
    return out


def _global_loads(node: ast.AST, local: frozenset = frozenset()) -> set[str]:
    """The names a statement reads from the module's namespace: not a function's parameters or the names it
    assigns (unless it declares them global). Decorators and defaults are read where the function is defined."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        outer = [*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults]
        if getattr(node, "returns", None) is not None:
            outer.append(node.returns)
        found = set().union(*(_global_loads(n, local) for n in outer if n is not None))
        declared = {g for n in ast.walk(node) if isinstance(n, ast.Global) for g in n.names}
        body = node.body if isinstance(node.body, list) else [node.body]
        inner = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} | _bound(body)
        scope = frozenset((local | inner) - declared)
        for stmt in body:
            found |= _global_loads(stmt, scope)
        return found
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) and node.id not in local else set()
    return set().union(*(_global_loads(c, local) for c in ast.iter_child_nodes(node)))


def _course_uses(src: Source, label: str, node: ast.AST, given: dict) -> list[str]:
    """The course names (beyond `given`) and oracle libraries one statement of the learner's uses."""
    text = dict((lbl, s) for lbl, s, _ in src.cells)[label]
    parents = {child: parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)}
    found = []
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Name) or not isinstance(sub.ctx, ast.Load) or sub.id not in src.modules:
            continue
        path = src.modules[sub.id].split(".")
        _, attrs = _chain(sub, parents)
        line = f"`{_line(text, sub)}` (cell {label})"
        used, full = ".".join([sub.id, *attrs]), ".".join(path + attrs)
        what = used if used == full else f"{used} ({full})"
        if path[0] in ANSWER_LIBRARIES:
            found.append(f"it uses {what}, which computes the answer for you: {line}")
        elif path[0] == "qmatmul" and not _given(path + attrs, given):
            found.append(f"it uses {what} of the course package, which the chapter does not give you: the exercise "
                         f"is to write it yourself: {line}")  # fmt: skip
    return found


def _reached_uses(src: Source, names, given: dict) -> list[str]:
    """_course_uses of every learner statement the names reach."""
    found = []
    for n in names:
        for label, node in _reached(src, n, scoped=True, device=True)[0]:
            if label in src.learners:
                found += _course_uses(src, label, node, given)
    return found


def _rebound_to_answers(src: Source, given: dict) -> list[str]:
    """Module attributes the learner's cells rebind, anywhere, to a course answer (`torch.abs = w8a16.quantize`,
    setattr(torch, "abs", ...)): any graded function calling the module's attribute then runs the answer."""
    found = []
    for label, _, tree in src.cells:
        if label not in src.learners or tree is None:
            continue
        for node in ast.walk(tree):
            value = None
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(
                    isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in src.modules for t in targets
                ):
                    value = node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                  and len(node.args) == 3 and _root(node.args[0]) in src.modules):  # fmt: skip
                value = node.args[2]
            if value is not None:
                names = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & set(src.defs)
                found += _course_uses(src, label, value, given) + _reached_uses(src, names, given)
    return found


# Names an IPython kernel binds before any cell runs.
_IPYTHON_NAMES = {"display", "get_ipython", "In", "Out", "exit", "quit", "_", "__", "___"}


def _unbound(src: Source, label: str, node: ast.AST, known: set) -> list[str]:
    """Names a learner's statement reads from the module's namespace that nothing binds where this reading can
    see: not a notebook cell's binding, an import, a builtin or the release's namespace (exec, globals() and
    friends bind such names)."""
    if src.star_imports:
        return []  # `from math import *` binds names this reading cannot list
    bound = set(src.defs) | set(src.modules) | src.globals | set(dir(builtins)) | _IPYTHON_NAMES | known
    missing = _global_loads(node) - bound
    text = dict((lbl, s) for lbl, s, _ in src.cells)[label]
    added = [added_cell_note(n, src.added[n]) for n in sorted(missing & set(src.added))]
    unseen = missing - set(src.added)
    return added + [f"it uses {n.id}, which no cell binds where the grader can read it (exec? globals()?): "
                    f"`{_line(text, n)}` (cell {label})"
                    for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in unseen]  # fmt: skip


def course_problems(src: Source, name: str, given: dict, known: set = frozenset()) -> list[str]:
    """Why `name` does not do the exercise's work itself ([] when it does): the learner's code it reaches uses the
    course package beyond what the chapter gives, or a library that computes a format's answer in one call.

    given: module -> the names of it that the chapter hands the learner (`prepare`, the launch configurations;
    each chapter module's GIVEN). Everything else of `qmatmul` (the quantizers, the references, the byte models)
    is what the exercises ask for. A course module used as a value (passed, stored, given to getattr) counts too:
    what it reaches cannot be read. So do, in the code it reaches, the escapes that read (exec, sys.modules,
    __globals__, getattr by a computed name) and names nothing visible binds (known: the release's namespace);
    and, anywhere in the learner's cells, a module attribute rebound to a course answer."""
    if name not in src.defs:
        return []
    nodes = [(label, node) for label, node in _reached(src, name, scoped=True, device=True)[0]
             if label in src.learners]  # fmt: skip
    problems = []
    spans = [(label, node.lineno, node.end_lineno) for label, node in nodes]
    hiding = [
        f for f in src.escapes if f.reads and any(f.cell == lbl and a <= f.line <= b for lbl, a, b in spans)
    ]
    if hiding:  # exec, sys.modules, __globals__, ...: what they reach this reading cannot see
        shown = "; ".join(f.describe() for f in hiding[:3])
        more = f" and {len(hiding) - 3} more" if len(hiding) > 3 else ""
        problems.append(f"its code uses constructs that could hide where its answers come from ({shown}{more}): "
                        "flagged for your instructor")  # fmt: skip
    for label, node in nodes:
        problems += _course_uses(src, label, node, given) + _unbound(src, label, node, set(known))
    problems += _rebound_to_answers(src, given)
    problems += [f"cell {label}, line {line} imports every name of a course module, the answers among them"
                 for label, line in src.course_stars]  # fmt: skip
    return sorted(set(problems), key=problems.index)
