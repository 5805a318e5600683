"""The behavioural breakdown: how often each failure mode shows up in a
policy's episodes, per object (docs/methods.md, "Behavioural failure modes").

Per object and mode: the episodes counted, how many of them carry at least
one live tag of the mode, the number of tags, and the share of episodes
with the mode with a Wilson score interval. The unit is the episode, not the
tag: operations within an episode are not independent (one bad grasp
strategy repeats), episodes are — so a mode tagged five times in one
episode counts once in the share (the tag count is shown beside it).

Tags exist only where someone looked (or the telemetry proposer fired), so
the share is a *tagged* rate: a lower bound of the true rate when review is
selective. Each cell says how many of its episodes were reviewed, so the
reader can tell a rate over every episode from one over a few.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from proctor.analysis.bootstrap import Interval


@dataclass(frozen=True)
class BehaviourCell:
    object: str
    mode: str
    episodes: int
    episodes_with: int
    tags: int
    share: Interval
    reviewed: int  # of ``episodes``, those a reviewer looked at


def wilson(k: int, n: int, level: float = 0.95) -> Interval:
    """Wilson score interval for a proportion k/n (None estimate when n = 0)."""
    if n < 0 or not 0 <= k <= max(n, 0):
        raise ValueError(f"wilson: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return Interval(None, None, None)
    z = float(special.ndtri(1 - (1 - level) / 2))
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, float(max(0.0, centre - half)), float(min(1.0, centre + half)))


def behaviour_breakdown(
    objects: Sequence[str],
    modes: Sequence[str],
    episode_object: np.ndarray,
    tag_episode: np.ndarray,
    tag_mode: np.ndarray,
    episode_reviewed: np.ndarray,
    *,
    level: float = 0.95,
) -> tuple[BehaviourCell, ...]:
    """``episode_object[e]``: index into ``objects`` of episode ``e``;
    ``tag_episode[j]``, ``tag_mode[j]``: the episode index and the index into
    ``modes`` of live tag ``j``; ``episode_reviewed[e]``: whether episode
    ``e`` was reviewed. One cell per (object, mode), objects and modes in the
    order given."""
    episode_object = np.asarray(episode_object, dtype=np.int64)
    episode_reviewed = np.asarray(episode_reviewed, dtype=bool)
    if episode_reviewed.shape != episode_object.shape:
        raise ValueError("episode_reviewed: one flag per episode")
    tag_episode = np.asarray(tag_episode, dtype=np.int64)
    tag_mode = np.asarray(tag_mode, dtype=np.int64)
    if tag_episode.shape != tag_mode.shape:
        raise ValueError("tag_episode and tag_mode: must have the same length")
    n_ep = len(episode_object)
    if len(tag_episode) and (tag_episode.min() < 0 or tag_episode.max() >= n_ep):
        raise ValueError("tag_episode: an index outside the episodes")
    if len(tag_mode) and (tag_mode.min() < 0 or tag_mode.max() >= len(modes)):
        raise ValueError("tag_mode: an index outside the modes")
    counts = np.zeros((n_ep, len(modes)), dtype=np.int64)
    np.add.at(counts, (tag_episode, tag_mode), 1)
    out = []
    for oi, obj in enumerate(objects):
        rows = counts[episode_object == oi]
        reviewed = int(np.count_nonzero(episode_reviewed[episode_object == oi]))
        for mi, mode in enumerate(modes):
            n = int(rows.shape[0])
            k = int(np.count_nonzero(rows[:, mi])) if n else 0
            out.append(
                BehaviourCell(
                    obj,
                    mode,
                    n,
                    k,
                    int(rows[:, mi].sum()) if n else 0,
                    wilson(k, n, level),
                    reviewed,
                )
            )
    return tuple(out)
