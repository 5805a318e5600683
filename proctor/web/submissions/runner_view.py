"""A checkpoint's runner server in words, for its owner and the admins: its
state and stage, and when it failed, why, whose fault, and what the runner
host recorded (``RunnerServer.diagnostics``). Never for a station or the
public: the host, url and failure are the runner's, and the runner is an
identity of the policy behind a blinded run."""

from __future__ import annotations

from typing import Any

from proctor.core.db.models import RunnerServer
from proctor.core.domain import RunnerFailure, RunnerFault

FAILURE_WORDS: dict[RunnerFailure, str] = {
    RunnerFailure.setup_crash: "the environment did not build, or the server exited before it "
    "was ready",
    RunnerFailure.inference_crash: "the server exited (or broke the wire) while serving",
    RunnerFailure.out_of_memory: "the server reached the sandbox's memory limit",
    RunnerFailure.latency_exceeded: "a reply took longer than the latency budget",
    RunnerFailure.wall_clock_exceeded: "the server was not ready in time, or served past its "
    "lifetime",
    RunnerFailure.sandbox_refused: "the sandbox stopped the server at one of its limits "
    "(processes, CPU time, open files)",
    RunnerFailure.runner_unresponsive: "the runner host stopped reporting",
    RunnerFailure.host_error: "the runner host itself failed",
}
FAULT_WORDS: dict[RunnerFault, str] = {
    RunnerFault.submitter: "yours: the checkpoint or its policy.toml",
    RunnerFault.platform: "ours: this does not count against your policy",
}


def failure_words(failure: RunnerFailure | None) -> str | None:
    return FAILURE_WORDS.get(failure) if failure is not None else None


def fault_words(fault: RunnerFault | None) -> str | None:
    return FAULT_WORDS.get(fault) if fault is not None else None


def _tail(value: Any, lines: int = 40) -> str | None:
    if isinstance(value, list):
        value = "\n".join(str(v) for v in value)
    if not isinstance(value, str) or not value:
        return None
    return "\n".join(value.splitlines()[-lines:])


def runner_fields(server: RunnerServer) -> dict[str, Any]:
    """The runner's state as its owner and the admins see it (``RunnerOut``)."""
    diag: dict[str, Any] = dict(server.diagnostics or {})
    return {
        "id": server.id,
        "status": server.status,
        "stage": server.stage,
        "requested_for": server.requested_for,
        "requested_at": server.requested_at,
        "ready_at": server.ready_at,
        "last_used_at": server.last_used_at,
        "finished_at": server.finished_at,
        "device": server.device,
        "failure": server.failure,
        "failure_words": failure_words(server.failure),
        "fault": server.fault,
        "fault_words": fault_words(server.fault),
        "message": server.message,
        "exit_code": diag.get("exit_code"),
        "signal": diag.get("signal"),
        "memory_peak_bytes": diag.get("memory_peak_bytes"),
        "gpu_memory_peak_bytes": diag.get("gpu_memory_peak_bytes"),
        "output_tail": _tail(diag.get("output_tail")),
        "build_log_tail": _tail(diag.get("build_log_tail")),
        # what the sandbox refused: the limits it hit, and every attempt it recorded
        "limits_hit": [words for key, words in _LIMIT_HITS.items() if diag.get(key)],
        "limits": diag.get("limits") if isinstance(diag.get("limits"), dict) else {},
        "sandbox_attempts": diag.get("attempts") if isinstance(diag.get("attempts"), list) else [],
    }


_LIMIT_HITS = {
    "oom_killed": "memory limit reached",
    "process_limit_hit": "a new process was refused (process limit)",
    "cpu_limit_hit": "CPU time limit reached",
    # rows recorded while the socket folder was the sandbox's to write (it no
    # longer is: nothing inside can write to the host's disk)
    "disk_limit_hit": "the socket folder's size or entry limit reached",
}
