"""The real ``proctor serve`` in a subprocess on a free loopback port, for
tests that talk to it over raw sockets."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def proctor_serve(db_url: str, tmp_path: Path, env: dict[str, str]) -> Iterator[Served]:
    """``proctor serve`` as deployed (its own process, uvicorn as it configures
    it); ``env`` adds ``PROCTOR_*`` settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    clean.update(
        {
            "PROCTOR_ENV": "test",
            "PROCTOR_DATA_DIR": str(tmp_path / "served"),
            "PROCTOR_DATABASE_URL": db_url,
            "PYTHONPATH": str(REPO),
            **env,
        }
    )
    port = free_port()
    log = tmp_path / f"serve-{port}.log"
    argv = [sys.executable, "-m", "proctor", "serve", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--no-migrate"]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=clean, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    served = Served("127.0.0.1", port, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"proctor serve exited ({proc.returncode}):\n{served.log_text()}")
            try:
                if httpx.get(served.base_url + "/api/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"proctor serve did not answer within 60 s:\n{served.log_text()}")
            time.sleep(0.2)
        yield served
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# -- a real server ----------------------------------------------------------------------
@dataclass
class Served:
    host: str
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
