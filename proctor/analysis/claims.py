"""What a reviewer of a claim asks for next (docs/methods.md §5 "Per-object
tests, success tests and rankings side by side"):

* a pairwise test on per-episode binary success (Barnard's exact,
  :mod:`proctor.analysis.binary_tests`), Bonferroni over the pairs as the
  macro tests are;
* the pair tests per object, beside the macro ones: on each object alone
  the studentized KS (the board's test on one stratum, computed on the
  macro test's own relabellings), Barnard on success
  and the ΔRMST interval, each object its own family of pairs (Bonferroni
  over the pairs, as the LBM paper's per-task letters are), and compact
  letters per object;
* the ranking under each aggregation rule (HRT, global RMST, macro AUC vs
  the reference, success at each declared t) side by side, with how often
  each policy is first under the episode-clustered bootstrap — the same
  replicates the intervals come from (every cell resampled on its own
  stream, so replicate r of all cells is one joint bootstrap draw).

Arrays in, frozen dataclasses out; the leaderboard assembles the inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from proctor.analysis.binary_tests import barnard_exact
from proctor.analysis.bootstrap import Interval, percentile_interval
from proctor.analysis.cld import compact_letters
from proctor.analysis.episodes import SUCCESS, Episode
from proctor.analysis.significance import bonferroni


@dataclass(frozen=True)
class SuccessTest:
    """Barnard's exact test of equal success rates between a pair's
    episodes (success = the episode's outcome is ``success``)."""

    successes_a: int
    episodes_a: int
    successes_b: int
    episodes_b: int
    statistic: float  # pooled-variance z of rate_a − rate_b
    p: float
    p_bonferroni: float


def success_test(
    a: Sequence[Episode], b: Sequence[Episode], comparisons: int
) -> SuccessTest | None:
    """None when a side has no episode."""
    if not a or not b:
        return None
    xa = sum(e.outcome == SUCCESS for e in a)
    xb = sum(e.outcome == SUCCESS for e in b)
    r = barnard_exact(xa, len(a), xb, len(b))
    return SuccessTest(xa, len(a), xb, len(b), r.statistic, r.p, bonferroni(r.p, comparisons))


@dataclass(frozen=True)
class ObjectPairTest:
    """One pair on one object: the studentized KS on that object alone,
    Barnard on success there, and ΔRMST (a − b) with its interval; p
    Bonferroni-adjusted over the pairs."""

    object: str
    ks_statistic: float
    ks_p: float
    ks_p_bonferroni: float
    success: SuccessTest | None
    rmst_diff: Interval
    significant: bool


def object_pair_test(
    obj: str,
    ks: tuple[float, float],
    episodes: tuple[Sequence[Episode], Sequence[Episode]],
    rmst_diff: np.ndarray,
    *,
    comparisons: int,
    alpha: float,
) -> ObjectPairTest:
    """``ks``: the object's own studentized KS (statistic, p), which the macro
    test computes on the same relabellings
    (``StudentizedKS.object_statistic`` / ``object_p``); ``rmst_diff``:
    estimate then bootstrap replicates of RMST_a − RMST_b."""
    p_bonf = bonferroni(ks[1], comparisons)
    return ObjectPairTest(
        object=obj,
        ks_statistic=ks[0],
        ks_p=ks[1],
        ks_p_bonferroni=p_bonf,
        success=success_test(episodes[0], episodes[1], comparisons),
        rmst_diff=percentile_interval(float(rmst_diff[0]), rmst_diff[1:], alpha),
        significant=p_bonf < alpha,
    )


def letters_per_object(
    order: Sequence[str], tests: Mapping[tuple[str, str], Sequence[ObjectPairTest]]
) -> dict[str, dict[str, str]]:
    """Compact letters on each object from its own pair tests (KS); policies
    not run on an object are left out of its letters."""
    objects = sorted({t.object for ts in tests.values() for t in ts})
    out = {}
    for o in objects:
        present = [
            p
            for p in order
            if any(o in {t.object for t in ts} and p in k for k, ts in tests.items())
        ]
        sig = [
            (a, b) for (a, b), ts in tests.items() for t in ts if t.object == o and t.significant
        ]
        out[o] = compact_letters(present, sig)
    return out


@dataclass(frozen=True)
class MetricRanking:
    """The ranking under one aggregation rule: ``order`` best first (by the
    point estimate), ``top1_share`` the share of bootstrap replicates in
    which each policy is first, ``estimates`` the point estimates."""

    metric: str
    higher_is_better: bool
    order: tuple[str, ...]
    estimates: dict[str, float]
    top1_share: dict[str, float]
    replicates: int


def rank_metric(
    metric: str, values: Mapping[str, np.ndarray], *, higher_is_better: bool
) -> MetricRanking:
    """``values``: policy → (1 + R,) array, the estimate then R replicates
    (the same R for all, replicate r one joint draw). Ties in a replicate
    share the first place equally; a replicate where a policy's value is
    undefined (nan) does not count it."""
    names = sorted(values)
    sign = 1.0 if higher_is_better else -1.0
    est = {p: float(values[p][0]) for p in names}
    order = tuple(
        sorted(
            names,
            key=lambda p: (
                not np.isfinite(est[p]),
                -sign * est[p] if np.isfinite(est[p]) else 0.0,
                p,
            ),
        )
    )
    reps = np.vstack([np.asarray(values[p][1:], dtype=float) for p in names]) * sign
    r = reps.shape[1]
    share = dict.fromkeys(names, 0.0)
    if r and names:
        filled = np.where(np.isfinite(reps), reps, -np.inf)
        best = filled.max(axis=0)
        first = (filled == best[None, :]) & np.isfinite(best)[None, :]
        n_first = first.sum(axis=0)
        weights = np.divide(first, n_first[None, :], out=np.zeros(first.shape), where=n_first > 0)
        share = {p: float(weights[k].sum() / r) for k, p in enumerate(names)}
    return MetricRanking(metric, higher_is_better, order, est, share, r)
