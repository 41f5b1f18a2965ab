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
    "importlib", "builtins", "gc", "inspect", "faulthandler", "code", "codeop", "marshal", "types",
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
    jit: set = field(default_factory=set)  # names bound to @triton.jit functions
    modules: dict = field(default_factory=dict)  # alias -> module name, from the cells' imports
    escapes: list = field(default_factory=list)  # Findings in the learner's own cells
    unparsable: list = field(default_factory=list)  # labels of cells that are not Python
    learners: set = field(default_factory=set)  # labels of the learner's own cells
    globals: set = field(default_factory=set)  # names a function declares `global` (it may bind them)
    star_imports: bool = False  # a cell imports `*` from a module
    course_stars: list = field(default_factory=list)  # (label, line) of each `from qmatmul... import *`


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
        for node in tree.body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
                if _is_jit(node):
                    out.jit.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                names = sorted(_bound([node]))  # for, while, if, try, with: whatever they bind, as they run
            for n in names:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    out.defs[n] = [(label, node)]  # a later def replaces an earlier one, as when it runs
                    if not _is_jit(node):
                        out.jit.discard(n)
                else:
                    out.defs.setdefault(n, []).append((label, node))
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


def _reached(src: Source, name: str, scoped: bool = False) -> tuple[list[tuple[str, ast.AST]], set[str]]:
    """The top-level statements a function reaches through names bound in the notebook (itself included).
    scoped: follow only the names a statement reads from the module's namespace (_global_loads), so that a
    scratch line `ref = x @ w.T` beside a function whose own `ref` is a local is not reached."""
    seen, todo, nodes = set(), [name], []
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
    return nodes, seen


def own_kernel_problems(src: Source, name: str) -> list[str]:
    """Why `name` does not compute in a Triton kernel of the notebook's own ([] when it does)."""
    if name in src.jit:
        return []
    if name not in src.defs:
        return []  # not defined: calling it fails with its own message
    nodes, reached = _reached(src, name, scoped=True)
    problems = []
    launches = set()
    text = dict((label, s) for label, s, _ in src.cells)
    for label, node in nodes:
        if getattr(node, "name", None) in src.jit:
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Subscript):
                base = _root(sub.func.value)
                if base in src.jit:
                    launches.add(base)
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
                problems.append(f"it reads tensor values into Python (.{sub.attr}): {line}")
            elif isinstance(sub, ast.Attribute) and sub.attr in HOST_ARITHMETIC_ATTRS:
                problems.append(f"it computes the product with PyTorch (.{sub.attr}) on the host: {line}")
            elif isinstance(sub, ast.Name) and src.modules.get(sub.id, "").split(".")[0] in HOST_MODULES:
                problems.append(f"it computes with numpy: {line}")
    if not launches:
        problems.insert(0, f"{name} launches no @triton.jit kernel defined in the notebook")
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
        for label, node in _reached(src, n, scoped=True)[0]:
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
    return [f"it uses {n.id}, which no cell binds where the grader can read it (exec? globals()?): "
            f"`{_line(text, n)}` (cell {label})"
            for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in missing]  # fmt: skip


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
    nodes = [(label, node) for label, node in _reached(src, name, scoped=True)[0] if label in src.learners]
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
