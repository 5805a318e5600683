"""The explorer's per-call breakdown of an episode: the station's
``policy_calls`` table, each call with its lateness judged as the analysis
judges it (``proctor.analysis.latency``, docs/methods.md §4, "Latency")."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from proctor.analysis.latency import calls_from_table, late_chunks, latency


class CallOut(BaseModel):
    n: int = Field(description="the call's number in the episode, from 1")
    t_ask_s: float | None = Field(description="the request went out, s from the start")
    round_trip_ms: float
    server_ms: float | None = Field(description="the server's own time, where it reported one")
    late_ms: float = Field(description="its chunk's start after its intended time")
    actions: int = Field(description="rows of its chunk played")
    skipped: int = Field(description="rows already past on arrival (a chunk timed from its call)")
    stale: bool = Field(description="its rows were played an action period or more late")
    over_budget: bool


class CallsOut(BaseModel):
    control_hz: float
    budget_ms: float | None
    tolerance: int | None
    over_budget: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    server_p50_ms: float | None
    stale_actions: int
    actions: int
    calls: list[CallOut]


def calls_view(details: dict[str, Any]) -> CallsOut | None:
    """The breakdown of a ``policy_calls`` event (None: not a whole table)."""
    table = calls_from_table(details)
    if table is None:
        return None
    cols = details["columns"]
    intended, start = np.array(table.t_intended_s), np.array(table.t_start_s)
    late = late_chunks(intended, start, table.period_s)
    summary = latency([table])
    n = len(table.round_trip_ms)

    def column(name: str, default: Any) -> list[Any]:
        values = list(cols.get(name) or [])
        return values if len(values) == n else [default] * n

    asked, skipped, over = column("t_ask_s", None), column("skipped", 0), column("over_budget", 0)
    return CallsOut(
        control_hz=float(details["control_hz"]),
        budget_ms=details.get("budget_ms"),
        tolerance=details.get("tolerance"),
        over_budget=table.over_budget,
        p50_ms=summary.p50_ms,
        p95_ms=summary.p95_ms,
        p99_ms=summary.p99_ms,
        server_p50_ms=summary.server_p50_ms,
        stale_actions=summary.stale_actions,
        actions=summary.actions,
        calls=[
            CallOut(
                n=i + 1,
                t_ask_s=asked[i],
                round_trip_ms=table.round_trip_ms[i],
                server_ms=table.server_ms[i],
                late_ms=round(max(0.0, float(start[i] - intended[i])) * 1000.0, 3),
                actions=table.actions[i],
                skipped=int(skipped[i] or 0),
                stale=bool(late[i]) and table.actions[i] > 0,
                over_budget=bool(over[i]),
            )
            for i in range(n)
        ],
    )
