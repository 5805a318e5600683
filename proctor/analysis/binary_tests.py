"""Pairwise tests on per-episode binary success (docs/methods.md §7, "Pairwise
tests on success").

* Barnard's exact unconditional test of p_A = p_B for two independent
  binomials (Barnard 1945, 1947; the test the LBM paper runs per pair). The
  statistic is the Wald z with the pooled variance,
  z = (p̂_A − p̂_B) / √(p̂(1 − p̂)(1/n_A + 1/n_B)), p̂ the pooled rate (0 when
  p̂ is 0 or 1). Its p-value is the largest, over the common rate π of the
  null, of P_π(|Z| ≥ |z_obs|): no conditioning on the margins (Fisher's
  test conditions on them and is conservative), no asymptotics.
* A sequential binary test in the STEP family (Snyder et al. 2025): the
  two policies are run in pairs, one episode of each per step, up to
  ``n_max`` steps; after step n the running 2 × 2 table (x_A, x_B of n each)
  is looked up in a region fixed before the first episode, and the test
  stops as soon as it lands in it. STEP optimises the region's shape by a
  convex programme; this one takes the simplest shape, a constant boundary
  on the same pooled |z| (a Pocock-type boundary, Pocock 1977), and picks
  the boundary *exactly*: the probability of ever entering the region
  under p_A = p_B = π is computed by dynamic programming over the joint
  success counts (absorbing the paths that stop), and the smallest boundary
  whose worst case over π is at most α is taken. No simulation, no
  asymptotics, no α-spending approximation.

The worst case over π: the rejection probability is a polynomial in π,
symmetric about ½ (swapping successes and failures leaves |z| unchanged);
it is evaluated on a grid of ``grid`` points of [0, ½] and refined around
its largest values by golden-section search (``_sup``).

References: G. A. Barnard, Nature 156:177 (1945) and Biometrika 34:123
(1947); R. D. Mehta & P. Senchaudhuri, "Conditional versus unconditional
exact tests for comparing two binomials" (2003); D. Snyder et al., "Is your
imitation learning policy better than mine? Policy comparison with
near-optimal stopping", RSS 2025 (arXiv:2503.10966); S. J. Pocock,
Biometrika 64:191 (1977); TRI LBM team (seeds/003) §IV-A5.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# scipy.special, not scipy.stats: see binary.py
from scipy import special

# a table's |z| within this of the observed one counts as "as extreme":
# equal tables computed along different float paths must not drop out
_TIE = 1e-9
# grid points over π in (0, ½] for the supremum, before refinement
_GRID = 200


def pooled_z(x_a: np.ndarray, n_a: int, x_b: np.ndarray, n_b: int) -> np.ndarray:
    """The Wald z of p̂_A − p̂_B with the pooled variance, elementwise; 0 where
    the pooled rate is 0 or 1 (the two samples agree completely)."""
    x_a = np.asarray(x_a, dtype=float)
    x_b = np.asarray(x_b, dtype=float)
    p = (x_a + x_b) / (n_a + n_b)
    var = p * (1.0 - p) * (1.0 / n_a + 1.0 / n_b)
    diff = x_a / n_a - x_b / n_b
    return np.divide(diff, np.sqrt(var), out=np.zeros(np.broadcast(diff, var).shape), where=var > 0)


def _binom_pmf(n: int, pi: np.ndarray) -> np.ndarray:
    """(len(pi), n + 1): P(X = k) for X ~ Bin(n, π), from log-gamma."""
    k = np.arange(n + 1)
    pi = np.clip(np.asarray(pi, dtype=float), 1e-300, 1.0 - 1e-16)
    log_c = special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
    log_p = log_c[None, :] + k[None, :] * np.log(pi)[:, None]
    log_p += (n - k)[None, :] * np.log1p(-pi)[:, None]
    return np.exp(log_p)


def _sup(
    f: Callable[[np.ndarray], np.ndarray], grid: int, *, refine: bool = True
) -> tuple[float, float]:
    """(max, argmax) of a smooth f on (0, ½], f symmetric about ½: a grid, then
    golden-section search in the brackets around every local maximum of the
    grid at once (the rejection probability can have several local maxima;
    f takes a vector of rates, so the brackets share its calls). A numerical
    supremum: exact up to a peak narrower than the grid's step."""
    xs = np.linspace(0.5 / grid, 0.5, grid)
    ys = f(xs)
    best_y, best_x = float(ys.max()), float(xs[int(ys.argmax())])
    if not refine:
        return best_y, best_x
    step = xs[1] - xs[0]
    g = (np.sqrt(5.0) - 1.0) / 2.0
    # every local maximum of the grid (not only the largest few): the
    # crossing probability of a sequential region oscillates in π, more so
    # as n_max grows, and the supremum may sit in any of its peaks
    left = np.concatenate([[-np.inf], ys[:-1]])
    right = np.concatenate([ys[1:], [-np.inf]])
    top = np.flatnonzero((ys >= left) & (ys >= right))
    lo = np.maximum(xs[top] - step, 1e-9)
    hi = np.minimum(xs[top] + step, 0.5)
    for _ in range(30):
        m1, m2 = hi - g * (hi - lo), lo + g * (hi - lo)
        v = f(np.concatenate([m1, m2]))
        left = v[: top.size] >= v[top.size :]
        hi = np.where(left, m2, hi)
        lo = np.where(left, lo, m1)
    mid = (lo + hi) / 2.0
    v = f(mid)
    k = int(v.argmax())
    if v[k] > best_y:
        best_y, best_x = float(v[k]), float(mid[k])
    return best_y, best_x


@dataclass(frozen=True)
class Barnard:
    """Barnard's exact test of p_A = p_B: the pooled-variance z of the
    observed table, the two-sided p-value (the supremum over the common
    rate) and the rate π where the supremum is attained."""

    successes_a: int
    n_a: int
    successes_b: int
    n_b: int
    statistic: float
    p: float
    nuisance: float


def barnard_exact(successes_a: int, n_a: int, successes_b: int, n_b: int) -> Barnard:
    """Two-sided Barnard's exact test (pooled-variance Wald statistic).
    p = sup over π of Σ P_π(table) over the tables whose |z| is at least the
    observed one; the same quantity as ``scipy.stats.barnard_exact`` (which
    takes the supremum over a coarser grid of π)."""
    if n_a < 1 or n_b < 1 or not (0 <= successes_a <= n_a and 0 <= successes_b <= n_b):
        raise ValueError("barnard_exact: need 0 <= successes <= n and n >= 1 on both sides")
    z_obs = float(pooled_z(np.array(successes_a), n_a, np.array(successes_b), n_b))
    z = pooled_z(np.arange(n_a + 1)[:, None], n_a, np.arange(n_b + 1)[None, :], n_b)
    extreme = (np.abs(z) >= abs(z_obs) - _TIE).astype(float)

    def p_of(pi: np.ndarray) -> np.ndarray:
        return np.einsum("pi,ij,pj->p", _binom_pmf(n_a, pi), extreme, _binom_pmf(n_b, pi))

    if extreme.all():
        return Barnard(successes_a, n_a, successes_b, n_b, z_obs, 1.0, 0.5)
    p, pi = _sup(p_of, _GRID)
    return Barnard(successes_a, n_a, successes_b, n_b, z_obs, float(min(1.0, p)), pi)


# --- the sequential test -------------------------------------------------


def _region(n: int) -> np.ndarray:
    """(n + 1, n + 1): |z| of every table (x_A, x_B) after n paired steps."""
    k = np.arange(n + 1)
    return np.abs(pooled_z(k[:, None], n, k[None, :], n))


def _crossing_probability(
    n_max: int, boundary: float, p_a: np.ndarray, p_b: np.ndarray, n_min: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact, by dynamic programming over the joint success counts: for each
    (p_a[k], p_b[k]), the probability that the test stops by step n_max, the
    expected number of steps run (stopped or not), and the probability that
    it stops with A ahead. Paths that enter the region are absorbed."""
    p_a = np.asarray(p_a, dtype=float)
    p_b = np.asarray(p_b, dtype=float)
    m = p_a.shape[0]
    size = n_max + 1
    mass = np.zeros((m, size, size))
    mass[:, 0, 0] = 1.0
    stop = np.zeros(m)
    stop_a = np.zeros(m)
    steps = np.zeros(m)
    qa, qb = (1.0 - p_a)[:, None, None], (1.0 - p_b)[:, None, None]
    pa, pb = p_a[:, None, None], p_b[:, None, None]
    for n in range(1, n_max + 1):
        steps += mass.sum(axis=(1, 2))  # still running before step n: runs it
        nxt = mass * qa * qb
        nxt[:, 1:, :] += mass[:, :-1, :] * pa * qb
        nxt[:, :, 1:] += mass[:, :, :-1] * qa * pb
        nxt[:, 1:, 1:] += mass[:, :-1, :-1] * pa * pb
        mass = nxt
        if n < n_min:
            continue
        k = np.arange(n + 1)
        hit = _region(n) >= boundary - _TIE
        if not hit.any():
            continue
        block = mass[:, : n + 1, : n + 1]
        hit_mass = block * hit[None]
        stop += hit_mass.sum(axis=(1, 2))
        ahead = (k[:, None] > k[None, :]) & hit
        stop_a += (block * ahead[None]).sum(axis=(1, 2))
        block[:, hit] = 0.0
    return stop, steps, stop_a


@dataclass(frozen=True)
class StepDesign:
    """A sequential binary test fixed before the first episode: run the pair
    one episode each per step, at most ``n_max`` steps; stop and reject
    p_A = p_B at the first step n >= ``n_min`` whose running table has
    |pooled z| >= ``boundary``; the direction is the sign of x_A − x_B.
    ``size``: the worst-case probability of rejecting under p_A = p_B (at
    the rate ``worst_rate``), at most ``alpha``: exact at each rate (dynamic
    programming), its supremum over rates numerical (:func:`_sup`)."""

    n_max: int
    n_min: int
    alpha: float
    boundary: float
    size: float
    worst_rate: float


def step_design(n_max: int, alpha: float = 0.05, *, n_min: int = 1) -> StepDesign:
    """The smallest constant |z| boundary whose exact worst-case type-I error
    over p_A = p_B = π is at most α. The achievable boundaries are the
    distinct |z| of the tables reachable up to n_max; the type-I error only
    falls as the boundary rises, so a bisection over them finds the
    smallest admissible one."""
    if n_max < 1 or not 1 <= n_min <= n_max:
        raise ValueError("step_design: need 1 <= n_min <= n_max")
    if not 0 < alpha < 1:
        raise ValueError("step_design: alpha must be in (0, 1)")
    values = np.unique(np.concatenate([_region(n).ravel() for n in range(n_min, n_max + 1)]))
    values = values[values > 0]

    def size_of(b: float, refine: bool) -> tuple[float, float]:
        return _sup(
            lambda pi: _crossing_probability(n_max, b, pi, pi, n_min)[0],
            # finer with n_max: the peaks narrow as the region gets more steps
            max(_GRID // 4, 10 * n_max) if refine else _GRID // 4,
            refine=refine,
        )

    # bisect on the grid alone (a lower bound of the supremum, so the
    # boundary found is at most the true one), then confirm with the
    # refined supremum, moving up a value while it exceeds α
    lo, hi = 0, values.size  # hi: "no boundary" (never reject), size 0
    while lo < hi:
        mid = (lo + hi) // 2
        if size_of(float(values[mid]), False)[0] <= alpha:
            hi = mid
        else:
            lo = mid + 1
    best = (0.0, 0.5)
    while lo < values.size:
        best = size_of(float(values[lo]), True)
        if best[0] <= alpha:
            break
        lo += 1
    boundary = float(values[lo]) if lo < values.size else float("inf")
    return StepDesign(n_max, n_min, alpha, boundary, best[0], best[1])


@dataclass(frozen=True)
class StepOperating:
    """What a design does at (p_A, p_B), exactly: the probability it rejects,
    the probability it rejects saying A is better, and the expected number
    of steps (pairs of episodes) it runs."""

    p_a: float
    p_b: float
    reject: float
    reject_a_better: float
    expected_steps: float


def step_operating(design: StepDesign, p_a: float, p_b: float) -> StepOperating:
    stop, steps, stop_a = _crossing_probability(
        design.n_max, design.boundary, np.array([p_a]), np.array([p_b]), design.n_min
    )
    return StepOperating(p_a, p_b, float(stop[0]), float(stop_a[0]), float(steps[0]))


@dataclass(frozen=True)
class StepResult:
    """The design walked along a pair's outcomes: the step it stopped at
    (None: not stopped), the decision ("a", "b" or None) and the running
    table at the end."""

    steps: int
    stopped_at: int | None
    winner: str | None
    successes_a: int
    successes_b: int
    z: float


def step_run(design: StepDesign, a: Sequence[bool], b: Sequence[bool]) -> StepResult:
    """Walk the paired outcomes (a[i], b[i] the i-th step) until the region
    is entered or ``n_max`` steps or the data run out."""
    n = min(len(a), len(b), design.n_max)
    x_a = x_b = 0
    z = 0.0
    for i in range(n):
        x_a += bool(a[i])
        x_b += bool(b[i])
        step = i + 1
        z = float(pooled_z(np.array(x_a), step, np.array(x_b), step))
        if step >= design.n_min and abs(z) >= design.boundary - _TIE:
            return StepResult(step, step, "a" if z > 0 else "b", x_a, x_b, z)
    return StepResult(n, None, None, x_a, x_b, z)
