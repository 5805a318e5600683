"""Which episodes of two policies are bet against each other, and in what
order (docs/methods.md §10, §11): the one pairing the CLI's sequential
verdict, the board and the adaptive rule all read.

**By design** (every scored episode carries the allocation's ``block`` and
``sequence``): within each block and object, the j-th episode of A by
sequence is matched with the j-th of B; pairs are bet on in block order,
then object, then j. Both episodes of a pair ran in the same block, so
they share its scene, configuration and, up to the block's length, the
station's drift (within a block the policies' order is a draw from the
seed, so which of the two ran first is a coin toss whatever the outcomes).
How many pairs a block holds is fixed by the plan before the block runs
(the adaptive rule re-plans only blocks after ``lag``), so the position of
every bet is predictable and the product of §10 stays a test martingale
under adaptive allocation and drift alike. A replacement of a ``system``
episode keeps its slot's block (a later sequence), so it still pairs
inside its block.

**Fallback: start order** (a file without ``block``/``sequence``, e.g. one
written before format 2 of §8, or from another tool): per object, the k-th
episode of A in start order is matched with the k-th of B, and pairs are
bet on in the order they complete. This is what the CLI did before; it is
valid when the schedule's order is fixed in advance and the station does
not drift, and :attr:`Pairing.note` says it was used.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from proctor.analysis.episodes import SYSTEM, Episode

BY_DESIGN = "block"
BY_START = "start"


@dataclass(frozen=True)
class Pairing:
    """The pair's scored episodes on shared objects in reading order
    (``episodes``), and its matched pairs as (A's index, B's index) into
    ``episodes`` in bet order. ``complete_at[j]``: the number of episodes
    read when pairs 0…j have all completed (non-decreasing). ``basis``:
    ``BY_DESIGN`` or ``BY_START``; ``note``: why the fallback was used."""

    a: str
    b: str
    episodes: tuple[Episode, ...]
    pairs: tuple[tuple[int, int], ...]
    complete_at: tuple[int, ...]
    basis: str
    note: str | None = None


def has_design(episodes: Sequence[Episode]) -> bool:
    """Every scored episode carries its block and sequence."""
    kept = [e for e in episodes if e.outcome != SYSTEM]
    return bool(kept) and all(e.block is not None and e.sequence is not None for e in kept)


def _shared_scored(a: str, b: str, episodes: Sequence[Episode]) -> list[Episode]:
    """The pair's scored episodes on the objects both were run on."""
    mine = [e for e in episodes if e.policy in (a, b) and e.outcome != SYSTEM]
    shared = {e.object for e in mine if e.policy == a} & {e.object for e in mine if e.policy == b}
    return [e for e in mine if e.object in shared]


def has_shared_episodes(a: str, b: str, episodes: Sequence[Episode]) -> bool:
    """Whether (a, b) has a scored episode on an object both were run on (what
    :func:`pair_episodes` needs)."""
    return bool(_shared_scored(a, b, episodes))


def pair_episodes(
    a: str,
    b: str,
    episodes: Sequence[Episode],
    starts: dict[str, datetime] | None = None,
) -> Pairing:
    """The pairing of (a, b): by design when every scored episode of the
    file has ``block`` and ``sequence``, else by start (``starts`` from
    :func:`proctor.analysis.sequential.start_times`; ValueError when it is
    needed and missing). ValueError when the pair has no scored episode on
    an object both were run on."""
    mine = _shared_scored(a, b, episodes)
    if not mine:
        raise ValueError(f"pair {a} vs {b}: no scored episodes on an object both were run on")
    if has_design(episodes):
        return _by_design(a, b, mine)
    if starts is None:
        raise ValueError(
            f"pair {a} vs {b}: episodes without block and sequence are paired in start "
            "order, and no start times were given"
        )
    return _by_start(a, b, mine, starts)


def _by_design(a: str, b: str, mine: list[Episode]) -> Pairing:
    def key(e: Episode) -> tuple[int, int]:
        assert e.block is not None and e.sequence is not None  # has_design
        return (e.block, e.sequence)

    ordered = sorted(mine, key=key)
    for x, y in itertools.pairwise(ordered):
        if key(x) == key(y):
            raise ValueError(
                f"sequence: episodes {x.episode_id} and {y.episode_id} of pair {a} vs {b} "
                f"share block {x.block} and sequence {x.sequence}"
            )
    cells: dict[tuple[int, str], tuple[list[int], list[int]]] = {}
    for i, e in enumerate(ordered):
        assert e.block is not None
        side = cells.setdefault((e.block, e.object), ([], []))
        side[0 if e.policy == a else 1].append(i)
    pairs: list[tuple[int, int]] = []
    for cell in sorted(cells):
        xs, ys = cells[cell]
        pairs.extend(zip(xs, ys, strict=False))
    return Pairing(a, b, tuple(ordered), tuple(pairs), _prefix_complete(pairs), BY_DESIGN)


def _by_start(a: str, b: str, mine: list[Episode], starts: dict[str, datetime]) -> Pairing:
    ordered = sorted(mine, key=lambda e: starts[e.episode_id])
    for x, y in itertools.pairwise(ordered):
        if starts[x.episode_id] == starts[y.episode_id]:
            raise ValueError(
                f"started_at: episodes {x.episode_id} and {y.episode_id} of pair {a} vs {b} "
                f"start at the same time ({x.started_at}); their order is unknown"
            )
    waiting: dict[tuple[str, str], list[int]] = {}
    pairs: list[tuple[int, int]] = []
    for i, e in enumerate(ordered):
        other = b if e.policy == a else a
        queue = waiting.get((other, e.object))
        if queue:
            j = queue.pop(0)
            pairs.append((i, j) if e.policy == a else (j, i))
        else:
            waiting.setdefault((e.policy, e.object), []).append(i)
    return Pairing(
        a,
        b,
        tuple(ordered),
        tuple(pairs),
        _prefix_complete(pairs),
        BY_START,
        note="paired in start order (the file has no block and sequence): valid only "
        "without drift and with a schedule fixed in advance (docs/methods.md §10)",
    )


def _prefix_complete(pairs: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """Episodes read when every pair up to j has completed: a bet is placed
    only once all bets before it in the fixed order are known."""
    out: list[int] = []
    done = 0
    for x, y in pairs:
        done = max(done, x + 1, y + 1)
        out.append(done)
    return tuple(out)
