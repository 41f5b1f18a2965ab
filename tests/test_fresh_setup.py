"""Each student notebook's setup cell in a clean environment holding only what Colab ships preinstalled.

The environment is a new virtual environment whose site-packages holds torch, triton, numpy, ipywidgets and
matplotlib (with what they need) and nothing else: no qmatmul, no nbgrader, no pytest. The packages are linked
from the course's own environment, so the same versions are tested without a 2 GB install. The cell must find
the course package in a clone, install it from QMATMUL_SOURCE, or say what to do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
COLAB_PACKAGES = ["torch", "triton", "numpy", "ipywidgets", "matplotlib"]
CHAPTERS = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir())

pytestmark = [pytest.mark.xdist_group("fresh_setup"), pytest.mark.timeout(900)]


def _closure(names: list[str]) -> dict[str, metadata.Distribution]:
    """The installed distributions of names and of everything they require (no extras)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional or platform-specific requirement this machine does not have
        found[key] = dist
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return found


def make_colab_env(where: Path) -> Path:
    """A virtual environment at `where` with only the Colab packages; returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    py = where / "bin" / "python"
    site = Path(
        subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       capture_output=True, text=True, check=True).stdout.strip()
    )  # fmt: skip
    ours = Path(sysconfig.get_paths()["purelib"])
    for dist in _closure(COLAB_PACKAGES).values():
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            src = ours / top
            if src.exists() and not (site / top).exists() and not top.startswith(".."):
                (site / top).symlink_to(src)
    return py


def setup_cell(chapter: str) -> tuple[str, str]:
    """The source of the notebook's setup cell and the chapter name it passes to environment.start."""
    nb = json.loads((ROOT / "notebooks" / chapter / f"{chapter}.ipynb").read_text())
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup":
            src = "".join(cell["source"])
            return src, re.search(r'environment\.start\("([^"]+)"\)', src).group(1)
    raise AssertionError(f"{chapter}: no setup cell")


def run_cell(py: Path, src: str, cwd: Path, **env) -> subprocess.CompletedProcess:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH", "VIRTUAL_ENV")
    }
    clean["PATH"] = f"{py.parent}{os.pathsep}{clean['PATH']}"
    return subprocess.run(
        [py, "-c", src], cwd=cwd, env=clean | env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def colab(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("colab")
    py = make_colab_env(where / "venv")
    probe = run_cell(py, "import torch, triton, numpy, ipywidgets, matplotlib; import qmatmul", where)
    assert "No module named 'qmatmul'" in probe.stderr, probe.stderr[-2000:]
    return py


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_setup_cell_finds_the_course_in_a_clone(colab, chapter):
    src, name = setup_cell(chapter)
    proc = run_cell(colab, src, ROOT / "notebooks" / chapter)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"smoke kernel for {name}: ok" in proc.stdout, proc.stdout
    assert "Triton interpreter" in proc.stdout


def test_setup_cell_says_what_to_do_without_the_course(colab, tmp_path):
    src, _ = setup_cell("w8a16")
    proc = run_cell(colab, src, tmp_path)
    assert proc.returncode != 0
    assert "The course package `qmatmul` is missing" in proc.stderr
    assert "QMATMUL_SOURCE" in proc.stderr


def test_setup_cell_installs_the_course_from_QMATMUL_SOURCE(tmp_path):
    py = make_colab_env(tmp_path / "venv")
    source = tmp_path / "course-src"  # a copy: building in place would write into the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "qmatmul", source / "qmatmul", ignore=shutil.ignore_patterns("__pycache__"))
    src, name = setup_cell("w8a16")
    proc = run_cell(py, src, tmp_path, QMATMUL_SOURCE=str(source))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"smoke kernel for {name}: ok" in proc.stdout, proc.stdout
    where = subprocess.run([py, "-c", "import qmatmul; print(qmatmul.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert str(tmp_path / "venv") in where
    # pip took the Colab packages as they were: nothing was reinstalled over them.
    torch_file = run_cell(py, "import torch; print(torch.__file__)", tmp_path).stdout
    assert Path(torch_file.strip()).resolve().is_relative_to(Path(sysconfig.get_paths()["purelib"]).resolve())
