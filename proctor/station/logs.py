"""The station's log: how ``proctor station run`` writes it, and the fault
lines an episode keeps in its manifest.

The daemon logs its lifecycle at INFO (connect, a gripper activation when
one was needed, the operator's homing, recover, arm/start/stop, each
episode's end and outcome) with a timestamp and the logger's name; journald
keeps it. The level is the setting ``log_level``
(``PROCTOR_LOG_LEVEL``, default INFO).

While an episode runs, every record at WARNING or above from the station's
loggers — and the INFO lines marked ``extra={"episode_fault": True}``, such as
a stop the controller refused because its reflex had already stopped the arm
— is also kept for the episode (``EpisodeFaultLines``) and written into its
manifest, so the explorer shows what the station said without the journal.
The capture is process-wide, which is right for one station per process (the
daemon, the demo's station processes); two runners in one process would see
each other's lines.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
# what a manifest keeps: enough for a bad episode, bounded for a pathological one
MAX_LINES = 100
MAX_LINE_CHARS = 500


def configure_logging(level: str) -> None:
    """Log to stderr (journald under systemd) at ``level``, with times and names.

    Replaces handlers a library may have installed on the root logger before,
    so that every line has one format."""
    logging.basicConfig(level=level.upper(), format=FORMAT, force=True)


class EpisodeFaultLines(logging.Handler):
    """Collects one episode's fault lines from the ``proctor.station`` loggers, from
    every thread, each with the episode time it was logged at."""

    def __init__(self, since: Callable[[], float]) -> None:
        super().__init__(level=logging.INFO)
        self._since = since
        self._lock_lines = threading.Lock()
        self.lines: list[dict[str, Any]] = []
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < logging.WARNING and not getattr(record, "episode_fault", False):
            return
        try:
            message = record.getMessage()
            t_s = round(self._since(), 3)
        except Exception:
            self.handleError(record)
            return
        line = {
            "t_s": t_s,
            "level": record.levelname,
            "logger": record.name,
            "message": message[:MAX_LINE_CHARS],
        }
        with self._lock_lines:
            if len(self.lines) < MAX_LINES:
                self.lines.append(line)
            else:
                self.dropped += 1

    def __enter__(self) -> EpisodeFaultLines:
        logging.getLogger("proctor.station").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("proctor.station").removeHandler(self)

    def report(self) -> dict[str, Any]:
        with self._lock_lines:
            return {"lines": list(self.lines), "dropped": self.dropped}


__all__ = ["FORMAT", "EpisodeFaultLines", "configure_logging"]
