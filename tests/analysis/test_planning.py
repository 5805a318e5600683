"""Planning formulas (docs/methods.md §6), §7 posteriors, and the compact letter
display, against published or hand-derived values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from proctor.analysis.binary import beta_posterior, dirichlet_mean_posterior, welch_t
from proctor.analysis.cld import compact_letters
from proctor.analysis.planning import (
    BridgeModel,
    ObjectEffect,
    _bridges,
    connor_n,
    indicator_icc,
    wilson_halfwidth,
    wilson_interval,
    wilson_n,
)


def test_connor_numbers_of_methods_md() -> None:
    # docs/methods.md §6 / PhAIL App. H: Δ = 0.05, α = 0.05, power 0.8 needs 626
    # pairs at ψ = 0.2 and 1568 at ψ = 0.5
    assert connor_n(0.05, 0.2) == 626
    assert connor_n(0.05, 0.5) == 1568
    # by hand at ψ = 0.2: [1.95996·√0.2 + 0.84162·√0.1975]² / 0.0025
    #   = (0.876521 + 0.374024)² / 0.0025 = 1.563863 / 0.0025 = 625.5 → 626
    z = (1.959964 * math.sqrt(0.2) + 0.841621 * math.sqrt(0.2 - 0.0025)) ** 2 / 0.0025
    assert 625 < z < 626
    with pytest.raises(ValueError):
        connor_n(0.3, 0.2)  # Δ cannot exceed the discordance rate


def test_wilson_sample_size() -> None:
    plan = wilson_n(0.05, 0.5)
    # docs/methods.md §6: ±5 pp at p = 0.5 needs ≈ 385 (z²·p(1−p)/h² = 1.95996²·0.25/0.0025
    # = 384.15 → 385)
    assert plan.approximate == 385
    # the exact Wilson half-width first drops to 0.05 at n = 381:
    # n = 380: 1.95996·√(0.25/380 + 3.8415/(4·380²)) / (1 + 3.8415/380) = 0.05002
    # n = 381: 1.95996·√(0.25/381 + 3.8415/(4·381²)) / (1 + 3.8415/381) = 0.04996
    assert plan.exact == 381
    assert wilson_halfwidth(0.5, 380) > 0.05 > wilson_halfwidth(0.5, 381)


@pytest.mark.parametrize(
    ("s", "n", "lo", "hi"),
    # Newcombe (1998), Stat. Med. 17:857, Table II, method 3 (Wilson score)
    [(81, 263, 0.2553, 0.3662), (15, 148, 0.0624, 0.1605), (0, 20, 0.0, 0.1611),
     (1, 29, 0.0061, 0.1718)],
)  # fmt: skip
def test_wilson_interval_published(s: int, n: int, lo: float, hi: float) -> None:
    got = wilson_interval(s, n)
    assert got[0] == pytest.approx(lo, abs=5e-5)
    assert got[1] == pytest.approx(hi, abs=5e-5)


def test_beta_posterior_by_hand() -> None:
    # all n succeed: Beta(n + 1, 1) has CDF x^(n+1), so its 2.5 % quantile is
    # 0.025^(1/(n+1)) and its mean (n + 1)/(n + 2)
    post = beta_posterior(10, 10)
    assert post.mean == pytest.approx(11 / 12)
    assert post.lo == pytest.approx(0.025 ** (1 / 11))
    assert post.hi == pytest.approx(0.975 ** (1 / 11))
    # no data: the uniform prior itself
    flat = beta_posterior(0, 0)
    assert (flat.mean, flat.lo, flat.hi) == pytest.approx((0.5, 0.025, 0.975))


def test_dirichlet_mean_posterior() -> None:
    rng = np.random.default_rng(0)
    # levels 0, ½, 1 observed 1, 2, 5 times: posterior Dirichlet(2, 3, 6), whose
    # mean score is (2·0 + 3·½ + 6·1)/11 = 7.5/11
    post = dirichlet_mean_posterior([0, 0.5, 0.5, 1, 1, 1, 1, 1], [0, 0.5, 1], rng=rng)
    assert post.mean == pytest.approx(7.5 / 11)
    assert post.lo < post.mean < post.hi
    with pytest.raises(ValueError, match="rubric levels"):
        dirichlet_mean_posterior([0.3], [0, 1], rng=rng)


def test_welch_by_hand() -> None:
    a, b = [1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0]
    # ā = 2.5, s²_a = 5/3; b̄ = 4, s²_b = 4: se² = 5/12 + 4/3 = 1.75
    # t = −1.5/√1.75; df = 1.75² / ((5/12)²/3 + (4/3)²/2) = 3.0625/0.946759 = 3.2347
    w = welch_t(a, b)
    assert w.statistic == pytest.approx(-1.5 / math.sqrt(1.75))
    assert w.df == pytest.approx(3.0625 / ((5 / 12) ** 2 / 3 + (4 / 3) ** 2 / 2))
    assert w.p == pytest.approx(stats.ttest_ind(a, b, equal_var=False).pvalue)


def test_brownian_bridge_moments_and_kolmogorov_quantile() -> None:
    rng = np.random.default_rng(1)
    u = np.linspace(0.0005, 0.9995, 2000)
    b = _bridges(u, 4000, rng)
    # Var B(u) = u(1 − u)
    for k in (200, 1000, 1800):
        assert b[:, k].var() == pytest.approx(u[k] * (1 - u[k]), rel=0.08)
    # sup|B| follows the Kolmogorov distribution: its 95 % point is 1.3581
    # (Smirnov 1948, Ann. Math. Stat. 19:279, table); the grid and 4000 draws
    # cost a little
    assert np.quantile(np.abs(b).max(axis=1), 0.95) == pytest.approx(1.358, abs=0.04)


def _effect(delta_size: float, m_bar: float = 6.0, rho: float = 0.1) -> ObjectEffect:
    f = np.linspace(0.01, 0.9, 120)
    delta = delta_size * np.sin(np.pi * f / 0.9)
    return ObjectEffect("o", f, delta, m_bar, rho)


def test_bridge_power_rises_with_n_and_sits_at_alpha_without_effect() -> None:
    model = BridgeModel([_effect(0.15)] * 4, sims=2000, rng=np.random.default_rng(2))
    powers = [model.power(n) for n in (5, 10, 20, 40, 80)]
    assert all(b >= a - 0.02 for a, b in itertools.pairwise(powers))
    assert powers[0] < 0.5 < 0.95 < powers[-1]
    n80 = model.n_needed(target=0.8)
    assert n80 is not None
    assert model.power(n80) >= 0.8 > model.power(n80 - 1)
    null = BridgeModel([_effect(0.0)] * 4, sims=4000, rng=np.random.default_rng(3))
    assert null.power(30) == pytest.approx(0.05, abs=0.015)
    assert null.n_needed(n_max=400) is None


def test_design_effect_costs_episodes() -> None:
    rng = np.random.default_rng(4)
    independent = BridgeModel([_effect(0.12, rho=0.0)] * 4, sims=2000, rng=rng)
    clustered = BridgeModel([_effect(0.12, rho=0.5)] * 4, sims=2000, rng=rng)
    # DEFF = 1 + (6 − 1)·0.5 = 3.5: the clustered pair needs ≈ 3.5× the episodes
    ratio = clustered.n_needed() / independent.n_needed()
    assert ratio == pytest.approx(3.5, rel=0.2)


def test_indicator_icc() -> None:
    # perfectly clustered indicators: every episode all fast or all slow
    time = np.array([1.0, 1.0, 1.0, 9.0, 9.0, 9.0, 1.0, 1.0, 9.0, 9.0])
    episode = np.array([0, 0, 0, 1, 1, 1, 2, 2, 3, 3])
    event = np.ones(10, dtype=bool)
    assert indicator_icc(time, event, episode, [5.0]) == pytest.approx(1.0)
    # independent operations: ICC near 0
    rng = np.random.default_rng(5)
    t = rng.exponential(5, 3000)
    ep = np.repeat(np.arange(500), 6)
    assert indicator_icc(t, np.ones(3000, dtype=bool), ep, [3.0, 5.0]) < 0.05


def test_compact_letters_by_hand() -> None:
    # A–C, A–D and B–D differ: A and B share a, B and C share b, C and D share c
    letters = compact_letters(["A", "B", "C", "D"], [("A", "C"), ("A", "D"), ("B", "D")])
    assert letters == {"A": "a", "B": "ab", "C": "bc", "D": "c"}
    assert compact_letters(["A", "B"], []) == {"A": "a", "B": "a"}
    assert compact_letters(["A", "B"], [("B", "A")]) == {"A": "a", "B": "b"}


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 7).flatmap(
        lambda k: st.tuples(
            st.just(k),
            st.sets(
                st.tuples(st.integers(0, k - 1), st.integers(0, k - 1)).filter(
                    lambda p: p[0] < p[1]
                )
            ),
        )
    )
)
def test_compact_letters_share_a_letter_iff_not_significant(case) -> None:  # fmt: skip
    k, pairs = case
    names = [f"p{i}" for i in range(k)]
    sig = {(names[i], names[j]) for i, j in pairs}
    letters = compact_letters(names, sorted(sig))
    assert all(letters[n] for n in names)
    for a, b in itertools.combinations(names, 2):
        share = bool(set(letters[a]) & set(letters[b]))
        assert share == ((a, b) not in sig)
