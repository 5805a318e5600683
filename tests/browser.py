"""Browser tests: the real app on a loopback port, driven by headless Chromium.

Registered for the whole suite (``pytest_plugins`` in ``tests/conftest.py``),
so any test can ask for:

* ``live_server`` — a ``LiveServer``: ``create_app`` under uvicorn in a
  thread on a free 127.0.0.1 port, over a fresh migrated SQLite database and
  a temporary artifact folder. Seed data with ``live_server.db()`` (a
  committed transaction on the same database) or ``live_server.add_user``.
  ``start_live_server(**settings)`` builds one with other settings.
* ``chromium`` — headless Debian Chromium, one per test (``launch_chromium``;
  the launch arguments are in /work/shared/RECIPES.md).
* ``page`` — a Playwright page in a fresh browser context whose
  ``base_url`` is the live server, so ``page.goto("/login")`` works. Every
  request, WebSocket and navigation is checked: one that would leave
  127.0.0.1/localhost is blocked and fails the test.
* ``sign_in(page, username, password)`` — fills the real login form.

Mark browser tests ``@pytest.mark.browser``.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import uvicorn
from fastapi import FastAPI

from proctor.core.db import migrate
from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import User
from proctor.core.domain import Role
from proctor.core.settings import Settings, load_settings

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-default-apps",
    "--disable-domain-reliability",
]
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
# schemes that never touch the network
LOCAL_SCHEMES = frozenset({"data", "blob", "about", "chrome-error"})
DEFAULT_PASSWORD = "correct horse battery"


def is_loopback_url(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme in LOCAL_SCHEMES:
        return True
    return (parts.hostname or "") in LOOPBACK_HOSTS


@dataclass
class LiveServer:
    base_url: str
    app: FastAPI
    settings: Settings

    @contextmanager
    def db(self) -> Iterator[ProctorSession]:
        """A transaction on the server's database, committed at the end."""
        with session_scope(self.app.state.web.session_factory) as session:
            yield session

    def add_user(self, username: str, *roles: Role, password: str | None = DEFAULT_PASSWORD) -> int:
        """Create an account through the accounts service; returns its id."""
        from proctor.web.accounts import service

        with self.db() as session:
            user: User = service.create_user(
                session=session,
                passwords=self.app.state.web.passwords,
                username=username,
                password=password,
                roles=roles,
                actor=service.Actor(label="test"),
                now=self.app.state.web.clock(),
            )
            return user.id


def _free_loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def serve_app(app: FastAPI, settings: Settings) -> Iterator[LiveServer]:
    """Run ``app`` under uvicorn in a thread until the block ends."""
    sock = _free_loopback_socket()
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            pytest.fail("the live server did not start within 15 s")
        time.sleep(0.02)
    try:
        yield LiveServer(base_url=f"http://127.0.0.1:{port}", app=app, settings=settings)
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
        if thread.is_alive():
            pytest.fail("the live server did not stop within 15 s")


@pytest.fixture
def start_live_server(tmp_path: Path) -> Iterator[Callable[..., LiveServer]]:
    """A factory: ``start_live_server(**settings_overrides)`` starts one server
    over a fresh migrated SQLite database; all stop at the end of the test."""
    from proctor.web.app import create_app

    stack: list[Any] = []

    def start(**overrides: Any) -> LiveServer:
        n = len(stack)
        data_dir = tmp_path / f"live{n}"
        url = overrides.pop("database_url", None) or f"sqlite:///{data_dir / 'proctor.db'}"
        data_dir.mkdir(parents=True, exist_ok=True)
        migrate.upgrade(url)
        settings = load_settings(
            **({"env": "test", "data_dir": data_dir, "database_url": url} | overrides)
        )
        cm = serve_app(create_app(settings), settings)
        server = cm.__enter__()
        stack.append(cm)
        return server

    yield start
    for cm in reversed(stack):
        cm.__exit__(None, None, None)


@pytest.fixture
def live_server(start_live_server: Callable[..., LiveServer]) -> LiveServer:
    return start_live_server()


def launch_chromium(playwright: Any) -> Any:
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail(
            "Debian chromium is not installed: `apt-get install -y chromium` "
            "(./run test installs it)",
            pytrace=False,
        )
    return playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)


@pytest.fixture
def chromium() -> Iterator[Any]:
    # One browser per test (~0.7 s): Playwright's sync API keeps an asyncio
    # loop running in the main thread while it is open, which would break any
    # later test that calls asyncio.run(), so it must not outlive the test.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class NetworkGuard:
    """Blocks and records every request that would leave loopback."""

    offenders: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)

    def route(self, route: Any) -> None:
        url = route.request.url
        self.seen.append(url)
        if is_loopback_url(url):
            route.continue_()
        else:
            self.offenders.append(url)
            route.abort("blockedbyclient")

    def websocket(self, ws: Any) -> None:
        if not is_loopback_url(ws.url):
            self.offenders.append(ws.url)


@pytest.fixture
def page(chromium: Any, live_server: LiveServer) -> Iterator[Any]:
    guard = NetworkGuard()
    context = chromium.new_context(
        base_url=live_server.base_url, viewport={"width": 1280, "height": 800}
    )
    context.route("**/*", guard.route)
    context.set_default_timeout(10_000)
    pg = context.new_page()
    pg.on("websocket", guard.websocket)
    console_errors: list[str] = []
    pg.on("pageerror", lambda exc: console_errors.append(str(exc)))
    pg.network_guard = guard  # type: ignore[attr-defined]
    pg.page_errors = console_errors  # type: ignore[attr-defined]
    try:
        yield pg
    finally:
        context.close()
    if guard.offenders:
        pytest.fail(f"requests tried to leave localhost: {guard.offenders}", pytrace=False)


def sign_in(page: Any, username: str, password: str = DEFAULT_PASSWORD) -> None:
    page.goto("/login")
    page.fill("#username", username)
    page.fill("#password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state()
