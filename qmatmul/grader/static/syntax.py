"""The syntax the reading of the learner's source is built on: a cell as the plain Python the notebook kernel runs,
and what a statement's tree says (the names it binds and those it reads from the module's namespace, the scopes
its nodes sit in, their parents, the name an expression starts from, a line of its source)."""

from __future__ import annotations

import ast

__all__ = [
    "as_python", "source_line", "bound_names", "root_name", "scoped_nodes", "parent_map", "param_names",
    "attribute_chain", "global_loads",
]  # fmt: skip


def as_python(src: str) -> str:
    """IPython magics and shell escapes turned into plain Python (as the notebook kernel runs them)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        return TransformerManager().transform_cell(src)
    except Exception:  # noqa: BLE001 - without IPython the source is read as it is
        return src


def source_line(src: str, node: ast.AST) -> str:
    lines = src.splitlines()
    n = getattr(node, "lineno", 1) - 1
    return lines[n].strip()[:120] if 0 <= n < len(lines) else ""


def bound_names(statements: list) -> set[str]:
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


def root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def scoped_nodes(node: ast.AST, scopes: tuple = ()):
    """(sub-node, the functions and lambdas it sits in, innermost last) for every node under `node`. A function's
    decorators and defaults belong to the scope that defines it; its body to its own."""
    yield node, scopes
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        outer = [*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults]
        for child in outer:
            if child is not None:
                yield from scoped_nodes(child, scopes)
        for child in node.body if isinstance(node.body, list) else [node.body]:
            yield from scoped_nodes(child, (*scopes, node))
        return
    for child in ast.iter_child_nodes(node):
        yield from scoped_nodes(child, scopes)


def parent_map(node: ast.AST) -> dict:
    return {child: parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)}


def param_names(fn: ast.AST) -> list[str]:
    a = fn.args
    return [x.arg for x in [*a.posonlyargs, *a.args, *([a.vararg] if a.vararg else []), *a.kwonlyargs,
                            *([a.kwarg] if a.kwarg else [])]]  # fmt: skip


def attribute_chain(node: ast.AST, parents: dict) -> tuple[ast.AST, list[str]]:
    """The outermost attribute access a name starts (`w8a16.prepare` for the name `w8a16`) and its attributes."""
    attrs = []
    while isinstance(parents.get(node), ast.Attribute) and parents[node].value is node:
        node = parents[node]
        attrs.append(node.attr)
    return node, attrs


def global_loads(node: ast.AST, local: frozenset = frozenset()) -> set[str]:
    """The names a statement reads from the module's namespace: not a function's parameters or the names it
    assigns (unless it declares them global). Decorators and defaults are read where the function is defined."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        outer = [*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults]
        if getattr(node, "returns", None) is not None:
            outer.append(node.returns)
        found = set().union(*(global_loads(n, local) for n in outer if n is not None))
        declared = {g for n in ast.walk(node) if isinstance(n, ast.Global) for g in n.names}
        body = node.body if isinstance(node.body, list) else [node.body]
        inner = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} | bound_names(body)
        scope = frozenset((local | inner) - declared)
        for stmt in body:
            found |= global_loads(stmt, scope)
        return found
    if isinstance(node, ast.Name):
        return {node.id} if isinstance(node.ctx, ast.Load) and node.id not in local else set()
    return set().union(*(global_loads(c, local) for c in ast.iter_child_nodes(node)))
