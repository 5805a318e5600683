"""Why a sandboxed server ended, as one of the closed set ``RunnerFailure``
(proctor/core/domain.py) and one sentence for the submitter.

Pure: from the sandbox's ``Diagnostics`` and what the runner saw. The
sandbox's own evidence comes first (the memory limit, then the process and
CPU limits), because a server killed by a limit also "exited"; then the
runner's clocks; then how the server exited.
"""

from __future__ import annotations

import signal as signals

from proctor.core.domain import RunnerFailure
from proctor.runner.sandbox.base import Diagnostics


def _how_it_ended(diag: Diagnostics) -> str:
    if diag.signal is not None:
        try:
            name = signals.Signals(diag.signal).name
        except ValueError:
            name = f"signal {diag.signal}"
        return f"was killed by {name}"
    if diag.exit_code is not None:
        return f"exited with code {diag.exit_code}"
    return "stopped"


def _limit(diag: Diagnostics) -> tuple[RunnerFailure, str] | None:
    limits = diag.limits
    if diag.oom_killed:
        mib = limits.get("memory_bytes", 0) // 2**20
        return (
            RunnerFailure.out_of_memory,
            f"the server reached the sandbox's memory limit ({mib} MiB) and was killed",
        )
    if diag.process_limit_hit:
        return (
            RunnerFailure.sandbox_refused,
            "the sandbox refused to start more than "
            f"{limits.get('max_processes', '?')} processes and threads",
        )
    if diag.cpu_limit_hit:
        return (
            RunnerFailure.sandbox_refused,
            f"the server used up its {limits.get('cpu_seconds', '?')} CPU seconds and was stopped",
        )
    return None


def classify(
    diag: Diagnostics,
    *,
    was_ready: bool,
    latency_exceeded: bool = False,
    ready_timed_out: bool = False,
    lifetime_exceeded: bool = False,
) -> tuple[RunnerFailure, str]:
    """The failure and one sentence for the submitter."""
    limit = _limit(diag)
    if limit is not None:
        return limit
    if latency_exceeded:
        return (
            RunnerFailure.latency_exceeded,
            "a reply took longer than the latency budget, so the server was stopped",
        )
    if ready_timed_out:
        return (
            RunnerFailure.wall_clock_exceeded,
            "the server did not answer on its port before the start-up deadline",
        )
    if lifetime_exceeded:
        return (
            RunnerFailure.wall_clock_exceeded,
            "the server ran past the longest lifetime a server may have and was stopped",
        )
    ended = _how_it_ended(diag)
    if was_ready:
        return RunnerFailure.inference_crash, f"the server {ended} while serving"
    return RunnerFailure.setup_crash, f"the server {ended} before it was ready"
