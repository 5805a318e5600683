"""The demo's servers, each on loopback: the scripted policy servers (the
real policy wire) and the web app (pages, API and the policy gateway)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from proctor.core.errors import ProctorError


@dataclass
class PolicyServers:
    """One scripted policy server per arm, in background threads."""

    servers: dict[str, Any]

    def url(self, arm: str) -> str:
        """The endpoint as registered (a Positronic server's session URL)."""
        server = self.servers[arm]
        return str(server.session_url() if hasattr(server, "session_url") else server.url)

    def stop(self) -> None:
        for server in self.servers.values():
            server.stop()


def start_policy_servers(arms: tuple[str, ...], *, seed: int) -> PolicyServers:
    """Each arm on the wire its profile names (openpi, RoboArena or Positronic v1)."""
    from proctor.policywire.serving.demo import DemoPolicy, demo_serve

    started: dict[str, Any] = {}
    try:
        for arm in arms:
            started[arm] = demo_serve(DemoPolicy(arm, seed=seed)).start()
    except BaseException:
        PolicyServers(started).stop()
        raise
    return PolicyServers(started)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class WebServer:
    """uvicorn serving the app in a background thread."""

    def __init__(self, app: Any, *, host: str, port: int) -> None:
        import uvicorn

        if not port_is_free(host, port):
            raise ProctorError(
                f"port {port} on {host} is in use: stop what holds it or pass --port"
            )
        self.host, self.port = host, port
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="web", daemon=True)

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> WebServer:
        self._thread.start()
        ready = threading.Event()

        def watch() -> None:
            while not self._server.started and self._thread.is_alive():
                ready.wait(0.05)
            ready.set()

        threading.Thread(target=watch, daemon=True).start()
        ready.wait(timeout_s)
        if not self._server.started:
            self.stop()
            raise ProctorError(f"the web server did not start on {self.origin}")
        return self

    def wait(self) -> None:
        """Serve until interrupted (Ctrl-C)."""
        with contextlib.suppress(KeyboardInterrupt):
            while self._thread.is_alive():
                self._thread.join(0.5)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(10)


@contextlib.contextmanager
def running(web: WebServer) -> Iterator[WebServer]:
    web.start()
    try:
        yield web
    finally:
        web.stop()
