"""The vectorised Kaplan–Meier: invariants, equivalence of replicate weights
with duplicated data, lifelines as a cross-check, and the projections."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lifelines import KaplanMeierFitter
from lifelines.statistics import logrank_test

from proctor.analysis.bootstrap import cluster_bootstrap, percentile_interval, pointwise_band
from proctor.analysis.km import (
    auc_against,
    kaplan_meier,
    quantile_time,
    risk_set,
    rmst,
    survival,
    survival_at,
)
from proctor.analysis.operations import (
    CENSORED_OP,
    DROPPED_OP,
    SUCCESS_OP,
    Operations,
    concat_operations,
    subset_operations,
)
from proctor.analysis.significance import logrank


def make_ops(times, kinds, episodes) -> Operations:
    kinds = np.asarray(kinds, dtype=np.int8)
    t = np.asarray(times, dtype=float)
    t = np.where(kinds >= 2, np.inf, t)
    ep = np.asarray(episodes, dtype=np.intp)
    return Operations(
        time=t,
        event=kinds == SUCCESS_OP,
        kind=kinds,
        episode=ep,
        n_episodes=int(ep.max()) + 1 if ep.size else 0,
    )


def random_ops(rng: np.random.Generator, n_ep: int, ties: bool = True) -> Operations:
    per = rng.integers(1, 6, n_ep)
    ep = np.repeat(np.arange(n_ep), per)
    n = ep.size
    t = rng.exponential(10.0, n)
    if ties:
        t = np.round(t)  # many ties, including events tied with censorings
    t = np.maximum(t, 0.5)
    kinds = rng.choice([SUCCESS_OP, CENSORED_OP, DROPPED_OP], size=n, p=[0.6, 0.3, 0.1])
    return make_ops(t, kinds, ep)


def finite(ops: Operations) -> np.ndarray:
    # lifelines needs finite durations; a ghost is censored beyond every time
    return np.where(np.isfinite(ops.time), ops.time, 1e9)


@pytest.mark.parametrize("seed", range(5))
def test_matches_lifelines_on_random_data(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ops = random_ops(rng, 40)
    km = kaplan_meier(ops)
    kmf = KaplanMeierFitter().fit(finite(ops), ops.event)
    np.testing.assert_allclose(km.survival, kmf.survival_function_at_times(km.t).values, atol=1e-12)
    other = random_ops(rng, 30)
    ours = logrank([(ops, other)])
    theirs = logrank_test(finite(ops), finite(other), ops.event, other.event)
    assert ours.chi2 == pytest.approx(theirs.test_statistic, rel=1e-10)
    assert ours.p == pytest.approx(theirs.p_value, rel=1e-8)


def test_replicate_weights_equal_duplicated_episodes() -> None:
    """A bootstrap replicate (integer multiplicities) gives the KM of the data
    with each episode repeated that many times — checked against lifelines
    fitted on the explicitly duplicated operations."""
    rng = np.random.default_rng(7)
    ops = random_ops(rng, 25)
    rs = risk_set(ops)
    w = cluster_bootstrap(ops.n_episodes, 6, rng)
    s = survival(rs, w)
    for r in range(w.shape[1]):
        reps = np.repeat(np.arange(ops.n_episodes), w[:, r].astype(int))
        dup = concat_operations([subset_operations(ops, np.array([e])) for e in reps])
        kmf = KaplanMeierFitter().fit(finite(dup), dup.event)
        expected = kmf.survival_function_at_times(rs.grid).values
        np.testing.assert_allclose(s[:, r], expected, atol=1e-12)


@st.composite
def operation_sets(draw: st.DrawFn) -> Operations:
    n = draw(st.integers(1, 40))
    times = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    kinds = draw(st.lists(st.sampled_from([0, 0, 1, 3]), min_size=n, max_size=n))
    n_ep = draw(st.integers(1, n))
    episodes = sorted(draw(st.lists(st.integers(0, n_ep - 1), min_size=n, max_size=n)))
    # renumber so every episode index below the max is used
    _, episodes = np.unique(episodes, return_inverse=True)
    return make_ops(times, kinds, episodes)


@settings(max_examples=200, deadline=None)
@given(operation_sets(), st.integers(0, 2**32 - 1))
def test_cdf_invariants(ops: Operations, seed: int) -> None:
    rs = risk_set(ops)
    w = np.hstack(
        [
            np.ones((ops.n_episodes, 1)),
            cluster_bootstrap(ops.n_episodes, 5, np.random.default_rng(seed)),
        ]
    )
    s = survival(rs, w)
    f = 1.0 - s
    # F is a CDF: monotone, within [0, 1]
    assert np.all(np.diff(f, axis=0) >= -1e-12)
    assert np.all(f >= -1e-12)
    # ghosts never leave the risk set: F <= 1 − (ghost share). For each
    # replicate, the ghosts' share of the weighted operations
    ghosts = np.bincount(ops.episode[ops.ghost], minlength=ops.n_episodes) @ w
    total = rs.n_ops @ w
    assert np.all(f <= 1.0 - ghosts / total + 1e-12)
    # RMST is the integral of S. Times are integers, so S is constant on each
    # [k, k + 1): the integral to τ = 15.5 is Σ_{k<15} S(k + ½) + ½·S(15.25)
    tau = 15.5
    mids = np.array([k + 0.5 for k in range(15)])
    s0 = np.concatenate([[1.0], s[:, 0]])
    at = s0[np.searchsorted(rs.grid, mids, side="right")]
    last = s0[np.searchsorted(rs.grid, 15.25, side="right")]
    assert rmst(rs.grid, s[:, :1], tau)[0] == pytest.approx(at.sum() + 0.5 * last, abs=1e-12)


def test_projections_by_hand() -> None:
    # one episode, successes after 2 and 4 s, one censored at 6, one ghost
    ops = make_ops([2, 2, 6, 0], [SUCCESS_OP, SUCCESS_OP, CENSORED_OP, DROPPED_OP], [0, 0, 0, 0])
    # as inter-success times this is: T = 2, 2 (tied), censored 6, ghost
    rs = risk_set(ops)
    s = survival(rs)
    assert rs.grid.tolist() == [2.0]
    # S(2) = 1 − 2/4 = 0.5: F reaches 0.5 at t = 2 (the median) and stays
    assert s[:, 0].tolist() == [0.5]
    assert quantile_time(rs.grid, s, 0.5)[0] == 2.0
    assert np.isinf(quantile_time(rs.grid, s, 0.51)[0])
    # RMST(10) = 2·1 + 8·0.5 = 6 (the ghost's T counts as τ)
    assert rmst(rs.grid, s, 10.0)[0] == pytest.approx(6.0)
    assert rmst(rs.grid, s, 1.0)[0] == pytest.approx(1.0)
    assert survival_at(rs.grid, s, 1.999)[0] == 1.0


def test_auc_by_enumeration() -> None:
    # reference: T ∈ {1, 3} equally likely; model: T ∈ {2, 3, ∞} (a ghost).
    ref = make_ops([1, 3], [SUCCESS_OP, SUCCESS_OP], [0, 1])
    mod = make_ops([2, 3, 0], [SUCCESS_OP, SUCCESS_OP, DROPPED_OP], [0, 1, 2])
    rs_r, rs_m = risk_set(ref), risk_set(mod)
    auc = auc_against(rs_r.grid, survival(rs_r), rs_m.grid, survival(rs_m))[0]
    # P(T_m < T_ref) + ½P(T_m = T_ref) over the 2 × 3 equally likely pairs:
    # (1,2): 0  (1,3): 0  (1,∞): 0  (3,2): 1  (3,3): ½  (3,∞): 0  → 1.5/6
    assert auc == pytest.approx(1.5 / 6)
    # and symmetric: P(T_ref < T_m) + ½ ties = 1 − 0.25
    assert auc_against(rs_m.grid, survival(rs_m), rs_r.grid, survival(rs_r))[0] == pytest.approx(
        0.75
    )


def test_percentile_interval_order_statistics() -> None:
    reps = np.arange(1, 2001, dtype=float)  # B = 2000
    iv = percentile_interval(0.0, reps)
    # k = ⌊2001·0.025⌋ = 50, m = ⌈2001·0.975⌉ = 1951
    assert (iv.lo, iv.hi) == (50.0, 1951.0)
    # undefined replicates sort as +inf, so an upper bound may not exist
    iv = percentile_interval(1.0, np.array([1.0] * 1900 + [np.nan] * 100))
    assert iv.lo == 1.0 and np.isinf(iv.hi)
    assert iv.as_json() == {"estimate": 1.0, "ci": [1.0, None]}


def test_pointwise_band_brackets_the_replicates() -> None:
    rng = np.random.default_rng(0)
    s = np.sort(rng.random((30, 400)), axis=0)[::-1]
    lo, hi = pointwise_band(s)
    f = 1 - s
    assert np.all(lo <= hi)
    inside = np.mean((f >= lo[:, None]) & (f <= hi[:, None]), axis=1)
    assert np.all(inside >= 0.94)


def test_supplied_grid_must_hold_every_success() -> None:
    ops = make_ops([1, 2], [SUCCESS_OP, SUCCESS_OP], [0, 0])
    with pytest.raises(ValueError, match="missing from the supplied grid"):
        risk_set(ops, grid=np.array([1.0, 3.0]))
    rs = risk_set(ops, grid=np.array([0.5, 1.0, 1.5, 2.0, 2.5]))
    assert survival(rs)[:, 0].tolist() == [1.0, 0.5, 0.5, 0.0, 0.0]


def test_logrank_with_zero_variance_is_chi2_0_p_1() -> None:
    """The convention docs/methods.md §5 states (R's survdiff raises here):
    A's only success comes after every B operation left the risk set, so no
    success time has both arms at risk; and two arms with no success at all."""
    a = make_ops([5.0, 6.0], [SUCCESS_OP, CENSORED_OP], [0, 1])
    b = make_ops([1.0, 2.0], [CENSORED_OP, CENSORED_OP], [0, 1])
    lr = logrank([(a, b)])
    assert (lr.variance, lr.chi2, lr.p) == (0.0, 0.0, 1.0)
    assert lr.observed == 1.0 and lr.expected == 1.0
    none = logrank([(b, b)])
    assert (none.chi2, none.p) == (0.0, 1.0)


def test_quantile_of_a_curve_with_no_success_is_never_reached() -> None:
    # an empty grid (no success in the cell): argmax over it used to raise
    s = np.ones((0, 3))
    assert np.array_equal(quantile_time(np.array([]), s, 0.5), np.full(3, np.inf))
    assert np.array_equal(rmst(np.array([]), s, 7.5), np.full(3, 7.5))
