"""Input checks: a wrapper may validate. Which statements of the host code are checks whose verdict only decides a
raise (validates), and the audit's ops less those such checks run (without_validation_ops)."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from qmatmul.grader.static.sizes import HOST_MODULES, META_METHODS, Sizes
from qmatmul.grader.static.source import Source, per_source, reached_statements
from qmatmul.grader.static.syntax import scoped_nodes

__all__ = [
    "CHECK_CALLS", "CHECK_BUILTINS", "READ_ATTRS", "TYPE_TESTS", "READ_BUILTINS", "InputChecks",
    "find_input_checks", "validates", "CHECK_BOOL_OPS", "CHECK_SCALAR_OPS", "CHECK_READ_OPS",
    "CHECK_OP_LIMIT", "without_validation_ops",
]  # fmt: skip


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
class InputChecks:
    inside: set  # ids of the nodes inside an input check's test or a raise statement
    tests: int  # how many input checks
    certified: (
        bool  # no other place in the code reads a tensor's values, and no try can catch a check's raise
    )


def find_input_checks(src: Source, nodes, sizes: Sizes) -> InputChecks:
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
        for sub, scopes in scoped_nodes(node):
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
        for sub, scopes in scoped_nodes(node):
            if (
                id(sub) not in inside
                and id(getattr(sub, "test", None)) not in inside
                and _reads(sub, sizes, scopes)
            ):
                certified = False
    return InputChecks(inside, tests, certified)


def _pure_test(test: ast.AST, sizes: Sizes, scopes: tuple) -> bool:
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
            elif not (isinstance(f, ast.Name) and f.id in CHECK_BUILTINS and sizes.builtin(f.id, scopes)):
                return False
    return True


def _reads(sub: ast.AST, sizes: Sizes, scopes: tuple) -> bool:
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
            return sizes.builtin(v.func.id, scopes)
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
            and sizes.builtin(sub.func.id, scopes)
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


@per_source
def validates(src: Source, name: str) -> bool:
    """Does `name` (a kernel wrapper) check its inputs, with nothing else in the host code it reaches that could
    compare tensors or read their values, and nothing that could catch a check's raise? Then the aten ops of those
    checks are let through the audit (without_validation_ops): a wrapper may validate."""
    if name in src.jit or name not in src.defs:
        return False
    nodes = [(label, node) for label, node in reached_statements(src, name, scoped=True)[0]
             if getattr(node, "name", None) not in src.jit]  # fmt: skip
    found = find_input_checks(src, nodes, Sizes(src, nodes))
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
