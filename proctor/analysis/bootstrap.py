"""Episode-clustered resampling (docs/methods.md §3) and percentile intervals.

Operations within an episode share the scene, so a replicate resamples whole
episodes with replacement, within the cell; a replicate is the vector of
multiplicities with which each episode was drawn (see :mod:`proctor.analysis.km`).

Reference: Efron & Tibshirani (1993), An Introduction to the Bootstrap,
ch. 13 (percentile intervals) and §8.4 (resampling clusters).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np


def child_rng(seed: int, *labels: str | int) -> np.random.Generator:
    """A generator for one named unit of work (a cell, a pair, …), derived
    from the protocol seed and stable labels, so each unit's replicates do not
    depend on which other units were computed or in what order."""
    key = tuple(zlib.crc32(str(label).encode()) for label in labels)
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=key))


def draw_counts(n_pool: int, n_draw: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """Multiplicities of ``replicates`` draws of ``n_draw`` episodes with
    replacement from a pool of ``n_pool``; shape (n_pool, replicates)."""
    if n_pool == 0:
        return np.zeros((0, replicates))
    idx = rng.integers(0, n_pool, size=(replicates, n_draw))
    flat = idx * replicates + np.arange(replicates)[:, None]
    return np.bincount(flat.ravel(), minlength=n_pool * replicates).reshape(n_pool, replicates)


def cluster_bootstrap(n_episodes: int, replicates: int, rng: np.random.Generator) -> np.ndarray:
    """The episode-clustered bootstrap of one cell: (n_episodes, replicates)."""
    return draw_counts(n_episodes, n_episodes, replicates, rng).astype(float)


@dataclass(frozen=True)
class Interval:
    """A point estimate and its interval. ``None`` marks a value that does
    not exist (e.g. a median the CDF never reaches); ``inf`` is kept as is."""

    estimate: float | None
    lo: float | None
    hi: float | None

    def as_json(self) -> dict[str, object]:
        return {"estimate": _finite(self.estimate), "ci": [_finite(self.lo), _finite(self.hi)]}


def _finite(x: float | None) -> float | None:
    if x is None or not np.isfinite(x):
        return None
    return float(x)


def percentile_interval(estimate: float, replicates: np.ndarray, alpha: float = 0.05) -> Interval:
    """Efron's percentile interval by order statistics: the k-th and m-th
    smallest of B replicates with k = ⌊(B + 1)·α/2⌋ and m = ⌈(B + 1)(1 − α/2)⌉
    (clamped to 1..B). Order statistics, not interpolation, so replicates at
    ±inf (a median never reached) are handled without NaN.
    NaN replicates (undefined values) are treated as +inf."""
    r = np.asarray(replicates, dtype=float)
    r = np.where(np.isnan(r), np.inf, r)
    b = r.shape[0]
    if b == 0:
        return Interval(estimate, None, None)
    r = np.sort(r)
    k = min(max(int(np.floor((b + 1) * alpha / 2)), 1), b)
    m = min(max(int(np.ceil((b + 1) * (1 - alpha / 2))), 1), b)
    return Interval(float(estimate), float(r[k - 1]), float(r[m - 1]))


def pointwise_band(s: np.ndarray, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise percentile band of F = 1 − S across replicates (columns),
    with the same order statistics as :func:`percentile_interval`."""
    b = s.shape[1]
    if s.shape[0] == 0 or b == 0:
        return np.zeros(s.shape[0]), np.zeros(s.shape[0])
    k = min(max(int(np.floor((b + 1) * alpha / 2)), 1), b)
    m = min(max(int(np.ceil((b + 1) * (1 - alpha / 2))), 1), b)
    part = np.partition(s, (k - 1, m - 1), axis=1)
    # F = 1 − S reverses the order: F's lower bound is S's upper
    return 1.0 - part[:, m - 1], 1.0 - part[:, k - 1]
