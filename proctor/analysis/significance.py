"""Is there any difference? (docs/methods.md §5)

* The board's test, the studentized macro-KS: the macro
  (equal-weight) CDF gap Σ_o (F̂_A,o − F̂_B,o)(t) over its episode-cluster-
  robust standard error, sup over a band of t; p the larger of two: by
  relabelling whole episodes within objects (the variances recomputed each
  time; exact when the episodes are exchangeable) and by a null-restricted
  wild bootstrap of the episodes' residuals (each arm keeps its own
  correlation across t; asymptotically valid when only the CDFs are
  equal) (``studentized_macro_ks_test``).
* The unstudentized macro-KS it replaces: D_o = sup over t in [0, τ] of
  |F_A,o(t) − F_B,o(t)| on the KM curves, D = mean over objects; the same
  episode permutation, p = (1 + #{D* >= D}) / (B + 1), size at most α for
  any n when episodes are exchangeable (Phipson & Smyth 2010) — but not
  when only the CDFs are equal (a "streaky" policy against a steady one,
  unequal n: benchmarks/robustness.py). Kept for comparison
  (``macro_ks_test``; the detection machinery's power model uses it).
* Log-rank stratified by object (Mantel 1966): O − E summed over strata.
  ``clustered_logrank`` (the board's) takes its variance per episode (Lin &
  Wei 1989) and its p as the max of the studentized permutation p and the
  wild bootstrap p, as for the macro-KS; ``logrank`` (R's
  ``survdiff``) treats operations as independent and is kept for comparison.
* The verdict: direction comes from the Bonferroni-level ΔRMST interval,
  never from the KS sign.

The KS sup is taken over the grid of pooled success times in [0, τ]: both
curves are right-continuous steps that only move there, so the largest gap on
[0, τ] is attained at one of them (or is 0).

References: PhAIL (seeds/002) §3.3 and App. J; Smirnov (1948); Mantel (1966),
Cancer Chemother. Rep. 50:163; Efron & Tibshirani (1993) §15–16; Phipson &
Smyth (2010), Stat. Appl. Genet. Mol. Biol. 9:39 (the +1 of random
permutations); Lin & Wei (1989), JASA 84:1074; Ying & Wei (1994), J.
Multivariate Anal. 50:17; Janssen (1997), Stat. Probab. Lett. 36:9; Chung &
Romano (2013), Ann. Stat. 41:484; Brendel, Janssen, Mayer & Pauly (2014),
Scand. J. Stat. 41; Eicker (1979), Ann. Stat. 7:116; Jaeschke (1979),
Ann. Stat. 7:108; for the wild bootstrap: Lin, Wei & Ying (1993),
Biometrika 80:557; Beyersmann, Di Termini & Pauly (2013), Scand. J. Stat.
40:387; Cameron, Gelbach & Miller (2008), Rev. Econ. Stat. 90:414;
MacKinnon & Webb (2018), Econometrics J. 21:114.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import special  # not scipy.stats: see binary.py

from proctor.analysis.km import RiskSet, at_risk, risk_set, survival
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


def rademacher_weights(n_pool: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """(n_pool, replicates) independent ±1 multipliers, one per episode and
    replicate: the wild bootstrap's weights (mean 0, variance 1, so a
    weighted sum of residuals keeps their sum of squares)."""
    return np.where(rng.random((n_pool, replicates)) < 0.5, -1.0, 1.0)


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


# --- valid under the weak null: episode-cluster-robust studentization ---


def _episode_matrices(rs: RiskSet) -> tuple[np.ndarray, np.ndarray]:
    """Dense (J, E): each episode's successes at each grid time, and its
    operations at risk there (a success at grid[j−1] has left by grid[j])."""
    d = rs.events.toarray()
    x = rs.exits.toarray()
    x[1:] += d[:-1]
    y = rs.n_ops[None, :] - np.cumsum(x, axis=0)
    return d, y


def _km_cluster_var(
    d_e: np.ndarray, y_e: np.ndarray, w: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """KM S and its episode-cluster-robust variance for every column of the
    0/1 membership ``w`` (E, R). The influence of episode i on Ŝ(t) is
    −Ŝ(t) Σ_{t_j ≤ t} [dN_i(t_j) − Y_i(t_j) dΛ̂(t_j)] / Y(t_j) (the KM's
    martingale representation summed over the episode's operations); the
    variance is Ŝ² Σ_i (that sum)² · n/(n − 1) over the arm's n episodes
    (the sandwich of Ying & Wei 1994 for clustered data, with the usual
    small-sample factor). One episode in the arm: variance 0 (undefined)."""
    d = d_e @ w
    y = y_e @ w
    inv = np.divide(1.0, y, out=np.zeros_like(y), where=y > 0)
    h = d * inv
    s = np.cumprod(1.0 - h, axis=0)
    b = h * inv
    # (J, E, R): every episode's running influence sum in every column
    c = d_e[:, :, None] * inv[:, None, :] - y_e[:, :, None] * b[:, None, :]
    np.cumsum(c, axis=0, out=c)
    np.multiply(c, c, out=c)
    acc = np.einsum("jer,er->jr", c, w)
    n = w.sum(axis=0)
    factor = np.where(n > 1, n / np.maximum(n - 1, 1), 0.0)
    return s, s * s * acc * factor[None, :]


def _null_cluster_var(
    d_e: np.ndarray, y_e: np.ndarray, w: np.ndarray, hazard: np.ndarray, s_pool: np.ndarray
) -> np.ndarray:
    """The variance of an arm's KM under H0 (both arms share the pooled
    hazard): Ŝ_pool(t)² Σ_i w_i (Σ_{t_j ≤ t} [dN_i(t_j) − Y_i(t_j) ĥ(t_j)] /
    Y_arm(t_j))², episode i's residuals against the *pooled* hazard ĥ. A
    score-type (null-restricted) standard error: an arm that happens to
    have no success yet at t still gets its spread from the others' rate,
    where the arm's own (Wald) variance would be 0 and the ratio explode —
    as Wilson's interval does for a proportion at 0 (Wilson 1927)."""
    y = y_e @ w
    inv = np.divide(1.0, y, out=np.zeros_like(y), where=y > 0)
    resid = d_e - y_e * hazard[:, None]  # (J, E)
    c = resid[:, :, None] * inv[:, None, :]
    np.cumsum(c, axis=0, out=c)
    np.multiply(c, c, out=c)
    acc = np.einsum("jer,er->jr", c, w)
    return (s_pool * s_pool)[:, None] * acc


def cluster_km_variance(
    ops: Operations, *, tau: float | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(grid, Ŝ, its episode-cluster-robust variance) of one arm's KM at its
    success times up to τ: the variance the studentized tests divide by."""
    rs = risk_set(ops, t_max=tau)
    d_e, y_e = _episode_matrices(rs)
    s, v = _km_cluster_var(d_e, y_e, np.ones((rs.n_episodes, 1)))
    return rs.grid, s[:, 0], v[:, 0]


# the smallest variance a studentized gap is divided by; a real one is at
# least about 1/operations² (≥ 1e-7 at a thousand operations an arm)
_VAR_FLOOR = 1e-10
# the share of the macro pooled F's rise on [0, τ] over which the
# studentized sup is taken
_BAND = (0.1, 0.9)
# elements of the (grid × episodes × replicates) tensor per block (16 MB)
_TENSOR_CELLS = 2_000_000


def survival_from(d_e: np.ndarray, y_e: np.ndarray, w: np.ndarray) -> np.ndarray:
    """KM S for every column of the membership ``w`` from the dense
    per-episode matrices of :func:`_episode_matrices`."""
    d = d_e @ w
    y = y_e @ w
    h = np.divide(d, y, out=np.zeros_like(d), where=y > 0)
    return np.cumprod(1.0 - h, axis=0)


def _on_grid(grid: np.ndarray, values: np.ndarray, at: np.ndarray, before: float) -> np.ndarray:
    """A right-continuous step function known at ``grid`` (rows of
    ``values``), read at the times ``at``; ``before`` ahead of grid[0]."""
    idx = np.searchsorted(grid, at, side="right") - 1
    out = values[np.maximum(idx, 0)]
    out[idx < 0] = before
    return out


@dataclass(frozen=True)
class _Stratum:
    grid: np.ndarray
    d_e: np.ndarray
    y_e: np.ndarray
    labels: np.ndarray  # (E, 1 + replicates): column 0 the observed arm A
    hazard: np.ndarray  # (J,): the pooled KM hazard, the same in every relabelling
    s_pool: np.ndarray  # (J,): the pooled KM
    multipliers: np.ndarray  # (E, replicates): the wild bootstrap's ±1 weights


def _banded_sup(z: np.ndarray, f: np.ndarray, n_cols: int) -> np.ndarray:
    """sup of the rows of ``z`` where F ``f`` lies in the band of its rise
    (``_BAND``; why: :func:`_macro_sups`)."""
    top = float(f[-1]) if f.size else 0.0
    inside = (f >= _BAND[0] * top) & (f <= _BAND[1] * top) & (f > 0)
    return np.max(z[inside], axis=0) if inside.any() else np.zeros(n_cols)


def _macro_sups(
    strata: list[_Stratum], union: np.ndarray, cols: slice
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For the label columns ``cols``: (sup_t |Σ_o ΔF_o(t)| / √Σ_o V_o(t),
    mean over objects of sup_t |ΔF_o(t)|, each object's own studentized sup
    sup_t |ΔF_o(t)| / √V_o(t) (rows: the strata)), ΔF_o = F̂_A,o − F̂_B,o
    and V_o the sum of the two arms' cluster-robust variances."""
    n_cols = cols.stop - cols.start
    gap_sum = np.zeros((union.shape[0], n_cols))
    var_sum = np.zeros((union.shape[0], n_cols))
    raw = np.zeros(n_cols)
    own = np.zeros((len(strata), n_cols))
    for k, st in enumerate(strata):
        w_a = st.labels[:, cols]
        w_b = 1.0 - w_a
        s_a = survival_from(st.d_e, st.y_e, w_a)
        s_b = survival_from(st.d_e, st.y_e, w_b)
        gap = s_b - s_a  # F_A − F_B
        raw += np.max(np.abs(gap), axis=0)
        v = _null_cluster_var(st.d_e, st.y_e, w_a, st.hazard, st.s_pool)
        v += _null_cluster_var(st.d_e, st.y_e, w_b, st.hazard, st.s_pool)
        # the same test on this object alone (the per-object tests beside the
        # macro one), on the same relabellings: a by-product, not a second pass
        own[k] = _banded_sup(
            np.abs(gap) / np.sqrt(np.maximum(v, _VAR_FLOOR)), 1.0 - st.s_pool, n_cols
        )
        gap_sum += _on_grid(st.grid, gap, union, 0.0)
        var_sum += _on_grid(st.grid, v, union, 0.0)
    return _band_sup(strata, union, gap_sum, var_sum), raw / len(strata), own


def _band_sup(
    strata: list[_Stratum], union: np.ndarray, gap_sum: np.ndarray, var_sum: np.ndarray
) -> np.ndarray:
    """sup over the band of |gap| / √var, per column."""
    # floored: arms without spread (every episode alike) and a gap give a
    # large finite Z (perfect separation), not 0/0 or inf in the JSON
    z = np.abs(gap_sum) / np.sqrt(np.maximum(var_sum, _VAR_FLOOR))
    # the sup only where the macro pooled F is inside the band of its rise on
    # [0, τ]: a standardized empirical process has no finite sup near F = 0
    # or 1 (Eicker 1979; Jaeschke 1979), and there a few fast or slow
    # episodes make the studentized gap far from normal. Relative to the
    # rise, so that policies that rarely succeed before τ are still compared
    f_pool = np.mean([_on_grid(st.grid, 1.0 - st.s_pool, union, 0.0) for st in strata], axis=0)
    return _banded_sup(z, f_pool, z.shape[1])


def _recentred_residuals(m: np.ndarray, y_e: np.ndarray, g: np.ndarray) -> np.ndarray:
    """(J, E, R) the wild bootstrap's null-restricted residuals: each
    episode's martingale increments m (J, E) times its multiplier g (E, R),
    less the pooled hazard refitted to the multiplied data (their sum over
    the pool at each t_j, shared out by operations at risk), so that H0
    (one hazard for both arms) holds in every replicate — the null-imposed
    wild bootstrap (Cameron, Gelbach & Miller 2008), the refit the data's
    own residuals went through."""
    y = y_e.sum(axis=1)
    shift = np.divide(
        m @ g, y[:, None], out=np.zeros((m.shape[0], g.shape[1])), where=y[:, None] > 0
    )
    out = m[:, :, None] * g[None, :, :]
    out -= y_e[:, :, None] * shift[:, None, :]
    return out


def _wild_sups(strata: list[_Stratum], union: np.ndarray, cols: slice) -> np.ndarray:
    """Z* for the multiplier columns ``cols``: the linearized KM gap
    S_pool Σ_j [Σ_{i∈A} m*_ij / Y_A,j − Σ_{i∈B} m*_ij / Y_B,j] of the
    recentred residuals m*, over the variances recomputed from the same m*
    (a wild bootstrap-t), arms fixed at the observed ones."""
    n_cols = cols.stop - cols.start
    gap_sum = np.zeros((union.shape[0], n_cols))
    var_sum = np.zeros((union.shape[0], n_cols))
    for st in strata:
        arm_a = st.labels[:, 0]
        y_a = st.y_e @ arm_a
        y_b = st.y_e.sum(axis=1) - y_a
        inv_a = np.divide(1.0, y_a, out=np.zeros_like(y_a), where=y_a > 0)
        inv_b = np.divide(1.0, y_b, out=np.zeros_like(y_b), where=y_b > 0)
        inv = np.where(arm_a[None, :] > 0, inv_a[:, None], inv_b[:, None])  # (J, E)
        m = st.d_e - st.y_e * st.hazard[:, None]
        c = _recentred_residuals(m, st.y_e, st.multipliers[:, cols])
        c *= inv[:, :, None]
        np.cumsum(c, axis=0, out=c)
        gap = st.s_pool[:, None] * np.einsum("jer,e->jr", c, 2.0 * arm_a - 1.0)
        np.multiply(c, c, out=c)
        var = (st.s_pool * st.s_pool)[:, None] * c.sum(axis=1)
        gap_sum += _on_grid(st.grid, gap, union, 0.0)
        var_sum += _on_grid(st.grid, var, union, 0.0)
    return _band_sup(strata, union, gap_sum, var_sum)


@dataclass(frozen=True)
class StudentizedKS:
    """The studentized macro-KS (the board's test) and, on the same
    relabellings, the unstudentized macro D it replaces (for comparison).
    ``p`` (the board's) is the larger of ``p_permutation`` (the studentized
    permutation p) and ``p_wild`` (the null-restricted wild bootstrap p of
    the same statistic). ``per_object``: each object's KS distance D_o =
    sup_t |ΔF_o(t)| (what its P-P plot shows; descriptive: the test pools
    the objects first)."""

    statistic: float
    p: float
    per_object: dict[str, float]
    replicates: int
    raw_statistic: float
    raw_p: float
    p_permutation: float
    p_wild: float
    # each object's own studentized sup and its p, on the same relabellings
    # (what the test gives with that object alone; an object without a
    # success time on [0, τ]: 0 and 1)
    object_statistic: dict[str, float] = field(default_factory=dict)
    object_p: dict[str, float] = field(default_factory=dict)


def studentized_macro_ks_test(
    strata: dict[str, tuple[Operations, Operations]],
    *,
    tau: float,
    replicates: int,
    rngs: dict[str, np.random.Generator],
) -> StudentizedKS:
    """docs/methods.md §5: Z = sup over t ≤ τ of |Σ_o (F̂_A,o(t) − F̂_B,o(t))|
    / √(Σ_o V̂_A,o(t) + V̂_B,o(t)), V̂ the episode-cluster-robust KM
    variance — the macro (equal-weight) CDF difference over its standard
    error. The variances are summed over objects before dividing: an arm's
    few episodes on one object give a noisy variance, and the sup over t
    finds where it is too small. Two references for the same Z:

    * relabelling whole episodes within each object, the variances
      recomputed in every relabelling (a studentized permutation test:
      exact when episodes are exchangeable; for one t it is asymptotically
      valid when only the CDFs are equal — Janssen 1997; Chung & Romano
      2013 — but the sup over t takes its correlation across t from the
      pool, not from each arm);
    * the wild bootstrap: each episode's residuals against the pooled
      hazard times one ±1 multiplier, the pooled hazard refitted, the
      variances recomputed (Lin, Wei & Ying 1993; Beyersmann, Di Termini
      & Pauly 2013; Cameron, Gelbach & Miller 2008): each arm keeps its own
      episodes, so its own covariance across t, whatever the n ratio — but
      with few episodes in an arm it runs liberal (MacKinnon & Webb 2018).

    p = max of the two: a rejection needs both, so the test is exact
    under exchangeable episodes (P(max ≤ α) ≤ P(p_perm ≤ α)) and its size
    under equal CDFs is at most the smaller of the two references'."""
    if not strata:
        raise ValueError("studentized_macro_ks_test: the two arms share no object")
    prepared: list[_Stratum] = []
    prepared_objects: list[str] = []
    per_object: dict[str, float] = {}
    for obj, (ops_a, ops_b) in strata.items():
        pooled = concat_operations([ops_a, ops_b])
        n_a, n_b = ops_a.n_episodes, ops_b.n_episodes
        labels = permutation_labels(n_a + n_b, n_a, replicates, rngs[obj])
        rs = risk_set(pooled, t_max=tau)
        if rs.n_grid == 0:
            per_object[obj] = 0.0
            continue
        observed = np.zeros((n_a + n_b, 1))
        observed[:n_a] = 1.0
        d_e, y_e = _episode_matrices(rs)
        d_all, y_all = d_e.sum(axis=1), y_e.sum(axis=1)
        hazard = np.divide(d_all, y_all, out=np.zeros_like(d_all), where=y_all > 0)
        st = _Stratum(
            rs.grid,
            d_e,
            y_e,
            np.hstack([observed, labels]),
            hazard,
            np.cumprod(1.0 - hazard),
            # drawn after the relabellings, so those match macro_ks_test's
            rademacher_weights(n_a + n_b, replicates, rngs[obj]),
        )
        s_obs = survival_from(d_e, y_e, np.hstack([observed, 1.0 - observed]))
        per_object[obj] = float(np.max(np.abs(s_obs[:, 0] - s_obs[:, 1])))
        prepared.append(st)
        prepared_objects.append(obj)
    k = len(strata)
    z_all = np.zeros(replicates + 1)
    raw_all = np.zeros(replicates + 1)
    own_all = np.zeros((len(prepared), replicates + 1))
    z_wild = np.zeros(replicates)
    if prepared:
        union = np.unique(np.concatenate([st.grid for st in prepared]))
        cells = union.shape[0] + sum(st.d_e.size for st in prepared)
        block = max(1, _TENSOR_CELLS // cells)
        for start in range(0, replicates + 1, block):
            cols = slice(start, min(start + block, replicates + 1))
            z_all[cols], raw_all[cols], own_all[:, cols] = _macro_sups(prepared, union, cols)
        for start in range(0, replicates, block):
            cols = slice(start, min(start + block, replicates))
            z_wild[cols] = _wild_sups(prepared, union, cols)
        # objects without a success time on [0, τ] add 0 to the mean of sups
        raw_all *= len(prepared) / k

    def p_of(observed: float, null: np.ndarray) -> float:
        # a tolerance so that a replicate equal to the observed value counts as >=
        return (1 + int(np.sum(null >= observed - 1e-12))) / (replicates + 1)

    p_perm = p_of(z_all[0], z_all[1:])
    # the wild replicates are compared with the observed Z itself (the KM
    # gap), not with its linearization: the multiplier approximates the
    # statistic's null law, as in Lin, Wei & Ying (1993)
    p_wild = p_of(z_all[0], z_wild)
    # objects without a success time on [0, τ]: no gap to test (Z = 0, p = 1)
    object_statistic = dict.fromkeys(strata, 0.0)
    object_p = dict.fromkeys(strata, 1.0)
    for o, row in zip(prepared_objects, own_all, strict=True):
        object_statistic[o] = float(row[0])
        object_p[o] = p_of(row[0], row[1:])
    return StudentizedKS(
        statistic=float(z_all[0]),
        p=max(p_perm, p_wild),
        per_object=per_object,
        replicates=replicates,
        raw_statistic=float(raw_all[0]),
        raw_p=p_of(raw_all[0], raw_all[1:]),
        p_permutation=p_perm,
        p_wild=p_wild,
        object_statistic=object_statistic,
        object_p=object_p,
    )


@dataclass(frozen=True)
class ClusteredLogRank:
    """The stratified log-rank score U = Σ(O − E) for arm A with its
    episode-cluster-robust variance, and its p-values: the normal one of
    χ² = U² / V (1 df), the studentized permutation one, the wild
    bootstrap one, and the board's ``p``, the larger of the last two."""

    observed: float
    expected: float
    variance: float
    chi2: float
    p_normal: float
    p: float
    replicates: int
    p_permutation: float
    p_wild: float


def _wild_logrank_scores(
    m: np.ndarray, y_e: np.ndarray, coef: np.ndarray, g: np.ndarray
) -> np.ndarray:
    """(E, R) each episode's log-rank score in the wild replicates: U*_i =
    Σ_j c_ij m*_ij, c_ij = z_i − Y_A,j/Y_j (observed arms, (J, E)), m* =
    g_i m_ij − Y_i(t_j) Σ_k g_k m_kj / Y_j the residuals against the
    hazard refitted to the multiplied data; without building the (J, E, R)
    tensor of :func:`_recentred_residuals` (the log-rank's grid is every
    success time, not only those up to τ)."""
    y = y_e.sum(axis=1)
    shift = np.divide(
        m @ g, y[:, None], out=np.zeros((y.shape[0], g.shape[1])), where=y[:, None] > 0
    )
    return g * (coef * m).sum(axis=0)[:, None] - (coef * y_e).T @ shift


def clustered_logrank(
    strata: Sequence[tuple[Operations, Operations]],
    *,
    replicates: int,
    rngs: Sequence[np.random.Generator],
) -> ClusteredLogRank:
    """docs/methods.md §5: the log-rank score of :func:`logrank` with the
    variance of Lin & Wei (1989) summed per episode: episode i's score is
    U_i = Σ_j (z_i − Ȳ_A,j/Y_j)(dN_i(t_j) − Y_i(t_j) d_j/Y_j), Σ_i U_i =
    O_A − E_A, V = Σ_i U_i² (the robust score test of R's
    ``coxph(... + strata(object) + cluster(episode))`` at β = 0, Breslow
    ties). |U/√V| is referred to relabellings of whole episodes within each
    stratum, V recomputed in each (studentized permutation), and to the
    null-restricted wild bootstrap (each episode's residuals times a ±1
    multiplier, the pooled hazard refitted, U* and V* recomputed); p is the
    larger of the two, as for the macro-KS."""
    score = np.zeros(replicates + 1)
    var = np.zeros(replicates + 1)
    score_w = np.zeros(replicates)
    var_w = np.zeros(replicates)
    o_total = e_total = 0.0
    for (ops_a, ops_b), rng in zip(strata, rngs, strict=True):
        pooled = concat_operations([ops_a, ops_b])
        n_a = ops_a.n_episodes
        n = pooled.n_episodes
        labels = permutation_labels(n, n_a, replicates, rng)
        rs = risk_set(pooled)
        if rs.n_grid == 0:
            continue
        g = rademacher_weights(n, replicates, rng)
        d_e, y_e = _episode_matrices(rs)
        d = d_e.sum(axis=1)
        y = y_e.sum(axis=1)
        hazard = np.divide(d, y, out=np.zeros_like(d), where=y > 0)
        m = d_e - y_e * hazard[:, None]  # (J, E): each episode's martingale increments
        m_sum = m.sum(axis=0)
        w = np.hstack([np.zeros((n, 1)), labels])
        w[:n_a, 0] = 1.0
        share = np.divide(
            y_e @ w, y[:, None], out=np.zeros((y.shape[0], w.shape[1])), where=y[:, None] > 0
        )
        u = w * m_sum[:, None] - m.T @ share  # (E, R + 1)
        score += u.sum(axis=0)
        var += np.einsum("er,er->r", u, u)
        o_total += float(d_e[:, :n_a].sum())
        e_total += float(np.sum(d * share[:, 0]))
        u_w = _wild_logrank_scores(m, y_e, w[:, 0][None, :] - share[:, :1], g)
        score_w += u_w.sum(axis=0)
        var_w += np.einsum("er,er->r", u_w, u_w)
    if var[0] <= 0:
        return ClusteredLogRank(o_total, e_total, 0.0, 0.0, 1.0, 1.0, replicates, 1.0, 1.0)
    z = np.divide(score, np.sqrt(var), out=np.zeros_like(score), where=var > 0)
    z_w = np.divide(score_w, np.sqrt(var_w), out=np.zeros_like(score_w), where=var_w > 0)
    chi2 = float(z[0] ** 2)
    p_perm = (1 + int(np.sum(np.abs(z[1:]) >= abs(z[0]) - 1e-12))) / (replicates + 1)
    p_wild = (1 + int(np.sum(np.abs(z_w) >= abs(z[0]) - 1e-12))) / (replicates + 1)
    return ClusteredLogRank(
        observed=o_total,
        expected=e_total,
        variance=float(var[0]),
        chi2=chi2,
        p_normal=float(special.chdtrc(1, chi2)),
        p=max(p_perm, p_wild),
        replicates=replicates,
        p_permutation=p_perm,
        p_wild=p_wild,
    )


def bonferroni(p: float, comparisons: int) -> float:
    return float(min(1.0, p * max(comparisons, 1)))


BETTER = "better"
CROSSING = "crossing"
# the KS rejects, but the Bonferroni-level interval of ΔRMST holds 0: the
# policies differ and the data do not say which is faster
UNCLEAR = "unclear"
INDISTINGUISHABLE = "indistinguishable"


def verdict(
    significant: bool,
    rmst_diff: float,
    auc_ab: float,
    rmst_ci: tuple[float | None, float | None] = (None, None),
) -> tuple[str, str | None]:
    """docs/methods.md §5: (i) KS rejects, the Bonferroni-level interval
    ``rmst_ci`` of ΔRMST excludes 0 and the AUC agrees with its sign → one
    is better; (ii) KS rejects, the interval excludes 0 but the AUC points
    the other way (or sits at ½) → the CDFs cross; (iii) KS rejects but the
    interval holds 0 (or is missing) → different, direction unclear; (iv) KS
    does not reject → indistinguishable at this n.

    ``rmst_diff`` = RMST_A − RMST_B (negative: A is faster);
    ``auc_ab`` = P(T_A < T_B) + ½P(T_A = T_B) (above ½: A tends to be faster).
    Returns (verdict, winner) with winner "a", "b" or None. Only the
    interval's side of 0 carries error control (Bonferroni over pairs); the
    AUC's point estimate can only withhold a direction, never grant one.
    """
    if not significant:
        return INDISTINGUISHABLE, None
    lo, hi = rmst_ci
    if lo is None or hi is None or not (hi < 0 or lo > 0):
        return UNCLEAR, None
    rmst_says = -1.0 if lo > 0 else 1.0  # interval below 0: A faster
    auc_says = np.sign(auc_ab - 0.5)
    if rmst_says == auc_says:
        return BETTER, "a" if rmst_says > 0 else "b"
    return CROSSING, None
