"""Empirical detection rate vs n, and null calibration (docs/methods.md §6; PhAIL
§5.2 and App. J).

Both run many *outer trials*, each a two-arm comparison on some episodes,
and inside each trial the episode-clustered permutation test of
:mod:`proctor.analysis.significance` (*inner* relabellings of the trial's episodes,
arm sizes kept) for three tests at once:

* macro-KS: D = mean over objects of sup_[0,τ] |F_A − F_B|, one-sided;
* RMST: |mean over objects of RMST_A(τ) − RMST_B(τ)|, two-sided;
* binary at t: |mean over objects of F_A(t) − F_B(t)|, two-sided;

p = (1 + #{stat* >= stat}) / (I + 1), the same relabellings serving all
three (under H0 the two arms' episodes are exchangeable, so the relabelled
differences are the null distribution of each statistic).

* Detection: outer trial = n episodes per cell drawn with replacement from
  each arm; detection rate = share of trials with p < α.
* Null calibration: (i) split one policy's episodes per object at random into
  two equal pseudo-arms; (ii) the same on the reference; (iii) permute the two
  policies' labels within each (object × spatial configuration) stratum,
  keeping the counts. The rejection rate should sit near α.

Everything is vectorised across the trials of a chunk and the inner
replicates (see :mod:`proctor.analysis.km`); each object keeps one risk set over its
pooled episodes, on which every trial's resample is a weight vector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from proctor.analysis.km import risk_set, rmst, survival, survival_at
from proctor.analysis.operations import Operations, concat_operations
from proctor.analysis.planning import wilson_interval

Progress = Callable[[int], None]  # called with the number of trials just finished


@dataclass(frozen=True)
class ObjectPool:
    """One object's episodes for an experiment: arm A's episodes are
    0..n_a−1 of ``ops``, arm B's the rest (for a split, all one policy's);
    ``strata`` labels each episode (e.g. its spatial configuration)."""

    object: str
    ops: Operations
    n_a: int
    strata: np.ndarray

    @property
    def n_b(self) -> int:
        return self.ops.n_episodes - self.n_a


def make_pool(
    obj: str, ops_a: Operations, ops_b: Operations, strata: Sequence[str] | None = None
) -> ObjectPool:
    ops = concat_operations([ops_a, ops_b])
    labels = np.asarray(strata if strata is not None else [""] * ops.n_episodes, dtype=object)
    if labels.shape[0] != ops.n_episodes:
        raise ValueError("make_pool: one stratum label per episode")
    return ObjectPool(object=obj, ops=ops, n_a=ops_a.n_episodes, strata=labels)


@dataclass(frozen=True)
class TrialPValues:
    """p-values of each trial (shape (T,)) for each test, keyed ``macro_ks``,
    ``rmst`` and ``binary@<t>``."""

    p: dict[str, np.ndarray]


def _counts(slots: np.ndarray, n_pool: int) -> np.ndarray:
    """(rows, k) episode indices → (n_pool, rows) multiplicities."""
    rows = slots.shape[0]
    flat = slots * rows + np.arange(rows)[:, None]
    return np.bincount(flat.ravel(), minlength=n_pool * rows).reshape(n_pool, rows).astype(float)


def trial_pvalues(
    pools: Sequence[ObjectPool],
    slots: Sequence[np.ndarray],
    n_a: Sequence[int],
    *,
    inner: int,
    tau: float,
    thresholds: Sequence[float],
    rng: np.random.Generator,
    chunk: int | None = None,
    progress: Progress | None = None,
) -> TrialPValues:
    """p-values of the three tests for T trials.

    ``slots[o]``: (T, m_o) episode indices into pool o for each trial — the
    trial's arm A is the first ``n_a[o]`` slots, arm B the rest; under H0 the
    inner relabellings give a random ``n_a[o]`` of the m_o slots to arm A and
    the rest to arm B.
    """
    n_trials = slots[0].shape[0]
    # about a thousand replicate columns an arm per block: large enough that
    # the per-row loops are cheap, small enough to stay in cache
    chunk = chunk or max(1, 1000 // inner)
    keys = ["macro_ks", "rmst", *(f"binary@{t:g}" for t in thresholds)]
    p_out = {k: np.empty(n_trials) for k in keys}
    k_obj = len(pools)
    risk = [risk_set(pool.ops, t_max=tau) for pool in pools]
    for start in range(0, n_trials, chunk):
        stop = min(start + chunk, n_trials)
        t_n = stop - start
        obs = {k: np.zeros(t_n) for k in keys}
        null = {k: np.zeros((t_n, inner)) for k in keys}
        for pool, rs, sl, na in zip(pools, risk, slots, n_a, strict=True):
            s_block = sl[start:stop]
            m = s_block.shape[1]
            nb = m - na
            e = pool.ops.n_episodes
            w_obs_a = _counts(s_block[:, :na], e)
            w_obs_b = _counts(s_block[:, na:], e)
            # inner: the trial's m slots shuffled, the first na to arm A —
            # a permutation, so each slot lands in exactly one arm (drawing
            # each arm with replacement made the null too narrow, docs/methods.md §5)
            order = np.argsort(rng.random((t_n, inner, m)), axis=2)
            pick_a = order[:, :, :na]
            pick_b = order[:, :, na:]
            rows = np.arange(t_n)[:, None, None]
            w_in_a = _counts(s_block[rows, pick_a].reshape(t_n * inner, na), e)
            w_in_b = _counts(s_block[rows, pick_b].reshape(t_n * inner, nb), e)
            s = survival(rs, np.hstack([w_obs_a, w_obs_b, w_in_a, w_in_b]))
            s_oa = s[:, :t_n]
            s_ob = s[:, t_n : 2 * t_n]
            s_ia = s[:, 2 * t_n : 2 * t_n + t_n * inner]
            s_ib = s[:, 2 * t_n + t_n * inner :]
            grid = rs.grid
            if grid.size:
                obs["macro_ks"] += np.max(np.abs(s_oa - s_ob), axis=0)
                null["macro_ks"] += np.max(np.abs(s_ia - s_ib), axis=0).reshape(t_n, inner)
            obs["rmst"] += rmst(grid, s_oa, tau) - rmst(grid, s_ob, tau)
            null["rmst"] += (rmst(grid, s_ia, tau) - rmst(grid, s_ib, tau)).reshape(t_n, inner)
            for t in thresholds:
                key = f"binary@{t:g}"
                obs[key] += survival_at(grid, s_ob, t) - survival_at(grid, s_oa, t)
                null[key] += (survival_at(grid, s_ib, t) - survival_at(grid, s_ia, t)).reshape(
                    t_n, inner
                )
        for key in keys:
            o = obs[key] / k_obj
            nl = null[key] / k_obj
            if key != "macro_ks":
                o, nl = np.abs(o), np.abs(nl)
            exceed = np.sum(nl >= o[:, None] - 1e-12, axis=1)
            p_out[key][start:stop] = (1 + exceed) / (inner + 1)
        if progress is not None:
            progress(t_n)
    return TrialPValues(p=p_out)


@dataclass(frozen=True)
class DetectionCurve:
    """Detection rate (share of outer trials with p < α) per test and n,
    with Wilson 95% intervals over the outer trials."""

    n: np.ndarray
    rate: dict[str, np.ndarray]
    lo: dict[str, np.ndarray]
    hi: dict[str, np.ndarray]
    outer: int
    inner: int
    alpha: float


def detection_rates(
    pools: Sequence[ObjectPool],
    *,
    n_values: Sequence[int],
    outer: int,
    inner: int,
    tau: float,
    thresholds: Sequence[float],
    alpha: float = 0.05,
    rng: np.random.Generator,
    progress: Progress | None = None,
) -> DetectionCurve:
    """For each n: ``outer`` trials, each drawing n episodes per cell with
    replacement from each arm of every object, tested with ``inner``
    relabellings."""
    rates: dict[str, list[float]] = {}
    lo: dict[str, list[float]] = {}
    hi: dict[str, list[float]] = {}
    for n in n_values:
        if n < 1:
            raise ValueError(f"n_values: episodes per cell must be positive, got {n}")
        slots = []
        for pool in pools:
            if pool.n_a == 0 or pool.n_b == 0:
                raise ValueError(f"object {pool.object}: an arm has no episodes")
            a = rng.integers(0, pool.n_a, size=(outer, n))
            b = pool.n_a + rng.integers(0, pool.n_b, size=(outer, n))
            slots.append(np.hstack([a, b]))
        res = trial_pvalues(
            pools,
            slots,
            [n] * len(pools),
            inner=inner,
            tau=tau,
            thresholds=thresholds,
            rng=rng,
            progress=progress,
        )
        for key, p in res.p.items():
            hits = int(np.sum(p < alpha))
            w_lo, w_hi = wilson_interval(hits, outer)
            rates.setdefault(key, []).append(hits / outer)
            lo.setdefault(key, []).append(w_lo)
            hi.setdefault(key, []).append(w_hi)
    return DetectionCurve(
        n=np.asarray(list(n_values)),
        rate={k: np.asarray(v) for k, v in rates.items()},
        lo={k: np.asarray(v) for k, v in lo.items()},
        hi={k: np.asarray(v) for k, v in hi.items()},
        outer=outer,
        inner=inner,
        alpha=alpha,
    )


@dataclass(frozen=True)
class NullCalibration:
    """Rejection rates of the macro-KS test under a null, at each α, with
    the mean p-value (uniform p would give 0.5)."""

    setup: str
    alphas: tuple[float, ...]
    rejection: tuple[float, ...]
    mean_p: float
    trials: int
    inner: int


def _split_slots(pool: ObjectPool, outer: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    e = pool.ops.n_episodes
    half = e // 2
    if half < 1:
        raise ValueError(f"object {pool.object}: fewer than 2 episodes to split")
    perm = np.argsort(rng.random((outer, e)), axis=1)[:, : 2 * half]
    return perm, half


def _permutation_slots(
    pool: ObjectPool, outer: int, rng: np.random.Generator
) -> tuple[np.ndarray, int]:
    """Within each stratum, a random n_a(stratum) of its episodes become arm
    A: labels permuted, counts per stratum kept."""
    labels = pool.strata
    is_a = np.arange(pool.ops.n_episodes) < pool.n_a
    a_rows = []
    b_rows = []
    for _ in range(outer):
        a_idx, b_idx = [], []
        for s in sorted(set(labels.tolist())):
            members = np.nonzero(labels == s)[0]
            k = int(is_a[members].sum())
            shuffled = rng.permutation(members)
            a_idx.extend(shuffled[:k])
            b_idx.extend(shuffled[k:])
        a_rows.append(a_idx)
        b_rows.append(b_idx)
    return np.hstack([np.asarray(a_rows), np.asarray(b_rows)]), pool.n_a


def null_calibration(
    pools: Sequence[ObjectPool],
    *,
    setup: str,
    outer: int,
    inner: int,
    tau: float,
    rng: np.random.Generator,
    alphas: Sequence[float] = (0.01, 0.05, 0.10),
    progress: Progress | None = None,
) -> NullCalibration:
    """``setup``: ``split`` (each pool's episodes halved at random; use a
    pool holding one policy) or ``permute`` (labels permuted within strata
    of a two-policy pool)."""
    if setup not in ("split", "permute"):
        raise ValueError(f"setup: expected 'split' or 'permute', got {setup!r}")
    slots, n_a = [], []
    for pool in pools:
        sl, na = (_split_slots if setup == "split" else _permutation_slots)(pool, outer, rng)
        slots.append(sl)
        n_a.append(na)
    res = trial_pvalues(
        pools, slots, n_a, inner=inner, tau=tau, thresholds=(), rng=rng, progress=progress
    )
    p = res.p["macro_ks"]
    return NullCalibration(
        setup=setup,
        alphas=tuple(alphas),
        rejection=tuple(float(np.mean(p < a)) for a in alphas),
        mean_p=float(np.mean(p)),
        trials=outer,
        inner=inner,
    )


def first_n_reaching(curve: DetectionCurve, target: float = 0.8) -> dict[str, int | None]:
    """PhAIL Table 4: per test, the smallest n of the curve whose detection
    rate reaches ``target`` (None: no n tried reaches it). The curve's n are
    the ones tried; the answer is exact only to their spacing."""
    order = np.argsort(curve.n)
    out: dict[str, int | None] = {}
    for key, rate in curve.rate.items():
        hit = [int(curve.n[k]) for k in order if rate[k] >= target]
        out[key] = hit[0] if hit else None
    return out
