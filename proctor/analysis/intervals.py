"""Bootstrap intervals for RMST and HRT at small cells (docs/methods.md §4,
"Interval coverage"), keyed by name in :data:`INTERVAL_METHODS`: the
percentile interval, the expanded percentile interval (the board's,
:data:`HRT_INTERVAL` and :data:`RMST_INTERVAL`: it covered best in
benchmarks/coverage.py), BCa with the acceleration from a jackknife over
episodes, and the studentized (bootstrap-t) interval on the raw or log scale.

The percentile interval of a macro mean of RMST ratios under-covers with few
episodes a cell (the statistical review measured 0.84–0.90 at 3–15): the
bootstrap distribution is too narrow by about √((n − 1)/n), which the
expanded percentile interval undoes (:func:`variance_inflation`), and HRT, a
ratio, is skewed and biased at small n. BCa (Efron 1987) moves the
percentile's order statistics by

    α₁ = Φ(z₀ + (z₀ + z_{α/2}) / (1 − a(z₀ + z_{α/2}))),   α₂ likewise with z_{1−α/2},

where z₀ = Φ⁻¹(share of replicates below the estimate, ties counted half)
corrects the median bias and ``a`` the skew of the estimate's sampling law.

The acceleration from independent samples (cells, each resampled on its own
episodes): with the jackknife's empirical influence of episode i of cell k,
U_ki = (n_k − 1)(θ̄_(k·) − θ_(k,i)), θ_(k,i) the statistic with that episode
left out and θ̄_(k·) their mean over the cell,

    a = Σ_k Σ_i U_ki³ / n_k³  /  (6 · (Σ_k Σ_i U_ki² / n_k²)^{3/2}),

which for one sample is Efron & Tibshirani's (1993) eq. 14.15,
Σ(θ̄ − θ_(i))³ / (6 (Σ(θ̄ − θ_(i))²)^{3/2}); the stratified form is Davison &
Hinkley (1997) §3.2.1 and §5.3 (influence values scaled by each stratum's size).
The episode, not the operation, is left out: the same cluster the bootstrap
resamples.

References: Efron (1987), JASA 82:171; Efron & Tibshirani (1993), An
Introduction to the Bootstrap, ch. 14; Davison & Hinkley (1997), Bootstrap
Methods and their Application, ch. 3 and 5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from proctor.analysis.bootstrap import Interval, percentile_interval


@dataclass(frozen=True)
class Resampled:
    """A statistic's estimate, its bootstrap replicates, and its jackknife:
    one array per independently resampled cell holding the statistic with
    each of that cell's episodes left out in turn."""

    estimate: float
    replicates: np.ndarray
    jackknife: tuple[np.ndarray, ...] = ()
    # the statistic's standard error, for the estimate and for each
    # replicate from that replicate's own data (the studentized intervals)
    se: float | None = None
    se_replicates: np.ndarray | None = None


def acceleration(jackknife: Sequence[np.ndarray]) -> float:
    """BCa's ``a`` from leave-one-episode-out values, one array per cell
    (the module docstring's formula); 0 where every value is equal or no
    cell has two episodes."""
    num = den = 0.0
    for loo in jackknife:
        v = np.asarray(loo, dtype=float)
        n = v.shape[0]
        if n < 2 or not np.all(np.isfinite(v)):
            continue
        u = (n - 1) * (v.mean() - v)
        num += float(np.sum(u**3)) / n**3
        den += float(np.sum(u**2)) / n**2
    if den <= 0.0:
        return 0.0
    return num / (6.0 * den**1.5)


def variance_inflation(jackknife: Sequence[np.ndarray]) -> float:
    """√(jackknife variance / plug-in variance) from the same influence values:
    √(Σ_k Σ_i U_ki² / (n_k(n_k − 1))  /  Σ_k Σ_i U_ki² / n_k²). The bootstrap
    estimates the plug-in variance, smaller than the unbiased one by (n − 1)/n
    per cell, which is what makes the percentile interval too narrow with few
    episodes; each cell weighs in by its share of the variance. 1 where no
    cell has two episodes."""
    unbiased = plug_in = 0.0
    for loo in jackknife:
        v = np.asarray(loo, dtype=float)
        n = v.shape[0]
        if n < 2 or not np.all(np.isfinite(v)):
            continue
        ss = float(np.sum(((n - 1) * (v.mean() - v)) ** 2))
        unbiased += ss / (n * (n - 1))
        plug_in += ss / n**2
    return float(np.sqrt(unbiased / plug_in)) if plug_in > 0 else 1.0


def bias_correction(estimate: float, replicates: np.ndarray) -> float:
    """z₀ = Φ⁻¹(#{θ* < θ̂} + ½ #{θ* = θ̂}) / B), the share kept inside
    [½/B, 1 − ½/B] so that z₀ stays finite when every replicate falls on one
    side (a degenerate cell)."""
    r = np.asarray(replicates, dtype=float)
    b = r.shape[0]
    share = (np.sum(r < estimate) + 0.5 * np.sum(r == estimate)) / b
    share = min(max(share, 0.5 / b), 1.0 - 0.5 / b)
    return float(ndtri(share))


def bca_levels(z0: float, a: float, alpha: float, widen: float = 1.0) -> tuple[float, float]:
    """The BCa interval's lower and upper percentile levels; ``widen``
    multiplies the normal quantiles z_{α/2}, z_{1−α/2} (the expanded form)."""
    out = []
    for z in (widen * ndtri(alpha / 2), widen * ndtri(1 - alpha / 2)):
        s = z0 + z
        denom = 1.0 - a * s
        # a(z₀ + z) ≥ 1 only with an acceleration far outside anything a
        # cell of episodes gives; the level then saturates at its own end
        out.append(float(ndtr(z0 + s / denom)) if denom > 0 else (0.0 if z < 0 else 1.0))
    return out[0], out[1]


def _order_statistic(sorted_r: np.ndarray, level: float, upper: bool) -> float:
    """The same order statistics as the percentile interval: the k-th smallest
    with k = ⌊(B + 1)·level⌋ (lower) or ⌈(B + 1)·level⌉ (upper), in 1..B."""
    b = sorted_r.shape[0]
    k = np.ceil((b + 1) * level) if upper else np.floor((b + 1) * level)
    return float(sorted_r[min(max(int(k), 1), b) - 1])


def bca_interval(x: Resampled, alpha: float = 0.05, *, expanded: bool = False) -> Interval:
    """Efron's BCa interval with the episode-jackknife acceleration. NaN
    replicates (undefined values) count as +inf, as in the percentile
    interval; with a = z₀ = 0 it is the percentile interval itself.

    ``expanded``: the normal quantiles are multiplied by
    :func:`variance_inflation`, which undoes the bootstrap's (n − 1)/n
    shrinkage of the variance (the idea of Hesterberg's expanded percentile
    interval, 2015, The American Statistician 69:371, with the factor read
    from the jackknife so that cells of different sizes weigh in by their
    share of the variance)."""
    r = np.asarray(x.replicates, dtype=float)
    r = np.where(np.isnan(r), np.inf, r)
    if r.shape[0] == 0 or not np.isfinite(x.estimate):
        return percentile_interval(x.estimate, r, alpha)
    z0 = bias_correction(x.estimate, r)
    widen = variance_inflation(x.jackknife) if expanded else 1.0
    lo_level, hi_level = bca_levels(z0, acceleration(x.jackknife), alpha, widen)
    r = np.sort(r)
    return Interval(
        float(x.estimate),
        _order_statistic(r, lo_level, upper=False),
        _order_statistic(r, hi_level, upper=True),
    )


def studentized_interval(x: Resampled, alpha: float = 0.05, *, log: bool = False) -> Interval:
    """The bootstrap-t interval (Efron & Tibshirani 1993, ch. 12): with
    t*_b = (θ*_b − θ̂) / se*_b, each replicate studentized by its own
    episode-clustered SE, the interval is θ̂ − t*_{(1−α/2)} ŝe, θ̂ − t*_{(α/2)} ŝe.
    ``log``: the same on log θ (SE of log θ = SE / θ, the delta method), the
    interval mapped back with exp. t* quantiles are the percentile interval's
    order statistics. A replicate whose SE is 0 (every draw the same episode
    in every cell) has t* = ±∞ by its sign (0 at the estimate). Falls back to
    the percentile interval without standard errors (or, on the log scale,
    at a non-positive estimate)."""
    se, se_r = x.se, x.se_replicates
    r = np.asarray(x.replicates, dtype=float)
    usable = se is not None and se_r is not None and np.isfinite(se) and se > 0
    if not usable or (log and not x.estimate > 0) or r.shape[0] == 0:
        return percentile_interval(x.estimate, r, alpha)
    assert se is not None and se_r is not None
    est = float(x.estimate)
    with np.errstate(divide="ignore", invalid="ignore"):
        if log:
            diff = np.log(np.where(r > 0, r, np.nan)) - np.log(est)
            se_r = se_r / r
            se = se / est
        else:
            diff = r - est
        t = np.where(se_r > 0, diff / np.where(se_r > 0, se_r, 1.0), np.sign(diff) * np.inf)
    # an undefined replicate counts as far out on top
    t = np.sort(np.where(np.isnan(t), np.inf, t))
    t_lo = _order_statistic(t, alpha / 2, upper=False)
    t_hi = _order_statistic(t, 1 - alpha / 2, upper=True)
    if not log:
        return Interval(est, est - t_hi * se, est - t_lo * se)
    with np.errstate(over="ignore"):
        return Interval(est, est * float(np.exp(-t_hi * se)), est * float(np.exp(-t_lo * se)))


def _studentized(x: Resampled, alpha: float = 0.05) -> Interval:
    return studentized_interval(x, alpha)


def _studentized_log(x: Resampled, alpha: float = 0.05) -> Interval:
    return studentized_interval(x, alpha, log=True)


def _percentile(x: Resampled, alpha: float = 0.05) -> Interval:
    return percentile_interval(x.estimate, x.replicates, alpha)


def expanded_percentile_interval(x: Resampled, alpha: float = 0.05) -> Interval:
    """The percentile interval at the levels Φ(f · z_{α/2}), Φ(f · z_{1−α/2})
    with f = :func:`variance_inflation` (Hesterberg 2015's expanded
    percentile interval, its factor read from the jackknife): no bias or
    skew correction, only the bootstrap's (n − 1)/n variance undone."""
    f = variance_inflation(x.jackknife)
    lo, hi = ndtr(f * ndtri(alpha / 2)), ndtr(f * ndtri(1 - alpha / 2))
    r = np.asarray(x.replicates, dtype=float)
    r = np.sort(np.where(np.isnan(r), np.inf, r))
    if r.shape[0] == 0:
        return Interval(x.estimate, None, None)
    return Interval(
        float(x.estimate),
        _order_statistic(r, float(lo), upper=False),
        _order_statistic(r, float(hi), upper=True),
    )


@dataclass(frozen=True)
class IntervalMethod:
    """One way to turn a :class:`Resampled` into an interval, and what it
    reads besides the replicates (so the board computes only that)."""

    compute: Callable[[Resampled, float], Interval]
    jackknife: bool = False
    se: bool = False


def _bca(x: Resampled, alpha: float = 0.05) -> Interval:
    return bca_interval(x, alpha)


def _bca_expanded(x: Resampled, alpha: float = 0.05) -> Interval:
    return bca_interval(x, alpha, expanded=True)


# by name; benchmarks/coverage.py measures every entry, and the board's HRT
# and RMST use the ones that covered best there (docs/methods.md §4)
INTERVAL_METHODS: dict[str, IntervalMethod] = {
    "percentile": IntervalMethod(_percentile),
    "percentile_expanded": IntervalMethod(expanded_percentile_interval, jackknife=True),
    "bca": IntervalMethod(_bca, jackknife=True),
    "bca_expanded": IntervalMethod(_bca_expanded, jackknife=True),
    "studentized": IntervalMethod(_studentized, se=True),
    "studentized_log": IntervalMethod(_studentized_log, se=True),
}
HRT_INTERVAL = "percentile_expanded"
RMST_INTERVAL = "percentile_expanded"


def interval_method(name: str) -> IntervalMethod:
    try:
        return INTERVAL_METHODS[name]
    except KeyError:
        known = ", ".join(sorted(INTERVAL_METHODS))
        raise ValueError(f"interval method: unknown {name!r} (known: {known})") from None
