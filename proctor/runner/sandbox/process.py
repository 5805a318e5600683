"""A started sandbox: bubblewrap running our bridge, which runs the server.

``start(spec)`` makes the work folder's socket and /etc folders, confines
the sandbox's first process (the cgroups, the rlimits) before it execs
bwrap, and reads its output. ``stop`` ends everything inside; ``diagnostics``
says how it went.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import stat
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from proctor.runner.frameworks.base import SANDBOX_HELPERS
from proctor.runner.sandbox import bwrap
from proctor.runner.sandbox.base import Diagnostics, SandboxSpec
from proctor.runner.sandbox.limits import Confinement, choose, rlimits
from proctor.runner.sandbox.output import OutputCapture, clean

# a Unix socket's path is at most 107 bytes (sun_path)
MAX_SOCKET_PATH = 107
# files the sandbox writes into the socket folder are read with a cap: it
# may have put anything there
MAX_READ_BYTES = 64 * 1024
MAX_ATTEMPTS = 200
# the socket folder is on the host's disk and the sandbox may write there:
# past this much (or this many entries) the sandbox is killed
SOCKET_FOLDER_BYTES = 64 * 2**20
SOCKET_FOLDER_ENTRIES = 1000
WATCH_S = 0.5

# bwrap's --die-with-parent is PR_SET_PDEATHSIG, which fires when the
# *thread* that forked it ends, not the process: a sandbox started from a
# short-lived thread would be killed with it. Every sandbox is forked from
# this one thread, which lives as long as the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawner")


def start(spec: SandboxSpec, *, cgroups: str = "auto") -> Sandbox:
    """Start ``spec``'s server in a sandbox; ``cgroups`` is RunnerSettings.cgroups."""
    work = spec.work_dir.resolve()
    wire = work / "sock" / bwrap.WIRE_SOCKET_NAME
    if len(os.fsencode(wire)) > MAX_SOCKET_PATH:
        raise bwrap.SandboxConfigError(f"work_dir: {wire} is too long for a Unix socket")
    for name in ("env_dir", "checkpoint_dir"):
        # bound at their own path or named in the launch: never resolved here
        if not getattr(spec, name).is_absolute():
            raise bwrap.SandboxConfigError(f"{name}: {getattr(spec, name)} is not absolute")
    if not (spec.env_dir / "bin" / "python").exists():
        raise bwrap.SandboxConfigError(f"env_dir: {spec.env_dir} has no bin/python")
    if not spec.checkpoint_dir.is_dir():
        raise bwrap.SandboxConfigError(f"checkpoint_dir: {spec.checkpoint_dir} is not a folder")
    env = bwrap.sandbox_env(spec)  # refuses a bad variable or GPU list: nothing made yet
    _fresh_folder(work / "sock")
    bwrap.write_etc(work / "etc")
    argv = bwrap.bwrap_argv(spec, _bridge_command(spec), env)
    confinement = choose(cgroups).confine(spec.limits)
    try:
        return _SPAWNER.submit(Sandbox, spec, argv, confinement, wire).result()
    except BaseException:
        confinement.remove()
        raise


def _fresh_folder(path: Path) -> None:
    # rmtree does not follow links a previous sandbox may have left there
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, mode=0o700)


def _bridge_command(spec: SandboxSpec) -> list[str]:
    run = bwrap.SANDBOX_RUN
    return [
        str(spec.env_dir / "bin" / "python"),
        "-I",  # the bridge ignores PYTHON* variables and the user's site
        f"{SANDBOX_HELPERS}/bridge.py",
        "--socket",
        f"{run}/{bwrap.WIRE_SOCKET_NAME}",
        "--port",
        str(spec.launch.port),
        "--attempts",
        f"{run}/{bwrap.ATTEMPTS_NAME}",
        "--exit-file",
        f"{run}/{bwrap.EXIT_NAME}",
        "--",
        *spec.launch.argv,
    ]


def _read_untrusted(path: Path) -> str:
    """A file the sandbox could have replaced by a link or a FIFO: never
    followed, never blocked on, read up to a cap."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, MAX_READ_BYTES).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _descendants(root: int) -> list[int]:
    """Every process under ``root`` (the sandbox's processes all descend from
    bwrap: its pid namespace's init adopts orphans)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            # the command name may hold spaces and parentheses: ppid follows the last ')'
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def _folder_usage(path: Path) -> tuple[int, int]:
    """Bytes and entries under ``path``, links not followed; stops counting
    past the entry cap (the sandbox may have made a great many)."""
    total = entries = 0
    for root, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            entries += 1
            with contextlib.suppress(OSError):
                total += (Path(root) / name).lstat().st_size
            if entries > SOCKET_FOLDER_ENTRIES:
                return total, entries
    return total, entries


class Sandbox:
    """``Sandboxed`` (proctor/runner/sandbox/base.py), one bwrap process tree."""

    def __init__(
        self, spec: SandboxSpec, argv: list[str], confinement: Confinement, wire: Path
    ) -> None:
        self.spec = spec
        self._confinement = confinement
        self._wire = wire
        self._run_dir = wire.parent
        self._lock = threading.Lock()
        self._final: Diagnostics | None = None
        limits = rlimits(spec.limits, bound_address_space=confinement.bound_address_space)

        def preexec() -> None:
            # in the forked child, before exec: only os calls (the parent has threads)
            confinement.enter()
            for which, value in limits.items():
                resource.setrlimit(which, value)

        read_fd, write_fd = os.pipe()
        try:
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                start_new_session=True,
                preexec_fn=preexec,  # forked from the spawner thread; os calls only
                env={},
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self._output = OutputCapture(read_fd, spec.work_dir / "output.log")
        self._disk_limit_hit = False
        threading.Thread(target=self._watch_disk, name="sandbox-disk", daemon=True).start()

    def _watch_disk(self) -> None:
        while True:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=WATCH_S)
                return
            size, entries = _folder_usage(self._run_dir)
            if size > SOCKET_FOLDER_BYTES or entries > SOCKET_FOLDER_ENTRIES:
                self._disk_limit_hit = True
                self._signal_all(signal.SIGKILL, outer=True)
                return

    @property
    def wire_socket(self) -> Path:
        return self._wire

    @property
    def pid(self) -> int:
        return self._process.pid

    def running(self) -> bool:
        return self._process.poll() is None

    def _signal_all(self, sig: int, *, outer: bool) -> None:
        """``sig`` to every process inside. bwrap itself is left out of a
        SIGTERM: it would die at once and SIGKILL the inside with it
        (--die-with-parent), leaving the server no grace."""
        pids = set(self._confinement.members()) | set(_descendants(self._process.pid))
        if not outer:
            pids.discard(self._process.pid)
        elif self._process.poll() is None:
            pids.add(self._process.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def stop(self, grace_s: float = 5.0) -> Diagnostics:
        with self._lock:
            if self._final is not None:
                return self._final
            if self._process.poll() is None:
                self._signal_all(signal.SIGTERM, outer=False)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._process.wait(timeout=grace_s)
            if self._process.poll() is None:
                self._signal_all(signal.SIGKILL, outer=True)
                self._process.wait()
            # whatever a double fork left behind, then the cgroups
            self._signal_all(signal.SIGKILL, outer=True)
            diag = self.diagnostics()
            self._confinement.remove()
            self._output.join(timeout_s=5.0)
            self._final = Diagnostics(**{**asdict(diag), "output_tail": self._output.tail()})
            return self._final

    def diagnostics(self) -> Diagnostics:
        if self._final is not None:
            return self._final
        exit_code, sig, cpu_s = self._exit()
        limits = self.spec.limits
        cpu_hit = sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= limits.cpu_seconds)
        return Diagnostics(
            exit_code=exit_code,
            signal=sig,
            memory_peak_bytes=self._confinement.memory_peak(),
            oom_killed=self._confinement.oom_killed(),
            process_limit_hit=self._confinement.process_limit_hit(),
            cpu_limit_hit=cpu_hit,
            disk_limit_hit=self._disk_limit_hit,
            output_tail=self._output.tail(),
            limits={**asdict(limits), "socket_folder_bytes": SOCKET_FOLDER_BYTES},
            limits_backend=self._confinement.backend,
            attempts=self._attempts(),
        )

    def _exit(self) -> tuple[int | None, int | None, float]:
        """How the server ended: the bridge's record of its child when there
        is one, else bwrap's status (128+N is signal N, as the bridge and
        bwrap's init report it)."""
        rc = self._process.poll()
        if rc is None:
            return None, None, 0.0
        record = _parse_exit(_read_untrusted(self._run_dir / bwrap.EXIT_NAME))
        if record is not None:
            return record
        if rc < 0:
            return None, -rc, 0.0
        if 128 < rc <= 128 + 64:
            return None, rc - 128, 0.0
        return rc, None, 0.0

    def _attempts(self) -> tuple[str, ...]:
        text = _read_untrusted(self._run_dir / bwrap.ATTEMPTS_NAME)
        return tuple(clean(line) for line in text.splitlines()[:MAX_ATTEMPTS] if line)


def _parse_exit(text: str) -> tuple[int | None, int | None, float] | None:
    try:
        record = json.loads(text)
        code, sig, cpu = record["exit_code"], record["signal"], float(record["cpu_s"])
    except (ValueError, KeyError, TypeError):
        return None
    valid_code = code is None or (isinstance(code, int) and 0 <= code <= 255)
    valid_sig = sig is None or (isinstance(sig, int) and 0 < sig < 65)
    if not (valid_code and valid_sig) or (code is None) == (sig is None):
        return None
    return code, sig, cpu
