"""Object-stratified drift sentinels (proctor/analysis/drift.py,
docs/methods.md §12): the seasonal Kendall trend test and van Elteren's
stratified station test against hand-derived values and scipy, and by
simulation — a schedule that changes the sentinel's object mix over the
campaign (or gives one station the hard objects) fools the pooled tests and
not these; a planted drift is still found."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from scipy import stats

from proctor.analysis.drift import (
    mann_kendall,
    seasonal_kendall,
    sentinel_drift,
    throughput,
    van_elteren,
)
from proctor.analysis.episodes import Episode

ALPHA = 0.05
LEVEL = ALPHA / 2  # one sentinel, two tests
N = 40  # sentinel episodes: one per block
T0 = datetime(2026, 1, 1, tzinfo=UTC)
# item-time factors of four objects (the review's PhAIL-like spread)
SPEED = {"spoons": 1.0, "cups": 1.6, "bowls": 0.8, "forks": 1.3}


# -- the statistics against hand-derived values and scipy ---------------------


def test_seasonal_kendall_by_hand() -> None:
    # object A in start order 3, 1, 2: pairs (3,1) −, (3,2) −, (1,2) + → S_A = −1,
    #   Var_A = 3·2·11/18 = 11/3;
    # object B 1, 2, 2, 4: five + pairs and one tie → S_B = 5,
    #   Var_B = (4·3·13 − 2·1·9)/18 = 23/3 (one tie of two);
    # S = 4, Var = 34/3, z = (4 − 1)/√(34/3)
    x = [3, 1, 1, 2, 2, 2, 4]
    objects = ["A", "B", "A", "B", "A", "B", "B"]
    k = seasonal_kendall(x, objects)
    assert k.by_stratum == {"A": -1.0, "B": 5.0}
    assert k.s == 4.0 and k.var == pytest.approx(34 / 3)
    assert k.z == pytest.approx(3 / math.sqrt(34 / 3))
    assert k.p == pytest.approx(2 * stats.norm.sf(3 / math.sqrt(34 / 3)))
    # pooled, the same numbers read as one series: a different S
    assert mann_kendall(x).s != k.s


def test_seasonal_kendall_components_match_scipy_kendalltau() -> None:
    rng = np.random.default_rng(11)
    x = rng.integers(0, 6, size=45).astype(float)  # many ties
    objects = rng.choice(["a", "b", "c"], size=45)
    k = seasonal_kendall(x, list(objects))
    var = 0.0
    for h in ("a", "b", "c"):
        y = x[objects == h]
        n = y.size
        res = stats.kendalltau(np.arange(n), y)  # tau-b; time has no ties
        n0 = n * (n - 1) / 2
        n2 = sum(t * (t - 1) / 2 for t in np.unique(y, return_counts=True)[1])
        s_h = res.statistic * math.sqrt(n0 * (n0 - n2))
        assert k.by_stratum[h] == pytest.approx(s_h)
        # scipy's p is 2Φ(−|S|/√Var) with the same tie-corrected variance
        t = np.unique(y, return_counts=True)[1]
        var_h = (n * (n - 1) * (2 * n + 5) - np.sum(t * (t - 1) * (2 * t + 5))) / 18
        assert res.pvalue == pytest.approx(2 * stats.norm.sf(abs(s_h) / math.sqrt(var_h)))
        var += var_h
    assert k.var == pytest.approx(var)
    assert k.s == pytest.approx(sum(k.by_stratum.values()))


def test_van_elteren_by_hand() -> None:
    # stratum 1: A = {1, 3}, B = {2} → A's rank sum 4 of n = 3;
    # stratum 2: A = {5}, B = {4, 6, 7} → A's rank 2 of n = 4.
    # W = 4/4 + 2/5 = 7/5, E W = 2/2 + 1/2 = 3/2,
    # Var W = 2·1/(12·4) + 1·3/(12·5) = 11/120 → Q = (1/10)²/(11/120) = 6/55
    r = van_elteren([1, 3, 2, 5, 4, 6, 7], list("AABABBB"), list("1112222"))
    assert r is not None
    assert r.df == 1 and r.statistic == pytest.approx(6 / 55)
    assert r.p == pytest.approx(stats.chi2.sf(6 / 55, 1))


def test_van_elteren_in_one_stratum_is_kruskal_wallis() -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 8, size=30).astype(float)  # ties
    g = rng.choice(["a", "b", "c"], size=30)
    r = van_elteren(x, list(g), ["one"] * 30)
    ref = stats.kruskal(*[x[g == k] for k in ("a", "b", "c")])
    assert r is not None and r.df == 2
    assert r.statistic == pytest.approx(ref.statistic) and r.p == pytest.approx(ref.pvalue)


def test_van_elteren_variance_is_the_exact_permutation_variance() -> None:
    """Over every within-stratum relabelling, E Q = trace(V⁺ Cov G) equals
    df exactly when V is the permutation covariance of G."""
    x = np.array([1.0, 2.0, 2.0, 5.0, 7.0, 3.0, 1.0, 4.0, 4.0])
    strata = ["s"] * 5 + ["t"] * 4
    labels = (["a", "a", "b", "c", "c"], ["a", "b", "b", "c"])
    qs = []
    for p1 in itertools.permutations(labels[0]):
        for p2 in itertools.permutations(labels[1]):
            r = van_elteren(x, list(p1) + list(p2), strata)
            assert r is not None and r.df == 2
            qs.append(r.statistic)
    assert np.mean(qs) == pytest.approx(2.0)


def test_degenerate_inputs() -> None:
    assert van_elteren([1, 2, 3], ["a", "b", "c"], ["x", "y", "z"]) is None  # no stratum pairs
    assert van_elteren([2, 2, 2, 2], list("abab"), list("xxxx")) is None  # all tied
    k = seasonal_kendall([1, 2, 3], ["x", "y", "z"])  # one episode an object
    assert (k.var, k.p) == (0.0, 1.0)
    with pytest.raises(ValueError, match="same length"):
        seasonal_kendall([1, 2], ["x"])


# -- simulation: a changing object mix, a planted drift ------------------------


def _campaign(
    rng: np.random.Generator, objects: list[str], slowdown: np.ndarray, stations: list[str]
) -> list[Episode]:
    """The sentinel's episodes in start order: 4 items, exponential item
    times with mean 8 s × the object's factor × the planted slowdown, 60 s
    budget."""
    out = []
    for i, (obj, k, st) in enumerate(zip(objects, slowdown, stations, strict=True)):
        times = np.cumsum(rng.exponential(8.0 * SPEED[obj] * k, size=4))
        placed = tuple(float(t) for t in times if t < 60)
        out.append(
            Episode(
                episode_id=f"e{i}",
                policy="ref",
                object=obj,
                items=4,
                duration_s=placed[-1] if len(placed) == 4 else 60.0,
                placements_s=placed,
                lost=0,
                dropped=0,
                outcome="success" if len(placed) == 4 else "ran_out_of_time",
                budget_s=60.0,
                station=st,
            )
        )
    return out


STARTS = {f"e{i}": T0 + timedelta(minutes=5 * i) for i in range(N)}


def _rotation(rng: np.random.Generator, pool: list[str], n: int) -> list[str]:
    """Blocks cycle the objects in a random order within each round."""
    out: list[str] = []
    while len(out) < n:
        out += list(rng.permutation(pool))
    return out[:n]


def _changing_mix(rng: np.random.Generator) -> list[str]:
    # the campaign runs the two fast objects first and switches to the two
    # slow ones halfway: the sentinel's throughput falls with no drift at all
    return _rotation(rng, ["bowls", "spoons"], N // 2) + _rotation(rng, ["cups", "forks"], N // 2)


def _simulate(reps: int, seed: int, mix, slowdown: np.ndarray, station_of) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    hits = {"seasonal": 0, "pooled_mk": 0, "van_elteren": 0, "pooled_kw": 0}
    for _ in range(reps):
        objects = mix(rng)
        stations = [station_of(rng, o) for o in objects]
        eps = _campaign(rng, objects, slowdown, stations)
        (d,) = sentinel_drift(eps, ["ref"], STARTS, alpha=ALPHA)
        hits["seasonal"] += bool(d.trend and d.trend.flagged)
        hits["van_elteren"] += bool(d.stations and d.stations.flagged)
        x = np.array([throughput(e) for e in eps])
        hits["pooled_mk"] += mann_kendall(x).p < LEVEL
        st = np.array(stations)
        hits["pooled_kw"] += (
            stats.kruskal(*[x[st == s] for s in sorted(set(stations))]).pvalue < LEVEL
        )
    return {k: v / reps for k, v in hits.items()}


def _random_station(rng: np.random.Generator, obj: str) -> str:
    return str(rng.choice(["cell-a", "cell-b"]))


def _hard_objects_on_b(rng: np.random.Generator, obj: str) -> str:
    # the slow objects run mostly on cell-b (its tote fits them): the
    # stations differ in what they run, not in how they run it
    p_b = 0.85 if SPEED[obj] > 1.1 else 0.15
    return "cell-b" if rng.random() < p_b else "cell-a"


def _lower(rate: float, reps: int) -> float:
    """The lower end of the 99 % interval of a simulated rejection rate."""
    return float(stats.binomtest(round(rate * reps), reps).proportion_ci(0.99).low)


def test_a_changing_object_mix_fools_the_pooled_tests_not_the_stratified_ones() -> None:
    reps = 1000
    r = _simulate(reps, 21, _changing_mix, np.ones(N), _hard_objects_on_b)
    print(f"\nno drift, object mix changing / confounded with station: {r}")
    # the pooled tests see a drift and a station effect that are the schedule's
    for key in ("pooled_mk", "pooled_kw"):
        assert r[key] > 4 * LEVEL and _lower(r[key], reps) > LEVEL, (key, r)
    # the stratified ones hold their level (the lower end of a 99 % interval)
    assert _lower(r["seasonal"], reps) <= LEVEL
    assert _lower(r["van_elteren"], reps) <= LEVEL


def test_the_stratified_tests_hold_their_size_with_rotating_objects() -> None:
    reps = 2000
    r = _simulate(reps, 22, lambda rng: _rotation(rng, list(SPEED), N), np.ones(N), _random_station)
    print(f"\nno drift, objects rotating: {r}")
    for key in ("seasonal", "van_elteren"):
        assert _lower(r[key], reps) <= LEVEL, (key, r)
        assert r[key] > 0.005, (key, r)  # not dead either


def test_a_planted_drift_is_found_with_heterogeneous_objects() -> None:
    reps = 400
    rotate = lambda rng: _rotation(rng, list(SPEED), N)  # noqa: E731
    r = _simulate(reps, 23, rotate, np.linspace(1.0, 3.0, N), _random_station)
    print(f"\nitem time ×3 over the campaign: {r}")
    assert r["seasonal"] >= 0.7
    # the stratified test is not weaker than the pooled one here (the spread
    # between objects is noise to the pooled test)
    assert r["seasonal"] >= r["pooled_mk"] - 0.05
    slow_b = lambda rng, o: _random_station(rng, o)  # noqa: E731
    rng = np.random.default_rng(24)
    flags = 0
    for _ in range(reps):
        objects = rotate(rng)
        stations = [slow_b(rng, o) for o in objects]
        k = np.where(np.array(stations) == "cell-b", 2.0, 1.0)
        (d,) = sentinel_drift(_campaign(rng, objects, k, stations), ["ref"], STARTS, alpha=ALPHA)
        flags += bool(d.stations and d.stations.flagged)
    print(f"one station ×2 slower: van Elteren flags {flags / reps:.3f}")
    assert flags / reps >= 0.8


def test_the_json_says_a_sentinel_certifies_nothing() -> None:
    rng = np.random.default_rng(5)
    objects = _rotation(rng, list(SPEED), N)
    eps = _campaign(rng, objects, np.ones(N), ["cell-a", "cell-b"] * (N // 2))
    (d,) = sentinel_drift(eps, ["ref"], STARTS, alpha=ALPHA)
    js = d.to_json()
    assert js["certifies_no_drift"] is False
    assert js["trend"]["test"].startswith("seasonal Kendall")
    assert set(js["trend"]["s_by_object"]) == set(SPEED)
    assert js["stations"]["test"].startswith("van Elteren") and js["stations"]["df"] == 1
