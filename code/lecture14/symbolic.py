"""Symbolic values for the collectives simulator: sums of named elements in the notes' notation.

Worker r's element j is `<letter r>j` (a0, b1, ...); a sum keeps its terms (a1+b1+c1+d1), so a
simulated collective shows what every device holds after every round. A full sum over K workers
has K terms: readable, and cheap, for small K only (the scripts use it up to K = 8).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def worker_name(rank: int) -> str:
    """a, b, ..., z, then aa, ab, ... (spreadsheet columns) for workers beyond 26."""
    if rank < 0:
        raise ValueError(f"rank must be >= 0, got {rank}")
    name, r = "", rank + 1
    while r:
        r, rem = divmod(r - 1, 26)
        name = chr(ord("a") + rem) + name
    return name


class Sym:
    """A sum of named elements, such as a2+c2+d2; terms kept sorted by (worker, element).

    Sym() is the empty sum (printed "0"). A term that appears twice is kept twice (a1+a1), so a
    simulator that adds something twice shows it.
    """

    __slots__ = ("terms",)

    def __init__(self, terms: Sequence[tuple[int, int]] = ()) -> None:
        self.terms = tuple(sorted(terms))

    def __add__(self, other: Any) -> Sym:
        if isinstance(other, Sym):
            return Sym(self.terms + other.terms)
        if isinstance(other, (int, float)) and other == 0:  # sum() and np.sum start from 0
            return self
        return NotImplemented

    __radd__ = __add__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sym) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(self.terms)

    def __str__(self) -> str:
        return "+".join(f"{worker_name(w)}{j}" for w, j in self.terms) or "0"

    __repr__ = __str__


def symbolic_inputs(k: int, length: int | None = None) -> list[np.ndarray]:
    """K object arrays: worker r holds <name r>0, <name r>1, ... (length defaults to K, as in the notes)."""
    if k < 1:
        raise ValueError(f"need at least one worker, got {k}")
    length = k if length is None else length
    out = []
    for r in range(k):
        arr = np.empty(length, dtype=object)
        for j in range(length):
            arr[j] = Sym(((r, j),))
        out.append(arr)
    return out


def format_chunks(buffer: np.ndarray | None, bounds: Sequence[slice]) -> list[str]:
    """One string per chunk, elements separated by spaces ("-" for an empty or undefined chunk)."""
    if buffer is None:
        return ["-" for _ in bounds]
    out = []
    for sl in bounds:
        part = buffer[sl]
        out.append(" ".join("-" if v is None else (str(v) if isinstance(v, Sym) else f"{v:g}")
                            for v in part) or "-")
    return out
