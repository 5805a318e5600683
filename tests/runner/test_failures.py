"""classify: the sandbox's evidence and the runner's clocks to one failure of
the closed set, and a sentence for the submitter."""

from __future__ import annotations

import signal

import pytest

from proctor.core.domain import RunnerFailure, RunnerFault
from proctor.runner.failures import classify
from proctor.runner.sandbox.base import Diagnostics

LIMITS = {
    "memory_bytes": 512 * 2**20,
    "max_processes": 64,
    "cpu_seconds": 600,
}


def diag(**fields: object) -> Diagnostics:
    return Diagnostics(limits=LIMITS, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("evidence", "kwargs", "failure", "words"),
    [
        (
            {"exit_code": 1},
            {"was_ready": False},
            RunnerFailure.setup_crash,
            "the server exited with code 1 before it was ready",
        ),
        (
            {"exit_code": 2},
            {"was_ready": True},
            RunnerFailure.inference_crash,
            "the server exited with code 2 while serving",
        ),
        (
            {"signal": signal.SIGSEGV},
            {"was_ready": True},
            RunnerFailure.inference_crash,
            "was killed by SIGSEGV",
        ),
        (
            {"signal": 9, "oom_killed": True},
            {"was_ready": True},
            RunnerFailure.out_of_memory,
            "memory limit (512 MiB)",
        ),
        (
            {"exit_code": 3, "process_limit_hit": True},
            {"was_ready": False},
            RunnerFailure.sandbox_refused,
            "more than 64 processes",
        ),
        (
            {"signal": signal.SIGXCPU, "cpu_limit_hit": True},
            {"was_ready": True},
            RunnerFailure.sandbox_refused,
            "600 CPU seconds",
        ),
        (
            {"signal": 15},
            {"was_ready": True, "latency_exceeded": True},
            RunnerFailure.latency_exceeded,
            "latency budget",
        ),
        (
            {"signal": 15},
            {"was_ready": False, "ready_timed_out": True},
            RunnerFailure.wall_clock_exceeded,
            "start-up deadline",
        ),
        (
            {"signal": 15},
            {"was_ready": True, "lifetime_exceeded": True},
            RunnerFailure.wall_clock_exceeded,
            "lifetime",
        ),
        # a limit the sandbox saw outranks the runner's reason to stop it
        (
            {"signal": 9, "oom_killed": True},
            {"was_ready": False, "ready_timed_out": True},
            RunnerFailure.out_of_memory,
            "memory limit",
        ),
        ({"signal": 99}, {"was_ready": False}, RunnerFailure.setup_crash, "signal 99"),
    ],
)
def test_classify(
    evidence: dict[str, object], kwargs: dict[str, bool], failure: RunnerFailure, words: str
) -> None:
    got, message = classify(diag(**evidence), **kwargs)
    assert got == failure
    assert words in message
    assert message.count(".") == 0 and "\n" not in message  # one sentence, no trailing period
    assert got.fault == RunnerFault.submitter
