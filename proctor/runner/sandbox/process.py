"""A started sandbox: bubblewrap running our bridge, which runs the server.

``start(spec)`` makes the work folder's socket and /etc folders and the
wire's listening socket, confines the sandbox's first process (the cgroups,
the rlimits) before it execs bwrap, and reads its output and the bridge's
reports. ``stop`` ends everything inside; ``diagnostics`` says how it went.

The sandbox has no writable host folder: the wire's socket file is made
here, in a folder the sandbox cannot see, and only its listening descriptor
goes in; the bridge's records (tripwire attempts, how the server exited)
come back on a pipe read with a cap. What a server writes lands in its
/tmp, a tmpfs charged to its memory limit, never on the host's disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import socket
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
# the bridge's reports are kept up to a cap: the server inside could write
# into the same pipe (through /proc), and anything past it is read and dropped
MAX_READ_BYTES = 64 * 1024
MAX_ATTEMPTS = 200

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
    listener = _listen(wire)
    report_read, report_write = os.pipe()
    fds = _Handed(listener, report_read, report_write)
    try:
        command = _bridge_command(spec, listener.fileno(), report_write)
        argv = bwrap.bwrap_argv(spec, command, env)
        confinement = choose(cgroups).confine(spec.limits)
    except BaseException:
        fds.close_all()
        raise
    try:
        return _SPAWNER.submit(Sandbox, spec, argv, confinement, wire, fds).result()
    except BaseException:
        confinement.remove()
        raise


class _Handed:
    """The descriptors the sandbox gets (the wire's listener, the report
    pipe's write end) and the host's end of the report pipe."""

    def __init__(self, listener: socket.socket, report_read: int, report_write: int) -> None:
        self.listener = listener
        self.report_read = report_read
        self.report_write = report_write

    def inherited(self) -> tuple[int, ...]:
        return (self.listener.fileno(), self.report_write)

    def close_inherited(self) -> None:
        # the host keeps no copy: once the sandbox ends, the socket refuses
        # connections and the report pipe reaches its end
        self.listener.close()
        with contextlib.suppress(OSError):
            os.close(self.report_write)

    def close_all(self) -> None:
        self.close_inherited()
        with contextlib.suppress(OSError):
            os.close(self.report_read)


def _listen(path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # private: its folder is 0700 (``_fresh_folder``), so no other local
        # account reaches the socket even for the moment before the chmod. Not
        # by narrowing the umask around bind: the umask is the whole process's,
        # and another thread (the worker's, the web app's) creating a folder in
        # that moment would get it without its x bits
        listener.bind(str(path))
        path.chmod(0o600)
        listener.listen(128)
    except BaseException:
        listener.close()
        raise
    return listener


def _fresh_folder(path: Path) -> None:
    # rmtree does not follow links a previous sandbox may have left there
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True, mode=0o700)


def _bridge_command(spec: SandboxSpec, socket_fd: int, report_fd: int) -> list[str]:
    return [
        str(spec.env_dir / "bin" / "python"),
        "-I",  # the bridge ignores PYTHON* variables and the user's site
        f"{SANDBOX_HELPERS}/bridge.py",
        "--socket-fd",
        str(socket_fd),
        "--report-fd",
        str(report_fd),
        "--port",
        str(spec.launch.port),
        "--",
        *spec.launch.argv,
    ]


class ReportCapture:
    """The bridge's JSON lines, read from the pipe by a thread: the first
    ``MAX_READ_BYTES`` kept, the rest read and dropped (a writer must never
    block on a full pipe, nor fill the host's memory)."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._kept = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="sandbox-report", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while chunk := os.read(self._fd, 1 << 16):
                with self._lock:
                    self._kept += chunk[: MAX_READ_BYTES - len(self._kept)]
        finally:
            os.close(self._fd)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def items(self) -> list[dict[str, object]]:
        with self._lock:
            text = bytes(self._kept).decode("utf-8", "replace")
        out = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                item = json.loads(line)
                if isinstance(item, dict):
                    out.append(item)
        return out


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


class Sandbox:
    """``Sandboxed`` (proctor/runner/sandbox/base.py), one bwrap process tree."""

    def __init__(
        self,
        spec: SandboxSpec,
        argv: list[str],
        confinement: Confinement,
        wire: Path,
        fds: _Handed,
    ) -> None:
        self.spec = spec
        self._confinement = confinement
        self._wire = wire
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
                pass_fds=fds.inherited(),  # bwrap passes them on to the bridge
                start_new_session=True,
                preexec_fn=preexec,  # forked from the spawner thread; os calls only
                env={},
            )
        except BaseException:
            os.close(read_fd)
            fds.close_all()
            raise
        finally:
            os.close(write_fd)
        fds.close_inherited()
        self._output = OutputCapture(read_fd, spec.work_dir / "output.log")
        self._report = ReportCapture(fds.report_read)

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
            self._report.join(timeout_s=5.0)
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
            output_tail=self._output.tail(),
            limits=asdict(limits),
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
        records = [item["exit"] for item in self._report.items() if "exit" in item]
        record = _parse_exit(records[-1]) if records else None
        if record is not None:
            return record
        if rc < 0:
            return None, -rc, 0.0
        if 128 < rc <= 128 + 64:
            return None, rc - 128, 0.0
        return rc, None, 0.0

    def _attempts(self) -> tuple[str, ...]:
        lines = [item["attempt"] for item in self._report.items() if "attempt" in item]
        return tuple(clean(line) for line in lines[:MAX_ATTEMPTS] if isinstance(line, str) and line)


def _parse_exit(record: object) -> tuple[int | None, int | None, float] | None:
    """The bridge's exit record, as untrusted as anything from inside."""
    if not isinstance(record, dict):
        return None
    try:
        code, sig, cpu = record["exit_code"], record["signal"], float(record["cpu_s"])
    except (ValueError, KeyError, TypeError):
        return None
    valid_code = code is None or (isinstance(code, int) and 0 <= code <= 255)
    valid_sig = sig is None or (isinstance(sig, int) and 0 < sig < 65)
    if not (valid_code and valid_sig) or (code is None) == (sig is None):
        return None
    return code, sig, cpu
