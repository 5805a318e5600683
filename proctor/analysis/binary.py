"""Binary and partial-credit outcomes (docs/methods.md §7, the TRI LBM paper).

* Success rate: posterior Beta(1 + s, 1 + n − s) under a uniform prior;
* mean task completion: the Bayesian bootstrap (Rubin 1981), weights
  w ~ Dirichlet(1, …, 1) over the *episodes*, mean Σ w_i x_i: no levels are
  needed and no prior mass pulls the mean (its posterior mean is the sample
  mean), whatever values completion takes;
* on a rubric with levels v_1..v_K *declared before the data*: the
  posterior of the mean Σ π_k v_k under a uniform Dirichlet prior,
  π ~ Dirichlet(1 + counts). Never build the levels from the data: one
  pseudo-count a distinct value grows the prior with n and pulls the mean
  toward the levels' average (the review of §7);
* Welch's t for a difference in mean completion.

Reference: TRI LBM team, "A Careful Examination of Large Behavior Models…"
(seeds/003) §IV-A4/5; Rubin (1981), Ann. Statist. 9:130; Welch (1947),
Biometrika 34:28.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# scipy.special, not scipy.stats: the same functions (stats calls these), and
# importing scipy.stats costs `proctor analyze` about half a second
from scipy import special


@dataclass(frozen=True)
class Posterior:
    """A posterior summarised by its mean and an equal-tailed credible interval."""

    mean: float
    lo: float
    hi: float


def beta_posterior(successes: int, trials: int, level: float = 0.95) -> Posterior:
    """Beta(1 + s, 1 + n − s): mean (1 + s)/(2 + n), equal-tailed interval."""
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError("beta_posterior: need 0 <= successes <= trials")
    a, b = 1 + successes, 1 + trials - successes
    tail = (1 - level) / 2
    return Posterior(
        mean=a / (a + b),
        lo=float(special.betaincinv(a, b, tail)),
        hi=float(special.betaincinv(a, b, 1 - tail)),
    )


def dirichlet_mean_posterior(
    scores: Sequence[float],
    levels: Sequence[float],
    *,
    rng: np.random.Generator,
    draws: int = 4000,
    level: float = 0.95,
) -> Posterior:
    """Posterior of the mean rubric score: π ~ Dirichlet(1 + counts of each
    level), mean = Σ π_k v_k; summarised from ``draws`` samples. Every score
    must be one of ``levels``."""
    lv = np.asarray(sorted(set(levels)), dtype=float)
    s = np.asarray(scores, dtype=float)
    pos = np.searchsorted(lv, s)
    if s.size and (np.any(pos >= lv.size) or not np.allclose(lv[np.minimum(pos, lv.size - 1)], s)):
        raise ValueError("dirichlet_mean_posterior: a score is not one of the rubric levels")
    counts = np.bincount(pos, minlength=lv.size)
    pi = rng.dirichlet(1.0 + counts, size=draws)
    means = pi @ lv
    tail = (1 - level) / 2
    return Posterior(
        mean=float((1.0 + counts) @ lv / (1.0 + counts).sum()),
        lo=float(np.quantile(means, tail)),
        hi=float(np.quantile(means, 1 - tail)),
    )


def bayesian_bootstrap_mean(
    scores: Sequence[float],
    *,
    rng: np.random.Generator,
    draws: int = 4000,
    level: float = 0.95,
) -> Posterior:
    """The Bayesian bootstrap of the mean of ``scores`` (Rubin 1981): each
    draw weighs the n episodes by w ~ Dirichlet(1, …, 1) and takes Σ w_i x_i.
    The estimate is the posterior mean, which is the sample mean (E w_i = 1/n);
    the interval is equal-tailed over ``draws`` draws. The episode is the unit
    (its completion is one number), as in the clustered bootstrap of §5.

    For 0/1 scores with k ones the draw is a sum of k Dirichlet components,
    Beta(k, n − k): the check in tests/analysis/test_completion_posterior.py.
    The posterior lives on the observed values: when every episode scores
    the same, the interval is that point (the Beta posterior of the success
    rate beside it says how sure 3 of 3 is)."""
    x = np.asarray(scores, dtype=float)
    if x.size == 0:
        raise ValueError("bayesian_bootstrap_mean: no scores")
    if draws < 1 or not 0 < level < 1:
        raise ValueError("bayesian_bootstrap_mean: need draws >= 1 and level in (0, 1)")
    # Dirichlet(1, …, 1) as normalised unit exponentials (what numpy's
    # dirichlet does), drawn in chunks so a large n does not hold draws × n
    means = np.empty(draws)
    chunk = max(1, 2_000_000 // x.size)
    for start in range(0, draws, chunk):
        g = rng.standard_exponential((min(chunk, draws - start), x.size))
        means[start : start + g.shape[0]] = (g @ x) / g.sum(axis=1)
    tail = (1 - level) / 2
    return Posterior(
        mean=float(x.mean()),
        lo=float(np.quantile(means, tail)),
        hi=float(np.quantile(means, 1 - tail)),
    )


@dataclass(frozen=True)
class Welch:
    statistic: float
    df: float
    p: float


def welch_t(a: Sequence[float], b: Sequence[float]) -> Welch:
    """Welch's unequal-variance t: t = (ā − b̄)/√(s_a²/n_a + s_b²/n_b) with
    Welch–Satterthwaite degrees of freedom. Degenerate samples (no variance
    in either) give t = 0, p = 1 when the means agree."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        raise ValueError("welch_t: each sample needs at least two values")
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    diff = x.mean() - y.mean()
    if va + vb == 0:
        if diff == 0:
            return Welch(0.0, np.nan, 1.0)
        return Welch(float(np.sign(diff) * np.inf), np.nan, 0.0)
    t = diff / np.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1))
    return Welch(float(t), float(df), float(2 * special.stdtr(df, -abs(t))))
