"""Measuring what quantization costs: a fresh model quantized in every format (cosine to fp32, Spearman's rho, bytes
per weight), real activations through the learner's QuantLinear, and the bytes each format stores."""

from __future__ import annotations

import math
import time

import torch

from qmatmul.capstone.formats import FORMATS, LABELS, weight_bytes_per_weight
from qmatmul.capstone.grading_kernels import GradingKernels
from qmatmul.capstone.layers import dense16, weight_bytes
from qmatmul.capstone.model import LINEAR_WEIGHTS, embed, linear_names, load_model
from qmatmul.capstone.registry import kernel_word, kernels, reference_kernels, using
from qmatmul.capstone.runtime import autograding
from qmatmul.capstone.stack import BLOCK_WEIGHTS
from qmatmul.capstone.stats import cosine, spearman_reference
from qmatmul.capstone.text import PAIRS, SENTENCES, pair_sentences
from qmatmul.teaching import roofline_model

RESULTS: list = []


def measure(quantize_model_fn, spearman_fn=None, formats=FORMATS, *, kernels_mode: str = "auto",
            backend: str = "auto") -> list[dict]:  # fmt: skip
    """Quantize a fresh copy of the model in every format and measure what it costs.

    Per format: cosine similarity of each shipped sentence's embedding to the unquantized model's (mean, min),
    Spearman's rho of the pair similarities against the unquantized model's and against the shipped scores,
    and the bytes per weight of the Linear layers. kernels_mode "auto": the registered kernels on a GPU, the
    reference path on a CPU (the interpreter would take minutes; per layer the two differ by 2e-7 to 6e-4, relative).
    """
    if autograding():
        return []
    spearman_fn = spearman_fn or spearman_reference
    use_ref = kernels_mode == "reference" or (kernels_mode == "auto" and not torch.cuda.is_available())
    if use_ref and not torch.cuda.is_available():
        # On a CPU, PyTorch's 16-bit matmul is slow: the grading kernels compute the same product (16-bit x, the
        # dequantized weight, a 16-bit result) in float32, with each layer's weight dequantized once.
        sets = GradingKernels().sets()
    else:
        sets = {f: reference_kernels(f) for f in FORMATS} if use_ref else {f: kernels(f) for f in FORMATS}
    base = load_model(backend)
    sentences = list(SENTENCES)
    pair_sents = pair_sentences()
    gold = torch.tensor([s for _, _, s in PAIRS])
    e_ref = embed(base, sentences)
    p_ref = embed(base, pair_sents)
    idx = {s: i for i, s in enumerate(pair_sents)}

    def pair_sims(e):
        a = e[[idx[a] for a, _, _ in PAIRS]]
        b = e[[idx[b] for _, b, _ in PAIRS]]
        return cosine(a, b)

    sims_ref = pair_sims(p_ref)
    rows = []
    variants = [("fp32", None), ("16-bit", None)] + [(f, f) for f in formats]
    for name, fmt in variants:
        m = load_model(backend)
        with using(sets), torch.no_grad():
            if name == "16-bit":
                m = dense16(m)
            elif fmt is not None:
                m = quantize_model_fn(m, fmt)
            e = embed(m, sentences)
            p = embed(m, pair_sents)
        nbytes, count = weight_bytes(m)
        cos = cosine(e, e_ref)
        sims = pair_sims(p)
        rows.append(dict(format=name, label=LABELS[name], bytes=nbytes, bytes_per_weight=nbytes / count,
                         cos_mean=float(cos.mean()), cos_min=float(cos.min()),
                         rho_model=float(spearman_fn(sims.cpu(), sims_ref.cpu())), rho_gold=float(spearman_fn(sims.cpu(), gold)),
                         kernels="reference path" if use_ref or fmt is None else kernel_word(sets[fmt])))  # fmt: skip
    RESULTS[:] = rows
    print_table(rows)
    if use_ref:
        print("(CPU: the quantized models ran the reference path, PyTorch's dequantize-then-matmul on the same stored "
              "weights; your kernels compute the same products, see the next cell.)")  # fmt: skip
    return rows


def print_table(rows) -> None:
    print(f"{'format':<22}{'MB':>7}{'B/weight':>10}{'cos mean':>10}{'cos min':>10}{'rho vs fp32':>13}"
          f"{'rho vs labels':>15}  kernels")  # fmt: skip
    for r in rows:
        print(f"{r['label']:<22}{r['bytes'] / 1e6:>7.2f}{r['bytes_per_weight']:>10.3f}{r['cos_mean']:>10.5f}"
              f"{r['cos_min']:>10.5f}{r['rho_model']:>13.4f}{r['rho_gold']:>15.4f}  {r['kernels']}")  # fmt: skip


def through_your_kernels(cls, formats=FORMATS, sentence: str | None = None, *, layers=None) -> None:
    """Real activations through `cls` (your QuantLinear) with each format's registered kernels, against the
    reference path on the same stored weights. One sentence (M <= 16 rows: the decode kernels) and a batch of
    sentences (the prefill kernels). On a GPU: every Linear of the model; in the interpreter, where one model
    pass takes minutes, the first layer's query and output Linears."""
    if autograding():
        return None
    sentence = sentence or SENTENCES[0]
    base = load_model("course")
    names = linear_names(base)
    if layers is None:
        layers = names if torch.cuda.is_available() else ["encoder.layer.0.attention.self.query",
                                                          "encoder.layer.0.output.dense"]  # fmt: skip
    inputs: dict = {}
    hooks = [base.get_submodule(n).register_forward_pre_hook(
        lambda mod, args, n=n: inputs.setdefault(n, []).append(args[0].detach())) for n in layers]  # fmt: skip
    with torch.no_grad():
        embed(base, [sentence])
        if torch.cuda.is_available():
            embed(base, list(SENTENCES[:8]))
    for h in hooks:
        h.remove()
    where = f"{len(layers)} Linear layers" if len(layers) > 2 else " and ".join(layers)
    print(
        f"Activations of {sentence!r}{' and of 8 sentences' if torch.cuda.is_available() else ''} through {where}:"
    )
    reference = {f: reference_kernels(f) for f in FORMATS}
    for fmt in formats:
        ks = kernels(fmt)
        if all(s == "reference" for s in ks.source.values()):
            print(f"  {LABELS[fmt]:<20} reference path only (no kernel of yours registered)")
            continue
        t0, worst, rows = time.time(), 0.0, set()
        for n in layers:
            lin = base.get_submodule(n)
            mine = cls(lin, fmt)
            with using(reference):
                ref = cls(lin, fmt)
            for x in inputs[n]:
                with torch.no_grad():
                    y = mine(x).float()
                    with using(reference):
                        r = ref(x).float()
                worst = max(worst, float((y - r).norm() / r.norm().clamp_min(1e-30)))
                rows.add(math.prod(x.shape[:-1]))
        print(f"  {LABELS[fmt]:<20} {kernel_word(ks):<16} largest relative error to the reference path {worst:.1e} "
              f"(M = {', '.join(map(str, sorted(rows)))}; {time.time() - t0:.1f} s)")  # fmt: skip


def explain_formats(K: int = 384) -> None:
    """Bytes per weight of each format at the model's K, and what that means for this model and for a Llama."""
    lin, block = LINEAR_WEIGHTS, BLOCK_WEIGHTS
    copy_bw = roofline_model.H200["copy_bandwidth"]
    print(f"Bytes per weight (scales and zeros included) for rows of K = {K}, and the Linear weights of "
          f"all-MiniLM-L6-v2 ({lin / 1e6:.1f} M) and of one Llama-3-8B block ({block / 1e6:.0f} M):")  # fmt: skip
    for name in ("16-bit", *FORMATS):
        b = weight_bytes_per_weight(name, K)
        print(f"  {LABELS[name]:<22}{b:>7.3f} B   MiniLM {lin * b / 1e6:>6.1f} MB   Llama block {block * b / 1e6:>6.0f} MB"
              f"   memory floor on the course's H200 ({copy_bw / 1e12:.2f} TB/s): {block * b / copy_bw * 1e6:>4.0f} µs")  # fmt: skip
