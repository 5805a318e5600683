"""Which pairs an adaptive campaign has resolved, and when (docs/methods.md §11).

The pure core of the adaptive rule, shared by the scheduler (which acts on
it) and the leaderboard (which shows it): each pair's e-process
(:mod:`proctor.analysis.sequential`) read on a campaign's counted episodes
in allocation order, and the block after which it first crossed its
threshold. Allocation order (block, then sequence) stands in for start
order: it is fixed by the seed before any outcome, so the e-process is read
in an order chosen in advance, and re-reading it after the reveal gives the
same answer whatever the stations' clocks said.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from proctor.analysis.episodes import SYSTEM, Episode
from proctor.analysis.sequential import sequential_pair


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
    policies: Sequence[int], alpha: float, outcomes: Sequence[Outcome]
) -> list[PairStop]:
    """Every pair whose e-process crossed its threshold (m/α over the m pairs
    of ``policies``) on ``outcomes`` read in allocation order, with the block
    in which it crossed."""
    ordered = sorted(outcomes, key=lambda o: (o.block_index, o.sequence))
    block_of = [o.block_index for o in ordered]
    episodes = [o.episode for o in ordered]
    t0 = datetime(2000, 1, 1, tzinfo=UTC)
    starts = {e.episode_id: t0 + timedelta(seconds=i) for i, e in enumerate(episodes)}
    pairs = list(itertools.combinations(sorted(policies), 2))
    out: list[PairStop] = []
    for a, b in pairs:
        mine = [i for i, e in enumerate(episodes) if e.policy in (str(a), str(b))]
        try:
            res = sequential_pair(
                str(a), str(b), episodes, starts, alpha=alpha, comparisons=len(pairs)
            )
        except ValueError:
            continue  # no scored episodes on a shared object yet
        if res.stopped_at is None:
            continue
        # the scored episodes of the pair, in order, are a subsequence of ``mine``
        scored = [i for i in mine if episodes[i].outcome != SYSTEM]
        shared = _shared_objects(episodes, scored, str(a), str(b))
        scored = [i for i in scored if episodes[i].object in shared]
        out.append(
            PairStop(a, b, block_of[scored[res.stopped_at - 1]], res.stopped_at, res.e_value)
        )
    return out


def _shared_objects(episodes: Sequence[Episode], idx: Sequence[int], a: str, b: str) -> set[str]:
    objs_a = {episodes[i].object for i in idx if episodes[i].policy == a}
    objs_b = {episodes[i].object for i in idx if episodes[i].policy == b}
    return objs_a & objs_b


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
