"""Drift sentinels (docs/methods.md §12): is a policy that recurs in every
block — the reference always, and any the campaign marks — getting faster
or slower over the campaign, or running differently on different stations?

Per sentinel episode the statistic is its throughput, items placed per
minute of episode (a ``system`` episode scores nothing and is left out).
Two pre-registered tests, each at α / (2 · sentinels) (Bonferroni over both
tests of every sentinel):

* **trend**: the seasonal Kendall test with the sentinel's objects as the
  seasons: S = Σ_objects Σ_{i<j} sign(x_j − x_i) over each object's episodes
  in start order, the variance the sum of the objects' tie-corrected ones,
  z = (S − sign(S)) / √Var (continuity-corrected), two-sided normal p;
* **stations**: van Elteren's stratified rank test over the stations that
  ran the sentinel (each with at least ``MIN_PER_STATION`` episodes), objects
  as strata, χ²(df) p; ties take mid-ranks.

Both are rank tests: throughput is bounded and skewed (a failed episode
places few items), and ranks make the null distribution free of its shape.
Both compare episodes of one object only: objects differ in throughput, so a
schedule that gives the sentinel easy objects early and hard ones late (or
one station more of the hard one) would look like drift to a pooled test —
and a real drift would hide in the spread between objects. Their null is
exchangeability of the sentinel's episodes of each object over time or over
stations, which the block design supports (the sentinel runs once per block,
in a random position); the tests' size under that null (also when the object
mix changes over the campaign), and their power on a planted trend, are
checked by simulation in tests/analysis/test_drift.py. Neither certifies
"no drift": a test that does not flag has not shown the sentinel stationary.

References: Hirsch, Slack & Smith (1982), Water Resour. Res. 18:107;
van Elteren (1960), Bull. Int. Stat. Inst. 37:351; Landis, Heyman & Koch
(1978), Int. Stat. Rev. 46:237.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from scipy import special  # not scipy.stats at import: see binary.py

from proctor.analysis.episodes import SYSTEM, Episode

MIN_EPISODES = 8  # fewer: no trend test (the normal approximation needs some n)
MIN_PER_STATION = 3


def throughput(e: Episode) -> float:
    """Items placed per minute of the episode (0 for an instant episode)."""
    return 60.0 * e.placed / e.duration_s if e.duration_s > 0 else 0.0


def midranks(v: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``v``, ties given the mean of the ranks they span."""
    _, inverse, counts = np.unique(v, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return (ends - (counts - 1) / 2.0)[inverse]


@dataclass(frozen=True)
class Kendall:
    """The seasonal Kendall trend test (Hirsch, Slack & Smith 1982) with the
    sentinel's objects as the seasons: S = Σ_h S_h, S_h the Mann–Kendall
    statistic of stratum h in start order; Var = Σ_h Var_h, each tie-corrected;
    z = (S − sign S)/√Var, two-sided normal p. One stratum: Mann–Kendall."""

    s: float
    var: float
    z: float
    p: float
    by_stratum: dict[str, float]  # S_h, strata in sorted order


def _kendall_s_var(v: np.ndarray) -> tuple[float, float]:
    n = v.size
    s = float(np.triu(np.sign(v[None, :] - v[:, None]), 1).sum())
    _, t = np.unique(v, return_counts=True)
    var = (n * (n - 1) * (2 * n + 5) - float(np.sum(t * (t - 1) * (2 * t + 5)))) / 18
    return s, var


def seasonal_kendall(x: Sequence[float], strata: Sequence[str]) -> Kendall:
    """``x`` in time order, ``strata[i]`` the stratum (object) of ``x[i]``.

    Pairs are compared only within a stratum, so a schedule that changes
    which objects the sentinel runs over the campaign neither makes nor hides
    a trend. The strata's S_h are independent under the null (exchangeable
    episodes within each object, distinct episodes in different objects), so
    Var(S) is the sum with no covariance term: Hirsch & Slack (1984)'s
    covariance is for serial dependence between the seasons of one year,
    which episodes of a block design do not share."""
    v = np.asarray(x, dtype=float)
    labels = np.asarray(strata, dtype=object)
    if v.shape != labels.shape:
        raise ValueError("seasonal_kendall: x and strata must have the same length")
    s, var, by = 0.0, 0.0, {}
    for h in sorted(set(labels.tolist())):
        sh, vh = _kendall_s_var(v[labels == h])
        s, var, by[h] = s + sh, var + vh, sh
    if var <= 0:
        return Kendall(s, 0.0, 0.0, 1.0, by)
    # the continuity correction: S moves in steps of 2 when nothing ties
    z = (s - math.copysign(1.0, s)) / math.sqrt(var) if s != 0 else 0.0
    return Kendall(s, var, z, float(2 * special.ndtr(-abs(z))), by)


def mann_kendall(x: Sequence[float]) -> Kendall:
    """The Mann–Kendall test on ``x`` in order (one stratum)."""
    return seasonal_kendall(x, [""] * len(x))


@dataclass(frozen=True)
class StratifiedRanks:
    """Van Elteren's stratified rank test, for k ≥ 2 groups (Landis, Heyman &
    Koch 1978's row-mean-score statistic with van Elteren's scores).

    Within stratum h (n_h values) a value scores a = midrank / (n_h + 1).
    T_hi is group i's score sum, E_hi = n_hi ā_h its mean under the
    within-stratum permutation null, and its covariance is
    σ²_h n_h/(n_h − 1) (diag n_hi − n_hi n_hj / n_h), σ²_h the scores'
    population variance. Q = G' V⁺ G with G = Σ_h (T_h − E_h), V = Σ_h V_h;
    χ²(df), df = rank V. Two groups: Q = z² of van Elteren (1960)'s
    W = Σ_h R_h/(n_h + 1). One stratum: the tie-corrected Kruskal–Wallis H."""

    statistic: float
    df: int
    p: float


def van_elteren(
    x: Sequence[float], groups: Sequence[str], strata: Sequence[str]
) -> StratifiedRanks | None:
    """None when no stratum holds two groups with different values (then
    the data say nothing about the groups)."""
    v = np.asarray(x, dtype=float)
    g = np.asarray(groups, dtype=object)
    h = np.asarray(strata, dtype=object)
    if not v.shape == g.shape == h.shape:
        raise ValueError("van_elteren: x, groups and strata must have the same length")
    names = sorted(set(g.tolist()))
    k = len(names)
    dev = np.zeros(k)
    cov = np.zeros((k, k))
    for stratum in sorted(set(h.tolist())):
        rows = h == stratum
        n = int(rows.sum())
        if n < 2:
            continue
        a = midranks(v[rows]) / (n + 1)
        sigma2 = float(np.mean((a - a.mean()) ** 2))
        if sigma2 == 0:
            continue  # every value ties: this stratum carries no ranks
        gi = np.array([names.index(name) for name in g[rows]])
        counts = np.bincount(gi, minlength=k).astype(float)
        dev += np.bincount(gi, weights=a, minlength=k) - counts * a.mean()
        cov += sigma2 * n / (n - 1) * (np.diag(counts) - np.outer(counts, counts) / n)
    # V is singular (the deviations sum to 0): a pseudo-inverse on its range
    w, u = np.linalg.eigh(cov)
    top = float(w.max()) if w.size else 0.0
    if top <= 0:
        return None
    keep = w > 1e-10 * top
    df = int(keep.sum())
    proj = u[:, keep].T @ dev
    q = float(np.sum(proj**2 / w[keep]))
    return StratifiedRanks(q, df, float(special.chdtrc(df, q)))


TREND_TEST = "seasonal Kendall, objects as seasons"
STATION_TEST = "van Elteren, stratified by object"


@dataclass(frozen=True)
class TrendTest:
    s: float
    var: float
    z: float
    p: float
    flagged: bool
    direction: str | None  # "slower" / "faster" over time, when flagged
    episodes: tuple[str, ...]  # the sentinel's episodes, in start order
    s_by_object: dict[str, float]


@dataclass(frozen=True)
class StationTest:
    statistic: float  # van Elteren's Q, χ²(df) under the null
    df: int
    p: float
    flagged: bool
    median_by_station: dict[str, float]
    episodes_by_station: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class SentinelDrift:
    policy: str
    level: float  # the per-test level, α / (2 · sentinels)
    trend: TrendTest | None  # None: fewer than MIN_EPISODES scored episodes
    stations: StationTest | None  # None: no object ran on two stations with enough episodes

    @property
    def flagged(self) -> bool:
        trend = self.trend is not None and self.trend.flagged
        return trend or (self.stations is not None and self.stations.flagged)

    def to_json(self) -> dict[str, object]:
        t, st = self.trend, self.stations
        return {
            "policy": self.policy,
            "level": self.level,
            "flagged": self.flagged,
            # a sentinel that is not flagged has not been shown stationary:
            # the tests are weak against a slow drift (docs/methods.md §12)
            "certifies_no_drift": False,
            "trend": None
            if t is None
            else {
                "test": TREND_TEST,
                # the name the pooled Mann–Kendall gave S (old snapshots and
                # the pages read it): the seasonal S is the sum of the objects'
                "mann_kendall_s": t.s,
                "variance": t.var,
                "z": t.z,
                "p": t.p,
                "flagged": t.flagged,
                "direction": t.direction,
                "episodes": list(t.episodes),
                "s_by_object": t.s_by_object,
            },
            "stations": None
            if st is None
            else {
                "test": STATION_TEST,
                "statistic": st.statistic,
                "df": st.df,
                "p": st.p,
                "flagged": st.flagged,
                "median_throughput": st.median_by_station,
                "episodes": {k: list(v) for k, v in st.episodes_by_station.items()},
            },
        }


def trend_test(ordered: Sequence[Episode], level: float) -> TrendTest | None:
    if len(ordered) < MIN_EPISODES:
        return None
    k = seasonal_kendall([throughput(e) for e in ordered], [e.object for e in ordered])
    if k.var <= 0:
        return None  # every object once (or every value tied): no pair to compare
    flagged = k.p < level
    return TrendTest(
        s=k.s,
        var=k.var,
        z=k.z,
        p=k.p,
        flagged=flagged,
        direction=("faster" if k.s > 0 else "slower") if flagged else None,
        episodes=tuple(e.episode_id for e in ordered),
        s_by_object=k.by_stratum,
    )


def station_test(episodes: Sequence[Episode], level: float) -> StationTest | None:
    groups: dict[str, list[Episode]] = {}
    for e in episodes:
        if e.station:
            groups.setdefault(e.station, []).append(e)
    groups = {k: v for k, v in sorted(groups.items()) if len(v) >= MIN_PER_STATION}
    if len(groups) < 2:
        return None
    mine = [e for v in groups.values() for e in v]
    test = van_elteren(
        [throughput(e) for e in mine], [str(e.station) for e in mine], [e.object for e in mine]
    )
    if test is None:
        return None
    return StationTest(
        statistic=test.statistic,
        df=test.df,
        p=test.p,
        flagged=test.p < level,
        median_by_station={
            k: float(np.median([throughput(e) for e in v])) for k, v in groups.items()
        },
        episodes_by_station={k: tuple(e.episode_id for e in v) for k, v in groups.items()},
    )


def sentinel_drift(
    episodes: Sequence[Episode],
    sentinels: Sequence[str],
    starts: dict[str, datetime],
    *,
    alpha: float,
) -> list[SentinelDrift]:
    """Both tests for every sentinel (by policy name) with episodes;
    ``starts`` orders them (:func:`proctor.analysis.sequential.start_times`)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    level = alpha / (2 * max(len(sentinels), 1))
    out: list[SentinelDrift] = []
    for name in sentinels:
        mine = [e for e in episodes if e.policy == name and e.outcome != SYSTEM]
        if not mine:
            continue
        mine.sort(key=lambda e: starts[e.episode_id])
        out.append(
            SentinelDrift(
                policy=name,
                level=level,
                trend=trend_test(mine, level),
                stations=station_test(mine, level),
            )
        )
    return out
