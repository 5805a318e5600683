"""Compact letter display (Piepho 2004, insert-absorb with sweeping).

Two policies share a letter iff the test could not separate them. Used by
the LBM paper (seeds/003, §IV-A5) to summarise all pairwise comparisons.

Reference: H.-P. Piepho, "An algorithm for a letter-based representation of
all-pairwise comparisons", J. Comput. Graph. Stat. 13(2):456–466, 2004.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence


def compact_letters(
    treatments: Sequence[str], significant: Iterable[tuple[str, str]]
) -> dict[str, str]:
    """Letters for ``treatments`` (listed best first: the first letter goes to
    the column holding the earliest treatment) given the pairs that differ.

    Insert: for each significant pair (i, j), every column holding both is
    split into a copy without i and a copy without j. Absorb: columns that
    are subsets of another column are dropped. Sweep: a letter is removed
    from a treatment when every pair it links through that letter is also
    linked through another letter; emptied or duplicate columns go.
    """
    order = {t: k for k, t in enumerate(treatments)}
    if len(order) != len(treatments):
        raise ValueError("compact_letters: duplicate treatment names")
    columns: list[set[str]] = [set(treatments)] if treatments else []
    for i, j in significant:
        if i not in order or j not in order:
            raise ValueError(f"compact_letters: unknown treatment in pair ({i}, {j})")
        new: list[set[str]] = []
        for col in columns:
            if i in col and j in col:
                new.append(col - {i})
                new.append(col - {j})
            else:
                new.append(col)
        columns = _absorb(new)
    columns = _sweep(columns)
    columns.sort(key=lambda c: sorted(order[t] for t in c))
    if len(columns) > len(string.ascii_lowercase):
        raise ValueError("compact_letters: more than 26 letters needed")
    letters = {t: "" for t in treatments}
    for letter, col in zip(string.ascii_lowercase, columns, strict=False):
        for t in sorted(col, key=order.__getitem__):
            letters[t] += letter
    return letters


def _absorb(columns: list[set[str]]) -> list[set[str]]:
    kept: list[set[str]] = []
    for k, col in enumerate(columns):
        if not col:
            continue
        dominated = any(
            (col < other) or (col == other and m < k) for m, other in enumerate(columns) if m != k
        )
        if not dominated:
            kept.append(col)
    return kept


def _sweep(columns: list[set[str]]) -> list[set[str]]:
    cols = [set(c) for c in columns]
    for k, col in enumerate(cols):
        for t in sorted(col):
            others = col - {t}
            if not others:
                # a lone treatment keeps its letter unless another column has it
                if any(t in c for m, c in enumerate(cols) if m != k):
                    col.discard(t)
                continue
            if all(any(t in c and u in c for m, c in enumerate(cols) if m != k) for u in others):
                col.discard(t)
    return _absorb([c for c in cols if c])
