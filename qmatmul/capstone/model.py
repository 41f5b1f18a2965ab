"""The model: all-MiniLM-L6-v2 in plain PyTorch (or through sentence-transformers where it is installed), a fresh copy
per call, and the sentence embeddings it gives."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import math
import os
from pathlib import Path

import torch
from torch import nn

from qmatmul.capstone.runtime import autograding, default_device
from qmatmul.capstone.text import features
from qmatmul.capstone.weights import MODEL_ENV, MODEL_PACKAGE, model_folder, read_state_dict, weights_file

N_LINEARS = 37  # all-MiniLM-L6-v2: 6 layers x 6 Linears, and BertModel's pooler


class _Dense(nn.Module):
    def __init__(self, k, n, norm: bool):
        super().__init__()
        self.dense = nn.Linear(k, n)
        if norm:
            self.LayerNorm = nn.LayerNorm(n, eps=1e-12)


class _SelfAttention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.query, self.key, self.value = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)


class _Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.add_module("self", _SelfAttention(d))
        self.output = _Dense(d, d, norm=True)


class _Layer(nn.Module):
    def __init__(self, d, ff):
        super().__init__()
        self.attention = _Attention(d)
        self.intermediate = _Dense(d, ff, norm=False)
        self.output = _Dense(ff, d, norm=True)


class _Embeddings(nn.Module):
    def __init__(self, vocab, d, positions):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(positions, d)
        self.token_type_embeddings = nn.Embedding(2, d)
        self.LayerNorm = nn.LayerNorm(d, eps=1e-12)


class _Encoder(nn.Module):
    def __init__(self, d, ff, n_layers):
        super().__init__()
        self.layer = nn.ModuleList([_Layer(d, ff) for _ in range(n_layers)])


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2 in plain PyTorch: BertModel's module names and weights, mean pooling, L2 normalization.

    The course's own copy of what sentence-transformers runs (tests/test_capstone.py checks that the two give
    the same embeddings): it needs neither transformers nor sentence-transformers (its token ids come from the
    small `tokenizers` library alone, text.py), so it also runs where those are missing, and it imports in a
    fraction of the time. Like BertModel it carries a pooler Linear that the sentence embedding never uses.
    """

    def __init__(self, d=384, ff=1536, n_layers=6, heads=12, vocab=30522, positions=512):
        super().__init__()
        self.heads = heads
        self.embeddings = _Embeddings(vocab, d, positions)
        self.encoder = _Encoder(d, ff, n_layers)
        self.pooler = _Dense(d, d, norm=False)

    def forward(self, features: dict) -> dict:
        ids, mask = features["input_ids"], features["attention_mask"]
        B, T = ids.shape
        e = self.embeddings
        pos = torch.arange(T, device=ids.device)
        h = (
            e.word_embeddings(ids)
            + e.position_embeddings(pos)[None]
            + e.token_type_embeddings(torch.zeros_like(ids))
        )
        h = e.LayerNorm(h)
        bias = (1.0 - mask[:, None, None, :].to(h.dtype)) * torch.finfo(h.dtype).min
        d = h.shape[-1] // self.heads

        def split(t):
            return t.reshape(B, T, self.heads, d).transpose(1, 2)

        for layer in self.encoder.layer:
            att = layer.attention.self
            q, k, v = split(att.query(h)), split(att.key(h)), split(att.value(h))
            p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, dim=-1)
            ctx = (p @ v).transpose(1, 2).reshape(B, T, -1)
            out = layer.attention.output
            h = out.LayerNorm(out.dense(ctx) + h)
            f = torch.nn.functional.gelu(layer.intermediate.dense(h))
            h = layer.output.LayerNorm(layer.output.dense(f) + h)
        m = mask[:, :, None].to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1e-9)
        return {"token_embeddings": h, "sentence_embedding": torch.nn.functional.normalize(pooled, dim=-1)}


MODEL_CACHE: dict = {}


def course_model(device: str | None = None) -> MiniLM:
    """The course's MiniLM with the packaged weights (float32, eval mode)."""
    device = device or default_device()
    key = ("course", device)
    if key not in MODEL_CACHE:
        state = {
            k: v.float() for k, v in read_state_dict(weights_file()).items() if k != "embeddings.position_ids"
        }
        model = MiniLM()
        model.load_state_dict(state)
        # a 16-bit checkpoint is upcast: the baseline is fp32
        MODEL_CACHE[key] = model.float().eval().to(device)
    return copy.deepcopy(MODEL_CACHE[key])


def sentence_transformers_model(device: str | None = None):
    """all-MiniLM-L6-v2 through sentence-transformers, from the packaged folder (HF_HUB_OFFLINE=1)."""
    device = device or default_device()
    key = ("st", device)
    if key not in MODEL_CACHE:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        folder = model_folder() if not os.environ.get(MODEL_ENV) else Path(os.environ[MODEL_ENV])
        if folder is None or not folder.is_dir():
            raise RuntimeError(f"all-MiniLM-L6-v2 is missing: `pip install {MODEL_PACKAGE}`")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import logging

        import transformers
        from sentence_transformers import SentenceTransformer

        logging.getLogger("transformers").setLevel(logging.ERROR)
        transformers.utils.logging.disable_progress_bar()
        with contextlib.redirect_stderr(io.StringIO()):
            model = SentenceTransformer(str(folder), device=device)
        # transformers keeps a 16-bit checkpoint's dtype; the baseline is fp32
        MODEL_CACHE[key] = model.float().eval()
    return copy.deepcopy(MODEL_CACHE[key])


def load_model(backend: str = "auto", device: str | None = None) -> nn.Module:
    """A fresh copy of all-MiniLM-L6-v2: through sentence-transformers where it is installed ("auto"), else the
    course's own MiniLM ("course"). Both take token-id features and return {"sentence_embedding": ...}."""
    if backend not in ("auto", "sentence-transformers", "course"):
        raise ValueError("backend must be 'auto', 'sentence-transformers' or 'course'")
    if backend == "auto":
        has_st = importlib.util.find_spec("sentence_transformers") is not None
        backend = (
            "sentence-transformers" if has_st and (model_folder() or os.environ.get(MODEL_ENV)) else "course"
        )
        if backend == "sentence-transformers" and os.environ.get(MODEL_ENV, "").endswith(
            (".pt", ".safetensors")
        ):
            backend = "course"
    if backend == "course":
        return course_model(device)
    return sentence_transformers_model(device)


# all-MiniLM-L6-v2's Linear weights: six layers' q, k, v, o, up and down (384 wide, 1536 inside), and the pooler.
LINEAR_WEIGHTS = 6 * (4 * 384 * 384 + 2 * 384 * 1536) + 384 * 384


def linear_names(model: nn.Module) -> list[str]:
    """The names of the modules that are exactly nn.Linear."""
    return [n for n, m in model.named_modules() if type(m) is nn.Linear]


def describe_model(model: nn.Module | None = None) -> None:
    """Print what the model is and where its parameters sit."""
    if autograding():
        return
    model = model if model is not None else load_model()
    backend = "course MiniLM (plain PyTorch)" if isinstance(model, MiniLM) else "sentence-transformers"
    if backend == "sentence-transformers":
        import sentence_transformers

        backend += f" {sentence_transformers.__version__}"
    names = linear_names(model)
    lin = sum(model.get_submodule(n).weight.numel() for n in names)
    total = sum(p.numel() for p in model.parameters())
    emb = sum(p.numel() for n, p in model.named_parameters() if "embeddings" in n)
    print(f"all-MiniLM-L6-v2 through {backend}, weights from the {MODEL_PACKAGE} package (no download)")
    print(f"  {total / 1e6:.1f} M parameters: {emb / 1e6:.1f} M in the embedding tables (looked up, not multiplied), "
          f"{lin / 1e6:.1f} M in {len(names)} nn.Linear layers (what you will quantize)")  # fmt: skip
    print(f"  e.g. {names[0]}: {tuple(model.get_submodule(names[0]).weight.shape)}, "
          f"{names[4]}: {tuple(model.get_submodule(names[4]).weight.shape)}")  # fmt: skip


def _model_device(model) -> torch.device:
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")


@torch.no_grad()
def embed(model: nn.Module, sentences, batch_size: int = 64) -> torch.Tensor:
    """Sentence embeddings [S, 384] (float32, unit length) of any sentences (the chapter's, or your own)."""
    device = _model_device(model)
    outs = []
    for i in range(0, len(sentences), batch_size):
        feats = features(sentences[i : i + batch_size], device)
        outs.append(model(feats)["sentence_embedding"].float())
    return torch.cat(outs)
