"""The stop latch on its own: the ending a stop requests, which stop wins,
and that stopping the arm never raises (the runner's stop tests drive it
through whole episodes: tests/station/test_stop.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest

from proctor.core.domain import Outcome
from proctor.station.cell import Cell
from proctor.station.control.stop_latch import StopKind, StopLatch


class _Arm:
    def __init__(self, fails: bool = False) -> None:
        self.stops = 0
        self.fails = fails

    def stop(self) -> None:
        self.stops += 1
        if self.fails:
            raise RuntimeError("the arm's link is gone")


def _latch(arm: _Arm) -> StopLatch:
    return StopLatch(cast(Cell, SimpleNamespace(arm=arm)))


def test_no_stop_requests_no_ending_and_leaves_the_arm_alone() -> None:
    arm = _Arm()
    latch = _latch(arm)
    assert latch.requested_ending() is None
    assert arm.stops == 0


def test_a_requested_stop_stops_the_arm_again_and_proposes_its_ending() -> None:
    arm = _Arm()
    latch = _latch(arm)
    latch.record(StopKind.operator, "operator stop")
    latch.set()
    assert latch.requested_ending() == (Outcome.operator_stop, "operator stop")
    assert arm.stops == 1


def test_a_safety_stop_overrides_an_operator_stop_but_not_the_reverse() -> None:
    latch = _latch(_Arm())
    latch.record(StopKind.operator, "operator stop")
    latch.record(StopKind.safety, "button")
    latch.record(StopKind.operator, "later operator stop")
    latch.set()
    assert latch.requested_ending() == (Outcome.safety, "button")


def test_an_event_set_before_its_kind_is_recorded_is_a_safety_stop() -> None:
    latch = _latch(_Arm())
    latch.set()
    assert latch.requested_ending() == (Outcome.safety, "safety stop pressed")


def test_reset_starts_a_new_episode_with_no_stop() -> None:
    latch = _latch(_Arm())
    latch.record(StopKind.safety, "button")
    latch.set()
    latch.reset()
    assert not latch.is_set()
    assert (latch.kind, latch.reason) == (None, "")
    assert latch.requested_ending() is None


def test_a_failing_stop_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    arm = _Arm(fails=True)
    _latch(arm).stop_arm()
    assert arm.stops == 1
    assert "FAILED TO STOP THE ARM" in caplog.text
