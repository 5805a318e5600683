"""Latency as a result (docs/methods.md §4, "Latency"): a policy's round trips
pooled over its calls, the server's own share where it reported one, and
the stale-action rate; from each episode's per-call table.

Quantiles are numpy's default (linear interpolation between order
statistics, Hyndman & Fan type 7) over every call of the policy's scored
episodes; a policy with no recorded call has none (unknown, not zero).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# the slack of comparing station-clock times computed two ways
_EPS_S = 1e-6

# the columns of the station's per-call table this module reads (the station's
# ``keys.POLICY_CALL_COLUMNS`` holds them all; a test keeps the two in step)
TABLE_COLUMNS = ("round_trip_ms", "server_ms", "t_intended_s", "t_start_s", "actions")


@dataclass(frozen=True)
class EpisodeCalls:
    """One episode's policy calls, as the station tabled them: per call the
    round trip (wall clock, ms), the server's own time (ms, None: not
    reported), when its chunk's first played row was intended to run and
    when it ran (station clock, s), and how many of its rows were played."""

    round_trip_ms: tuple[float, ...]
    server_ms: tuple[float | None, ...]
    t_intended_s: tuple[float, ...]
    t_start_s: tuple[float, ...]
    actions: tuple[int, ...]
    period_s: float  # one action step, 1 / control_hz
    over_budget: int = 0  # calls over the campaign's latency budget

    def problems(self) -> list[tuple[str, str]]:
        """(field, reason) for each thing wrong with the table."""
        n = len(self.round_trip_ms)
        columns = (self.server_ms, self.t_intended_s, self.t_start_s, self.actions)
        out = []
        if any(len(c) != n for c in columns):
            out.append(("calls", "the columns differ in length"))
        if not self.period_s > 0:
            out.append(("calls.period_s", f"must be positive, got {self.period_s!r}"))
        if any(not (r >= 0) for r in self.round_trip_ms):
            out.append(("calls.round_trip_ms", "must be non-negative numbers"))
        if any(a < 0 for a in self.actions):
            out.append(("calls.actions", "must not be negative"))
        return out


@dataclass(frozen=True)
class Latency:
    """One policy's latency over its scored episodes."""

    calls: int
    episodes: int  # episodes whose calls were recorded
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    server_p50_ms: float | None  # over the calls whose server reported its time
    server_calls: int
    actions: int  # rows played
    stale_actions: int
    stale_action_rate: float | None  # stale / played; None: nothing played
    calls_per_episode: float | None
    over_budget: int


def calls_from_table(details: Mapping[str, Any]) -> EpisodeCalls | None:
    """An episode's per-call table as the station's ``policy_calls`` event holds
    it (None: not that shape, or not one call listed in full)."""
    columns = details.get("columns")
    hz = details.get("control_hz")
    if not isinstance(columns, Mapping) or not isinstance(hz, int | float) or not hz > 0:
        return None
    if details.get("calls_not_listed"):
        return None  # a partial table would bias every quantile
    try:
        rtt, server, intended, start, actions = (list(columns[c]) for c in TABLE_COLUMNS)
        return EpisodeCalls(
            round_trip_ms=tuple(float(v) for v in rtt),
            server_ms=tuple(None if v is None else float(v) for v in server),
            t_intended_s=tuple(float(v) for v in intended),
            t_start_s=tuple(float(v) for v in start),
            actions=tuple(int(v) for v in actions),
            period_s=1.0 / float(hz),
            over_budget=int(details.get("over_budget") or 0),
        )
    except (KeyError, TypeError, ValueError):
        return None


def quantiles_ms(values: np.ndarray, qs: Sequence[float]) -> tuple[float | None, ...]:
    """The ``qs`` quantiles of ``values`` (type 7); None each when there are none."""
    if values.size == 0:
        return tuple(None for _ in qs)
    return tuple(float(v) for v in np.quantile(values, qs))


def late_chunks(t_intended_s: np.ndarray, t_start_s: np.ndarray, period_s: float) -> np.ndarray:
    """Per call, whether its chunk started late because the reply was: its
    first played row ran one action period or more after it was intended
    (less than a period late is the row in force on the control grid, on time)."""
    late = np.asarray(t_start_s, float) - np.asarray(t_intended_s, float)
    return np.asarray(late >= period_s - _EPS_S, bool)


def stale_actions(
    t_intended_s: np.ndarray, t_start_s: np.ndarray, actions: np.ndarray, period_s: float
) -> int:
    """Rows played late because their reply was: a late chunk ran every row of
    it as late as its first, so all its played rows are stale."""
    return int(np.asarray(actions, int)[late_chunks(t_intended_s, t_start_s, period_s)].sum())


def latency(episodes: Sequence[EpisodeCalls | None]) -> Latency:
    """Pooled over the episodes' calls; episodes without a table are left out."""
    tables = [e for e in episodes if e is not None]
    rtt = np.array([r for e in tables for r in e.round_trip_ms], float)
    server = np.array([s for e in tables for s in e.server_ms if s is not None], float)
    played = sum(int(sum(e.actions)) for e in tables)
    stale = sum(
        stale_actions(
            np.array(e.t_intended_s), np.array(e.t_start_s), np.array(e.actions), e.period_s
        )
        for e in tables
    )
    p50, p95, p99 = quantiles_ms(rtt, (0.5, 0.95, 0.99))
    (server_p50,) = quantiles_ms(server, (0.5,))
    return Latency(
        calls=int(rtt.size),
        episodes=len(tables),
        p50_ms=p50,
        p95_ms=p95,
        p99_ms=p99,
        server_p50_ms=server_p50,
        server_calls=int(server.size),
        actions=played,
        stale_actions=stale,
        stale_action_rate=stale / played if played else None,
        calls_per_episode=rtt.size / len(tables) if tables else None,
        over_budget=sum(e.over_budget for e in tables),
    )
