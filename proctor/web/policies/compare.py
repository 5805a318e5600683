"""P-P and Q-Q of one policy against any other, from the two stored
Kaplan–Meier curves.

A snapshot stores, per object, every policy's KM CDF (``km``: ``t`` from 0
over the event grid, ``cdf`` the right-continuous step values) and the
P-P/Q-Q against the human reference only. When the policy page compares
with another policy (``?vs=``), the plots are computed here from the two
curves, with the definitions ``proctor.analysis.leaderboard`` uses for the
reference:

* P-P: ``(F_c(t), F(t))`` at ``t = 0`` and at every time of the union of
  both event grids, ``F`` read as a step function (the value at the last
  grid time ≤ t);
* Q-Q: for each probability ``p`` of the grid, the first event time at
  which a curve reaches ``p`` (``F ≥ p``), ``None`` where it never does
  (the curve plateaus below ``p``).

The stored curves are rounded to 6 digits, so these match the analysis's
own reference plots to that precision (tests/web/test_policy.py checks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

# tolerance on "the curve reaches p" (as in proctor.analysis.leaderboard)
_REACH_EPS = 1e-12


def _curve(km: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray([np.nan if v is None else v for v in km["t"]], dtype=float)
    f = np.asarray([np.nan if v is None else v for v in km["cdf"]], dtype=float)
    if t.size == 0 or t.size != f.size or np.isnan(t).any():
        raise ValueError("a KM curve needs matching, finite t and cdf arrays")
    return t, f


def cdf_at(km: dict[str, Any], times: np.ndarray) -> np.ndarray:
    """The step function F at ``times`` (≥ 0): the value at the last curve
    time ≤ each time."""
    t, f = _curve(km)
    j = np.searchsorted(t, times, side="right") - 1
    return f[np.clip(j, 0, None)]


def _list(a: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else round(float(v), 6) for v in a]


def pp(comparator_km: dict[str, Any], km: dict[str, Any]) -> dict[str, Any]:
    """P-P of ``km`` (y, ``model``) against ``comparator_km`` (x, ``ref``)."""
    tc, _ = _curve(comparator_km)
    tm, _ = _curve(km)
    grid = np.union1d(tc[1:], tm[1:])
    return {
        "ref": [0.0, *_list(cdf_at(comparator_km, grid))],
        "model": [0.0, *_list(cdf_at(km, grid))],
    }


def _quantiles(km: dict[str, Any], probabilities: np.ndarray) -> list[float | None]:
    t, f = _curve(km)
    t, f = t[1:], f[1:]  # the event grid (t = 0 is the curve's start, F = 0)
    out: list[float | None] = []
    for p in probabilities:
        hit = np.nonzero(f >= p - _REACH_EPS)[0]
        out.append(round(float(t[hit[0]]), 6) if hit.size else None)
    return out


def qq(
    comparator_km: dict[str, Any],
    km: dict[str, Any],
    probabilities: Sequence[float],
    last_reachable: float | None,
) -> dict[str, Any]:
    """Q-Q of ``km`` (``model``) against ``comparator_km`` (``ref``) at
    ``probabilities``; ``last_reachable`` is ``km``'s plateau F(∞)."""
    p = np.asarray(probabilities, dtype=float)
    return {
        "p": [round(float(x), 6) for x in p],
        "ref": _quantiles(comparator_km, p),
        "model": _quantiles(km, p),
        "last_reachable": last_reachable,
    }
