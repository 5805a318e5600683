"""Which pairs an adaptive campaign has resolved, and when (docs/methods.md §11).

The pure core of the adaptive rule, shared by the scheduler (which acts on
it) and the leaderboard (which shows it). Each pair's e-process is the one
of :mod:`proctor.analysis.sequential` (matched episodes within object, the
same bet and stake), but its matched pairs are bet on in an order fixed
before the campaign starts — round k = 0, 1, …: the k-th episode of A with
the k-th of B on each object in ascending id — not in the order they
complete. Under adaptive allocation the order of completion depends on
outcomes (a stop shifts slots, which moves later episodes earlier), and a
bet whose position depends on the outcome of one of its own episodes is no
longer fair; in the fixed order every pair's two episodes are fresh draws
whatever the allocation did, so the product is a test martingale and
Ville's bound covers every look. What is read at a decision is the product
up to the first pair not complete yet. The block (and sequence) of each
episode comes from the allocation, so re-reading after the reveal gives
the same answer whatever the stations' clocks said.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proctor.analysis.episodes import SYSTEM, Episode
from proctor.analysis.operations import extract_operations
from proctor.analysis.sequential import (
    PaddedEpisodes,
    bet_scores,
    log_wealth,
    pad_operations,
    pair_z,
    threshold,
)


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
    of ``policies``) on ``outcomes``, with the block after which it had."""
    by_cell: dict[tuple[str, str], list[Outcome]] = {}
    for o in sorted(outcomes, key=lambda o: (o.block_index, o.sequence)):
        if o.episode.outcome != SYSTEM:
            by_cell.setdefault((o.episode.policy, o.episode.object), []).append(o)
    pairs = list(itertools.combinations(sorted(policies), 2))
    bar = math.log(threshold(alpha, len(pairs)))
    out: list[PairStop] = []
    for a, b in pairs:
        matched = _fixed_order(str(a), str(b), sorted(objects), by_cell)
        if not matched:
            continue
        eps = [e for x, y in matched for e in (x.episode, y.episode)]
        padded = pad_operations(extract_operations(eps))
        g = np.array(
            [
                bet_scores(pair_z(_row(padded, 2 * j), _row(padded, 2 * j + 1))[0, 0])
                for j in range(len(matched))
            ]
        )
        logs = log_wealth(g)[0]
        hit = np.nonzero(logs >= bar - 1e-12)[0]
        if not hit.size:
            continue
        j = int(hit[0])
        # observed once every pair up to j had completed
        block = max(max(x.block_index, y.block_index) for x, y in matched[: j + 1])
        seen = sum(
            o.block_index <= block
            for (pol, _obj), got in by_cell.items()
            if pol in (str(a), str(b))
            for o in got
        )
        out.append(PairStop(a, b, block, seen, float(np.exp(logs[j]))))
    return out


def _fixed_order(
    a: str, b: str, objects: Sequence[int], by_cell: dict[tuple[str, str], list[Outcome]]
) -> list[tuple[Outcome, Outcome]]:
    """The matched pairs in the order fixed before the campaign: the k-th
    episode of A with the k-th of B on each object, k = 0, 1, …, objects in
    ascending id within each k; up to the first pair not complete yet."""
    out: list[tuple[Outcome, Outcome]] = []
    for k in itertools.count():
        for obj in objects:
            xs, ys = by_cell.get((a, str(obj)), []), by_cell.get((b, str(obj)), [])
            if k >= len(xs) or k >= len(ys):
                return out
            out.append((xs[k], ys[k]))
    return out  # unreachable: itertools.count never ends


def _row(p: PaddedEpisodes, i: int) -> PaddedEpisodes:
    return PaddedEpisodes(p.time[i : i + 1], p.event[i : i + 1], p.present[i : i + 1])


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
