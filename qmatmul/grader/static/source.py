"""The learner's source, parsed (Source): what each cell binds at the top level, which names are Triton kernels
(`@triton.jit`, or Gluon's `@gluon.jit`), the imports, the escapes; and what a function reaches through the names the
notebook binds."""

from __future__ import annotations

import ast
import copy
import functools
from dataclasses import dataclass, field

from qmatmul.grader.static.escapes import find_escapes
from qmatmul.grader.static.syntax import as_python, bound_names, global_loads

__all__ = ["Source", "parse", "reached_statements", "added_cell_note", "per_source"]


@dataclass
class Source:
    """The learner's cells, parsed. `defs` maps each top-level name to the statements that bind it."""

    cells: list[tuple[str, str, ast.Module | None]]  # (label, source, tree)
    defs: dict = field(default_factory=dict)  # name -> list of (label, node)
    # names bound to @triton.jit or @gluon.jit functions (or to triton.jit(f), gluon.jit(f))
    jit: set = field(default_factory=set)
    # kernel -> the functions `kernel = triton.jit(f)` (or `gluon.jit(f)`) wraps
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
    # answers read from these cells, kept by per_source (the grader asks the same at every audited call)
    memo: dict = field(default_factory=dict, repr=False, compare=False)


def per_source(fn):
    """fn(src, *args) answered once per Source and arguments (a copy each time: callers may add to a list). A
    Source is not changed once the grader has read the notebook, and each audited call of a wrapper asks again."""

    @functools.wraps(fn)
    def answer(src: Source, *args):
        key = (fn.__qualname__, *args)
        if key not in src.memo:
            src.memo[key] = fn(src, *args)
        return copy.copy(src.memo[key])

    return answer


# The decorators that make a kernel, as the last part of the dotted path they are read from: `triton.jit`,
# `triton.autotune`, `triton.heuristics`, Gluon's `jit` (triton.experimental.gluon.jit). A decorator counts only when
# that path, resolved through the cells' imports, lies under `triton` (_triton_decorator): a `jit` of the notebook's
# own, or `gluon.constexpr_function`, makes no kernel.
JIT_DECORATORS = {"jit", "autotune", "heuristics"}


def _import_path(node: ast.AST, modules: dict, defs: dict | None = None) -> str | None:
    """The dotted path an expression names through the cells' imports (`gl.jit` -> "triton.experimental.gluon.jit"
    after `from triton.experimental import gluon as gl`), or None when it does not start from an imported name, or
    from one a cell's top level also defines or assigns (defs: `class gluon: ...`, `def jit(f)`, `triton = ...`). A
    binding inside a compound statement does not count: `try: from triton.experimental import gluon` with
    `except ImportError: gluon = None` is how a notebook imports Gluon where it may be missing."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in modules:
        return None
    own = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign, ast.AugAssign)
    if any(isinstance(bound, own) for _, bound in (defs or {}).get(node.id, [])):
        return None
    return ".".join([modules[node.id], *reversed(attrs)])


def _triton_decorator(node: ast.AST, modules: dict, defs: dict | None = None) -> bool:
    """`triton.jit`, `triton.autotune`, `triton.heuristics`, `gluon.jit` (or the name imported from triton or Gluon,
    under any alias): the path the name resolves to lies under `triton` and ends in one of JIT_DECORATORS."""
    path = _import_path(node, modules, defs)
    return path is not None and path.split(".")[0] == "triton" and path.split(".")[-1] in JIT_DECORATORS


def _is_jit(node: ast.AST, modules: dict, defs: dict | None = None) -> bool:
    """A definition decorated by triton (`@triton.jit`, `@triton.autotune(...)`, `@gluon.jit`, ...)."""
    for dec in getattr(node, "decorator_list", []):
        if _triton_decorator(dec.func if isinstance(dec, ast.Call) else dec, modules, defs):
            return True
    return False


def _jit_wrapped(value: ast.AST | None, modules: dict, defs: dict | None = None) -> str | None:
    """The function a `triton.jit(f)`, `gluon.jit(f)`, `triton.jit(...)(f)` or `triton.autotune(...)(triton.jit(f))` call
    wraps."""
    if not isinstance(value, ast.Call) or len(value.args) != 1:
        return None
    f = value.func
    direct = _triton_decorator(f, modules, defs)
    if not direct and not (
        isinstance(f, ast.Call) and not value.keywords and _triton_decorator(f.func, modules, defs)
    ):
        return None
    inner = value.args[0]
    return inner.id if isinstance(inner, ast.Name) else _jit_wrapped(inner, modules, defs)


def parse(cells: list[tuple[str, str, bool]]) -> Source:
    """cells: (label, source, is_learners) in notebook order; escapes are looked for in the learner's cells."""
    out = Source(cells=[])
    for label, src, learners in cells:
        py = as_python(src)
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
                for a in node.names:  # `import a.b.c` binds a, the package; `import a.b.c as m` binds a.b.c
                    top = a.name.split(".")[0]
                    out.modules[a.asname or top] = a.name if a.asname else top
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    out.modules[a.asname or a.name] = f"{node.module}.{a.name}"
                    out.star_imports |= a.name == "*"
                    if a.name == "*" and node.module.split(".")[0] == "qmatmul" and learners:
                        out.course_stars.append((label, node.lineno))
            elif isinstance(node, ast.Global):
                out.globals.update(node.names)
        for node in tree.body:
            names, wrapped, kernel = [], None, False
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names = [node.name]
                kernel = _is_jit(node, out.modules, out.defs)  # read before the definition binds its name
                if kernel:
                    out.jit.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                if (
                    not isinstance(node, ast.AugAssign)
                    and len(targets) == 1
                    and isinstance(targets[0], ast.Name)
                ):
                    wrapped = _jit_wrapped(node.value, out.modules, out.defs)  # `kernel = triton.jit(body)`
            elif not isinstance(node, (ast.Import, ast.ImportFrom)):
                names = sorted(
                    bound_names([node])
                )  # for, while, if, try, with: whatever they bind, as they run
            for n in names:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    out.defs[n] = [(label, node)]  # a later def replaces an earlier one, as when it runs
                    out.kernel_bodies.pop(n, None)
                    if not kernel:
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
            out.escapes += find_escapes(label, py, tree, out.modules)
    return out


def reached_statements(
    src: Source, name: str, scoped: bool = False, device: bool = False
) -> tuple[list[tuple[str, ast.AST]], set[str]]:
    """The top-level statements a function reaches through names bound in the notebook (itself included).
    scoped: follow only the names a statement reads from the module's namespace (global_loads), so that a
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
                global_loads(node) if scoped else {s.id for s in ast.walk(node) if isinstance(s, ast.Name)}
            )
            todo += [m for m in names if m in src.defs and m not in seen]
        for body in sorted(src.kernel_bodies.get(n, ())) if device and n in src.jit else ():
            if body in src.jit:
                todo.append(body)
            elif body in src.defs and body not in bodies:  # read as device code; as host code only if named
                bodies.add(body)
                nodes += src.defs[body]
    return nodes, seen


def added_cell_note(name: str, where: str) -> str:
    """Why a name the learner defined is missing when the grader runs their functions."""
    return (
        f"`{name}` is defined in a cell you added ({where}); the grader runs only the exercise cells (those with "
        "YOUR CODE HERE) and the notebook's own locked cells: move it into the exercise's cell"
    )
