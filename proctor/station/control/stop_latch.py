"""The stop latch: the one place that stops the arm, and the ending a stop requests.

The runner owns one ``StopLatch`` for its lifetime and hands it to each
episode's control loop. Stops come in on other threads (the operator's stop,
the safety button); the loop asks ``requested_ending`` every tick. Keeping the
event, the arm's stop and the stop's kind and reason together means the loop
needs nothing of the runner's to stop the arm or to end on a stop."""

from __future__ import annotations

import logging
import threading
from enum import StrEnum

from proctor.core.domain import Outcome
from proctor.station.cell import Cell

log = logging.getLogger(__name__)


class StopKind(StrEnum):
    operator = "operator"
    safety = "safety"


class StopLatch:
    """The stop event, stopping the arm and the ending the stop requests.

    ``reset`` starts a new episode with no stop requested; ``record`` notes a
    stop's kind and reason (the first one, unless a safety stop overrides it);
    ``set`` raises the event the control loop checks."""

    def __init__(self, cell: Cell) -> None:
        # the cell, not its arm: the arm is looked up at each stop, as every
        # other command to it is
        self._cell = cell
        self._event = threading.Event()
        self.kind: StopKind | None = None
        self.reason: str = ""

    def stop_arm(self) -> None:
        """Stop the arm now; a failure is logged, never raised (a stop path
        must not itself end in an exception that skips the rest of it)."""
        try:
            self._cell.arm.stop()
        except Exception:
            log.critical("FAILED TO STOP THE ARM", exc_info=True)

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def reset(self) -> None:
        """A new episode: no stop requested for it yet."""
        self._event.clear()
        self.kind = None
        self.reason = ""

    def record(self, kind: StopKind, reason: str) -> None:
        """Note the stop an episode ends on: the first one, or a safety stop
        over an operator's (the stricter ending wins)."""
        if self.kind is None or kind == StopKind.safety:
            self.kind = kind
            self.reason = reason

    def requested_ending(self) -> tuple[Outcome, str] | None:
        """The ending a stop requested from another thread proposes (checked by
        the control loop every tick): a safety stop has halted the arm already."""
        if not self._event.is_set():
            return None
        # stopped again here: a command the loop sent while the stop came in
        # must not outlive it (the driver's latch refuses any later one)
        self.stop_arm()
        if self.kind == StopKind.safety:
            return Outcome.safety, self.reason
        if self.kind is None:  # set before its kind was recorded: a safety stop
            return Outcome.safety, "safety stop pressed"
        return Outcome.operator_stop, self.reason
