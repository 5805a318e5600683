"""Is there any difference? (docs/methods.md §5)

* Macro-averaged KS: D_o = sup over t in [0, τ] of |F_A,o(t) − F_B,o(t)| on
  the KM curves, D = mean over objects (equal weights); p-value by an
  episode-clustered permutation test: under H0 the two arms' episodes of
  each object are exchangeable, so shuffle the arm labels of whole episodes
  within each object (keeping both arms' sizes), recompute D*;
  p = (1 + #{D* >= D}) / (B + 1), which has size at most α for any n
  (Phipson & Smyth 2010). The pooled-resample bootstrap it replaces (two arms
  drawn with replacement from the pool) rejected 0.067 / 0.126 at
  α = 0.05 / 0.10 on null splits with 15 episodes a cell, mean p 0.44: see
  docs/methods.md §5.
* Log-rank stratified by object (Mantel 1966): sum over strata of O − E and
  of the hypergeometric variances, χ² on 1 df; Bonferroni over pairs.
* The verdict: direction comes from scalars, never from the KS sign.

The KS sup is taken over the grid of pooled success times in [0, τ]: both
curves are right-continuous steps that only move there, so the largest gap on
[0, τ] is attained at one of them (or is 0).

References: PhAIL (seeds/002) §3.3 and App. J; Smirnov (1948); Mantel (1966),
Cancer Chemother. Rep. 50:163; Efron & Tibshirani (1993) §15–16; Phipson &
Smyth (2010), Stat. Appl. Genet. Mol. Biol. 9:39 (the +1 of random
permutations).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special  # not scipy.stats: see binary.py

from proctor.analysis.km import at_risk, risk_set, survival
from proctor.analysis.operations import Operations, concat_operations


def two_arm_survival(
    pooled: Operations, w_a: np.ndarray, w_b: np.ndarray, tau: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """S of both arms (weights over the pooled episodes, (E, R) each) on the
    pooled grid cut at τ; one KM pass for both."""
    rs = risk_set(pooled, t_max=tau)
    s = survival(rs, np.hstack([w_a, w_b]))
    r = w_a.shape[1]
    return rs.grid, s[:, :r], s[:, r:]


def permutation_labels(
    n_pool: int, n_a: int, replicates: int, rng: np.random.Generator
) -> np.ndarray:
    """Arm A's membership in ``replicates`` random relabellings of a pool of
    ``n_pool`` episodes: shape (n_pool, replicates), each column 1 on a
    uniformly random n_a of the episodes and 0 elsewhere (arm B is 1 − it).
    Drawn without replacement, so every episode lands in exactly one arm, as
    in the data; drawing with replacement shares episodes between the arms
    and makes the null too narrow."""
    labels = np.zeros((n_pool, replicates))
    if n_pool == 0 or n_a == 0:
        return labels
    order = np.argsort(rng.random((replicates, n_pool)), axis=1)
    labels[order[:, :n_a], np.arange(replicates)[:, None]] = 1.0
    return labels


@dataclass(frozen=True)
class MacroKS:
    """The macro-averaged KS statistic and its permutation p-value."""

    statistic: float
    p: float
    per_object: dict[str, float]
    replicates: int


def macro_ks_test(
    strata: dict[str, tuple[Operations, Operations]],
    *,
    tau: float,
    replicates: int,
    rngs: dict[str, np.random.Generator],
) -> MacroKS:
    """Macro-KS over objects; ``strata`` maps object → (arm A ops, arm B ops),
    ``rngs`` gives each object its own generator."""
    if not strata:
        raise ValueError("macro_ks_test: the two arms share no object")
    observed = {}
    null_sum = np.zeros(replicates)
    for obj, (ops_a, ops_b) in strata.items():
        pooled = concat_operations([ops_a, ops_b])
        n_a, n_b = ops_a.n_episodes, ops_b.n_episodes
        n_pool = n_a + n_b
        w_obs_a = np.zeros((n_pool, 1))
        w_obs_a[:n_a] = 1
        w_obs_b = 1.0 - w_obs_a
        grid, s_a, s_b = two_arm_survival(pooled, w_obs_a, w_obs_b, tau)
        observed[obj] = float(np.max(np.abs(s_a - s_b))) if grid.size else 0.0
        w_a = permutation_labels(n_pool, n_a, replicates, rngs[obj])
        w_b = 1.0 - w_a
        grid, s_a, s_b = two_arm_survival(pooled, w_a, w_b, tau)
        if grid.size:
            np.subtract(s_a, s_b, out=s_a)
            np.abs(s_a, out=s_a)
            null_sum += np.max(s_a, axis=0)
    statistic = float(np.mean(list(observed.values())))
    null = null_sum / len(strata)
    # a tolerance so that a replicate equal to the observed value counts as >=
    exceed = int(np.sum(null >= statistic - 1e-12))
    return MacroKS(
        statistic=statistic,
        p=(1 + exceed) / (replicates + 1),
        per_object=observed,
        replicates=replicates,
    )


@dataclass(frozen=True)
class LogRank:
    """Stratified log-rank: Σ(O − E) for arm A, its variance, χ² (1 df), p."""

    observed: float
    expected: float
    variance: float
    chi2: float
    p: float


def logrank(strata: Sequence[tuple[Operations, Operations]]) -> LogRank:
    """The log-rank test of arm A vs arm B, stratified: per stratum, at each
    distinct success time t_j with d_j successes among n_j at risk (n_Aj of
    them in A), E_A = Σ d_j n_Aj / n_j and
    V = Σ d_j (n_Aj/n_j)(1 − n_Aj/n_j)(n_j − d_j)/(n_j − 1); summed over
    strata, χ² = (O_A − E_A)² / V. Ghosts stay at risk throughout."""
    o_total = e_total = v_total = 0.0
    for ops_a, ops_b in strata:
        pooled = concat_operations([ops_a, ops_b])
        rs = risk_set(pooled)
        if rs.n_grid == 0:
            continue
        w_a = np.zeros(pooled.n_episodes)
        w_a[: ops_a.n_episodes] = 1.0
        w = np.ones(pooled.n_episodes)
        d = rs.events @ w
        d_a = rs.events @ w_a
        n = at_risk(rs, w)
        n_a = at_risk(rs, w_a)
        share = n_a / n
        o_total += float(d_a.sum())
        e_total += float(np.sum(d * share))
        with np.errstate(invalid="ignore", divide="ignore"):
            v = np.where(n > 1, d * share * (1 - share) * (n - d) / (n - 1), 0.0)
        v_total += float(v.sum())
    if v_total <= 0:
        return LogRank(o_total, e_total, 0.0, 0.0, 1.0)
    chi2 = (o_total - e_total) ** 2 / v_total
    return LogRank(o_total, e_total, v_total, chi2, float(special.chdtrc(1, chi2)))


def bonferroni(p: float, comparisons: int) -> float:
    return float(min(1.0, p * max(comparisons, 1)))


BETTER = "better"
CROSSING = "crossing"
INDISTINGUISHABLE = "indistinguishable"


def verdict(significant: bool, rmst_diff: float, auc_ab: float) -> tuple[str, str | None]:
    """docs/methods.md §5: (i) KS rejects and the scalars agree → one is better;
    (ii) KS rejects but they disagree in sign → the CDFs cross;
    (iii) KS does not reject → indistinguishable at this n.

    ``rmst_diff`` = RMST_A − RMST_B (negative: A is faster);
    ``auc_ab`` = P(T_A < T_B) + ½P(T_A = T_B) (above ½: A tends to be faster).
    Returns (verdict, winner) with winner "a", "b" or None. A scalar exactly
    at its no-difference value counts as disagreeing (no direction to read).
    """
    if not significant:
        return INDISTINGUISHABLE, None
    rmst_says = np.sign(-rmst_diff)
    auc_says = np.sign(auc_ab - 0.5)
    if rmst_says != 0 and rmst_says == auc_says:
        return BETTER, "a" if rmst_says > 0 else "b"
    return CROSSING, None
