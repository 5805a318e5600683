"""Calibration by simulation, seeded and bounded (seconds each): bootstrap
coverage of RMST with known truth, macro-KS Type-I error under the three
null setups of PhAIL App. J, and detection power rising with n."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.bootstrap import cluster_bootstrap, percentile_interval
from analysis.detection import ObjectPool, detection_rates, make_pool, null_calibration
from analysis.episodes import Episode
from analysis.km import risk_set, rmst, survival
from analysis.operations import extract_operations
from analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models

# Clustered operations with a closed-form truth: each episode has a shared
# frailty z ~ Gamma(k, θ); each of its M operations is a ghost with
# probability g, else T | z ~ Exponential(rate λz). Marginally
#   S(t) = g + (1 − g)·E[exp(−λzt)] = g + (1 − g)(1 + λθt)^(−k)
# (the Gamma Laplace transform), so for k ≠ 1
#   RMST(τ) = gτ + (1 − g)·[(1 + λθτ)^(1−k) − 1] / (λθ(1 − k)).
K, THETA, LAMBDA, GHOST, M, TAU = 2.0, 0.5, 0.1, 0.1, 5, 30.0
TRUE_RMST = GHOST * TAU + (1 - GHOST) * ((1 + LAMBDA * THETA * TAU) ** (1 - K) - 1) / (
    LAMBDA * THETA * (1 - K)
)


def test_true_rmst_arithmetic() -> None:
    # λθ = 0.05: ∫₀³⁰ (1 + 0.05t)^(−2) dt = (1 − 1/2.5)/0.05 = 12;
    # RMST = 0.1·30 + 0.9·12 = 13.8
    true_rmst = TRUE_RMST
    assert true_rmst == pytest.approx(13.8)


def frailty_episodes(n: int, rng: np.random.Generator) -> list[Episode]:
    eps = []
    for i in range(n):
        z = rng.gamma(K, THETA)
        ghosts = rng.random(M) < GHOST
        times = rng.exponential(1.0 / (LAMBDA * z), M)[~ghosts]
        eps.append(
            Episode(
                episode_id=str(i),
                policy="p",
                object="o",
                items=M,
                duration_s=float(np.sum(times)) if times.size else 1.0,
                placements_s=tuple(np.cumsum(times).tolist()),
                lost=0,
                dropped=int(ghosts.sum()),
                outcome="success",
            )
        )
    return eps


def test_clustered_bootstrap_covers_the_true_rmst() -> None:
    rng = np.random.default_rng(20240611)
    clustered = naive = 0
    n_sim, b = 300, 400
    for _ in range(n_sim):
        ops = extract_operations(frailty_episodes(30, rng))
        rs = risk_set(ops, t_max=TAU)
        w = np.hstack([np.ones((ops.n_episodes, 1)), cluster_bootstrap(ops.n_episodes, b, rng)])
        reps = rmst(rs.grid, survival(rs, w), TAU)
        iv = percentile_interval(reps[0], reps[1:])
        clustered += iv.lo <= TRUE_RMST <= iv.hi
        # the wrong way: resample operations as if they were independent
        ops_iid = type(ops)(ops.time, ops.event, ops.kind, np.arange(len(ops)), len(ops))
        rs_iid = risk_set(ops_iid, t_max=TAU)
        w_iid = np.hstack([np.ones((len(ops), 1)), cluster_bootstrap(len(ops), b, rng)])
        reps_iid = rmst(rs_iid.grid, survival(rs_iid, w_iid), TAU)
        iv_iid = percentile_interval(reps_iid[0], reps_iid[1:])
        naive += iv_iid.lo <= TRUE_RMST <= iv_iid.hi
    coverage = clustered / n_sim
    # nominal 0.95; 300 replications have a binomial SD of 0.0126
    assert 0.91 <= coverage <= 0.985
    # operation-level resampling ignores the shared frailty and under-covers
    assert naive / n_sim < coverage - 0.08


@pytest.fixture(scope="module")
def phail_cohort() -> list[Episode]:
    eps = cohort(
        phail_like_models(), PHAIL_OBJECTS, episodes_per_cell=36, rng=np.random.default_rng(11)
    )
    return [e for e in eps if e.outcome != "system"]


def _split_pools(eps: list[Episode], policy: str) -> list[ObjectPool]:
    pools = []
    for obj in PHAIL_OBJECTS:
        mine = [e for e in eps if e.policy == policy and e.object == obj]
        ops = extract_operations(mine)
        pools.append(ObjectPool(obj, ops, ops.n_episodes, np.array([""] * len(mine))))
    return pools


def _pair_pools(eps: list[Episode], a: str, b: str) -> list[ObjectPool]:
    pools = []
    for obj in PHAIL_OBJECTS:
        ea = [e for e in eps if e.policy == a and e.object == obj]
        eb = [e for e in eps if e.policy == b and e.object == obj]
        strata = [e.configuration or "" for e in (*ea, *eb)]
        pools.append(make_pool(obj, extract_operations(ea), extract_operations(eb), strata))
    return pools


@pytest.mark.parametrize(
    ("setup", "arms"),
    [
        ("split", ("alpha",)),  # (i) same-model split
        ("split", ("human",)),  # (ii) human-reference split
        ("permute", ("alpha", "beta")),  # (iii) permutation within object × configuration
    ],
)
def test_macro_ks_type_one_error_under_app_j_nulls(
    phail_cohort: list[Episode], setup: str, arms: tuple[str, ...]
) -> None:
    pools = (
        _split_pools(phail_cohort, arms[0])
        if setup == "split"
        else _pair_pools(phail_cohort, *arms)
    )
    cal = null_calibration(
        pools, setup=setup, outer=400, inner=200, tau=60.0, rng=np.random.default_rng(5)
    )
    # nominal α = 0.01 / 0.05 / 0.10; 400 trials: SD 0.005 / 0.011 / 0.015.
    # PhAIL App. J saw 0.013 / 0.060 / 0.121 and a mean p of 0.438 across its
    # setups (slightly liberal with ~20 episodes an arm); with these seeds the
    # splits give 0.0125 / 0.0675 / 0.15 (mean p 0.45) and the permutation
    # 0.0075 / 0.035 / 0.0925 (mean p 0.495). The bounds are ±3 SD around
    # nominal, widened upward by the paper's observed excess.
    r01, r05, r10 = cal.rejection
    assert r01 <= 0.035
    assert 0.02 <= r05 <= 0.09
    assert 0.055 <= r10 <= 0.17
    assert 0.4 <= cal.mean_p <= 0.6


def test_detection_power_rises_with_n(phail_cohort: list[Episode]) -> None:
    pools = _pair_pools(phail_cohort, "alpha", "gamma")
    curve = detection_rates(
        pools,
        n_values=[4, 12, 36],
        outer=120,
        inner=100,
        tau=60.0,
        thresholds=(30.0,),
        rng=np.random.default_rng(9),
    )
    for key in ("macro_ks", "rmst", "binary@30"):
        rate = curve.rate[key]
        assert rate[0] < rate[1] <= rate[2] + 0.03, key
        assert np.all(curve.lo[key] <= rate) and np.all(rate <= curve.hi[key])
    assert curve.rate["macro_ks"][2] >= 0.8
    assert curve.rate["macro_ks"][0] <= 0.6
