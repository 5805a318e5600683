"""From a checkpoint to a ready sandboxed server, one stage at a time.

The runner host (``worker``) and ``proctor runner serve`` run the same
stages, so a submitter's trial on their own machine is the host's run:
unpack (archives only) → read and check ``policy.toml`` and the framework's
own files → build or reuse the environment → start the sandbox → wait until
the server answers its wire. Each stage is announced through ``on_stage``;
a failure raises ``PipelineFailed`` with a reason from the closed set and
whose fault it is (``RunnerFailure.fault``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proctor.core.domain import RunnerFailure
from proctor.runner import readiness
from proctor.runner.archive import ArchiveLimits, ArchiveRejected, unpack_archive
from proctor.runner.envs import BuiltEnv, EnvBuildFailed, EnvStore
from proctor.runner.failures import classify
from proctor.runner.frameworks import framework_for
from proctor.runner.frameworks.base import EnvSpec
from proctor.runner.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    check_paths,
    parse_manifest,
)
from proctor.runner.sandbox import start as start_sandbox
from proctor.runner.sandbox.base import Limits, Sandboxed, SandboxSpec
from proctor.runner.sandbox.bwrap import SandboxConfigError

# the port the server listens on inside its own network namespace: nothing
# else lives there, so any port will do; the bridge reaches it on loopback
SANDBOX_PORT = 8000
READY_POLL_S = 0.25


class PipelineFailed(Exception):
    """A stage failed; ``failure`` says why (and, through it, whose fault)."""

    def __init__(
        self, failure: RunnerFailure, message: str, diagnostics: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message
        self.diagnostics = diagnostics or {}


@dataclass(frozen=True)
class PipelineConfig:
    work_dir: Path  # unpacked checkpoints and each server's folder
    limits: Limits
    archive_limits: ArchiveLimits
    ready_timeout_s: float
    gpus: str = ""  # CUDA_VISIBLE_DEVICES for the sandbox; "" = CPU
    # where the sandbox's limits are made (RunnerSettings.cgroups)
    cgroups: str = "auto"
    # each server's folder (its wire socket, temp and output log): a short
    # path, because a Unix socket's path may have at most 107 bytes
    runtime_dir: Path = field(default_factory=lambda: default_runtime_dir())


@dataclass
class Launched:
    """A started server: its sandbox, what it speaks, and where it came from."""

    sandbox: Sandboxed
    manifest: Manifest
    dialect: str
    env: BuiltEnv
    server_dir: Path
    started_at: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        """The sandbox stopped (idempotent) and the server's folder removed."""
        try:
            self.sandbox.stop()
        finally:
            shutil.rmtree(self.server_dir, ignore_errors=True)


Stage = Callable[[str], None]


class ServerPipeline:
    def __init__(
        self,
        config: PipelineConfig,
        envs: EnvStore,
        on_stage: Stage,
        start: Callable[[SandboxSpec], Sandboxed] | None = None,
    ) -> None:
        self.config = config
        self.envs = envs
        self.on_stage = on_stage
        self._start = start

    # ------------------------------------------------------------ stages

    def unpack(self, archive: Path, sha256: str) -> Path:
        """The archive unpacked once under the work folder, by content."""
        private_dir(self.config.work_dir)
        dest = private_dir(self.config.work_dir / "checkpoints") / sha256
        if (dest / ".complete").exists():
            return dest
        self.on_stage("unpacking the checkpoint")
        partial = dest.with_name(f"{sha256}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            unpack_archive(archive, partial, self.config.archive_limits)
        except ArchiveRejected as exc:
            shutil.rmtree(partial, ignore_errors=True)
            raise PipelineFailed(RunnerFailure.setup_crash, f"the archive: {exc}") from None
        (partial / ".complete").touch(mode=0o600)
        shutil.rmtree(dest, ignore_errors=True)
        partial.rename(dest)
        return dest

    def read(self, folder: Path) -> tuple[Path, Manifest]:
        """The folder holding policy.toml and its validated manifest."""
        root = find_root(folder)
        try:
            manifest = parse_manifest((root / MANIFEST_NAME).read_bytes())
        except ManifestError as exc:
            raise PipelineFailed(RunnerFailure.setup_crash, str(exc)) from None
        problems = check_paths(manifest, "", _members(root))
        problems += framework_for(manifest).check(manifest, root)
        if problems:
            raise PipelineFailed(RunnerFailure.setup_crash, "; ".join(str(p) for p in problems))
        return root, manifest

    def build(self, manifest: Manifest, root: Path) -> BuiltEnv:
        spec = framework_for(manifest).env_spec(manifest, root)
        self.on_stage(f"environment {spec.key()}")
        try:
            return self.envs.ensure(spec, lambda line: self.on_stage(f"building: {line}"))
        except EnvBuildFailed as exc:
            raise _build_failure(spec, exc) from None

    def launch(self, manifest: Manifest, root: Path, env: BuiltEnv, name: str) -> Launched:
        launch = framework_for(manifest).launch(manifest, SANDBOX_PORT).fill(env.path)
        server_dir = self.config.runtime_dir / name
        shutil.rmtree(server_dir, ignore_errors=True)
        # private: another local user must not reach a server's socket
        self.config.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        server_dir.mkdir()
        self.on_stage("starting the sandboxed server")
        spec = SandboxSpec(
            launch=launch,
            env_dir=env.path,
            checkpoint_dir=root,
            work_dir=server_dir,
            limits=self.config.limits,
            env=dict(launch.env),
            gpus=self.config.gpus,
        )
        try:
            sandbox = (
                self._start(spec)
                if self._start
                else start_sandbox(spec, cgroups=self.config.cgroups)
            )
        except SandboxConfigError as exc:  # the host's configuration, not the checkpoint
            shutil.rmtree(server_dir, ignore_errors=True)
            raise PipelineFailed(RunnerFailure.host_error, f"the sandbox: {exc}") from None
        except BaseException:
            shutil.rmtree(server_dir, ignore_errors=True)
            raise
        return Launched(sandbox, manifest, launch.dialect, env, server_dir)

    def wait_ready(self, launched: Launched, stop: Callable[[], bool] = lambda: False) -> None:
        """Until the server answers its wire; raises if it exits or takes too long."""
        self.on_stage("loading the policy (waiting for the server to answer)")
        deadline = time.monotonic() + self.config.ready_timeout_s
        while not stop():
            if readiness.is_ready(launched.dialect, launched.sandbox.wire_socket):
                self.on_stage("ready")
                return
            if not launched.sandbox.running():
                diag = launched.sandbox.stop()
                failure, message = classify(diag, was_ready=False)
                raise PipelineFailed(failure, message, diag.as_json())
            if time.monotonic() > deadline:
                diag = launched.sandbox.stop()
                failure, message = classify(diag, was_ready=False, ready_timed_out=True)
                raise PipelineFailed(failure, message, diag.as_json())
            time.sleep(READY_POLL_S)
        launched.sandbox.stop()
        raise PipelineFailed(RunnerFailure.host_error, "stopped before the server was ready")

    # ------------------------------------------------------------ all of it

    def run(self, folder: Path, name: str, stop: Callable[[], bool] = lambda: False) -> Launched:
        """Every stage; a server that never gets ready leaves nothing behind
        (its sandbox stopped, its folder removed). Once it is returned, the
        caller ends it (``Launched.close``)."""
        root, manifest = self.read(folder)
        env = self.build(manifest, root)
        launched = self.launch(manifest, root, env, name)
        try:
            self.wait_ready(launched, stop)
        except BaseException:
            launched.close()
            raise
        return launched


def private_dir(path: Path) -> Path:
    """``path`` made (with its parents) and set to 0700: the runner's work
    folder holds submitters' private checkpoints. A folder an earlier
    version made 0755 is tightened too, which closes everything under it."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def default_runtime_dir() -> Path:
    """``/tmp/proctor-runner-<uid>``: short enough for every server's socket."""
    return Path(tempfile.gettempdir()) / f"proctor-runner-{os.getuid()}"


def find_root(folder: Path) -> Path:
    """The folder holding policy.toml: ``folder`` itself, or its one
    subfolder that holds it (``tar czf x.tgz dir`` packs the folder inside)."""
    if (folder / MANIFEST_NAME).is_file():
        return folder
    found = [p.parent for p in folder.glob(f"*/{MANIFEST_NAME}") if p.is_file()]
    if len(found) != 1:
        raise PipelineFailed(
            RunnerFailure.setup_crash,
            f"{MANIFEST_NAME} must be at the checkpoint's top (or in its one top folder)",
        )
    return found[0]


def _members(root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in root.rglob("*") if p.name != ".complete"]


def _build_failure(spec: EnvSpec, exc: EnvBuildFailed) -> PipelineFailed:
    diagnostics = {"build_log_tail": exc.log_tail.splitlines()[-40:]}
    if exc.timed_out:
        return PipelineFailed(
            RunnerFailure.wall_clock_exceeded,
            f"the environment did not build within the time limit: {exc}",
            diagnostics,
        )
    # what the submitter asked to install is theirs to fix; the framework's
    # own packages failing to install is the host's (a network or disk problem)
    failure = RunnerFailure.setup_crash if spec.requirements else RunnerFailure.host_error
    return PipelineFailed(failure, f"the environment did not build: {exc}", diagnostics)
