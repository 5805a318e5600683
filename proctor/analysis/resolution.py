"""Which pairs an adaptive campaign has resolved, and when (docs/methods.md §11).

The pure core of the adaptive rule, shared by the scheduler (which acts on
it) and the leaderboard (which shows it). Each pair's e-process is the one
of ``proctor analyze --sequential`` (:mod:`proctor.analysis.sequential`):
the same pairing by design (:mod:`proctor.analysis.pairing`), within each
block and object the j-th episode of A by sequence against the j-th of B,
bet on in block order. Under adaptive allocation the order in which pairs
*complete* depends on outcomes (a stop shifts slots), and a bet whose
position depends on the outcome of one of its own episodes is no longer
fair; the block order and the number of pairs in a block are fixed by the
plan before the block runs, so every stake is predictable. Both episodes of
a pair ran in one block, so a drift of the station cancels from every bet
(matching the k-th episode of A with the k-th of B across blocks did not:
after a shift the receiving policy's k-th episode ran blocks earlier than
its partner's, and with item times ×3 over a campaign a true-null pair was
rejected at 5× its bound). What is read at a decision is the product over
the settled blocks. The block and sequence come from the allocation, so
re-reading after the reveal gives the same answer whatever the stations'
clocks said.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from proctor.analysis.episodes import Episode
from proctor.analysis.pairing import has_shared_episodes, pair_episodes
from proctor.analysis.sequential import pairing_result


@dataclass(frozen=True)
class Outcome:
    """A counted episode of an original or replacement slot, as the rule
    reads it: ``sequence`` orders it (allocation order); ``episode`` has
    ``policy`` = str(policy id) and ``object`` = str(object type id)."""

    block_index: int
    sequence: int
    episode: Episode


@dataclass(frozen=True)
class PairStop:
    a: int
    b: int
    block: int  # the block after which the pair's e-process had crossed
    episodes: int  # the pair's episodes seen then (sequential ``stopped_at``)
    e_value: float


def pair_crossings(
    policies: Sequence[int],
    objects: Sequence[int],
    alpha: float,
    outcomes: Sequence[Outcome],
) -> list[PairStop]:
    """Every pair whose e-process crossed its threshold (m/α over the m pairs
    of ``policies``) on ``outcomes``, with the block after which it had.
    The e-process is the CLI's (:func:`proctor.analysis.sequential.pairing_result`
    on the pairing by design of :mod:`proctor.analysis.pairing`), so the
    board, the rule and ``proctor analyze --sequential`` read one process."""
    known = {str(o) for o in objects}
    episodes = [
        replace(o.episode, block=o.block_index, sequence=o.sequence)
        for o in outcomes
        if o.episode.object in known
    ]
    pairs = list(itertools.combinations(sorted(policies), 2))
    m = len(pairs)
    out: list[PairStop] = []
    for a, b in pairs:
        if not has_shared_episodes(str(a), str(b), episodes):
            continue  # no scored episode on a shared object yet
        # any other ValueError (two episodes in one (block, sequence)) is a
        # fault in the data, not a pair without data: it propagates
        pairing = pair_episodes(str(a), str(b), episodes)
        if not pairing.pairs:
            continue
        run = pairing_result(pairing, alpha=alpha, comparisons=m)
        if run.stopped_at is None:
            continue
        # observed once the block holding the crossing had settled
        crossing = pairing.episodes[run.stopped_at - 1]
        assert crossing.block is not None
        seen = sum(e.block is not None and e.block <= crossing.block for e in pairing.episodes)
        out.append(PairStop(a, b, crossing.block, seen, run.e_value))
    return out


def policy_stops(
    policies: Sequence[int], sentinels: Sequence[int], crossings: Sequence[PairStop]
) -> dict[int, int]:
    """policy id → the block after which all its pairs had crossed; sentinels
    never stop."""
    at = {(c.a, c.b): c.block for c in crossings}
    out: dict[int, int] = {}
    for p in policies:
        if p in sentinels:
            continue
        blocks = [at.get((min(p, q), max(p, q))) for q in policies if q != p]
        if blocks and all(b is not None for b in blocks):
            out[p] = max(b for b in blocks if b is not None)
    return out
