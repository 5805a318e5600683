"""A server in the sandbox reached through the bridge and the relay, its
output captured, its end reported."""

from __future__ import annotations

import os
import random
import signal
from concurrent.futures import ThreadPoolExecutor

from proctor.runner.sandbox.relay import Relay
from tests.runner.sandbox.conftest import (
    LIMITS,
    StartSandbox,
    echo_ready,
    round_trip,
    tcp,
    wait_for,
)


def test_an_echo_server_answers_through_bridge_and_relay(sandboxes: StartSandbox) -> None:
    sandbox = sandboxes("echo", "echo_server.py", "9000")
    echo_ready(sandbox)
    over: list[float] = []
    with Relay(
        "127.0.0.1", 0, sandbox.wire_socket, latency_budget_s=30, on_latency_exceeded=over.append
    ) as relay:
        assert round_trip(tcp(relay.port), b"hello") == b"hello"
        # concurrent connections, each its own bytes back
        payloads = [os.urandom(100_000 + i) for i in range(8)]
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda p: round_trip(tcp(relay.port), p), payloads))
        assert answers == payloads
        # one large binary message (a camera frame's order of size, and more)
        big = random.Random(7).randbytes(20 * 2**20)
        assert round_trip(tcp(relay.port), big) == big
        wait_for(lambda: relay.connections == 0)
    assert over == []
    diag = sandbox.diagnostics()
    assert diag.exit_code is None and sandbox.running()
    assert diag.limits_backend == "cgroup-v1"
    assert diag.memory_peak_bytes is not None and diag.memory_peak_bytes > 0
    assert "echo server listening on 9000" in diag.output_tail


def test_stop_ends_the_server_with_sigterm_and_is_idempotent(sandboxes: StartSandbox) -> None:
    sandbox = sandboxes("stop", "echo_server.py", "9000")
    echo_ready(sandbox)
    first = sandbox.stop(grace_s=5)
    assert not sandbox.running()
    assert first.signal == signal.SIGTERM and first.exit_code is None
    assert sandbox.stop() is first
    assert sandbox.diagnostics() == first
    assert first.as_json()["signal"] == signal.SIGTERM
    assert first.as_json()["attempts"] == []


def test_a_server_that_exits_reports_its_exit_code(sandboxes: StartSandbox) -> None:
    # the echo server without a port argument dies of an IndexError: code 1
    sandbox = sandboxes("crash", "echo_server.py")
    wait_for(lambda: not sandbox.running())
    diag = sandbox.stop()
    assert diag.exit_code == 1 and diag.signal is None
    assert any("IndexError" in line for line in diag.output_tail)


def test_output_is_capped_and_stripped_of_control_characters(sandboxes: StartSandbox) -> None:
    sandbox = sandboxes("spam", "hostile.py", "spam")
    wait_for(lambda: not sandbox.running())
    diag = sandbox.stop()
    assert diag.exit_code == 0
    log = sandbox.spec.work_dir / "output.log"
    # 200 000 lines of ~130 bytes: 26 MB written, 8 MiB kept
    assert 8 * 2**20 <= log.stat().st_size < 8 * 2**20 + 1024
    assert diag.output_tail[-1] == "the end"
    assert len(diag.output_tail) == 50
    line = diag.output_tail[-2]
    assert line.startswith("199999 [31mred[0m spam  line")
    assert all(ord(c) >= 0x20 for tail in diag.output_tail for c in tail)


def test_rlimits_alone_still_run_the_server(sandboxes: StartSandbox) -> None:
    sandbox = sandboxes("rlimit", "echo_server.py", "9000", cgroups="none")
    echo_ready(sandbox)
    diag = sandbox.stop()
    assert diag.limits_backend == "rlimit"
    assert diag.memory_peak_bytes is None
    assert diag.limits["memory_bytes"] == LIMITS.memory_bytes
