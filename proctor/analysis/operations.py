"""From episodes to operations: the random variable T (docs/methods.md §2).

From an episode with placements s1 < … < sk (s0 = 0):

* each success gives T_i = s_i − s_(i−1), an observed event;
* each lost item, each dropped item, and the operation that triggered a
  safety stop is a *ghost*: an event at T = +∞ (it never leaves the risk set
  at any finite t, so the CDF plateaus below 1);
* items still unhandled at a ``ran_out_of_time`` / ``operator_stop`` end give
  one right-censored operation T = duration − s_k (a ``safety`` end gives its
  ghost instead);
* ``system`` episodes carry no operations (they are excluded upstream).

Reference: PhAIL (seeds/002) §3.1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proctor.analysis.episodes import CENSORING_OUTCOMES, SAFETY, SYSTEM, Episode

# operation kinds
SUCCESS_OP = 0
CENSORED_OP = 1
LOST_OP = 2
DROPPED_OP = 3
SAFETY_OP = 4
KIND_NAMES = ("success", "censored", "lost", "dropped", "safety")


@dataclass(frozen=True)
class Operations:
    """Operations of a sequence of episodes, as flat arrays of length N.

    ``time``: seconds (``+inf`` for ghosts); ``event``: a success observed at
    ``time``; ``kind``: one of the ``*_OP`` codes; ``episode``: index of the
    episode (in the sequence given to :func:`extract_operations`) the
    operation belongs to.
    """

    time: np.ndarray
    event: np.ndarray
    kind: np.ndarray
    episode: np.ndarray
    n_episodes: int

    def __len__(self) -> int:
        return int(self.time.shape[0])

    @property
    def ghost(self) -> np.ndarray:
        return self.kind >= LOST_OP

    @property
    def censored(self) -> np.ndarray:
        return self.kind == CENSORED_OP

    def per_episode(self) -> np.ndarray:
        """Operations per episode, shape (n_episodes,)."""
        return np.bincount(self.episode, minlength=self.n_episodes)


def episode_operations(ep: Episode) -> list[tuple[float, int]]:
    """(time, kind) of each operation of one validated, non-system episode."""
    if ep.outcome == SYSTEM:
        raise ValueError(f"episode {ep.episode_id}: system episodes have no operations")
    ops: list[tuple[float, int]] = []
    previous = 0.0
    for s in ep.placements_s:
        ops.append((s - previous, SUCCESS_OP))
        previous = s
    ops.extend((np.inf, LOST_OP) for _ in range(ep.lost))
    ops.extend((np.inf, DROPPED_OP) for _ in range(ep.dropped))
    if ep.outcome == SAFETY:
        # docs/methods.md §2: one more ghost for the operation that triggered the stop,
        # and no censored tail
        ops.append((np.inf, SAFETY_OP))
    elif ep.outcome in CENSORING_OUTCOMES and ep.unhandled > 0:
        ops.append((ep.duration_s - previous, CENSORED_OP))
    return ops


def extract_operations(episodes: Sequence[Episode]) -> Operations:
    """All operations of ``episodes`` (validated, none of them ``system``)."""
    times: list[float] = []
    kinds: list[int] = []
    owners: list[int] = []
    for i, ep in enumerate(episodes):
        for t, k in episode_operations(ep):
            times.append(t)
            kinds.append(k)
            owners.append(i)
    kind = np.asarray(kinds, dtype=np.int8)
    return Operations(
        time=np.asarray(times, dtype=float),
        event=kind == SUCCESS_OP,
        kind=kind,
        episode=np.asarray(owners, dtype=np.intp),
        n_episodes=len(episodes),
    )


def concat_operations(parts: Sequence[Operations]) -> Operations:
    """The operations of several episode sets as one, episodes renumbered in
    order (the first part's episodes first)."""
    offsets = np.cumsum([0, *[p.n_episodes for p in parts]])
    return Operations(
        time=np.concatenate([p.time for p in parts]) if parts else np.zeros(0),
        event=np.concatenate([p.event for p in parts]) if parts else np.zeros(0, dtype=bool),
        kind=np.concatenate([p.kind for p in parts]) if parts else np.zeros(0, dtype=np.int8),
        episode=(
            np.concatenate([p.episode + off for p, off in zip(parts, offsets, strict=False)])
            if parts
            else np.zeros(0, dtype=np.intp)
        ),
        n_episodes=int(offsets[-1]),
    )


def subset_operations(ops: Operations, episodes: np.ndarray) -> Operations:
    """The operations of the episodes with the given indices, renumbered
    0..len(episodes)-1 in the order given."""
    episodes = np.asarray(episodes, dtype=np.intp)
    new_index = np.full(ops.n_episodes, -1, dtype=np.intp)
    new_index[episodes] = np.arange(episodes.shape[0])
    keep = new_index[ops.episode] >= 0
    return Operations(
        time=ops.time[keep],
        event=ops.event[keep],
        kind=ops.kind[keep],
        episode=new_index[ops.episode[keep]],
        n_episodes=int(episodes.shape[0]),
    )
