"""The package's rooms hold to their roles (README.md, "What is here"): read from the imports and the sizes of the
files themselves, so a change that breaks a rule fails here, not in a reviewer's memory."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qmatmul"
ROOMS = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
FACADES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")

# What each room may import of the package (besides itself). The chapter facades are for notebooks: no room but the
# capstone (which runs the chapters' wrappers) imports one. Set-up (environment, course) may be used by any room.
MAY_IMPORT = {
    "formats": set(),  # the formats need nothing of the package: they are checked against torch and torchao alone
    "timing": set(),
    "kernels": {"formats", "scaffold"},  # the expert wrappers validate with the chapters' `prepare`
    "scaffold": {"formats", "kernels", "checks"},  # checks: the worker's state registry (FP8's forced path)
    "teaching": {
        "formats",
        "timing",
        "checks",
        "kernels",
        "scaffold",
    },  # never the grader: nothing here grades
    "checks": {"formats", "timing", "kernels", "scaffold", "teaching", "grader"},
    "grader": {"checks", "timing", "formats"},
    "capstone": {"formats", "timing", "kernels", "scaffold", "checks", "grader", "teaching", *FACADES},
}
SETUP = {"environment", "course", "__version__"}
MAX_LINES = 600  # a module a reader takes in at one sitting
FACADE_LINES = 250


def _imports(path: Path) -> set[str]:
    """The package's top-level names (rooms and modules) a file imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "qmatmul":
            parts = node.module.split(".")
            found |= {a.name for a in node.names} if len(parts) == 1 else {parts[1]}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("qmatmul.")}
    return found


def test_every_room_is_named_in_the_rules():
    assert set(ROOMS) == set(MAY_IMPORT), "a new room needs its line in MAY_IMPORT (and README.md's map)"


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_imports_only_what_its_role_allows(room):
    wrong = {}
    for path in sorted((PACKAGE / room).rglob("*.py")):
        bad = _imports(path) - MAY_IMPORT[room] - SETUP - {room}
        if bad:
            wrong[str(path.relative_to(PACKAGE))] = sorted(bad)
    assert not wrong, (
        f"{room}/ may import {sorted(MAY_IMPORT[room])} of the package; these import more: {wrong}"
    )


def test_modules_stay_readable():
    long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        n = len(path.read_text().splitlines())
        limit = FACADE_LINES if path.parent == PACKAGE else MAX_LINES
        if n > limit:
            long[str(path.relative_to(PACKAGE))] = n
    assert not long, f"over {MAX_LINES} lines (a chapter facade: {FACADE_LINES}): {long}"


def test_the_packages_outside_qmatmul_are_imported_as_packages():
    """autograder/ and tools/ run as `python -m`: no file edits sys.path to find its neighbours."""
    root = PACKAGE.parent
    edits = [
        f"{p.relative_to(root)}:{node.lineno}"
        for folder in ("autograder", "tools", "tests", "qmatmul")
        for p in sorted((root / folder).rglob("*.py"))
        if "adversarial" not in p.parts
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in ("insert", "append")
        and isinstance(node.value, ast.Attribute) and node.value.attr == "path"
        and isinstance(node.value.value, ast.Name) and node.value.value.id == "sys"
    ]  # fmt: skip
    assert not edits, f"sys.path edited at {edits}"


def test_the_package_never_imports_its_drivers():
    """autograder/ and tools/ use the package; the package (what a learner installs) needs neither."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])  # fmt: skip
            found += [
                f"{path.relative_to(PACKAGE)}: {n}"
                for n in names
                if n.split(".")[0] in ("autograder", "tools")
            ]
    assert not found, found
