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

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from proctor.analysis.confseq import betting_confidence_sequence
from proctor.analysis.episodes import Episode
from proctor.analysis.operations import SUCCESS_OP, Operations, extract_operations
from proctor.analysis.pairing import BY_DESIGN, Pairing, pair_episodes

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


def _side_matched(
    own: PaddedEpisodes, other: PaddedEpisodes, own_is_a: bool
) -> tuple[np.ndarray, ...]:
    """:func:`_side` for row p of ``own`` against row p of ``other`` only:
    the (P,) sums of O − E and V over ``own``'s successes."""
    t = own.time[:, :, None]  # (P, M_own, 1)
    n_own = np.sum(own.present[:, None, :] & (own.time[:, None, :] >= t), axis=2).astype(float)
    tie_own = np.sum(own.event[:, None, :] & (own.time[:, None, :] == t), axis=2)
    n_other = np.sum(other.present[:, None, :] & (other.time[:, None, :] >= t), axis=2)
    tie_other = np.sum(other.event[:, None, :] & (other.time[:, None, :] == t), axis=2)
    n = n_own + n_other
    d = (tie_own + tie_other).astype(float)
    n_a = n_own if own_is_a else n_other.astype(float)
    n_b = n - n_a
    with np.errstate(invalid="ignore", divide="ignore"):
        u = (1.0 if own_is_a else 0.0) - n_a / n
        v = np.where(n > 1, n_a * n_b * (n - d) / (n * n * (n - 1)), 0.0)
    return np.sum(np.where(own.event, u, 0.0), axis=1), np.sum(np.where(own.event, v, 0.0), axis=1)


def matched_z(a: PaddedEpisodes, b: PaddedEpisodes) -> np.ndarray:
    """The diagonal of :func:`pair_z` (A's episode p against B's episode p,
    shape (P,)) without the (E_a, E_b) matrix: the bets of matched pairs in
    one pass over the pairs, not one call each."""
    if a.n_episodes != b.n_episodes:
        raise ValueError("matched_z: as many episodes of A as of B")
    ua, va = _side_matched(a, b, True)
    ub, vb = _side_matched(b, a, False)
    u, v = ua + ub, va + vb
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
    """The e-process of one pair over its episodes in reading order (block
    and sequence by design, start order as the fallback: :mod:`pairing`).

    ``path[i]`` is E after the pair's first i + 1 scored episodes (it moves
    only when every matched pair before in bet order has completed).
    ``stopped_at`` is the number of episodes seen when E first reached
    ``threshold`` (None: never); ``e_value`` is E there, or at the last
    episode when never. E tests "the two policies' episodes are
    exchangeable"; it names no direction. The direction comes from
    ``delta_s``, the anytime-valid confidence sequence (level α/m, running
    intersection, at the last episode) on δ = E[s_B − s_A] · τ, the mean
    within-pair difference of the per-episode time per item truncated at τ
    (:func:`episode_scores`; positive: A faster): once E has rejected,
    ``favours`` is A when it lies above 0, B when below; None otherwise."""

    a: str
    b: str
    path: np.ndarray
    threshold: float
    stopped_at: int | None
    e_value: float
    episodes_total: int
    matched_pairs: int
    favours: str | None
    delta_s: tuple[float, float] | None = None
    tau: float | None = None
    pairing: str = BY_DESIGN
    note: str | None = None

    @property
    def rejected(self) -> bool:
        return self.stopped_at is not None

    @property
    def verdict(self) -> str:
        """``better`` (E rejected and the confidence sequence excludes 0:
        ``favours`` is better), ``unclear`` (E rejected but the sequence
        holds 0: different, direction unclear) or ``undecided``."""
        if self.favours is not None:
            return "better"
        return "unclear" if self.rejected else "undecided"

    def to_json(self) -> dict[str, object]:
        return {
            "rejected": self.rejected,
            "stopped_at": self.stopped_at,
            "episodes_total": self.episodes_total,
            "e_value": self.e_value,
            "threshold": self.threshold,
            # added with the directional estimand (§10); readers of the five
            # keys above are unaffected
            "verdict": self.verdict,
            "favours": self.favours,
            "delta_s": None if self.delta_s is None else list(self.delta_s),
            "tau": self.tau,
            "pairing": self.pairing,
        }


def episode_scores(episodes: Sequence[Episode], tau: float) -> np.ndarray:
    """s = (Σ_placed min(T_i, τ) + τ · (items − placed)) / (τ · items) ∈ [0, 1]
    for each episode: its mean time per item truncated at τ, an item not
    placed (lost, dropped, unhandled) charged the full τ, as a ghost is in
    RMST (§4). T_i are the inter-placement times of §2. With no operation
    censored before τ, E[s] = RMST(τ)/τ of the episode's operations; it
    needs no censoring model, so it is defined for every scored episode."""
    if not tau > 0:
        raise ValueError(f"tau: must be > 0, got {tau}")
    out = np.empty(len(episodes))
    for i, e in enumerate(episodes):
        gaps = np.diff(np.asarray((0.0, *e.placements_s)))
        out[i] = (np.minimum(gaps, tau).sum() + tau * (e.items - e.placed)) / (tau * e.items)
    return np.clip(out, 0.0, 1.0)


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


def sequential_pair(
    a: str,
    b: str,
    episodes: Sequence[Episode],
    starts: dict[str, datetime] | None,
    *,
    alpha: float,
    comparisons: int,
    tau: float | None = None,
) -> SequentialResult:
    """The e-process of pair (a, b) over its scored episodes on shared
    objects, paired by :func:`proctor.analysis.pairing.pair_episodes`
    (``starts`` from :func:`start_times`, needed only for the start-order
    fallback); with ``tau`` also the confidence sequence that names the
    direction."""
    pairing = pair_episodes(a, b, episodes, starts)
    return pairing_result(pairing, alpha=alpha, comparisons=comparisons, tau=tau)


def pairing_result(
    pairing: Pairing, *, alpha: float, comparisons: int, tau: float | None = None
) -> SequentialResult:
    """The e-process (and, with ``tau``, the direction) of one pairing."""
    a, b = pairing.a, pairing.b
    n_eps = len(pairing.episodes)
    padded = pad_operations(extract_operations(pairing.episodes))
    ia = np.array([i for i, _ in pairing.pairs], dtype=int)
    ib = np.array([j for _, j in pairing.pairs], dtype=int)
    g = bet_scores(matched_z(_take(padded, ia), _take(padded, ib)))

    logs = np.zeros(n_eps)
    if g.size:
        wealth = log_wealth(g)[0]
        # E after episode i: the wealth of the longest prefix of bets complete by then
        done = np.searchsorted(
            np.asarray(pairing.complete_at), np.arange(1, n_eps + 1), side="right"
        )
        logs = np.where(done > 0, wealth[np.maximum(done - 1, 0)], 0.0)
    path = np.exp(logs)
    bar = threshold(alpha, comparisons)
    hit = np.nonzero(logs >= math.log(bar) - 1e-12)[0]
    favours, delta = None, None
    if tau is not None and g.size:
        s = episode_scores(pairing.episodes, tau)
        d = np.array([s[j] - s[i] for i, j in pairing.pairs])  # > 0: A faster
        lo, hi = betting_confidence_sequence(d, alpha / max(comparisons, 1))
        delta = (float(lo[-1] * tau), float(hi[-1] * tau))
        # a direction is named only for a pair E has already called different:
        # a pair whose episodes are exchangeable then meets a false claim of
        # either kind with probability ≤ α/m, as before the estimand (an empty
        # sequence, lo > hi, names nothing)
        if hit.size and delta[0] <= delta[1]:
            favours = a if delta[0] > 0 else b if delta[1] < 0 else None
    return SequentialResult(
        a=a,
        b=b,
        path=path,
        threshold=bar,
        stopped_at=int(hit[0]) + 1 if hit.size else None,
        e_value=float(path[hit[0]] if hit.size else path[-1]),
        episodes_total=n_eps,
        matched_pairs=int(g.size),
        favours=favours,
        delta_s=delta,
        tau=tau,
        pairing=pairing.basis,
        note=pairing.note,
    )


def _take(p: PaddedEpisodes, rows: np.ndarray) -> PaddedEpisodes:
    return PaddedEpisodes(p.time[rows], p.event[rows], p.present[rows])
