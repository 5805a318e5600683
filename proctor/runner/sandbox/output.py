"""A sandboxed server's stdout and stderr: read from a pipe by a thread into a
size-capped log file (a server spamming output must not fill the host's
disk) and a ring of its last lines, stripped of control characters (they
reach the admin's page and the submitter's report)."""

from __future__ import annotations

import collections
import os
import re
import threading
from pathlib import Path

TAIL_LINES = 50
LINE_CHARS = 500
DEFAULT_LOG_BYTES = 8 * 2**20
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
TRUNCATED = b"\n[proctor: output past the log's size cap is not kept]\n"


def clean(line: str) -> str:
    """One line as it may be shown: no control characters (escape sequences,
    carriage returns, bidirectional overrides), at most ``LINE_CHARS``."""
    return _CONTROL.sub("", line)[:LINE_CHARS]


class OutputCapture:
    def __init__(self, fd: int, log_path: Path, max_log_bytes: int = DEFAULT_LOG_BYTES) -> None:
        self._fd = fd
        self._log_path = log_path
        self._max = max_log_bytes
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._partial = b""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="sandbox-output", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        written = 0
        with self._log_path.open("wb") as log:
            while chunk := os.read(self._fd, 1 << 16):
                if written < self._max:
                    keep = chunk[: self._max - written]
                    log.write(keep)
                    written += len(keep)
                    if written >= self._max:
                        log.write(TRUNCATED)
                    log.flush()
                self._lines(chunk)
        os.close(self._fd)
        if self._partial:
            self._lines(b"\n")

    def _lines(self, chunk: bytes) -> None:
        *complete, partial = (self._partial + chunk).split(b"\n")
        # a line without an end is kept to a bounded length
        self._partial = partial[-4 * LINE_CHARS :]
        with self._lock:
            for raw in complete[-TAIL_LINES:]:
                self._tail.append(clean(raw.decode("utf-8", "replace")))

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def tail(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._tail)
