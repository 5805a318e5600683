"""What the runner asks of a sandbox, and what it learns back.

The sandbox (``proctor/runner/sandbox``) runs a ``ServerLaunch`` with no
network (a fresh network namespace: loopback only), a read-only view of the
checkpoint, the environment and our helpers, a private writable temp, an
environment holding only what the runner passes, and the ``Limits``; the
wire leaves it only through a Unix socket the host makes in ``work_dir/sock``
and hands in as a listening descriptor, which our bridge (inside) connects to
the server's loopback port. Backends of the limits are
found by name (cgroup v2, cgroup v1, rlimits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from proctor.runner.frameworks.base import ServerLaunch


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    max_processes: int
    cpu_seconds: int
    max_open_files: int = 1024
    # the largest file the server may write in its temp
    max_file_bytes: int = 4 * 2**30


@dataclass(frozen=True)
class SandboxSpec:
    launch: ServerLaunch
    env_dir: Path  # the environment (a venv), bound read-only at its own path
    checkpoint_dir: Path  # the folder holding policy.toml, read-only at /checkpoint
    work_dir: Path  # the host folder for this server: socket, temp, output log
    limits: Limits
    # the sandbox's whole environment besides HOME, TMPDIR, PATH (no inheritance)
    env: Mapping[str, str] = field(default_factory=dict)
    # GPUs the server may see (CUDA_VISIBLE_DEVICES); empty: CPU only
    gpus: str = ""


@dataclass(frozen=True)
class Diagnostics:
    """What a finished (or still running) sandbox tells the admin and submitter."""

    exit_code: int | None = None  # None while running or when killed by a signal
    signal: int | None = None
    memory_peak_bytes: int | None = None
    gpu_memory_peak_bytes: int | None = None
    oom_killed: bool = False  # the memory limit was reached
    process_limit_hit: bool = False  # a fork was refused by the process limit
    cpu_limit_hit: bool = False
    # the last lines of the server's stdout and stderr (stripped of control chars)
    output_tail: tuple[str, ...] = ()
    limits: Mapping[str, int] = field(default_factory=dict)
    # which limit backend enforced them ("cgroup-v1", "cgroup-v2", "rlimit")
    limits_backend: str = ""
    # what the server tried to reach: each connection to a tripwire port
    # inside the sandbox ("connect 127.0.0.1:5432 at 2026-01-01T00:00:00Z")
    attempts: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "signal": self.signal,
            "memory_peak_bytes": self.memory_peak_bytes,
            "gpu_memory_peak_bytes": self.gpu_memory_peak_bytes,
            "oom_killed": self.oom_killed,
            "process_limit_hit": self.process_limit_hit,
            "cpu_limit_hit": self.cpu_limit_hit,
            "output_tail": list(self.output_tail),
            "limits": dict(self.limits),
            "limits_backend": self.limits_backend,
            "attempts": list(self.attempts),
        }


class Sandboxed(Protocol):
    """A started sandbox (``proctor.runner.sandbox.start``)."""

    @property
    def wire_socket(self) -> Path:
        """The Unix socket the wire is reached on (the bridge inside listens)."""
        ...

    def running(self) -> bool: ...

    def stop(self, grace_s: float = 5.0) -> Diagnostics:
        """Terminate everything inside (idempotent) and say how it ended."""
        ...

    def diagnostics(self) -> Diagnostics: ...
