"""Planning: how many rollouts? (docs/methods.md §6)

* Wilson half-width for one binary success rate and the n for a target
  half-width;
* Connor's (1987) paired-binary (McNemar) sample size;
* the Brownian-bridge model of macro-KS power with a cluster design effect
  (PhAIL, seeds/002, App. H, steps 1–5).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import special  # not scipy.stats: see binary.py


def _z(p: float) -> float:
    return float(special.ndtri(p))


def wilson_interval(successes: int, trials: int, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson (1927) score interval for a binomial proportion:
    (p̂ + z²/2n ± z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n)."""
    if trials <= 0:
        raise ValueError("wilson_interval: trials must be positive")
    z = _z(1 - alpha / 2)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return centre - half, centre + half


def wilson_halfwidth(p: float, n: int, alpha: float = 0.05) -> float:
    """Half-width of the Wilson interval at observed proportion p with n trials."""
    z = _z(1 - alpha / 2)
    return z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)


@dataclass(frozen=True)
class WilsonPlan:
    """Trials for a target half-width: ``approximate`` from the large-sample
    form h ≈ z·√(p(1−p)/n) (what the PhAIL paper quotes: ±5 pp at p = 0.5 →
    385), ``exact`` the smallest n whose Wilson half-width is <= h."""

    halfwidth: float
    p: float
    approximate: int
    exact: int


def wilson_n(halfwidth: float, p: float = 0.5, alpha: float = 0.05) -> WilsonPlan:
    if not 0 < halfwidth < 0.5:
        raise ValueError("wilson_n: the half-width must be in (0, 0.5)")
    if not 0 <= p <= 1:
        raise ValueError("wilson_n: p must be in [0, 1]")
    z = _z(1 - alpha / 2)
    approx = max(1, math.ceil(z * z * p * (1 - p) / halfwidth**2 - 1e-9))
    # the Wilson half-width decreases in n; bracket and bisect
    lo, hi = 1, max(approx, 2)
    while wilson_halfwidth(p, hi, alpha) > halfwidth:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if wilson_halfwidth(p, mid, alpha) <= halfwidth:
            hi = mid
        else:
            lo = mid + 1
    return WilsonPlan(halfwidth=halfwidth, p=p, approximate=approx, exact=lo)


def connor_n(delta: float, psi: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Paired-binary (McNemar) sample size, Connor (1987), Biometrics 43:207:
    n = [z_(1−α/2)·√ψ + z_(1−β)·√(ψ − Δ²)]² / Δ², rounded up; ψ is the
    discordance rate, Δ the paired difference in success probability."""
    if not 0 < abs(delta) <= psi <= 1:
        raise ValueError("connor_n: need 0 < |delta| <= psi <= 1")
    za = _z(1 - alpha / 2)
    zb = _z(power)
    n = (za * math.sqrt(psi) + zb * math.sqrt(psi - delta * delta)) ** 2 / (delta * delta)
    return math.ceil(n - 1e-9)


# --- macro-KS power: the Brownian-bridge model ---


@dataclass(frozen=True)
class ObjectEffect:
    """One object's inputs to the bridge model: the pooled CDF F and the
    difference ΔF = F_A − F_B at the pooled success times in [0, τ],
    operations per episode m̄ and the intra-episode correlation ρ."""

    object: str
    f_pooled: np.ndarray
    delta: np.ndarray
    m_bar: float
    rho: float

    @property
    def deff(self) -> float:
        """Design effect 1 + (m̄ − 1)ρ."""
        return 1.0 + (self.m_bar - 1.0) * self.rho


@dataclass(frozen=True)
class PowerCurve:
    """Predicted power of the macro-KS test vs episodes per cell ``n``;
    ``n_needed`` is the smallest n reaching ``target`` (None: not within
    ``n_max``)."""

    n: np.ndarray
    power: np.ndarray
    target: float
    alpha: float
    n_needed: int | None
    effect: float  # the macro D of the population curves: mean_o sup|ΔF_o|


def _bridges(u: np.ndarray, sims: int, rng: np.random.Generator) -> np.ndarray:
    """A standard Brownian bridge at the non-decreasing points u in [0, 1],
    shape (sims, len(u)): B(u) = W(u) − u·W(1)."""
    u = np.clip(np.asarray(u, dtype=float), 0.0, 1.0)
    steps = np.diff(np.concatenate([[0.0], u]))
    steps = np.maximum(steps, 0.0)
    w = np.cumsum(rng.standard_normal((sims, u.size)) * np.sqrt(steps), axis=1)
    tail = 1.0 - (u[-1] if u.size else 0.0)
    w1 = (w[:, -1] if u.size else 0.0) + rng.standard_normal(sims) * math.sqrt(max(tail, 0.0))
    return w - u[None, :] * np.asarray(w1).reshape(-1, 1)


class BridgeModel:
    """D_o ≈ sup_t |√(2/n_eff)·B(F(t)) + ΔF_o(t)|, n_eff = n·m̄/DEFF; macro D
    = mean over objects; the critical value is the (1 − α) quantile of the
    drift-free macro D at the same n (simulated, not the Kolmogorov table,
    since this is a mean of several sups). The same bridge draws are used at
    every n (common random numbers), so the curve in n is smooth."""

    def __init__(
        self,
        effects: Sequence[ObjectEffect],
        *,
        sims: int = 2000,
        rng: np.random.Generator,
    ) -> None:
        if not effects:
            raise ValueError("BridgeModel: no objects")
        self.effects = list(effects)
        self._alt = [_bridges(e.f_pooled, sims, rng) for e in self.effects]
        # the drift-free sup scales with n: sup|s·B| = s·sup|B| exactly (a
        # positive factor keeps the order of rounded products), so each
        # object's null sup is drawn once, not at every n
        self._null_sup = [
            np.max(np.abs(b), axis=1) if b.size else np.zeros(sims)
            for b in (_bridges(e.f_pooled, sims, rng) for e in self.effects)
        ]
        self.sims = sims
        # n_needed's bisection and curve() ask for the same n more than once
        self._power: dict[tuple[float, float], float] = {}

    @property
    def effect(self) -> float:
        return float(
            np.mean([np.max(np.abs(e.delta)) if e.delta.size else 0.0 for e in self.effects])
        )

    def with_rho(self, rho: float) -> BridgeModel:
        """The same model — the same bridge draws — with every object's ρ set
        to ``rho`` (for calibrating ρ: its fit is then not blurred by new
        simulation noise at each candidate)."""
        new = copy.copy(self)
        new.effects = [replace(e, rho=rho) for e in self.effects]
        new._power = {}
        return new

    def power(self, n: float, alpha: float = 0.05) -> float:
        key = (float(n), float(alpha))
        if key not in self._power:
            self._power[key] = self._simulate(n, alpha)
        return self._power[key]

    def _simulate(self, n: float, alpha: float) -> float:
        alt = np.zeros(self.sims)
        null = np.zeros(self.sims)
        for e, b_alt, sup_null in zip(self.effects, self._alt, self._null_sup, strict=True):
            if e.delta.size == 0:
                continue
            scale = math.sqrt(2.0 * e.deff / (n * e.m_bar))
            # |scale·B + ΔF| in one buffer (the same arithmetic, fewer arrays)
            path = np.multiply(b_alt, scale)
            path += e.delta[None, :]
            np.abs(path, out=path)
            alt += np.max(path, axis=1)
            null += scale * sup_null
        k = len(self.effects)
        critical = np.quantile(null / k, 1.0 - alpha)
        return float(np.mean(alt / k > critical))

    def curve(
        self,
        n_values: Sequence[int],
        *,
        alpha: float = 0.05,
        target: float = 0.8,
        n_max: int = 5000,
    ) -> PowerCurve:
        n_arr = np.asarray(sorted(set(int(v) for v in n_values)), dtype=int)
        power = np.array([self.power(n, alpha) for n in n_arr])
        return PowerCurve(
            n=n_arr,
            power=power,
            target=target,
            alpha=alpha,
            n_needed=self.n_needed(alpha=alpha, target=target, n_max=n_max),
            effect=self.effect,
        )

    def n_needed(
        self, *, alpha: float = 0.05, target: float = 0.8, n_max: int = 5000
    ) -> int | None:
        """Smallest n (episodes per cell) whose predicted power reaches
        ``target``: doubling to bracket, then bisection."""
        lo, hi = 1, 2
        while self.power(hi, alpha) < target:
            lo, hi = hi, hi * 2
            if hi > n_max:
                if self.power(n_max, alpha) < target:
                    return None
                hi = n_max
                break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.power(mid, alpha) >= target:
                hi = mid
            else:
                lo = mid
        return hi if self.power(lo, alpha) < target else lo


def indicator_icc(
    time: np.ndarray,
    event: np.ndarray,
    episode: np.ndarray,
    thresholds: Sequence[float],
) -> float:
    """Intra-episode correlation of the indicators 1{T <= t} that the KS
    functional reads (PhAIL App. H step 3), by the one-way ANOVA estimator
    with unequal cluster sizes, averaged over ``thresholds`` and clipped to
    [0, 1]. An operation counts at t when its status at t is known: a success,
    a ghost (never <= t), or a censoring at or after t.

    ICC = (MSB − MSW) / (MSB + (n₀ − 1)·MSW), n₀ = (N − Σn_e²/N)/(k − 1)
    (Snedecor & Cochran, Statistical Methods, 8th ed., §13.7)."""
    values = []
    for t in thresholds:
        known = event | (time >= t)
        y = (event & (time <= t))[known].astype(float)
        g = episode[known]
        if y.size < 3:
            continue
        _, g = np.unique(g, return_inverse=True)
        k = int(g.max()) + 1
        if k < 2 or y.size <= k:
            continue
        n_e = np.bincount(g, minlength=k).astype(float)
        mean_e = np.bincount(g, weights=y, minlength=k) / n_e
        grand = y.mean()
        msb = float(np.sum(n_e * (mean_e - grand) ** 2) / (k - 1))
        msw = float(np.sum((y - mean_e[g]) ** 2) / (y.size - k))
        n0 = (y.size - np.sum(n_e**2) / y.size) / (k - 1)
        denom = msb + (n0 - 1) * msw
        if denom <= 0:
            continue
        values.append(float(np.clip((msb - msw) / denom, 0.0, 1.0)))
    return float(np.mean(values)) if values else 0.0


@dataclass(frozen=True)
class RhoCalibration:
    """ρ fitted to empirical macro-KS detection rates (PhAIL App. H): the
    one ρ, shared by every pair, that minimises the squared gap between the
    bridge model's power and the observed rates at the n tried; the largest
    and the root-mean-square gap at that ρ, and the points it was fitted on
    as (pair index, n, observed, predicted)."""

    rho: float
    max_gap: float
    rms_gap: float
    points: tuple[tuple[int, int, float, float], ...]


def calibrate_rho(
    curves: Sequence[tuple[BridgeModel, Sequence[int], Sequence[float]]],
    *,
    alpha: float = 0.05,
    grid: Sequence[float] | None = None,
) -> RhoCalibration:
    """``curves``: per pair, its bridge model and the empirical detection
    rates of the macro-KS test at episodes per cell ``n`` (from
    ``proctor.analysis.detection``, same α). A grid search over ρ in [0, 1]
    (step 0.01 unless ``grid``): predicted power falls as ρ rises, so the
    least-squares ρ is found without a model of the noise. One parameter
    against every point — PhAIL fitted it to six and checked the rest."""
    if not curves:
        raise ValueError("calibrate_rho: no detection curves")
    candidates = np.asarray(grid if grid is not None else np.linspace(0.0, 1.0, 101), dtype=float)
    best: tuple[float, float, list[tuple[int, int, float, float]]] | None = None
    for rho in candidates:
        pts = []
        for i, (model, ns, rates) in enumerate(curves):
            m = model.with_rho(float(rho))
            for n, r in zip(ns, rates, strict=True):
                pts.append((i, int(n), float(r), m.power(float(n), alpha)))
        sse = float(sum((obs - pred) ** 2 for _, _, obs, pred in pts))
        if best is None or sse < best[1] - 1e-12:
            best = (float(rho), sse, pts)
    assert best is not None
    rho, sse, pts = best
    gaps = [abs(obs - pred) for _, _, obs, pred in pts]
    return RhoCalibration(
        rho=rho,
        max_gap=float(max(gaps)),
        rms_gap=float(math.sqrt(sse / len(pts))),
        points=tuple(pts),
    )
