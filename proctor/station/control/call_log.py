"""The per-call log: every policy call's round trip, the server's own time,
and when its chunk was meant to start and did start; and the latency budget.

The station records facts, the analysis judges them (``proctor.analysis.latency``):
a chunk whose first row played later than intended was late because its
reply was, and every row of it ran late by the same amount. What "intended"
means (docs/methods.md §4, "Latency"):

* a chunk played from its first row (openpi, RoboArena) was intended at the
  action step where the station first needed it: where the chunk before it
  ran out (or, for the first call, where the episode asked);
* a chunk timed from its call (Positronic's waypoints) starts at the row in
  force when it arrives; that row was intended ``row`` steps after the request
  went out, and the rows before it are skipped, not played late.

Times are station-clock seconds since the episode's start (on a virtual clock
time stands still while the policy thinks, so nothing there is late); round
trips are wall-clock milliseconds, the station's own measure of the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proctor.core.recording import keys
from proctor.core.work import LatencyBudget
from proctor.policywire.client import Reply

# the keys of a server's reported timing that measure its handling of the
# request, most specific first: openpi's and Positronic 3's ``infer_ms``,
# then Positronic's ``model_ms``
SERVER_TIME_KEYS = ("infer_ms", "model_ms")

# an episode's event carries at most this many calls (the rest are counted);
# a 30-minute episode at 15 Hz, 8 steps a chunk, makes about 3 400
MAX_LISTED_CALLS = 20_000


def server_ms(timing: dict[str, float] | None) -> float | None:
    """The server's own time for a reply, from what it reported (None: nothing usable)."""
    if not timing:
        return None
    for key in SERVER_TIME_KEYS:
        value = timing.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return None


@dataclass
class PolicyCall:
    t_ask_s: float  # the request went out (station clock, since the episode's start)
    round_trip_ms: float  # wall clock, request sent → reply decoded
    server_ms: float | None  # what the server reported of its own time
    t_intended_s: float  # when the chunk's first played row was meant to run
    t_start_s: float  # the action step its first played row ran at
    skipped: int  # rows of a chunk timed from its call already past on arrival
    over_budget: bool
    actions: int = 0  # rows of the chunk played

    def row(self) -> list[Any]:
        return [
            round(self.t_ask_s, 6),
            round(self.round_trip_ms, 3),
            None if self.server_ms is None else round(self.server_ms, 3),
            round(self.t_intended_s, 6),
            round(self.t_start_s, 6),
            self.actions,
            self.skipped,
            self.over_budget,
        ]


class CallLog:
    """One episode's policy calls, in order, and its latency budget."""

    def __init__(self, t0: float, control_hz: float, budget: LatencyBudget | None) -> None:
        self.t0 = t0
        self.dt = 1.0 / control_hz
        self.control_hz = control_hz
        self.budget = budget
        self.calls: list[PolicyCall] = []
        self.over_budget = 0
        self._needed_at: float | None = None  # the step the next chunk is needed from

    def needed(self, t: float) -> None:
        """The chunk in play ran out at action step ``t`` (kept: the first one counts)."""
        if self._needed_at is None:
            self._needed_at = t

    def replied(self, reply: Reply, *, asked_at: float, t: float, first_row: int) -> PolicyCall:
        """A reply whose chunk starts playing at action step ``t``, from ``first_row``."""
        if reply.timed_from_call:
            intended = asked_at + first_row * self.dt
        else:
            intended = self._needed_at if self._needed_at is not None else t
        self._needed_at = None
        rtt_ms = reply.latency_s * 1000.0
        over = self.budget is not None and rtt_ms > self.budget.budget_ms
        self.over_budget += over
        call = PolicyCall(
            t_ask_s=asked_at - self.t0,
            round_trip_ms=rtt_ms,
            server_ms=server_ms(reply.server_timing),
            t_intended_s=intended - self.t0,
            t_start_s=t - self.t0,
            skipped=first_row if reply.timed_from_call else 0,
            over_budget=over,
        )
        self.calls.append(call)
        return call

    def played(self) -> None:
        """A row of the newest call's chunk was sent to the cell."""
        if self.calls:
            self.calls[-1].actions += 1

    @property
    def exceeded(self) -> bool:
        """More calls over the budget than its tolerance allows."""
        return self.budget is not None and self.over_budget > self.budget.tolerance

    def exceeded_reason(self) -> str:
        budget = self.budget
        assert budget is not None
        return (
            f"{keys.LATENCY_BUDGET_EXCEEDED}: {self.over_budget} policy calls took longer "
            f"than the campaign's {budget.budget_ms:g} ms budget "
            f"(at most {budget.tolerance} allowed per episode)"
        )

    def event_details(self) -> dict[str, Any]:
        """The ``policy_calls`` event's details: the table, a column per field."""
        listed = self.calls[:MAX_LISTED_CALLS]
        rows = [c.row() for c in listed]
        return {
            "control_hz": self.control_hz,
            "budget_ms": self.budget.budget_ms if self.budget is not None else None,
            "tolerance": self.budget.tolerance if self.budget is not None else None,
            "over_budget": self.over_budget,
            "calls_not_listed": len(self.calls) - len(listed),
            "columns": {
                name: [r[i] for r in rows] for i, name in enumerate(keys.POLICY_CALL_COLUMNS)
            },
        }
