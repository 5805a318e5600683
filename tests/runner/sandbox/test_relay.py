"""The relay: use and latency watched, and a link planted in the socket
folder never followed."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from proctor.runner.sandbox.relay import Relay
from tests.runner.sandbox.conftest import StartSandbox, echo_ready, round_trip, tcp, wait_for


class SilentUnixServer:
    """A Unix socket on the host that accepts, reads and never answers (it
    closes when its client does)."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen()
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        with conn:
            while conn.recv(1 << 16):
                pass


def _closed(conn: socket.socket) -> bool:
    """The relay closed the connection (a reset when our bytes were unread)."""
    try:
        return conn.recv(10) == b""
    except ConnectionResetError:
        return True


def test_a_slow_reply_calls_the_latency_budget_once(sandboxes: StartSandbox) -> None:
    sandbox = sandboxes("slow", "echo_server.py", "9000")
    echo_ready(sandbox)
    over: list[float] = []
    with Relay(
        "127.0.0.1", 0, sandbox.wire_socket, latency_budget_s=0.2, on_latency_exceeded=over.append
    ) as relay:
        assert round_trip(tcp(relay.port), b"quick") == b"quick"
        assert over == []
        assert round_trip(tcp(relay.port), b"slow:1") == b"slow:1"
        assert round_trip(tcp(relay.port), b"slow:2") == b"slow:2"
        wait_for(lambda: relay.connections == 0)
    assert len(over) == 1 and over[0] >= 0.2
    assert max(relay.latencies) >= 0.5


def test_an_exchange_never_answered_is_over_budget(short_dir: Path) -> None:
    silent = SilentUnixServer(short_dir / "wire.sock")
    over: list[float] = []
    with Relay(
        "127.0.0.1",
        0,
        short_dir / "wire.sock",
        latency_budget_s=0.2,
        on_latency_exceeded=over.append,
    ) as relay:
        before = relay.last_used
        with socket.create_connection(("127.0.0.1", relay.port)) as conn:
            conn.sendall(b"anyone?")
            wait_for(lambda: relay.connections == 1 and silent.accepted == 1)
            time.sleep(0.05)
            # an open connection is use: last_used is now while it lasts
            assert relay.last_used > before + 0.04
            wait_for(lambda: len(over) == 1)
        wait_for(lambda: relay.connections == 0)
        used = relay.last_used
        time.sleep(0.05)
        assert relay.last_used == used
    assert len(over) == 1 and over[0] > 0.2


def test_a_link_in_the_socket_folder_is_not_followed(short_dir: Path) -> None:
    """The sandbox owns its socket folder: a link there to a host socket
    must not connect the gateway's traffic to it."""
    host = SilentUnixServer(short_dir / "host.sock")
    (short_dir / "sock").mkdir()
    (short_dir / "sock" / "wire.sock").symlink_to(short_dir / "host.sock")
    with Relay(
        "127.0.0.1",
        0,
        short_dir / "sock" / "wire.sock",
        latency_budget_s=5,
        on_latency_exceeded=lambda s: None,
    ) as relay:
        with socket.create_connection(("127.0.0.1", relay.port)) as conn:
            conn.settimeout(10)
            conn.sendall(b"observation")
            assert _closed(conn)
        wait_for(lambda: relay.connections == 0)
    assert host.accepted == 0


def test_close_stops_listening_and_drops_connections(short_dir: Path) -> None:
    SilentUnixServer(short_dir / "wire.sock")
    relay = Relay(
        "127.0.0.1",
        0,
        short_dir / "wire.sock",
        latency_budget_s=5,
        on_latency_exceeded=lambda s: None,
    )
    conn = socket.create_connection(("127.0.0.1", relay.port))
    conn.settimeout(10)
    wait_for(lambda: relay.connections == 1)
    relay.close()
    assert _closed(conn)
    conn.close()
    wait_for(lambda: relay.connections == 0)
    try:
        socket.create_connection(("127.0.0.1", relay.port), timeout=2).close()
        refused = False
    except OSError:
        refused = True
    assert refused
    relay.close()  # idempotent
