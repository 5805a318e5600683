"""Policy calls: the request in flight, its deadline, and when to ask."""

from __future__ import annotations

import concurrent.futures
import enum
import math
from collections.abc import Callable
from typing import Any

from proctor.core.clock import Clock
from proctor.core.domain import Outcome
from proctor.policywire.client import PolicyError, PolicyWorker, Reply


class Waited(enum.Enum):
    """A wait for a reply that a stop request cut short."""

    interrupted = "interrupted"


class PolicyCalls:
    """At most one request in flight, on the policy worker's thread.

    On a real-time clock the loop goes on (and can stop the arm) while the
    policy thinks, and the request's deadline is checked on every tick
    against the wall clock. On a virtual clock time stands still while the
    policy thinks: the reply is awaited when the chunk ends. Velocity chunks
    are asked for ``lookahead_steps`` ahead (a position chunk planned from an
    older state would pull the arm back to where it was: those are asked for
    at the end), and the velocity in force is halted while the arm waits."""

    def __init__(
        self,
        worker: PolicyWorker,
        observe: Callable[[float], dict[str, Any]],
        *,
        clock: Clock,
        wall: Clock,
        real_time: bool,
        timeout_s: float,
        lookahead_steps: int,
        stop_requested: Callable[[], bool],
        stop_arm: Callable[[], None],
        latencies: list[float],
    ) -> None:
        self.worker = worker
        self.observe = observe  # the observation for a query at a station time
        self.clock, self.wall = clock, wall
        self.real_time = real_time
        self.timeout_s = timeout_s
        self.lookahead = lookahead_steps
        self.stop_requested = stop_requested
        self.stop_arm = stop_arm
        self.latencies = latencies  # every completed call's wall-clock latency
        self.pending: concurrent.futures.Future[Reply] | None = None
        self.asked_wall = 0.0  # when the pending request went out, on the wall clock
        self.asked_at = 0.0  # and on the station clock

    @property
    def calls(self) -> int:
        return len(self.latencies)

    @property
    def last_latency(self) -> float:
        return self.latencies[-1] if self.latencies else math.nan

    def ask(self, t: float) -> None:
        """Send the observation for station time ``t``."""
        obs = self.observe(t)
        self.pending = self.worker.submit(obs, self.timeout_s)
        self.asked_wall, self.asked_at = self.wall.now(), self.clock.now()

    def wants_ahead(self, rows_left: int) -> bool:
        """Ask now for the next chunk while this one's last rows run."""
        return self.pending is None and rows_left < self.lookahead

    def next_chunk(self, t: float, halt: Callable[[], None]) -> Reply | Waited | None:
        """The chunk has run out at action step ``t``: the reply to play next,
        None while it has not come (real-time clock), ``Waited.interrupted``
        when a stop was requested while waiting for it (virtual clock).
        ``halt`` stops a velocity command while the arm waits."""
        if self.pending is None:
            halt()
            self.ask(t)
        elif self.real_time and not self.pending.done():
            halt()  # the reply asked for ahead is late
        assert self.pending is not None
        if not self.real_time:
            reply = self._await(self.pending)
            if reply is None:
                return Waited.interrupted
        elif self.pending.done():
            reply = self.pending.result()  # raises the PolicyError, if any
        else:
            return None
        self.pending = None
        self.latencies.append(reply.latency_s)
        return reply

    def _await(self, pending: concurrent.futures.Future[Reply]) -> Reply | None:
        """Wait for the reply on a virtual clock (None: a stop was requested)."""
        deadline_wall = self.asked_wall + self.timeout_s + 1.0
        while True:
            try:
                return pending.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if self.stop_requested():
                    return None
                if self.wall.now() > deadline_wall:
                    self.stop_arm()
                    raise PolicyError(
                        f"policy did not answer within {self.timeout_s:g} s"
                    ) from None

    def check_deadline(self, t0: float, end_details: dict[str, Any]) -> tuple[Outcome, str] | None:
        """On a real-time clock, a request in flight past its deadline stops the
        arm and ends the episode (``end_details`` says when); one that failed
        stops the arm and raises its error. On a virtual clock the reply is
        awaited at the chunk's end, deterministically."""
        pending = self.pending
        if not self.real_time or pending is None:
            return None
        if not pending.done():
            waited = self.wall.now() - self.asked_wall
            if waited > self.timeout_s:
                self.stop_arm()
                end_details.update(
                    t_request_s=self.asked_at - t0,
                    t_stop_s=self.clock.now() - t0,
                    waited_wall_s=round(waited, 4),
                )
                pending.cancel()
                return Outcome.system, f"policy did not answer within {self.timeout_s:g} s"
        elif (error := pending.exception()) is not None:
            self.stop_arm()
            end_details.update(t_request_s=self.asked_at - t0, t_stop_s=self.clock.now() - t0)
            raise error
        return None
