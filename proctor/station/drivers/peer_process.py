"""What the protocol peers (franky-sim, the simulated 2F-85) share when they
run as child processes of a test or of the twin profile."""

from __future__ import annotations

import os
import threading


def watch_parent(done: threading.Event, period_s: float = 0.5) -> None:
    """End with the process that started us: a parent that dies without
    stopping its peer (SIGKILL) must not leave a simulator running."""
    parent = os.getppid()

    def watch() -> None:
        while not done.wait(period_s):
            if os.getppid() != parent:
                done.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
