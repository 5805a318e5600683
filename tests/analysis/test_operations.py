"""Operations from episodes (docs/methods.md §2): hand examples, validation, and
properties over random episodes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.analysis.episodes import (
    OUTCOMES,
    Episode,
    resolve_reference,
    scored,
    validate_episode,
)
from proctor.analysis.operations import (
    CENSORED_OP,
    DROPPED_OP,
    LOST_OP,
    SAFETY_OP,
    SUCCESS_OP,
    episode_operations,
    extract_operations,
)
from proctor.core.domain import Outcome


def ep(**kw) -> Episode:
    base = dict(
        episode_id="e1",
        policy="p",
        object="o",
        items=5,
        duration_s=100.0,
        placements_s=(),
        lost=0,
        dropped=0,
        outcome="ran_out_of_time",
    )
    return Episode(**(base | kw))


def test_outcome_vocabulary_matches_the_domain() -> None:
    assert set(OUTCOMES) == {o.value for o in Outcome}


def test_inter_success_times_ghosts_and_one_censored_tail() -> None:
    e = ep(placements_s=(10.0, 25.0, 31.0), lost=1, dropped=0, outcome="ran_out_of_time")
    ops = episode_operations(e)
    # successes 10, 15, 6; the lost item a ghost; 5 − 3 − 1 = 1 unhandled: one
    # censored operation of 100 − 31 = 69 s
    assert ops == [
        (10.0, SUCCESS_OP),
        (15.0, SUCCESS_OP),
        (6.0, SUCCESS_OP),
        (math.inf, LOST_OP),
        (69.0, CENSORED_OP),
    ]


def test_safety_stop_is_a_ghost_not_a_censored_tail() -> None:
    e = ep(placements_s=(10.0,), dropped=1, outcome="safety", duration_s=40.0)
    kinds = [k for _, k in episode_operations(e)]
    assert kinds == [SUCCESS_OP, DROPPED_OP, SAFETY_OP]


def test_zero_successes_give_one_censored_operation_of_full_length() -> None:
    assert episode_operations(ep(duration_s=150.0, outcome="operator_stop")) == [
        (150.0, CENSORED_OP)
    ]


def test_success_episode_has_no_tail() -> None:
    e = ep(items=2, placements_s=(3.0, 7.5), duration_s=8.0, outcome="success")
    assert episode_operations(e) == [(3.0, SUCCESS_OP), (4.5, SUCCESS_OP)]


def test_system_episodes_are_excluded_and_listed() -> None:
    kept, excluded = scored([ep(episode_id="a"), ep(episode_id="b", outcome="system")])
    assert [e.episode_id for e in kept] == ["a"]
    assert [(x.episode_id, x.reason.split(":")[0]) for x in excluded] == [("b", "system")]
    with pytest.raises(ValueError, match="system"):
        episode_operations(ep(outcome="system"))


@pytest.mark.parametrize(
    ("changes", "field", "fragment"),
    [
        (dict(placements_s=(1.0, 2.0, 3.0), lost=2, dropped=1), "items", "exceeds items = 5"),
        (dict(placements_s=(5.0, 4.0)), "placements_s", "not strictly increasing"),
        (dict(placements_s=(5.0, 5.0)), "placements_s", "not strictly increasing"),
        (dict(placements_s=(-1.0,)), "placements_s", "negative"),
        (dict(placements_s=(0.0,)), "placements_s", "at 0 s"),
        (dict(placements_s=(101.0,)), "placements_s", "after the episode's end"),
        (dict(outcome="success", placements_s=(1.0,)), "outcome", "4 of 5 items are unhandled"),
        (dict(outcome="crashed"), "outcome", "unknown outcome 'crashed'"),
        (dict(items=0), "items", "at least 1"),
        (dict(lost=-1), "lost", "negative"),
        (dict(duration_s=float("nan")), "duration_s", "finite"),
        (dict(budget_s=0.0), "budget_s", "> 0"),
    ],
)
def test_validation_names_the_field(changes: dict, field: str, fragment: str) -> None:
    problems = validate_episode(ep(**changes))
    assert [p.field for p in problems] == [field]
    assert fragment in problems[0].reason


def test_a_valid_episode_has_no_problems() -> None:
    assert validate_episode(ep(placements_s=(1.0, 2.0), lost=1, outcome="safety")) == []


def test_reference_resolution() -> None:
    eps = [ep(policy="human", reference=True), ep(policy="m")]
    assert resolve_reference(eps, None) == "human"
    assert resolve_reference(eps, "human") == "human"
    with pytest.raises(ValueError, match="names 'm'"):
        resolve_reference(eps, "m")
    with pytest.raises(ValueError, match="no episodes of policy 'x'"):
        resolve_reference([ep(policy="m")], "x")
    with pytest.raises(ValueError, match="more than one policy"):
        resolve_reference([ep(policy="a", reference=True), ep(policy="b", reference=True)], None)


@st.composite
def episodes(draw: st.DrawFn) -> Episode:
    items = draw(st.integers(1, 12))
    outcome = draw(st.sampled_from(["success", "ran_out_of_time", "operator_stop", "safety"]))
    k = draw(st.integers(0, items))
    lost = draw(st.integers(0, items - k))
    dropped = draw(st.integers(0, items - k - lost))
    if outcome == "success":
        # all handled
        dropped = items - k - lost
    gaps = draw(st.lists(st.floats(0.01, 60.0), min_size=k, max_size=k))
    placements = tuple(np.cumsum(gaps).tolist())
    tail = draw(st.floats(0.0, 60.0))
    duration = (placements[-1] if placements else 0.0) + tail
    return ep(
        items=items,
        placements_s=placements,
        lost=lost,
        dropped=dropped,
        outcome=outcome,
        duration_s=duration,
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(episodes(), min_size=1, max_size=8))
def test_operation_counts_are_conserved(eps: list[Episode]) -> None:
    for e in eps:
        assert validate_episode(e) == []
    ops = extract_operations(eps)
    for i, e in enumerate(eps):
        mine = ops.episode == i
        kinds = ops.kind[mine]
        times = ops.time[mine]
        # every success is one placement; inter-success times add up to s_k
        assert int(np.sum(kinds == SUCCESS_OP)) == e.placed
        assert math.isclose(
            float(np.sum(times[kinds == SUCCESS_OP])),
            e.placements_s[-1] if e.placements_s else 0.0,
            abs_tol=1e-9,
        )
        # one ghost per lost, per dropped, and one more for a safety stop
        assert int(np.sum(kinds == LOST_OP)) == e.lost
        assert int(np.sum(kinds == DROPPED_OP)) == e.dropped
        assert int(np.sum(kinds == SAFETY_OP)) == (e.outcome == "safety")
        assert np.all(np.isinf(times[kinds >= LOST_OP]))
        # at most one censored operation, only when items remain at a
        # timeout / operator stop, of length duration − s_k
        censored = times[kinds == CENSORED_OP]
        expect_tail = e.outcome in ("ran_out_of_time", "operator_stop") and e.unhandled > 0
        assert censored.size == int(expect_tail)
        if expect_tail:
            last = e.placements_s[-1] if e.placements_s else 0.0
            assert math.isclose(float(censored[0]), e.duration_s - last, abs_tol=1e-9)
        # timeouts are never ghosts; a safety episode never has a tail
        if e.outcome == "safety":
            assert censored.size == 0
        # operations never exceed items by more than the safety ghost
        assert kinds.size <= e.items + (e.outcome == "safety")
    assert ops.per_episode().sum() == len(ops)
    assert np.all(ops.time[ops.event] > 0)
