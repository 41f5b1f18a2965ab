"""Known mistakes: the wrong answers a check can name when a learner's output matches one.

Each is a whole alternative product (the kernel as it would compute with the mistake), so a check builds them only
when a result is wrong: `lazily(make, *args)` stands for them until `known_mistakes` asks. Built eagerly, they were a
third of the layouts chapter's decode cell on an H100 (5.5 of 16.5 s, 2026-12-06), for results that were right.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

__all__ = ["Mistake", "known_mistakes", "lazily", "matches"]


@dataclass
class Mistake:
    """A known wrong answer: if the learner's output matches `output`, the report names it. A tuple of outputs stands
    for a race: each element matches one of them (which program's store landed last differs from element to element
    on a GPU)."""

    name: str
    explanation: str
    output: torch.Tensor | tuple[torch.Tensor, ...] | None


def known_mistakes(mistakes: Sequence[Mistake] | Callable[[], Sequence[Mistake]]) -> Sequence[Mistake]:
    """A check's known mistakes: a sequence, or what `lazily` made (built now, once)."""
    return mistakes() if callable(mistakes) else mistakes


def lazily(make, *args, **kwargs) -> Callable[[], Sequence[Mistake]]:
    """make(*args, **kwargs), called the first time a failed check asks for it (known_mistakes) and then kept."""
    return functools.cache(functools.partial(make, *args, **kwargs))


def matches(got: torch.Tensor, output, differ: Callable) -> bool:
    """Whether got (on the host) is a known mistake's output: every element matches it, or one of a tuple of them.
    differ(got, candidate): where they differ beyond the check's tolerance (NaN where both are NaN, and equal
    infinities, match)."""
    cands = output if isinstance(output, tuple) else (output,)
    if output is None or any(tuple(c.shape) != tuple(got.shape) for c in cands):
        return False
    wrong = torch.ones(got.shape, dtype=torch.bool)
    for cand in cands:
        cand = cand.cpu()
        same_special = (got.double() == cand.double()) | (
            torch.isnan(got.double()) & torch.isnan(cand.double())
        )
        wrong &= differ(got, cand) & ~same_special
    return not bool(wrong.any())
