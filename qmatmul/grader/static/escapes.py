"""Escapes: constructs in the learner's cells that could hide work from the worker's op audit, forge its replies or
rewrite the grader's view of the process (threads, ctypes, dynamic code, frame introspection, monkeypatching,
fd-level I/O). None is needed by any exercise; each is a Finding with its cell and line, for the instructor."""

from __future__ import annotations

import ast
from dataclasses import dataclass

from qmatmul.grader.static.syntax import root_name, source_line

__all__ = [
    "ESCAPE_MODULES", "ESCAPE_CALLS", "NAME_CALLS", "ESCAPE_ATTRS", "SYS_ATTRS", "OS_ATTRS", "OS_NO_VALUE",
    "Finding", "find_escapes",
]  # fmt: skip


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


def find_escapes(label: str, src: str, tree: ast.Module, known: dict) -> list[Finding]:
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
        found.append(Finding(label, getattr(node, "lineno", 0), source_line(src, node), what, reads))

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
            base = root_name(node)
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
                if isinstance(t, ast.Attribute) and root_name(t) in module_aliases:
                    add(
                        node,
                        f"rebinds {ast.unparse(t)} (an attribute of the module {module_aliases[root_name(t)]})",
                    )
    return found
