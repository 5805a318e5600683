"""The runner host: ``proctor runner worker``.

One process per host. Each tick it: fails the rows of hosts that went
silent (the platform's fault), queues a server for every checkpoint that a
running campaign or a conformance check needs, writes its heartbeat, and
claims queued rows while it has room (``max_servers``, one GPU each when it
has GPUs). Each claimed row is served by a ``ServedServer`` on its own
thread: fetch and unpack the checkpoint, build or reuse its environment,
start the sandbox, wait until the server answers, then open a relay port
for the gateway and the checker and mark the row ready. It watches the
server until it exits (``inference_crash``, ``out_of_memory``, …), a reply
runs over the latency budget, its lifetime ends, or nothing has needed it
for ``idle_stop_s`` (then it is stopped, not failed).

If the worker itself dies, its sandboxes die with it (bubblewrap's
``--die-with-parent``), the relays close (the gateway sees the policy vanish:
the episode ends ``system``), and the rows' heartbeat stops: another host —
or this one restarted — fails them ``runner_unresponsive`` and serves the
checkpoints again.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import Submission
from proctor.core.db.types import utcnow
from proctor.core.domain import RunnerFailure, RunnerStatus
from proctor.core.settings import Settings
from proctor.runner import queue
from proctor.runner.archive import ArchiveLimits
from proctor.runner.envs import EnvStore, default_env_dir
from proctor.runner.failures import classify
from proctor.runner.pipeline import (
    Launched,
    PipelineConfig,
    PipelineFailed,
    ServerPipeline,
    default_runtime_dir,
    private_dir,
)
from proctor.runner.sandbox.base import Limits, Sandboxed, SandboxSpec
from proctor.runner.sandbox.relay import Relay

log = logging.getLogger(__name__)
WATCH_S = 0.25


@dataclass(frozen=True)
class WorkerConfig:
    host: str
    advertise_host: str
    bind_host: str
    port_range: tuple[int, int]
    heartbeat_s: float
    stale_after_s: float
    idle_stop_s: float
    max_lifetime_s: float
    latency_budget_s: float
    max_servers: int
    gpus: tuple[str, ...]
    env_dir: Path
    build_timeout_s: float
    pipeline: PipelineConfig

    @classmethod
    def from_settings(cls, settings: Settings, *, host: str | None = None) -> WorkerConfig:
        r = settings.runner
        name = host or socket.gethostname()
        limits = Limits(
            memory_bytes=r.memory_bytes or default_memory_bytes(r.max_servers),
            max_processes=r.max_processes,
            cpu_seconds=r.cpu_seconds,
            max_open_files=r.max_open_files,
        )
        sub = settings.submissions
        return cls(
            host=name,
            advertise_host=r.advertise_host or r.bind_host,
            bind_host=r.bind_host,
            port_range=r.port_range,
            heartbeat_s=r.heartbeat_s,
            stale_after_s=r.stale_after_s,
            idle_stop_s=r.idle_stop_s,
            max_lifetime_s=r.max_lifetime_s,
            latency_budget_s=r.latency_budget_s,
            max_servers=r.max_servers,
            gpus=tuple(g.strip() for g in r.gpus.split(",") if g.strip()),
            env_dir=default_env_dir(r.env_dir),
            build_timeout_s=r.build_timeout_s,
            pipeline=PipelineConfig(
                work_dir=(r.work_dir or settings.data_dir / "runner").resolve(),
                limits=limits,
                archive_limits=ArchiveLimits(
                    max_unpacked_bytes=sub.max_unpacked_bytes,
                    max_files=sub.max_files,
                    max_ratio=sub.max_compression_ratio,
                ),
                ready_timeout_s=r.ready_timeout_s,
                cgroups=r.cgroups,
                runtime_dir=r.runtime_dir or default_runtime_dir(),
            ),
        )


# the share of the host's memory the sandboxes may hold together; the rest
# is the worker's, the system's and the page cache's
HOST_MEMORY_SHARE = 0.75
MIN_MEMORY_BYTES = 64 * 2**20


def host_memory_bytes() -> int:
    """The host's physical memory (MemTotal)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def default_memory_bytes(max_servers: int, total_bytes: int | None = None) -> int:
    """``runner.memory_bytes`` when unset: ``HOST_MEMORY_SHARE`` of the host's
    memory split among ``max_servers``, so all of them at their limit fit
    together (a fixed 16 GiB default let two sandboxes ask 32 GiB of a
    23 GiB host, and the host's OOM killer, not the sandbox's, would pick)."""
    total = host_memory_bytes() if total_bytes is None else total_bytes
    return max(MIN_MEMORY_BYTES, int(total * HOST_MEMORY_SHARE) // max(1, max_servers))


class ServedServer:
    """One server life on this host, from the claim to its end, on its own thread."""

    def __init__(self, worker: RunnerWorker, row_id: int, submission_id: int, gpu: str) -> None:
        self.worker = worker
        self.row_id = row_id
        self.submission_id = submission_id
        self.gpu = gpu
        self.wanted = True  # set each tick: something still needs this checkpoint
        self.stopping = threading.Event()
        self.launched: Launched | None = None
        self.relay: Relay | None = None
        self.latency_over: float | None = None
        self.thread = threading.Thread(
            target=self._run, name=f"runner-server-{row_id}", daemon=True
        )

    # ------------------------------------------------------------ life

    def _run(self) -> None:
        try:
            self._bring_up()
            self._watch()
        except PipelineFailed as exc:
            self._end(exc.failure, exc.message, exc.diagnostics)
        except Exception as exc:  # a bug or the host's trouble: never the policy's
            log.exception("runner: server %s: host error", self.row_id)
            self._end(RunnerFailure.host_error, f"the runner host failed: {exc}", {})
        finally:
            self._teardown()

    def _stage(self, text: str, status: RunnerStatus = RunnerStatus.building) -> None:
        log.info("runner: server %s: %s", self.row_id, text)
        self.worker.write(
            lambda s: queue.set_stage(
                s, self.row_id, self.worker.name, text, utcnow(), status=status
            )
        )

    def _bring_up(self) -> None:
        w = self.worker
        pipeline = ServerPipeline(w.config.pipeline, w.envs, self._stage, start=w.start_sandbox)
        if self.gpu:
            pipeline.config = replace(pipeline.config, gpus=self.gpu)
        folder = self._checkpoint(pipeline)
        root, manifest = pipeline.read(folder)
        env = pipeline.build(manifest, root)
        self._stage("starting the sandboxed server", RunnerStatus.starting)
        self.launched = pipeline.launch(
            manifest, root, env, f"r{self.row_id}-{secrets.token_hex(4)}"
        )
        pipeline.on_stage = lambda text: self._stage(text, RunnerStatus.starting)
        pipeline.wait_ready(self.launched, self.stopping.is_set)
        self.relay = w.open_relay(self.launched.sandbox.wire_socket, self._latency_exceeded)
        url = f"ws://{w.config.advertise_host}:{self.relay.port}"
        device = f"cuda:{self.gpu}" if self.gpu else "cpu"
        dialect = self.launched.dialect

        def ready(s: ProctorSession) -> bool:
            return queue.mark_ready(
                s, self.row_id, w.name, url=url, dialect=dialect, device=device, now=utcnow()
            )

        w.write(ready)

    def _checkpoint(self, pipeline: ServerPipeline) -> Path:
        with self.worker.sessions() as s:
            sub = s.get(Submission, self.submission_id)
            sha = sub.checkpoint_sha256 if sub else None
        if not sha:
            raise PipelineFailed(RunnerFailure.host_error, "the submission has no checkpoint")
        self._stage("fetching the checkpoint")
        archive = self.worker.fetch(sha)
        return pipeline.unpack(archive, sha)

    def _latency_exceeded(self, seconds: float) -> None:
        self.latency_over = seconds

    def _watch(self) -> None:
        assert self.launched is not None and self.relay is not None
        born = time.monotonic()
        while True:
            if self.stopping.is_set():
                self._end(None, "stopped: the runner host is shutting down", self._diag_stop())
                return
            if not self.launched.sandbox.running():
                diag = self.launched.sandbox.stop()
                failure, message = classify(diag, was_ready=True)
                self._end(failure, message, diag.as_json())
                return
            if self.latency_over is not None:
                diag = self.launched.sandbox.stop()
                failure, message = classify(diag, was_ready=True, latency_exceeded=True)
                self._end(failure, message, diag.as_json())
                return
            if time.monotonic() - born > self.worker.config.max_lifetime_s:
                diag = self.launched.sandbox.stop()
                failure, message = classify(diag, was_ready=True, lifetime_exceeded=True)
                self._end(failure, message, diag.as_json())
                return
            if self._idle():
                self._end(None, "stopped: idle (it starts again when needed)", self._diag_stop())
                return
            time.sleep(WATCH_S)

    def _idle(self) -> bool:
        assert self.relay is not None
        quiet = time.monotonic() - self.relay.last_used > self.worker.config.idle_stop_s
        return not self.wanted and self.relay.connections == 0 and quiet

    def _diag_stop(self) -> dict[str, Any]:
        return self.launched.sandbox.stop().as_json() if self.launched else {}

    def _end(self, failure: RunnerFailure | None, message: str, diag: dict[str, Any]) -> None:
        log.info("runner: server %s ended: %s %s", self.row_id, failure or "stopped", message)
        worker = self.worker.name

        def end(s: ProctorSession) -> bool:
            return queue.finish(
                s,
                self.row_id,
                now=utcnow(),
                failure=failure,
                message=message,
                diagnostics=diag,
                worker=worker,
            )

        self.worker.write(end)

    def _teardown(self) -> None:
        if self.relay is not None:
            self.relay.close()
        if self.launched is not None:
            # its output's tail is on the row; the folder (socket, temp, log) goes
            self.launched.close()


class RunnerWorker:
    def __init__(
        self,
        sessions: sessionmaker[ProctorSession],
        store: ArtifactStore,
        config: WorkerConfig,
        *,
        envs: EnvStore | None = None,
        start_sandbox: Callable[[SandboxSpec], Sandboxed] | None = None,
    ) -> None:
        self.sessions = sessions
        self.store = store
        self.config = config
        self.envs = envs or EnvStore(config.env_dir, build_timeout_s=config.build_timeout_s)
        self.start_sandbox = start_sandbox
        self.name = f"{config.host}:{os.getpid()}"
        self.servers: dict[int, ServedServer] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ helpers

    def write(self, change: Callable[[ProctorSession], object]) -> None:
        with session_scope(self.sessions) as s:
            change(s)

    def fetch(self, sha256: str) -> Path:
        """The checkpoint archive on local disk, verified against its hash."""
        private_dir(self.config.pipeline.work_dir)
        folder = private_dir(self.config.pipeline.work_dir / "archives")
        path = folder / sha256
        if path.exists():
            return path
        part = folder / f"{sha256}.part-{os.getpid()}-{threading.get_ident()}"
        # owner only, as the artifact store keeps it
        fd = os.open(part, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        with self.store.open_verified(sha256) as chunks, os.fdopen(fd, "wb") as out:
            for block in chunks:
                out.write(block)
        part.rename(path)
        return path

    def open_relay(self, socket_path: Path, on_latency: Callable[[float], None]) -> Relay:
        lo, hi = self.config.port_range
        for port in range(lo, hi + 1):
            try:
                return Relay(
                    self.config.bind_host,
                    port,
                    socket_path,
                    latency_budget_s=self.config.latency_budget_s,
                    on_latency_exceeded=on_latency,
                )
            except OSError:
                continue
        raise PipelineFailed(
            RunnerFailure.host_error, f"no free port in {lo}–{hi} on {self.config.bind_host}"
        )

    def _free_gpu(self) -> str | None:
        """A GPU no server of ours holds, "" when the host has none, None when all are taken."""
        if not self.config.gpus:
            return ""
        taken = {s.gpu for s in self.servers.values()}
        free = [g for g in self.config.gpus if g not in taken]
        return free[0] if free else None

    # ------------------------------------------------------------ the loop

    def tick(self) -> None:
        now = utcnow()
        with session_scope(self.sessions) as s:
            queue.fail_stale(s, now=now, stale_after_s=self.config.stale_after_s)
            queue.sync_demand(s, now)
            queue.heartbeat(s, self.name, list(self.servers), now)
            # the host itself is alive, serving or not (a waiting check reads it)
            queue.host_seen(s, host=self.config.host, worker=self.name, now=now)
            needed = queue.needed_submissions(s)
        for row_id, server in list(self.servers.items()):
            server.wanted = server.submission_id in needed
            if not server.thread.is_alive():
                del self.servers[row_id]
        while len(self.servers) < self.config.max_servers:
            gpu = self._free_gpu()
            if gpu is None:
                break
            with session_scope(self.sessions) as s:
                row = queue.claim(s, host=self.config.host, worker=self.name, now=utcnow())
                taken = (row.id, row.submission_id) if row else None
            if taken is None:
                break
            server = ServedServer(self, taken[0], taken[1], gpu)
            self.servers[taken[0]] = server
            server.thread.start()

    def run(self, stop: threading.Event) -> None:
        log.info(
            "runner worker %s: serving (at most %d servers)", self.name, self.config.max_servers
        )
        # submitters' checkpoints: closed to other local accounts, whatever
        # an earlier version left (it made the folder 0755)
        private_dir(self.config.pipeline.work_dir)
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # the database went away for a moment: try again
                log.exception("runner worker: tick failed")
            stop.wait(self.config.heartbeat_s)
        self.shutdown()

    def shutdown(self) -> None:
        for server in self.servers.values():
            server.stopping.set()
        for server in self.servers.values():
            server.thread.join(30)
        self.servers.clear()
