"""The share of a policy's episodes that ended in a fault of its own doing
(``proctor.analysis.policy_faults``; hardware review #4), against hand-derived
and published values."""

from __future__ import annotations

import pytest

from proctor.analysis.episodes import Episode, validate_episode
from proctor.analysis.policy_faults import policy_faults


def _episode(i: int, outcome: str = "ran_out_of_time", fault: str | None = None) -> Episode:
    return Episode(
        episode_id=f"e{i}",
        policy="p",
        object="cup",
        items=3,
        duration_s=10.0,
        placements_s=(),
        lost=0,
        dropped=0,
        outcome=outcome,
        policy_fault=fault,
    )


def test_three_of_ten_with_the_published_wilson_interval() -> None:
    """3 faults in 10 episodes: 0.3 with the Wilson 95 % interval
    [0.108, 0.603] (Newcombe 1998, Table I, method 3: 0.1078–0.6032)."""
    eps = [_episode(i) for i in range(7)]
    eps += [_episode(7, "system", "policy_motion"), _episode(8, "system", "policy_motion")]
    eps += [_episode(9, "safety", "policy_protocol")]
    got = policy_faults(eps)
    assert (got.episodes, got.faults) == (10, 3)
    assert got.by_class == (("policy_motion", 2), ("policy_protocol", 1))
    assert got.share.estimate == pytest.approx(0.3)
    assert got.share.lo == pytest.approx(0.1078, abs=1e-4)
    assert got.share.hi == pytest.approx(0.6032, abs=1e-4)


def test_no_fault_is_zero_and_no_episode_is_undefined() -> None:
    got = policy_faults([_episode(i) for i in range(5)])
    assert got.faults == 0 and got.share.estimate == 0.0 and got.share.lo == 0.0
    assert policy_faults([]).share.estimate is None


def test_an_unknown_fault_class_is_refused_by_name() -> None:
    problems = validate_episode(_episode(0, "system", "the_station"))
    assert [p.field for p in problems] == ["policy_fault"], problems
