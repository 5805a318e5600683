"""Barnard's exact test and the sequential binary (STEP-family) test:
against hand-derived values, scipy, exact enumeration and simulation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from proctor.analysis.binary_tests import (
    StepDesign,
    _crossing_probability,
    barnard_exact,
    pooled_z,
    step_design,
    step_operating,
    step_run,
)


def test_barnard_by_hand() -> None:
    # n = 1 each, 1 vs 0: the two discordant tables are the extreme ones,
    # P = 2π(1 − π), largest at π = ½: p = ½
    r = barnard_exact(1, 1, 0, 1)
    assert r.statistic == pytest.approx(np.sqrt(2))
    assert r.p == pytest.approx(0.5, abs=1e-9)
    # n = 2 each, 2 vs 0 (z = 2): only (2, 0) and (0, 2) reach |z| = 2 (the
    # tables (2, 1), (1, 0) have |z| = 1.155), P = 2π²(1 − π)², at ½: 1/8
    r = barnard_exact(2, 2, 0, 2)
    assert r.statistic == pytest.approx(2.0)
    assert r.p == pytest.approx(0.125, abs=1e-9)
    assert barnard_exact(4, 9, 4, 9).p == 1.0


def test_barnard_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    for _ in range(12):
        na, nb = (int(x) for x in rng.integers(3, 25, size=2))
        if na == nb:
            nb += 1  # equal n has mirror tables tied in |z|: see the next test
        xa, xb = int(rng.integers(0, na + 1)), int(rng.integers(0, nb + 1))
        ours = barnard_exact(xa, na, xb, nb)
        theirs = stats.barnard_exact([[xa, xb], [na - xa, nb - xb]], n=400)
        assert ours.statistic == pytest.approx(theirs.statistic)
        # ours refines the supremum that scipy takes on its grid: at least as large, close
        assert ours.p >= theirs.pvalue - 1e-9
        assert ours.p == pytest.approx(theirs.pvalue, abs=2e-3)


def test_barnard_counts_tables_tied_with_the_observed_one() -> None:
    # 7/15 vs 12/15 and its mirror 8/15 vs 3/15 have the same |z| exactly;
    # in floats one is 4e-16 below, which scipy drops (p 0.06815): ours
    # keeps it, and its p is the direct enumeration at the maximising rate
    r = barnard_exact(7, 15, 12, 15)
    z = np.abs(pooled_z(np.arange(16)[:, None], 15, np.arange(16)[None, :], 15))
    pi = r.nuisance
    pmf = np.array([math.comb(15, k) * pi**k * (1 - pi) ** (15 - k) for k in range(16)])
    direct = float(pmf @ (z >= abs(r.statistic) - 1e-9) @ pmf)
    assert r.p == pytest.approx(direct, rel=1e-9)
    assert r.p == pytest.approx(0.06822, abs=1e-4)


def test_barnard_size_by_simulation() -> None:
    """Under p_A = p_B the rejection rate at α = 0.05 is at most α (plus MC error)."""
    rng = np.random.default_rng(2)
    for pi in (0.3, 0.7):
        xa = rng.binomial(20, pi, size=400)
        xb = rng.binomial(20, pi, size=400)
        p = np.array([barnard_exact(int(a), 20, int(b), 20).p for a, b in zip(xa, xb, strict=True)])
        assert np.mean(p < 0.05) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400)


def _enumerated_stop(n_max: int, boundary: float, pa: float, pb: float) -> float:
    """P(stop) by brute force over every outcome sequence (tiny n_max)."""
    total = 0.0
    for seq in itertools.product(((0, 0), (0, 1), (1, 0), (1, 1)), repeat=n_max):
        prob = 1.0
        for x, y in seq:
            prob *= (pa if x else 1 - pa) * (pb if y else 1 - pb)
        r = step_run(
            StepDesign(n_max, 1, 0.05, boundary, 0.0, 0.5),
            [s[0] for s in seq],
            [s[1] for s in seq],
        )
        total += prob * (r.stopped_at is not None)
    return total


def test_the_dynamic_programme_equals_enumeration() -> None:
    for boundary, pa, pb in ((1.9, 0.5, 0.5), (1.5, 0.2, 0.6), (2.2, 0.7, 0.4)):
        dp = _crossing_probability(5, boundary, np.array([pa]), np.array([pb]), 1)[0][0]
        assert dp == pytest.approx(_enumerated_stop(5, boundary, pa, pb), abs=1e-12)


def test_step_design_holds_alpha_exactly_and_is_tight() -> None:
    d = step_design(30, 0.05)
    assert d.size <= 0.05
    # on a fine grid of the null the exact rejection probability never exceeds α
    pis = np.linspace(0.001, 0.999, 999)
    stop = _crossing_probability(30, d.boundary, pis, pis, 1)[0]
    assert stop.max() <= 0.05 + 1e-12
    # and the boundary is the smallest admissible: one step lower breaks α
    z = np.unique(np.concatenate([np.abs(pooled_z(np.arange(n + 1)[:, None], n,
                  np.arange(n + 1)[None, :], n)).ravel() for n in range(1, 31)]))  # fmt: skip
    lower = z[z < d.boundary - 1e-9].max()
    assert _crossing_probability(30, lower, pis, pis, 1)[0].max() > 0.05
    # a fixed-n z test at 1.96 peeked at every step would not hold it
    assert _crossing_probability(30, 1.96, pis, pis, 1)[0].max() > 0.15


def test_step_by_simulation_and_power() -> None:
    d = step_design(20, 0.05)
    rng = np.random.default_rng(5)
    trials = 2000
    a = rng.random((trials, 20)) < 0.5
    b = rng.random((trials, 20)) < 0.5
    rejected = np.mean([step_run(d, a[i], b[i]).stopped_at is not None for i in range(trials)])
    exact = step_operating(d, 0.5, 0.5).reject
    assert rejected == pytest.approx(exact, abs=3 * np.sqrt(exact * (1 - exact) / trials))
    alt = step_operating(d, 0.2, 0.8)
    assert alt.reject > 0.8 and alt.reject_a_better < 1e-3
    assert alt.expected_steps < 20
