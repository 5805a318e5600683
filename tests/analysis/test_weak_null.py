"""The board's tests valid when only the CDFs are equal (issue 31; docs/methods.md
§5): the episode-clustered log-rank and the studentized macro-KS, against
hand-derived values, Greenwood's formula, and a hidden null (equal
per-operation laws, one policy "streaky") on which the permutation test of the
unstudentized macro D and the operation-level log-rank reject far too often."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from proctor.analysis.km import at_risk, risk_set, survival
from proctor.analysis.operations import (
    CENSORED_OP,
    LOST_OP,
    SUCCESS_OP,
    Operations,
    concat_operations,
    extract_operations,
)
from proctor.analysis.significance import (
    _episode_matrices,
    _recentred_residuals,
    _wild_logrank_scores,
    cluster_km_variance,
    clustered_logrank,
    logrank,
    macro_ks_test,
    studentized_macro_ks_test,
)
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models


def ops(episodes: list[list[tuple[float, int]]]) -> Operations:
    """Operations from per-episode lists of (time, kind)."""
    rows = [(t, k, e) for e, ep in enumerate(episodes) for t, k in ep]
    kind = np.array([k for _, k, _ in rows], dtype=np.int8)
    return Operations(
        time=np.array([t for t, _, _ in rows], dtype=float),
        event=kind == SUCCESS_OP,
        kind=kind,
        episode=np.array([e for _, _, e in rows], dtype=np.intp),
        n_episodes=len(episodes),
    )


S, C = SUCCESS_OP, CENSORED_OP


def test_clustered_logrank_by_hand() -> None:
    # A: a1 succeeds at 1 and 3. B: b1 succeeds at 2; b2 censored at 4.
    # At t = 1, 2, 3: Y = 4, 3, 2 at risk (A's share ½, ⅓, ½), one success
    # each (A, B, A): O_A = 2, E_A = ½ + ⅓ + ½ = 4/3, U = ⅔.
    # Residuals dN_i − Y_i·d/Y: a1 (½, −⅓, ½), b1 (−¼, ⅔, 0), b2 (−¼, −⅓, −½);
    # U_i = Σ_j (z_i − share_j)·resid: a1 = 5/18, b1 = −7/72, b2 = 35/72
    # (sum ⅔); V = (20² + 7² + 35²)/72² = 1674/5184; χ² = (4/9)/V = 2304/1674.
    a = ops([[(1.0, S), (3.0, S)]])
    b = ops([[(2.0, S)], [(4.0, C)]])
    lr = clustered_logrank([(a, b)], replicates=10, rngs=[np.random.default_rng(0)])
    assert lr.observed == pytest.approx(2.0)
    assert lr.expected == pytest.approx(4 / 3)
    assert lr.variance == pytest.approx(1674 / 5184)
    assert lr.chi2 == pytest.approx(2304 / 1674)
    # the score is the operation-level log-rank's (which equals R's survdiff,
    # test_published.py); only the variance differs
    plain = logrank([(a, b)])
    assert (plain.observed, plain.expected) == pytest.approx((lr.observed, lr.expected))
    assert plain.variance != pytest.approx(lr.variance)


def test_wild_logrank_scores_by_hand() -> None:
    # the example above; residuals m: a1 (½, −⅓, ½), b1 (−¼, ⅔, 0),
    # b2 (−¼, −⅓, −½); operations at risk a1 (2, 1, 1), b1 (1, 1, 0),
    # b2 (1, 1, 1); c = z − share: a1 (½, ⅔, ½), b1 = b2 = (−½, −⅓, −½).
    # Multipliers (1, 1, 1): the pooled sums are 0, nothing to refit, the
    # data's own U_i. Multipliers (1, −1, 1): g·m sums to (½, −4/3, 0), the
    # refit shifts by (⅛, −4/9, 0) an operation at risk, m* = a1 (¼, 1/9, ½),
    # b1 (⅛, −2/9, 0), b2 (−⅜, 1/9, −½), and U*_i = Σ_j c_ij m*_ij =
    # 97/216, 5/432, 173/432 (sum 31/36 = Σ c g m: the refit leaves U alone
    # and changes only how it splits over episodes, hence V*)
    a = ops([[(1.0, S), (3.0, S)]])
    b = ops([[(2.0, S)], [(4.0, C)]])
    rs = risk_set(concat_operations([a, b]))
    d_e, y_e = _episode_matrices(rs)
    d, y = d_e.sum(axis=1), y_e.sum(axis=1)
    m = d_e - y_e * (d / y)[:, None]
    z = np.array([1.0, 0.0, 0.0])
    coef = z[None, :] - ((y_e @ z) / y)[:, None]
    g = np.array([[1.0, 1.0], [1.0, -1.0], [1.0, 1.0]])
    u = _wild_logrank_scores(m, y_e, coef, g)
    assert u[:, 0] == pytest.approx([5 / 18, -7 / 72, 35 / 72])
    assert u[:, 1] == pytest.approx([97 / 216, 5 / 432, 173 / 432])
    # the KS's tensor form: the same m*, and H0 imposed in every replicate
    # (the refitted residuals sum to 0 over the pool at each time)
    m_star = _recentred_residuals(m, y_e, g)
    assert m_star[:, :, 0] == pytest.approx(m)
    assert m_star[:, :, 1] == pytest.approx(
        np.array([[1 / 4, 1 / 8, -3 / 8], [1 / 9, -2 / 9, 1 / 9], [1 / 2, 0.0, -1 / 2]])
    )
    assert m_star.sum(axis=1) == pytest.approx(np.zeros((3, 2)))


def test_the_boards_p_needs_both_references() -> None:
    rng = np.random.default_rng(3)
    alpha, beta = phail_like_models()[1:3]
    eps = [
        e
        for e in cohort([alpha, beta], PHAIL_OBJECTS, episodes_per_cell=6, rng=rng)
        if e.outcome != "system"
    ]

    def arm(o: str, policy: str) -> Operations:
        return extract_operations([e for e in eps if e.object == o and e.policy == policy])

    strata = {o: (arm(o, "alpha"), arm(o, "beta")) for o in PHAIL_OBJECTS}
    ks = studentized_macro_ks_test(
        strata, tau=60.0, replicates=200, rngs={o: np.random.default_rng(5) for o in strata}
    )
    lr = clustered_logrank(
        list(strata.values()), replicates=200, rngs=[np.random.default_rng(5)] * len(strata)
    )
    for res in (ks, lr):
        assert res.p == max(res.p_permutation, res.p_wild)
        assert 1 / 201 <= res.p_wild <= 1.0
    # the wild replicates are not the relabellings: the two p differ
    assert (ks.p_permutation, lr.p_permutation) != (ks.p_wild, lr.p_wild)


def test_cluster_km_variance_by_hand() -> None:
    # e1 succeeds at 1 and 2, e2 is censored at 3. At t = 1: Y = 3, d = 1,
    # S = ⅔; at t = 2: Y = 2, d = 1, S = ⅓. Influence sums Σ (dN_i − Y_i h)/Y:
    # e1 1/9 then 1/9 + 1/4 = 13/36; e2 the negatives. With n/(n − 1) = 2:
    # Var(t=1) = (4/9)·(2/81)·2 = 16/729, Var(t=2) = (1/9)·(338/1296)·2.
    grid, s, v = cluster_km_variance(ops([[(1.0, S), (2.0, S)], [(3.0, C)]]))
    assert grid.tolist() == [1.0, 2.0]
    assert s == pytest.approx([2 / 3, 1 / 3])
    assert v == pytest.approx([16 / 729, 676 / 11664])


def test_cluster_km_variance_is_greenwoods_for_independent_operations() -> None:
    # one operation an episode: the cluster sandwich and Greenwood's
    # S² Σ d/(n(n − d)) estimate the same variance (they agree to O(1/n))
    rng = np.random.default_rng(4)
    n = 3000
    t = rng.exponential(10.0, n).round(2)
    c = rng.exponential(25.0, n).round(2)
    o = ops([[(min(ti, ci), S if ti <= ci else C)] for ti, ci in zip(t, c, strict=True)])
    _, s, v = cluster_km_variance(o, tau=30.0)
    rs = risk_set(o, t_max=30.0)
    d = rs.events @ np.ones(n)
    y = at_risk(rs)
    s_km = survival(rs)[:, 0]
    greenwood = s_km**2 * np.cumsum(d / (y * np.maximum(y - d, 1)))
    mid = (s > 0.2) & (s < 0.9)
    assert mid.sum() > 100
    assert v[mid] / greenwood[mid] == pytest.approx(np.ones(mid.sum()), rel=0.03)


def test_the_unstudentized_statistic_is_the_old_tests() -> None:
    """The JSON keeps the old macro D for comparison: same statistic, same
    p on the same relabellings."""
    rng = np.random.default_rng(2)
    alpha, beta = phail_like_models()[1:3]
    eps = cohort([alpha, beta], PHAIL_OBJECTS, episodes_per_cell=8, rng=rng)
    eps = [e for e in eps if e.outcome != "system"]
    strata = {
        o: tuple(
            extract_operations([e for e in eps if e.object == o and e.policy == p])
            for p in ("alpha", "beta")
        )
        for o in PHAIL_OBJECTS
    }
    new = studentized_macro_ks_test(
        strata, tau=60.0, replicates=300, rngs={o: np.random.default_rng(9) for o in strata}
    )
    old = macro_ks_test(
        strata, tau=60.0, replicates=300, rngs={o: np.random.default_rng(9) for o in strata}
    )
    assert new.raw_statistic == pytest.approx(old.statistic)
    assert new.raw_p == old.p
    assert 1 / 301 <= new.p <= 1.0 and new.statistic > 0


def test_arms_without_spread_still_get_a_finite_z() -> None:
    # no spread within either arm: each arm's own (Wald) variance is 0; the
    # null-restricted one (residuals against the pooled hazard) is not, so
    # the separation counts and Z stays finite for the JSON
    a = ops([[(1.0, S), (2.0, S), (np.inf, LOST_OP)]] * 5)
    b = ops([[(5.0, S), (7.0, S), (np.inf, LOST_OP)]] * 5)
    res = studentized_macro_ks_test(
        {"o": (a, b)}, tau=60.0, replicates=200, rngs={"o": np.random.default_rng(1)}
    )
    assert np.isfinite(res.statistic) and res.statistic > 3
    assert res.p < 0.05


def hidden_null_pvalues(trials: int, inner: int, seed: int) -> np.ndarray:
    """p of (old macro-KS, studentized macro-KS by permutation alone, new
    macro-KS, old log-rank, clustered log-rank by permutation alone, new
    log-rank) on the review's hidden null: identical per-operation laws on every object,
    PhAIL-like frailty (Gamma(4), σ 0.6), the 6-episode arm streaky (one
    slowness an episode), the 30-episode arm steady (a new one after every
    success); no budget censoring, no safety stops."""
    base = dataclasses.replace(phail_like_models()[1], p_safety=0.0, p_system=0.0)
    streaky = dataclasses.replace(base, name="streaky")
    steady = dataclasses.replace(base, name="steady", frailty_per_operation=True)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        strata = {}
        for o, tags in PHAIL_OBJECTS.items():
            arms = [
                extract_operations(
                    cohort(
                        [m],
                        {o: tags},
                        episodes_per_cell=n,
                        rng=rng,
                        configurations=False,
                        budget_per_item=1e6,
                    )
                )
                for m, n in ((streaky, 6), (steady, 30))
            ]
            strata[o] = (arms[0], arms[1])
        ks = studentized_macro_ks_test(
            strata, tau=60.0, replicates=inner, rngs=dict.fromkeys(strata, rng)
        )
        lr = clustered_logrank(list(strata.values()), replicates=inner, rngs=[rng] * 4)
        old_lr = logrank(list(strata.values()))
        out.append((ks.raw_p, ks.p_permutation, ks.p, old_lr.p, lr.p_permutation, lr.p))
    return np.array(out)


def test_the_new_tests_hold_their_size_where_the_old_ones_do_not() -> None:
    """200 trials, B = 100 (about 20 s on one core). The bound is the issue's
    acceptance — within binomial noise of α: α + 2 SE of 200 trials
    (√(0.05 · 0.95 / 200) = 0.0154), so 0.08. At this seed the board's
    tests (max of the permutation and wild bootstrap p) reject 0.050
    (macro-KS) and 0.055 (log-rank); the old ones 0.27 and 0.24, and the
    clustered log-rank with its permutation p alone 0.070. The benchmark's
    400-trial rows are in docs/methods.md §5."""
    p = hidden_null_pvalues(trials=200, inner=100, seed=11)
    rate = (p < 0.05).mean(axis=0)
    old_ks, _, new_ks, old_lr, _, new_lr = rate
    assert new_ks <= 0.08, rate
    assert new_lr <= 0.08, rate
    # the null really is one the old tests fail: far above the bound
    assert old_ks >= 0.2, rate
    assert old_lr >= 0.15, rate


def test_policies_that_rarely_succeed_are_still_compared() -> None:
    # A never succeeds, B places one of five items in each episode: the
    # pooled F stays near 0.1 on [0, τ], so a band fixed at F ∈ [0.1, 0.9]
    # would hold no time and the test could never reject; the band follows
    # the pooled F's rise instead
    rng = np.random.default_rng(6)
    a = ops([[(np.inf, LOST_OP)] * 5 for _ in range(20)])
    b = ops([[(float(rng.uniform(1, 50)), S)] + [(np.inf, LOST_OP)] * 4 for _ in range(20)])
    res = studentized_macro_ks_test(
        {"o": (a, b)}, tau=60.0, replicates=400, rngs={"o": np.random.default_rng(2)}
    )
    assert res.p < 0.01, res
