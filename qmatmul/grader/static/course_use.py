"""Course use: does the learner's code do the exercise's work itself, or hand it to the course package beyond what
the chapter gives (its GIVEN), or to a library that computes a format's answer in one call?"""

from __future__ import annotations

import ast
import builtins
import types

from qmatmul.grader.static.source import Source, added_cell_note, reached_statements
from qmatmul.grader.static.syntax import attribute_chain, global_loads, root_name, source_line

__all__ = ["ANSWER_LIBRARIES", "given", "course_problems"]


# Libraries that compute a course format's answer in one call (the tests' own oracles): no exercise uses them.
ANSWER_LIBRARIES = {"torchao", "ml_dtypes"}


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


def _course_uses(src: Source, label: str, node: ast.AST, given: dict) -> list[str]:
    """The course names (beyond `given`) and oracle libraries one statement of the learner's uses."""
    text = dict((lbl, s) for lbl, s, _ in src.cells)[label]
    parents = {child: parent for parent in ast.walk(node) for child in ast.iter_child_nodes(parent)}
    found = []
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Name) or not isinstance(sub.ctx, ast.Load) or sub.id not in src.modules:
            continue
        path = src.modules[sub.id].split(".")
        _, attrs = attribute_chain(sub, parents)
        line = f"`{source_line(text, sub)}` (cell {label})"
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
        for label, node in reached_statements(src, n, scoped=True, device=True)[0]:
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
                    isinstance(t, (ast.Attribute, ast.Subscript)) and root_name(t) in src.modules
                    for t in targets
                ):
                    value = node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                  and len(node.args) == 3 and root_name(node.args[0]) in src.modules):  # fmt: skip
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
    missing = global_loads(node) - bound
    text = dict((lbl, s) for lbl, s, _ in src.cells)[label]
    added = [added_cell_note(n, src.added[n]) for n in sorted(missing & set(src.added))]
    unseen = missing - set(src.added)
    return added + [f"it uses {n.id}, which no cell binds where the grader can read it (exec? globals()?): "
                    f"`{source_line(text, n)}` (cell {label})"
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
    nodes = [(label, node) for label, node in reached_statements(src, name, scoped=True, device=True)[0]
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
