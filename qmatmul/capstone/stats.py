"""Rank correlation (the reference; exercise 1 writes its own) and the cosine similarity of embeddings."""

from __future__ import annotations

import torch


def ranks(v: torch.Tensor) -> torch.Tensor:
    """1-based ranks, ties sharing the average of their positions, by counting (O(n^2), independent of sort)."""
    v = v.double().flatten()
    less = (v[None, :] < v[:, None]).sum(1).double()
    equal = (v[None, :] == v[:, None]).sum(1).double()
    return less + (equal + 1) / 2


def spearman_reference(a, b) -> float:
    ra, rb = ranks(torch.as_tensor(a)), ranks(torch.as_tensor(b))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def pearson(a, b) -> float:
    a, b = torch.as_tensor(a).double().flatten(), torch.as_tensor(b).double().flatten()
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / (a.norm() * b.norm()))


def cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1)
