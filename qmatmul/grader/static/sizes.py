"""Sizes: which expressions of the host code are sizes (numbers, tensor metadata, the sizes prepare returns, the
launch configurations) and never a tensor's values. Host code may hand numpy sizes (a grid's `np.ceil(N / BLOCK)`),
and an input check may read them."""

from __future__ import annotations

import ast
import builtins

from qmatmul.grader.static.source import Source
from qmatmul.grader.static.syntax import attribute_chain, bound_names, param_names, parent_map, root_name

__all__ = [
    "META_ATTRS", "META_METHODS", "META_HOOKS", "SCALAR_BUILTINS", "SIZE_BUILTINS", "TRITON_SIZES",
    "NUMPY_CONSTANTS", "COURSE_SIZES", "DICT_READS", "HOST_MODULES", "TENSOR_METHODS", "Sizes",
]  # fmt: skip


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


# Host array libraries, under the names notebooks import them as: host code may call them on sizes alone
# (Sizes.numpy_call).
HOST_MODULES = {"numpy", "np", "math_np", "scipy"}


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
                root, f = root_name(sub.func), sub.func
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


class Sizes:
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
        return (set(param_names(fn)) | bound_names(body)) - declared

    def scope_of(self, name: str, scopes: tuple):
        for i in range(len(scopes) - 1, -1, -1):
            if name in self._locals(scopes[i]):
                return scopes[: i + 1]
        return None

    def name(self, name: str, scopes: tuple) -> bool:
        where = self.scope_of(name, scopes)
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
        clean = {n for n in self._locals(fn) - set(param_names(fn)) - nonlocal_ if binds.get(n)}
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
            if isinstance(e.func, ast.Name) and e.func.id == "dict" and self.builtin("dict", scopes):
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
        where = self.scope_of(name, scopes)
        roots = [where[-1]] if where else [tree for _, _, tree in self.src.cells if tree is not None]
        for root in roots:
            parents = self._parents.setdefault(id(root), parent_map(root))
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
    def builtin(self, name: str, scopes: tuple) -> bool:
        return (
            self.scope_of(name, scopes) is None
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
        if self.scope_of(e.id, scopes) is not None:
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
        if isinstance(f, ast.Name) and self.builtin(f.id, scopes):
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
        top, attrs = attribute_chain(name, parents)
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
