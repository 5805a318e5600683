"""``proctor runner serve``: a checkpoint archive served exactly as a runner
host serves it (the same unpacking, environment, sandbox and limits), tried
with the station's own conformance check, then stopped with Ctrl-C; and a
checkpoint whose server dies before it is ready, reported with its reason.

The checkpoint is the demo's: a scripted arm packed as a submitter packs one
(``proctor.demo.checkpoint``), its environment built from pinned wheels into
the host-wide cache (once per machine)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from proctor.demo.checkpoint import build_archive
from proctor.policywire.conformance.check import CheckOptions, check_endpoint
from tests.runner.conftest import free_port

pytestmark = pytest.mark.slow  # the first run on a machine builds the environment


def _serve(archive: Path, port: int, tmp_path: Path, report: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PROCTOR_DATA_DIR": str(tmp_path / "data"),
        "PROCTOR_RUNNER__MEMORY_BYTES": str(2 * 2**30),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "proctor", "runner", "serve", str(archive), "--port", str(port),
         "--report", str(report)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )  # fmt: skip


def _lines_until(proc: subprocess.Popen[str], needle: str, timeout_s: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip())
        if needle in line:
            return seen
    raise AssertionError(f"never printed {needle!r}:\n" + "\n".join(seen))


def test_a_checkpoint_archive_is_served_checked_and_stopped(tmp_path: Path) -> None:
    archive = build_archive(tmp_path / "dawdler.tgz", seed=3, name="dawdler-trial")
    port = free_port()
    proc = _serve(archive, port, tmp_path, tmp_path / "report.json")
    try:
        seen = _lines_until(proc, "serving dawdler-trial", 900)
        # each stage is printed as it starts
        text = "\n".join(seen)
        for stage in ("unpacking the checkpoint", "environment command-", "starting the sandboxed"):
            assert stage in text, text
        report = check_endpoint(f"ws://127.0.0.1:{port}", options=CheckOptions(dialect="openpi"))
        assert report.passed, report.summary
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    assert "stopped" in out


def _crashing_archive(path: Path) -> Path:
    files = {
        "policy.toml": b"""name = "crashes-early"
[runner]
framework = "command"
command = ["python", "serve.py", "{port}"]
[policy]
action_space = "joint_position"
chunk_length = 4
""",
        "serve.py": b"import sys\nprint('loading weights... no', flush=True)\nsys.exit(3)\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_server_that_exits_before_ready_is_reported_as_the_submitters_setup_crash(
    tmp_path: Path,
) -> None:
    archive = _crashing_archive(tmp_path / "crash.tgz")
    report = tmp_path / "report.json"
    proc = _serve(archive, free_port(), tmp_path, report)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 1, out
    assert "failed: setup_crash (submitter's fault)" in out
    assert "exited with code 3" in out
    # the server's own last words reach the submitter
    assert "loading weights... no" in out
    import json

    ended = json.loads(report.read_text())
    assert ended["failure"] == "setup_crash" and ended["fault"] == "submitter"
    assert ended["diagnostics"]["exit_code"] == 3
