"""Anytime-valid pairwise verdicts (docs/methods.md §10): an e-process over
matched episode pairs, stratified by object, that may be looked at after
every episode.

Why episode pairs and not the operation-level log-rank martingale of
ter Schure, Pérez-Ortiz, Ly & Grünwald (2024): that martingale is built in
the filtration of event times of independent subjects, where at each event
the arm it falls in is Bernoulli(n_A / n) under H0. Here the operations of
one episode share a slowness (the within-episode correlation §3 clusters
on) and follow one another on the episode's own clock, and the data arrive
an episode at a time, not an event at a time; the Bernoulli step is then
not a conditional probability given the past and the product is not a
martingale. So the unit is the episode: within each object the k-th
episode of A (in start order) is matched with the k-th of B. Under H0 the
two episodes of a pair are exchangeable and independent of every other
pair, so any statistic that changes sign when the labels are swapped has
conditional mean 0 given the pairs before it, whatever happens inside an
episode. The statistic used is the two-sample log-rank z of the pair's
operations (ghosts at +∞, censored tails as in §2), squashed into [−1, 1];
the e-process bets on its sign with a predictable stake (Shafer 2021;
Waudby-Smith & Ramdas 2024):

    E_k = Π_{j≤k} (1 + λ_j g_j),   g_j = clip(z_j / Z_SCALE, −1, 1),
    λ_j = clip(S_{j−1} / (PRIOR + Q_{j−1}), −LAMBDA_MAX, LAMBDA_MAX),

with S, Q the running sums of g and g² over the pairs completed before
(λ_1 = 0). E is a non-negative martingale with E_0 = 1 under H0, so by
Ville's inequality P(sup_k E_k ≥ 1/α) ≤ α: rejecting when E first
reaches the threshold is valid under monitoring after every episode and
under any stopping rule. Over m pairs the threshold is m/α (e-value
Bonferroni: familywise error ≤ α).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from proctor.analysis.episodes import SYSTEM, Episode
from proctor.analysis.operations import SUCCESS_OP, Operations, extract_operations

Z_SCALE = 2.0  # a pair's |z| of 2 or more is a full-size bet
LAMBDA_MAX = 0.5  # the stake never risks more than half of the wealth
PRIOR = 1.0  # pseudo-sum of g² shrinking the first stakes towards 0


@dataclass(frozen=True)
class PaddedEpisodes:
    """The operations of E episodes as (E, M) arrays, M the most operations
    of any; padding has ``present`` False. Ghosts have time +∞."""

    time: np.ndarray
    event: np.ndarray
    present: np.ndarray

    @property
    def n_episodes(self) -> int:
        return int(self.time.shape[0])


def pad_operations(ops: Operations) -> PaddedEpisodes:
    counts = ops.per_episode()
    width = max(int(counts.max()) if counts.size else 0, 1)
    order = np.argsort(ops.episode, kind="stable")
    ep = ops.episode[order]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    col = np.arange(ep.size) - starts[ep]
    time = np.full((ops.n_episodes, width), -1.0)
    event = np.zeros((ops.n_episodes, width), dtype=bool)
    present = np.zeros((ops.n_episodes, width), dtype=bool)
    time[ep, col] = ops.time[order]
    event[ep, col] = ops.kind[order] == SUCCESS_OP
    present[ep, col] = True
    return PaddedEpisodes(time=time, event=event, present=present)


def _side(own: PaddedEpisodes, other: PaddedEpisodes, own_is_a: bool) -> tuple[np.ndarray, ...]:
    """Sums over the successes of ``own``'s episodes, for every (own, other)
    pair, of (1{in A} − n_A/n) and n_A n_B (n − d) / (n² (n − 1)), where n_A,
    n_B count the operations at risk (time ≥ t) and d the successes at t.
    Summed over the d tied successes of a time these are the grouped
    O − E and hypergeometric variance of the log-rank test."""
    t = own.time[:, :, None]  # (E_own, M_own, 1)
    alive_own = own.present[:, None, :] & (own.time[:, None, :] >= t)
    n_own = alive_own.sum(axis=2).astype(float)  # (E_own, M_own)
    tie_own = (own.event[:, None, :] & (own.time[:, None, :] == t)).sum(axis=2)
    # (E_own, M_own, E_other)
    ot = other.time[None, None, :, :]
    tt = own.time[:, :, None, None]
    n_other = np.sum(other.present[None, None] & (ot >= tt), axis=3).astype(float)
    tie_other = np.sum(other.event[None, None] & (ot == tt), axis=3)
    n = n_own[:, :, None] + n_other
    d = (tie_own[:, :, None] + tie_other).astype(float)
    n_a = n_own[:, :, None] if own_is_a else n_other
    n_b = n - n_a
    with np.errstate(invalid="ignore", divide="ignore"):
        u = (1.0 if own_is_a else 0.0) - n_a / n
        v = np.where(n > 1, n_a * n_b * (n - d) / (n * n * (n - 1)), 0.0)
    mask = own.event[:, :, None]
    return np.sum(np.where(mask, u, 0.0), axis=1), np.sum(np.where(mask, v, 0.0), axis=1)


def pair_z(a: PaddedEpisodes, b: PaddedEpisodes, *, chunk: int = 64) -> np.ndarray:
    """The log-rank z of A's episode i against B's episode j, shape (E_a, E_b):
    (O_A − E_A) / √V on the two episodes' operations alone; positive when
    A succeeds sooner than expected under H0 (A faster); 0 when V = 0.
    Swapping the arguments transposes and negates it."""
    u = np.zeros((a.n_episodes, b.n_episodes))
    v = np.zeros_like(u)
    for s in range(0, a.n_episodes, chunk):
        part = PaddedEpisodes(
            a.time[s : s + chunk], a.event[s : s + chunk], a.present[s : s + chunk]
        )
        ua, va = _side(part, b, True)
        ub, vb = _side(b, part, False)
        u[s : s + chunk] = ua + ub.T
        v[s : s + chunk] = va + vb.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(v > 0, u / np.sqrt(np.where(v > 0, v, 1.0)), 0.0)


def bet_scores(z: np.ndarray) -> np.ndarray:
    return np.clip(np.asarray(z, dtype=float) / Z_SCALE, -1.0, 1.0)


def log_wealth(g: np.ndarray) -> np.ndarray:
    """log E_k after each pair, for every row of ``g`` (shape (S, K), or (K,)):
    the stake of pair k uses pairs 1..k−1 only (predictable)."""
    g = np.atleast_2d(np.asarray(g, dtype=float))
    s_prev = np.cumsum(g, axis=1) - g
    q_prev = np.cumsum(g * g, axis=1) - g * g
    lam = np.clip(s_prev / (PRIOR + q_prev), -LAMBDA_MAX, LAMBDA_MAX)
    return np.cumsum(np.log1p(lam * g), axis=1)


def threshold(alpha: float, comparisons: int) -> float:
    """Reject when E reaches m/α (Ville's inequality with Bonferroni)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    return max(comparisons, 1) / alpha


@dataclass(frozen=True)
class SequentialResult:
    """The e-process of one pair over its episodes in start order.

    ``path[i]`` is E after the pair's first i + 1 scored episodes (it moves
    only when an episode completes a matched pair). ``stopped_at`` is the
    number of episodes seen when E first reached ``threshold`` (None:
    never); ``e_value`` is E there, or at the last episode when never.
    ``favours`` is the policy the evidence points to (the sign of the summed
    scores), None without a completed pair."""

    a: str
    b: str
    path: np.ndarray
    threshold: float
    stopped_at: int | None
    e_value: float
    episodes_total: int
    matched_pairs: int
    favours: str | None

    @property
    def rejected(self) -> bool:
        return self.stopped_at is not None

    def to_json(self) -> dict[str, object]:
        return {
            "rejected": self.rejected,
            "stopped_at": self.stopped_at,
            "episodes_total": self.episodes_total,
            "e_value": self.e_value,
            "threshold": self.threshold,
        }


def start_times(episodes: Sequence[Episode]) -> dict[str, datetime]:
    """Parsed ``started_at`` of every episode; ValueError naming the
    episodes that lack one or whose value is not an ISO 8601 time."""
    out: dict[str, datetime] = {}
    missing: list[str] = []
    for e in episodes:
        if not e.started_at:
            missing.append(e.episode_id)
            continue
        try:
            out[e.episode_id] = datetime.fromisoformat(e.started_at)
        except ValueError:
            raise ValueError(
                f"started_at: episode {e.episode_id}: not an ISO 8601 time ({e.started_at!r})"
            ) from None
    if missing:
        raise ValueError(
            f"started_at: {len(missing)} episode(s) have none (first: {missing[0]}); "
            "--sequential orders episodes by their start"
        )
    aware = {t.tzinfo is not None for t in out.values()}
    if len(aware) > 1:
        raise ValueError("started_at: some times carry a time zone and some do not")
    return out


def _ordered(
    a: str, b: str, episodes: Sequence[Episode], starts: dict[str, datetime]
) -> list[Episode]:
    mine = [e for e in episodes if e.policy in (a, b) and e.outcome != SYSTEM]
    shared = {e.object for e in mine if e.policy == a} & {e.object for e in mine if e.policy == b}
    mine = [e for e in mine if e.object in shared]
    if not mine:
        raise ValueError(f"pair {a} vs {b}: no scored episodes on an object both were run on")
    mine.sort(key=lambda e: starts[e.episode_id])
    for x, y in itertools.pairwise(mine):
        if starts[x.episode_id] == starts[y.episode_id]:
            raise ValueError(
                f"started_at: episodes {x.episode_id} and {y.episode_id} of pair {a} vs {b} "
                f"start at the same time ({x.started_at}); their order is unknown"
            )
    return mine


def sequential_pair(
    a: str,
    b: str,
    episodes: Sequence[Episode],
    starts: dict[str, datetime],
    *,
    alpha: float,
    comparisons: int,
) -> SequentialResult:
    """The e-process of pair (a, b) over its scored episodes on shared objects,
    in start order; ``starts`` from :func:`start_times`."""
    ordered = _ordered(a, b, episodes, starts)
    ops = extract_operations(ordered)
    padded = pad_operations(ops)
    waiting: dict[tuple[str, str], list[int]] = {}
    g = np.zeros(len(ordered))
    completes = np.zeros(len(ordered), dtype=bool)
    for i, e in enumerate(ordered):
        other = b if e.policy == a else a
        queue = waiting.get((other, e.object))
        if queue:
            j = queue.pop(0)
            ia, ib = (i, j) if e.policy == a else (j, i)
            z = pair_z(_rows(padded, ia), _rows(padded, ib))[0, 0]
            g[i] = bet_scores(z)
            completes[i] = True
        else:
            waiting.setdefault((e.policy, e.object), []).append(i)
    logs = np.zeros(len(ordered))
    done = np.nonzero(completes)[0]
    if done.size:
        logs[done] = log_wealth(g[done])[0]
        # E holds its value between completions
        last = np.maximum.accumulate(np.where(completes, np.arange(len(ordered)), -1))
        logs = np.where(last >= 0, logs[np.maximum(last, 0)], 0.0)
    path = np.exp(logs)
    bar = threshold(alpha, comparisons)
    hit = np.nonzero(logs >= math.log(bar) - 1e-12)[0]
    stopped = int(hit[0]) + 1 if hit.size else None
    total = float(g[done].sum()) if done.size else 0.0
    return SequentialResult(
        a=a,
        b=b,
        path=path,
        threshold=bar,
        stopped_at=stopped,
        e_value=float(path[hit[0]] if hit.size else path[-1]),
        episodes_total=len(ordered),
        matched_pairs=int(done.size),
        favours=None if not done.size or total == 0 else (a if total > 0 else b),
    )


def _rows(p: PaddedEpisodes, i: int) -> PaddedEpisodes:
    return PaddedEpisodes(p.time[i : i + 1], p.event[i : i + 1], p.present[i : i + 1])
