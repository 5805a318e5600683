"""The demo's rollout progress says how long is left (issue 22: under load
the demo took 24 minutes where the README said 7, with no estimate)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress

from proctor.demo.run import RemainingColumn


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _line(progress: Progress) -> str:
    buf = io.StringIO()
    Console(file=buf, width=120).print(progress.get_renderable())
    return buf.getvalue().strip()


def test_the_estimate_is_the_average_pace_times_what_is_left() -> None:
    clock = FakeClock()
    progress = Progress(MofNCompleteColumn(), RemainingColumn(), get_time=clock, auto_refresh=False)
    task = progress.add_task("runs", total=120)
    assert _line(progress) == "0/120 estimating time left"
    clock.now += 600.0  # 30 runs in 10 minutes: 90 more take 30 minutes
    progress.update(task, completed=30)
    assert _line(progress) == "30/120 ≈ 30 min left"
    clock.now += 3000.0  # slowed down: 40 runs in 60 minutes, 80 left → 2 h
    progress.update(task, completed=40)
    assert _line(progress) == "40/120 ≈ 2 h 00 min left"
    clock.now += 200.0  # 119 of 120 after 3800 s: 32 s left
    progress.update(task, completed=119)
    assert _line(progress) == "119/120 ≈ 32 s left"
