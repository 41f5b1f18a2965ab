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

__all__ = ["Mistake", "known_mistakes", "lazily"]


@dataclass
class Mistake:
    """A known wrong answer: if the learner's output matches `output`, the report names it."""

    name: str
    explanation: str
    output: torch.Tensor | None


def known_mistakes(mistakes: Sequence[Mistake] | Callable[[], Sequence[Mistake]]) -> Sequence[Mistake]:
    """A check's known mistakes: a sequence, or what `lazily` made (built now, once)."""
    return mistakes() if callable(mistakes) else mistakes


def lazily(make, *args, **kwargs) -> Callable[[], Sequence[Mistake]]:
    """make(*args, **kwargs), called the first time a failed check asks for it (known_mistakes) and then kept."""
    return functools.cache(functools.partial(make, *args, **kwargs))
