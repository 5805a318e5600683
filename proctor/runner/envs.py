"""Framework environments: one virtualenv per ``EnvSpec.key()``, built once and reused.

A build goes into a temporary sibling folder and is renamed into place only
when pip has finished and a completion marker is written, so a half-built
environment is never used; a per-key file lock makes concurrent workers (and
processes) build each environment once, the later ones waiting and reusing it.

Our own packages (a framework and the wire's msgpack/websockets, pinned by
us) are installed from the package index as pip does by default; the
submitter's requirements only as wheels (``--only-binary=:all:``): a source
distribution runs its setup.py at install time, on the host, outside the
sandbox, and that code would be the submitter's to choose.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from proctor.core.settings import RunnerSettings
from proctor.runner.frameworks.base import EnvSpec
from proctor.runner.requirements import check_requirements

MARKER = ".proctor-env.json"
LOG_NAME = "build.log"
TAIL_LINES = 40
_PIP = (
    "-m",
    "pip",
    "install",
    "--disable-pip-version-check",
    "--no-input",
    "--progress-bar",
    "off",
)

Progress = Callable[[str], None]


class EnvBuildFailed(RuntimeError):
    """The environment could not be built; ``log_tail`` is pip's last words."""

    def __init__(self, message: str, log_tail: str = "", *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.timed_out = timed_out


@dataclass(frozen=True)
class BuiltEnv:
    path: Path  # the venv's folder
    python: Path  # its interpreter (path/bin/python)
    key: str
    reused: bool
    log_path: Path  # the build's pip output
    # the interpreter the venv was made from (sys.base_prefix): a sandbox
    # running the env's python must see it too
    base_prefix: Path


def default_env_dir(env_dir: Path | None) -> Path:
    """``RunnerSettings.env_dir``, or the host-wide cache shared by every data folder."""
    return env_dir if env_dir is not None else Path.home() / ".cache" / "proctor" / "runner-envs"


def find_interpreter(version: str) -> Path:
    """``python3.X`` for ``version`` "3.X": on PATH (pyenv's shims skipped:
    a venv made from a shim breaks when the shim's selection changes), then
    pyenv's installed versions, newest patch first."""
    name = f"python{version}"
    shims = str(Path.home() / ".pyenv" / "shims")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or folder.rstrip("/") == shims:
            continue
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    versions = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = sorted(
        (p for p in versions.glob(f"{version}.*/bin/{name}") if os.access(p, os.X_OK)),
        key=lambda p: _patch(p.parents[1].name),
        reverse=True,
    )
    if found:
        return found[0]
    raise EnvBuildFailed(
        f"runner.python: Python {version} is not installed on this runner host "
        f"(no {name} on PATH or under pyenv's versions); choose another version "
        "or ask the operator to install it"
    )


def _patch(name: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", name))


def progress_line(line: str) -> str | None:
    """A pip output line as a short progress note, or None for the rest."""
    if m := re.match(r"^Collecting (\S+)", line):
        return f"collecting {m.group(1)}"
    if m := re.match(r"^Installing collected packages: (.*)$", line):
        n = len([p for p in m.group(1).split(",") if p.strip()])
        return f"installing {n} packages"
    if m := re.match(r"^Successfully installed (.*)$", line):
        return f"installed {len(m.group(1).split())} packages"
    if m := re.match(r"^Building wheels? for (\S+)", line):
        return f"building {m.group(1)}"
    return None


class EnvStore:
    def __init__(self, root: Path, *, build_timeout_s: float) -> None:
        self.root = root
        self.build_timeout_s = build_timeout_s

    @classmethod
    def from_settings(cls, settings: RunnerSettings) -> EnvStore:
        return cls(default_env_dir(settings.env_dir), build_timeout_s=settings.build_timeout_s)

    def path_of(self, spec: EnvSpec) -> Path:
        return self.root / spec.key()

    def ensure(self, spec: EnvSpec, progress: Progress) -> BuiltEnv:
        """The environment for ``spec``: the built one, or built now (then
        EnvBuildFailed when pip fails or runs past the time limit)."""
        key = spec.key()
        final = self.root / key
        built = self._existing(final, key)
        if built is not None:
            return built
        self.root.mkdir(parents=True, exist_ok=True)
        with self._lock(key, progress):
            built = self._existing(final, key)  # another worker built it meanwhile
            if built is not None:
                return built
            return self._build(spec, final, progress)

    def _existing(self, final: Path, key: str) -> BuiltEnv | None:
        marker = final / MARKER
        if not marker.is_file():
            return None
        data = json.loads(marker.read_text())
        return BuiltEnv(
            path=final,
            python=final / "bin" / "python",
            key=key,
            reused=True,
            log_path=final / LOG_NAME,
            base_prefix=Path(data["base_prefix"]),
        )

    @contextlib.contextmanager
    def _lock(self, key: str, progress: Progress) -> Iterator[None]:
        with (self.root / f".{key}.lock").open("a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                progress("waiting for another build of this environment")
                fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _build(self, spec: EnvSpec, final: Path, progress: Progress) -> BuiltEnv:
        if spec.requirements is not None:
            problems = check_requirements(spec.requirements)
            if problems:
                raise EnvBuildFailed("; ".join(str(p) for p in problems))
        interpreter = find_interpreter(spec.python)
        for stale in self.root.glob(f".{final.name}.building-*"):
            shutil.rmtree(stale, ignore_errors=True)  # a build that died with its worker
        tmp = self.root / f".{final.name}.building-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            log_path = tmp / LOG_NAME
            with log_path.open("w") as log:
                _Builder(spec, tmp, log, progress, time.monotonic() + self.build_timeout_s).run(
                    interpreter, self.build_timeout_s
                )
            base_prefix = _base_prefix(tmp)
            _repoint_scripts(tmp, final)
            (tmp / MARKER).write_text(
                json.dumps({"key": final.name, "base_prefix": str(base_prefix)})
            )
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        progress("environment ready")
        return BuiltEnv(
            path=final,
            python=final / "bin" / "python",
            key=final.name,
            reused=False,
            log_path=final / LOG_NAME,
            base_prefix=base_prefix,
        )


class _Builder:
    """One build: venv, our packages, then the submitter's requirements."""

    def __init__(
        self, spec: EnvSpec, folder: Path, log: TextIO, progress: Progress, deadline: float
    ) -> None:
        self.spec = spec
        self.folder = folder
        self.log = log
        self.progress = progress
        self.deadline = deadline
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    def run(self, interpreter: Path, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.progress(f"creating a Python {self.spec.python} environment")
        self._step([str(interpreter), "-m", "venv", str(self.folder)], "creating the venv")
        python = str(self.folder / "bin" / "python")
        if self.spec.packages:
            self._step([python, *_PIP, *self.spec.packages], "installing the framework")
        if self.spec.requirements:
            reqs = self.folder / "requirements.txt"
            reqs.write_bytes(self.spec.requirements)
            self._step(
                [python, *_PIP, "--only-binary=:all:", "-r", str(reqs)],
                "installing runner.requirements",
            )

    def _step(self, argv: list[str], what: str) -> None:
        write = self.log.write
        write(f"$ {' '.join(argv)}\n")
        env = {**os.environ, "PIP_NO_INPUT": "1", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,  # its own group: a timeout kills pip and its builds
        )
        timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), _kill_group, [proc])
        timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                write(line)
                self.log.flush()
                self.tail.append(line.rstrip("\n"))
                note = progress_line(line)
                if note is not None:
                    self.progress(note)
            rc = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
        tail = "\n".join(self.tail)
        if time.monotonic() >= self.deadline and rc != 0:
            raise EnvBuildFailed(
                f"the environment build ran past {self.timeout_s:g} s while {what} and was stopped",
                tail,
                timed_out=True,
            )
        if rc != 0:
            raise EnvBuildFailed(f"{what} failed (exit status {rc})", tail)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _base_prefix(folder: Path) -> Path:
    out = subprocess.run(
        [str(folder / "bin" / "python"), "-c", "import sys; print(sys.base_prefix)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return Path(out.stdout.strip())


def _repoint_scripts(tmp: Path, final: Path) -> None:
    """Console scripts' ``#!`` lines (and activate) name the folder they were
    installed in: point them at the final one before the rename, so a command
    such as ``uvicorn`` runs from the environment."""
    old, new = str(tmp).encode(), str(final).encode()
    for script in (tmp / "bin").iterdir():
        if script.is_symlink() or not script.is_file() or script.stat().st_size > 1 << 20:
            continue
        data = script.read_bytes()
        if old in data:
            script.write_bytes(data.replace(old, new))
