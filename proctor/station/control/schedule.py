"""The control loop's two tick grids on the cell's clock."""

from __future__ import annotations

import math
from typing import NamedTuple

from proctor.station.control.sampling import TelemetryTicks

_EPS = 1e-9  # ticks computed from different rates that coincide are one instant


class Tick(NamedTuple):
    """The next telemetry tick, the next action step, and the earlier of the two."""

    t_tel: float
    t_act: float
    t: float

    @property
    def action_due(self) -> bool:
        return self.t_act <= self.t + _EPS

    @property
    def telemetry_due(self) -> bool:
        return self.t_tel <= self.t + _EPS


class Schedule:
    """Telemetry ticks at ``telemetry_hz`` and action steps at ``control_hz``,
    both counted from ``t0`` (never accumulated, so they do not drift), up to
    the end of the time budget."""

    def __init__(
        self,
        t0: float,
        budget_s: float,
        telemetry_hz: float,
        control_hz: float,
        ticks: TelemetryTicks,
    ) -> None:
        self.t0 = t0
        self.end = t0 + budget_s
        self.dt_tel = 1.0 / telemetry_hz
        self.dt_act = 1.0 / control_hz
        self.k_tel_end = math.floor(budget_s / self.dt_tel + _EPS)  # the last tick in the budget
        self.k_tel = 0
        self.k_act = 0
        self.ticks = ticks

    def next(self) -> Tick:
        t_tel = self.t0 + self.k_tel * self.dt_tel
        t_act = self.t0 + self.k_act * self.dt_act
        return Tick(t_tel, t_act, min(t_tel, t_act))

    def past_end(self, tick: Tick) -> bool:
        return tick.t > self.end + _EPS

    def resume_at(self, now: float) -> None:
        """Behind schedule (a stall on a real-time clock): resume from ``now``
        rather than catch up in a burst; the telemetry ticks passed over are
        counted, never back-filled."""
        behind = min(math.floor((now - self.t0) / self.dt_tel), self.k_tel_end + 1) - self.k_tel
        if behind > 0:
            self.k_tel += behind
            self.ticks.late += behind
        self.k_act = max(self.k_act, math.floor((now - self.t0) / self.dt_act))

    def action_taken(self) -> None:
        self.k_act += 1

    def telemetry_taken(self) -> None:
        self.k_tel += 1
        self.ticks.due += 1
