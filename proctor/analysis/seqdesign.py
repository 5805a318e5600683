"""The sequential design by simulation (docs/methods.md §10): how many
episodes the e-process of :mod:`proctor.analysis.sequential` takes to a
verdict, against the fixed design's n, and the naive contrast of looking
at an ordinary log-rank p-value after every episode.

A simulated campaign runs in interleaved blocks: each block gives every
object one episode of A and one of B, so the k-th matched pair of an object
completes with the block's episode 2k (per object), and the pairs of the
objects follow each other round-robin. Each arm's episodes of an object are
drawn with replacement from a pool of that arm's episodes (observed or
simulated), as in the detection machinery; for a null pair both arms draw
from one pool, which makes their episodes exactly exchangeable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from proctor.analysis.km import RiskSet, risk_set
from proctor.analysis.operations import Operations, concat_operations
from proctor.analysis.sequential import bet_scores, log_wealth


def _draws(z_by_object: Sequence[np.ndarray], streams: int, pairs_per_object: int,
           rng: np.random.Generator) -> np.ndarray:  # fmt: skip
    """Bet scores of every stream's pairs, shape (streams, K · pairs_per_object),
    pair k of object k mod K."""
    k_obj = len(z_by_object)
    g = np.empty((streams, k_obj * pairs_per_object))
    for o, z in enumerate(z_by_object):
        ia = rng.integers(0, z.shape[0], size=(streams, pairs_per_object))
        ib = rng.integers(0, z.shape[1], size=(streams, pairs_per_object))
        g[:, o::k_obj] = bet_scores(z[ia, ib])
    return g


def crossings(
    z_by_object: Sequence[np.ndarray],
    *,
    streams: int,
    pairs_per_object: int,
    bar: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Episodes seen (both arms, all objects) when each stream's e-process
    first reaches ``bar``; +∞ where it does not within the horizon.
    ``z_by_object[o][i, j]``: the pair z of A's pool episode i against B's j."""
    if not z_by_object:
        raise ValueError("crossings: no objects")
    out = np.full(streams, np.inf)
    log_bar = math.log(bar) - 1e-12
    # chunks of streams bound the memory of (streams, pairs) arrays
    for s in range(0, streams, 500):
        n = min(500, streams - s)
        logs = log_wealth(_draws(z_by_object, n, pairs_per_object, rng))
        hit = logs >= log_bar
        first = np.argmax(hit, axis=1)
        out[s : s + n] = np.where(hit.any(axis=1), 2.0 * (first + 1), np.inf)
    return out


@dataclass(frozen=True)
class SequentialDesign:
    """The sequential design against the fixed one, in episodes of the pair
    (both arms, all K objects). ``fixed_episodes`` = 2·K·n_fixed;
    ``max_episodes``: the horizon at which the e-process reaches the fixed
    design's power ``target`` (None: not within the simulated horizon);
    ``expected_episodes`` / ``p90_episodes``: of min(first crossing,
    max_episodes), a stream that has not crossed by then ending there
    without a verdict; ``fraction`` = expected / fixed."""

    objects: int
    n_fixed: int
    fixed_episodes: int
    target: float
    threshold: float
    streams: int
    power_at_fixed_n: float
    max_episodes: int | None
    expected_episodes: float | None
    p90_episodes: float | None
    fraction: float | None


def design(
    z_by_object: Sequence[np.ndarray],
    *,
    n_fixed: int,
    target: float,
    bar: float,
    streams: int,
    rng: np.random.Generator,
    horizon: float = 4.0,
) -> SequentialDesign:
    """Simulate ``streams`` campaigns of up to ``horizon``·n_fixed pairs per
    object and summarise when the e-process crosses ``bar``."""
    if n_fixed < 1:
        raise ValueError(f"n_fixed: must be at least 1, got {n_fixed}")
    k_obj = len(z_by_object)
    pairs = max(math.ceil(horizon * n_fixed), n_fixed)
    cross = crossings(z_by_object, streams=streams, pairs_per_object=pairs, bar=bar, rng=rng)
    fixed = 2 * k_obj * n_fixed
    finite = np.sort(cross[np.isfinite(cross)])
    need = math.ceil(target * streams - 1e-9)
    if finite.size < need:
        cap = None
        expected = p90 = fraction = None
    else:
        cap = int(finite[need - 1])
        used = np.minimum(cross, cap)
        expected = float(np.mean(used))
        p90 = float(np.quantile(used, 0.9))
        fraction = expected / fixed
    return SequentialDesign(
        objects=k_obj,
        n_fixed=n_fixed,
        fixed_episodes=fixed,
        target=target,
        threshold=bar,
        streams=streams,
        power_at_fixed_n=float(np.mean(cross <= fixed)),
        max_episodes=cap,
        expected_episodes=expected,
        p90_episodes=p90,
        fraction=fraction,
    )


def naive_pair_peeking(
    z_by_object: Sequence[np.ndarray],
    *,
    streams: int,
    pairs_per_object: int,
    alpha: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """A second contrast, at the episode level so that clustering plays no
    part: the same matched pairs' z scores summed, Σz / √(Σz²) (a
    self-normalised z test, N(0, 1) under H0 for many pairs), with a
    two-sided p < α looked at after every pair. Returns (ever rejected,
    rejected at the single look at the end), per stream."""
    crit = float(special.ndtri(1 - alpha / 2))
    z = np.empty((streams, len(z_by_object) * pairs_per_object))
    for o, zo in enumerate(z_by_object):
        ia = rng.integers(0, zo.shape[0], size=(streams, pairs_per_object))
        ib = rng.integers(0, zo.shape[1], size=(streams, pairs_per_object))
        z[:, o :: len(z_by_object)] = zo[ia, ib]
    total = np.cumsum(z, axis=1)
    scale = np.sqrt(np.cumsum(z * z, axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        stat = np.where(scale > 0, np.abs(total) / np.where(scale > 0, scale, 1.0), 0.0)
    hit = stat > crit
    return np.asarray(hit.any(axis=1)), hit[:, -1]


def naive_peeking(
    pools: Sequence[tuple[Operations, Operations]],
    *,
    streams: int,
    pairs_per_object: int,
    alpha: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The contrast: the stratified operation-level log-rank (as
    :func:`proctor.analysis.significance.logrank`) recomputed after every
    episode, stopping at the first p < α. Returns, per stream, whether it
    ever rejected within the horizon, and whether the single look at the
    end (the fixed design of that size) rejected: the second separates what
    ignoring the episode clusters costs from what peeking costs.
    ``pools[o]`` = (A's pool, B's pool) of object o (the same pool twice
    for a null pair)."""
    k_obj = len(pools)
    crit = float(special.chdtri(1, alpha))
    state = []
    for ops_a, ops_b in pools:
        pooled = concat_operations([ops_a, ops_b])
        rs = risk_set(pooled)
        state.append((rs, ops_a.n_episodes, ops_b.n_episodes))
    u = np.zeros((k_obj, streams))
    v = np.zeros((k_obj, streams))
    w_a = [np.zeros((rs.n_episodes, streams)) for rs, _, _ in state]
    w_b = [np.zeros((rs.n_episodes, streams)) for rs, _, _ in state]
    rejected = np.zeros(streams, dtype=bool)
    cols = np.arange(streams)
    for _ in range(pairs_per_object):
        for o, (rs, n_a, n_b) in enumerate(state):
            for arm in (0, 1):
                if arm == 0:
                    w_a[o][rng.integers(0, n_a, size=streams), cols] += 1
                else:
                    w_b[o][n_a + rng.integers(0, n_b, size=streams), cols] += 1
                u[o], v[o] = _logrank_parts(rs, w_a[o], w_b[o])
                total_v = v.sum(axis=0)
                with np.errstate(invalid="ignore", divide="ignore"):
                    chi2 = np.where(total_v > 0, u.sum(axis=0) ** 2 / total_v, 0.0)
                rejected |= chi2 > crit
    return rejected, np.asarray(chi2 > crit)


def _logrank_parts(rs: RiskSet, w_a: np.ndarray, w_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """O_A − E_A and V of one stratum for every column of the weights."""

    def risk(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = np.asarray(rs.events @ w)
        x = np.asarray(rs.exits @ w)
        x[1:] += d[:-1]
        return d, (rs.n_ops @ w)[None, :] - np.cumsum(x, axis=0)

    d_a, n_a = risk(w_a)
    d_b, n_b = risk(w_b)
    d = d_a + d_b
    n = n_a + n_b
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, n_a / n, 0.0)
        var = np.where(n > 1, d * share * (1 - share) * (n - d) / (n - 1), 0.0)
    return np.sum(d_a - d * share, axis=0), np.sum(var, axis=0)
