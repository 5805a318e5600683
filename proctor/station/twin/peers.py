"""Protocol peers as child processes: franky-sim, the simulated 2F-85, and
the socat pty pair that carries Modbus RTU between driver and gripper.

Peers run in their own processes, not as threads beside the drivers: franky's
bindings can hold the GIL while they wait on the controller, and a simulator
that needs the same GIL to answer would deadlock with them.

This module only orchestrates (it starts ``python -m …`` modules that live
under ``proctor/station/drivers/``); it imports no hardware library. Readiness is
read from each peer's own output — ``READY …`` on stdout, socat's "starting
data transfer loop" on stderr — never guessed with a sleep.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from proctor.core.clock import Clock, MonotonicClock

log = logging.getLogger(__name__)


class PeerError(RuntimeError):
    """A protocol peer failed to start (with what it printed)."""


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent goes away, so a
    station that is killed (or a test run that is) leaves no simulator
    spinning. Linux only; elsewhere the peers' own parent watch covers it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _read_line(stream: IO[bytes], deadline: float, clock: Clock) -> str | None:
    """One line from a pipe, waiting on the pipe (not a sleep) until the
    deadline; ``None`` on timeout or end of stream."""
    fd = stream.fileno()
    buf = bytearray()
    while True:
        remaining = deadline - clock.now()
        if remaining <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            return None
        chunk = os.read(fd, 1)
        if not chunk:
            return None
        if chunk == b"\n":
            return buf.decode(errors="replace")
        buf += chunk


class PeerProcess:
    """A child process that announces readiness with a line on one of its
    streams; stopped with SIGTERM (then SIGKILL) on ``stop``."""

    name = "peer"

    def __init__(
        self,
        argv: Sequence[str],
        ready_prefix: str,
        ready_stream: str = "stdout",
        log_path: Path | None = None,
        clock: Clock | None = None,
        start_timeout_s: float = 30.0,
    ) -> None:
        self.argv = list(argv)
        self.ready_prefix = ready_prefix
        self.ready_stream = ready_stream
        self.log_path = log_path
        self.clock = clock or MonotonicClock()
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready_line: str | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> str:
        if self.proc is not None:
            raise PeerError(f"{self.name} is already running")
        other = subprocess.DEVNULL
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("wb")
            other = self._log  # type: ignore[assignment]
        pipes = {"stdout": other, "stderr": other}
        pipes[self.ready_stream] = subprocess.PIPE
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=pipes["stdout"],
            stderr=pipes["stderr"],
            start_new_session=True,  # a Ctrl-C at the station's terminal is ours to forward
            preexec_fn=_die_with_parent,
        )
        stream = self.proc.stdout if self.ready_stream == "stdout" else self.proc.stderr
        if stream is None:
            raise PeerError(f"{self.name}: no pipe to read readiness from")
        deadline = self.clock.now() + self.start_timeout_s
        seen: list[str] = []
        while True:
            line = _read_line(stream, deadline, self.clock)
            if line is None:
                code = self.proc.poll()
                self.stop()
                why = f"exited with {code}" if code is not None else "timed out"
                raise PeerError(
                    f"{self.name} {why} before it was ready "
                    f"({' '.join(self.argv)}); it said: {' | '.join(seen[-5:]) or 'nothing'}"
                )
            seen.append(line)
            if self._log is not None:
                self._log.write(line.encode() + b"\n")
            if self.ready_prefix in line:
                self.ready_line = line
                # keep reading the pipe, or a chatty peer blocks once it fills
                threading.Thread(
                    target=self._drain, args=(stream,), name=f"{self.name}-drain", daemon=True
                ).start()
                return line

    def _drain(self, stream: IO[bytes]) -> None:
        try:
            for chunk in iter(lambda: stream.read1(4096), b""):  # type: ignore[attr-defined]
                log_file = self._log
                if log_file is not None and not log_file.closed:
                    log_file.write(chunk)
        except (OSError, ValueError):
            pass  # the pipe closed under us: the peer is gone

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 5.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.error("%s ignored SIGTERM for %.0f s; killing it", self.name, timeout_s)
                proc.kill()
                proc.wait()
        if proc is not None:
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> PeerProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class FrankySimProcess(PeerProcess):
    """franky-sim (MuJoCo behind libfranka's protocol) on a loopback address."""

    name = "franky-sim"

    def __init__(
        self,
        initial_q: Sequence[float] | None = None,
        hostname: str | None = None,
        log_path: Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        argv = [sys.executable, "-m", "proctor.station.drivers.arm.franky_sim_server"]
        if initial_q is not None:
            # one token with "=": a first angle such as -0.5 would otherwise read as an option
            argv.append("--initial-q=" + ",".join(f"{v:.6f}" for v in initial_q))
        if hostname is not None:
            argv += ["--hostname", hostname]
        super().__init__(argv, "READY ", log_path=log_path, clock=clock)
        self.host: str | None = None

    def start(self) -> str:
        line = super().start()
        self.host = line.split("READY ", 1)[1].strip()
        return self.host


class SocatPtyPair(PeerProcess):
    """Two pseudo-terminals joined back to back: what one end writes, the
    other reads — a serial cable on one machine. Links give them stable names."""

    name = "socat"

    def __init__(self, driver_end: Path, device_end: Path, clock: Clock | None = None) -> None:
        socat = shutil.which("socat")
        if socat is None:
            raise PeerError("socat is not installed (Debian package socat; ./run test installs it)")
        self.driver_end = driver_end
        self.device_end = device_end
        super().__init__(
            [
                socat,
                "-d",
                "-d",
                f"pty,raw,echo=0,link={driver_end}",
                f"pty,raw,echo=0,link={device_end}",
            ],
            "starting data transfer loop",
            ready_stream="stderr",
            clock=clock,
            start_timeout_s=10.0,
        )


class GripperSimProcess(PeerProcess):
    """The simulated Robotiq 2F-85 serving Modbus RTU on a serial device."""

    name = "simulated 2F-85"

    def __init__(
        self,
        port: Path,
        activation_s: float = 1.0,
        log_path: Path | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(
            [
                sys.executable,
                "-m",
                "proctor.station.drivers.gripper.robotiq_sim",
                "--port",
                str(port),
                "--activation-s",
                str(activation_s),
            ],
            "READY",
            log_path=log_path,
            clock=clock,
        )
