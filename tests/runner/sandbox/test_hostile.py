"""A hostile checkpoint: every escape it tries is contained, every limit it
runs into is reported and classified, and a well-behaved server in the
sandbox beside it keeps answering throughout."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proctor.core.domain import RunnerFailure
from proctor.runner.failures import classify
from proctor.runner.frameworks.base import HELPERS_DIR
from proctor.runner.sandbox import Sandbox
from proctor.runner.sandbox.base import Limits
from proctor.runner.sandbox.output import DEFAULT_LOG_BYTES
from proctor.runner.sandbox.relay import Relay
from tests.runner.sandbox.conftest import StartSandbox, echo_ready, round_trip, tcp, wait_for

SECRET = "the-host-secret-4b1d"


class Neighbour:
    """A benign sandboxed echo server asked every 20 ms through its relay."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.relay = Relay(
            "127.0.0.1",
            0,
            sandbox.wire_socket,
            latency_budget_s=30,
            on_latency_exceeded=lambda s: None,
        )
        self.answers = self._seen = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._ask, daemon=True)
        self._thread.start()

    def _ask(self) -> None:
        while not self._stop.wait(0.02):
            try:
                if round_trip(tcp(self.relay.port), b"still there?") == b"still there?":
                    self.answers += 1
                else:
                    self.failures.append("wrong answer")
            except OSError as exc:
                self.failures.append(repr(exc))

    def mark(self) -> None:
        self._seen = self.answers

    def assert_answered_throughout(self) -> None:
        # a few more answers after the hostile sandbox ended (a deadline
        # for the condition: a loaded machine answers slower, not never)
        wait_for(lambda: self.answers >= self._seen + 3 or bool(self.failures))
        self._stop.set()
        self._thread.join()
        self.relay.close()
        assert self.failures == []


@pytest.fixture
def neighbour(sandboxes: StartSandbox) -> Iterator[Neighbour]:
    sandbox = sandboxes("neighbour", "echo_server.py", "9000")
    echo_ready(sandbox)
    n = Neighbour(sandbox)
    wait_for(lambda: n.answers >= 1)  # it answers before the hostile one starts
    n.mark()
    yield n
    n.relay.close()


class HostListener:
    """A real web port on the host: it must see no connection from inside."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


def _host_addresses() -> list[str]:
    """This host's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return [probe.getsockname()[0]]
        except OSError:
            return []


def _findings(sandbox: Sandbox) -> dict[str, object]:
    out = {}
    for line in (sandbox.spec.work_dir / "output.log").read_text().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            out[record["probe"]] = record["result"]
    return out


def test_escapes_are_contained(
    sandboxes: StartSandbox,
    neighbour: Neighbour,
    short_dir: Path,
    env_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROCTOR_SECRET_KEY", SECRET)
    web = HostListener()
    data = short_dir / "data"
    data.mkdir()
    (data / "secret.txt").write_text(SECRET)
    (short_dir / "proctor.toml").write_text(f'secret_key = "{SECRET}"\n')
    other = short_dir / "other-checkpoint"
    other.mkdir()
    (other / "policy.toml").write_text(SECRET)
    host_files = [
        str(data / "secret.txt"),
        str(short_dir / "proctor.toml"),
        str(other / "policy.toml"),
        "/etc/shadow",
        "/etc/resolv.conf",
        str(Path(__file__)),  # the project's own tree (/work/…)
        "/root/.pyenv/version",  # /root beyond the base Python's prefix
        "/sys/fs/cgroup/pids/cgroup.procs",
    ]
    present = [p for p in host_files if Path(p).exists()]
    assert len(present) >= 6  # the probes below read files that do exist on the host
    writes = [
        "/checkpoint/pwn",
        "/usr/pwn",
        "/opt/proctor/pwn",
        f"{env_dir}/pwn",
        "/pwn",
        "/etc/pwn",
    ]
    config = {
        "web_port": web.port,
        "host_addresses": _host_addresses(),
        "read": present,
        "write": writes,
    }
    sandbox = sandboxes("probes", "hostile.py", "probes", json.dumps(config), env={"OK_VAR": "1"})
    wait_for(lambda: not sandbox.running())
    diag = sandbox.stop()
    found = _findings(sandbox)
    assert diag.exit_code == 0, diag.output_tail

    # positive controls: the probes work where access is meant to be allowed
    assert found["own_checkpoint"]["ok"] and found["tmp_writable"]["ok"]  # type: ignore[index]
    assert found["uid"] == 65534
    # network: the tripwire took the 5432 connection and said nothing (the
    # host's PostgreSQL answers an SSLRequest with N or S); nothing else reached
    postgres = found["postgres"]
    assert postgres in ({"ok": True, "value": ""}, {"ok": False, "error": "ConnectionResetError"})
    assert found["host_web_loopback"]["ok"] is False  # type: ignore[index]
    for address in config["host_addresses"]:
        assert found[f"host_web_{address}"]["ok"] is False  # type: ignore[index]
    assert found["dns"]["ok"] is False  # type: ignore[index]
    assert web.accepted == 0
    assert any(a.startswith("connect 127.0.0.1:5432 at ") for a in diag.attempts)
    # files: nothing of the host's is readable, nothing outside /tmp writable
    leaked = [p for p in present if found[f"read {p}"]["ok"]]  # type: ignore[index]
    assert leaked == []
    written = [p for p in writes if found[f"write {p}"]["ok"]]  # type: ignore[index]
    assert written == []
    for folder in (HELPERS_DIR, env_dir, sandbox.spec.checkpoint_dir):
        assert not (folder / "pwn").exists()
    # environment: only what the runner passed, and ours
    assert found["secret_env"] is None
    # PWD: bwrap's --chdir; LC_CTYPE: Python's own locale coercion inside
    names = set(found["env_names"]) - {"LC_CTYPE"}  # type: ignore[arg-type]
    assert names == {"HOME", "TMPDIR", "PATH", "PWD", "OK_VAR"}
    assert found["pids_visible"] <= 4  # bwrap's init, the bridge, this script
    assert SECRET not in (sandbox.spec.work_dir / "output.log").read_text()
    neighbour.assert_answered_throughout()


def test_a_fork_bomb_hits_the_process_limit(sandboxes: StartSandbox, neighbour: Neighbour) -> None:
    limits = Limits(memory_bytes=256 * 2**20, max_processes=32, cpu_seconds=60)
    sandbox = sandboxes("fork", "hostile.py", "fork", limits=limits)
    wait_for(lambda: not sandbox.running())
    diag = sandbox.stop()
    assert _findings(sandbox)["fork"]["refused"] is True  # type: ignore[index]
    assert diag.process_limit_hit and diag.exit_code == 3
    assert classify(diag, was_ready=False)[0] == RunnerFailure.sandbox_refused
    neighbour.assert_answered_throughout()


def test_memory_past_the_limit_is_an_oom_kill(
    sandboxes: StartSandbox, neighbour: Neighbour
) -> None:
    limits = Limits(memory_bytes=128 * 2**20, max_processes=64, cpu_seconds=60)
    sandbox = sandboxes("memory", "hostile.py", "memory", "1024", limits=limits)
    wait_for(lambda: not sandbox.running())
    diag = sandbox.stop()
    assert "not stopped" not in str(_findings(sandbox).get("memory"))
    assert diag.oom_killed and diag.signal == 9
    assert diag.memory_peak_bytes is not None and diag.memory_peak_bytes <= 128 * 2**20
    failure, message = classify(diag, was_ready=True)
    assert failure == RunnerFailure.out_of_memory and "128 MiB" in message
    neighbour.assert_answered_throughout()


def test_cpu_past_the_limit_is_stopped(sandboxes: StartSandbox, neighbour: Neighbour) -> None:
    limits = Limits(memory_bytes=256 * 2**20, max_processes=64, cpu_seconds=1)
    sandbox = sandboxes("cpu", "hostile.py", "cpu", limits=limits)
    started = time.monotonic()
    wait_for(lambda: not sandbox.running(), timeout_s=30)
    diag = sandbox.stop()
    assert diag.cpu_limit_hit, diag
    assert time.monotonic() - started < 30
    assert classify(diag, was_ready=True)[0] == RunnerFailure.sandbox_refused
    neighbour.assert_answered_throughout()


# what the host's folder for one sandbox may hold at most: the output log's
# cap, its truncation note, the sandbox's /etc files and the socket (a few KiB)
HOST_FOLDER_CAP = DEFAULT_LOG_BYTES + 64 * 1024


def _host_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += (Path(root) / name).lstat().st_size
    return total


@pytest.mark.parametrize("target", ["/run/proctor", "/"])
def test_writing_200_mib_never_reaches_the_hosts_disk(
    sandboxes: StartSandbox, neighbour: Neighbour, target: str
) -> None:
    """The sandbox has no writable host folder (the review's 175 MiB got into
    the bound socket folder before a 0.5 s watcher killed it): 200 × 1 MiB
    is refused at the first file, and the host's folder for the sandbox,
    measured every 10 ms while it runs, stays under the output log's cap."""
    sandbox = sandboxes(f"disk{len(target)}", "hostile.py", "disk", target)
    host_folder = sandbox.spec.work_dir
    peak = 0
    deadline = time.monotonic() + 30
    while sandbox.running() and time.monotonic() < deadline:
        peak = max(peak, _host_bytes(host_folder))
        time.sleep(0.01)
    diag = sandbox.stop()
    peak = max(peak, _host_bytes(host_folder))
    finding = _findings(sandbox)["disk"]
    assert finding == {"written": 0, "error": finding["error"]} and finding["error"], finding  # type: ignore[index]
    assert diag.exit_code == 0, diag.output_tail
    assert peak <= HOST_FOLDER_CAP, f"{peak} bytes on the host's disk"
    neighbour.assert_answered_throughout()


def test_the_wire_socket_is_the_hosts_and_private(sandboxes: StartSandbox) -> None:
    """The host makes the wire's socket (0600) in a folder (0700) the sandbox
    never sees; only its listening descriptor goes in."""
    sandbox = sandboxes("wire", "echo_server.py", "9000")
    echo_ready(sandbox)
    assert stat.S_IMODE(sandbox.wire_socket.stat().st_mode) == 0o600
    assert stat.S_IMODE(sandbox.wire_socket.parent.stat().st_mode) == 0o700
    assert stat.S_ISSOCK(sandbox.wire_socket.lstat().st_mode)
