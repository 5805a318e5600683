"""The web app over HTTP: ``web`` gives a fresh app per test on each
database backend (a copy of a migrated template database: a file copy for
SQLite, ``CREATE DATABASE … TEMPLATE`` for PostgreSQL), a controllable clock,
and helpers to create users, sign in and mint tokens. Requests go through
httpx (Starlette's TestClient) into the real ASGI app, middleware included.
"""

from __future__ import annotations

import re
import sqlite3
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from proctor.core.db import migrate
from proctor.core.db.engine import ProctorSession, make_engine, session_scope
from proctor.core.domain import Role
from proctor.core.settings import Settings, load_settings
from tests.conftest import PG_ADMIN_URL, PostgresDatabases

with warnings.catch_warnings():
    # Starlette 1.x prefers the httpx2 package; httpx is what the project ships
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

PASSWORD = "correct horse battery"
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


class FakeClock:
    """The app's clock in tests: starts at a fixed instant, moves when told."""

    def __init__(self, start: datetime = datetime(2031, 5, 4, 9, 0, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class TemplateDatabases:
    """One migrated template per backend; each test gets a copy."""

    def __init__(self, tmp: Path, pg: PostgresDatabases | None) -> None:
        self.tmp = tmp
        self.pg = pg
        self._sqlite: Path | None = None
        self._pg_template: str | None = None

    def copy(self, backend: str) -> str:
        if backend == "sqlite":
            if self._sqlite is None:
                self._sqlite = self.tmp / "template.db"
                migrate.upgrade(f"sqlite:///{self._sqlite}")
            target = self.tmp / f"web-{uuid.uuid4().hex[:8]}.db"
            # the backup API copies a consistent image, WAL content included
            with sqlite3.connect(self._sqlite) as src, sqlite3.connect(target) as dst:
                src.backup(dst)
            return f"sqlite:///{target}"
        assert self.pg is not None
        if self._pg_template is None:
            url = self.pg.create("webtpl")
            migrate.upgrade(url)
            self._pg_template = make_url(url).database
        name = f"proctor_test_web_{uuid.uuid4().hex[:10]}"
        admin = make_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{self._pg_template}"'))
        finally:
            admin.dispose()
        return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)

    def drop(self, url: str) -> None:
        """Drop a PostgreSQL copy as soon as its test is done (SQLite files go
        with the test's temporary folder)."""
        parsed = make_url(url)
        if parsed.get_backend_name() != "postgresql":
            return
        admin = make_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)'))
        finally:
            admin.dispose()


@pytest.fixture(scope="session")
def web_template_dbs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> TemplateDatabases:
    from tests.conftest import BACKENDS

    pg = request.getfixturevalue("postgres_databases") if "postgresql" in BACKENDS else None
    return TemplateDatabases(tmp_path_factory.mktemp("webdb"), pg)


@pytest.fixture
def web_db_url(backend: str, web_template_dbs: TemplateDatabases) -> Iterator[str]:
    """A migrated database of its own for this test (on each backend)."""
    url = web_template_dbs.copy(backend)
    yield url
    web_template_dbs.drop(url)


@dataclass
class Web:
    """The app under test and what tests need around it."""

    app: Any
    clock: FakeClock
    settings: Settings
    clients: list[TestClient] = field(default_factory=list)

    def client(self, ip: str = "10.0.0.1") -> TestClient:
        """An HTTP client; ``ip`` is the client address the app sees."""
        c = TestClient(self.app, client=(ip, 50000), follow_redirects=False)
        self.clients.append(c)
        return c

    @contextmanager
    def db(self) -> Iterator[ProctorSession]:
        with session_scope(self.app.state.web.session_factory) as session:
            yield session

    def add_user(
        self, username: str, *roles: Role, password: str | None = PASSWORD, active: bool = True
    ) -> int:
        from proctor.web.accounts import service

        with self.db() as session:
            user = service.create_user(
                session=session,
                passwords=self.app.state.web.passwords,
                username=username,
                password=password,
                roles=roles,
                actor=service.Actor(label="test"),
                now=self.clock(),
            )
            if not active:
                user.is_active = False
            return user.id

    def token(
        self, username: str, scopes: tuple[str, ...] = (), expires_in_days: int | None = None
    ) -> str:
        """Mint a token through the service (as the CLI does); returns it."""
        from proctor.web.accounts import service

        with self.db() as session:
            user = service.get_user_by_username(session, username)
            assert user is not None
            _, plaintext = service.create_token(
                session=session,
                user=user,
                name=f"test {len(scopes)}",
                scopes=scopes,
                expires_in_days=expires_in_days,
                allowed_roles=list(Role),
                actor=service.Actor(label="test"),
                now=self.clock(),
            )
            return plaintext

    def audit(self, action: str) -> list[Any]:
        from proctor.core.db.models import AuditLog

        with self.db() as session:
            rows = session.scalars(
                sa.select(AuditLog).where(AuditLog.action == action).order_by(AuditLog.id)
            )
            return [
                (r.actor_id, r.actor_label, r.target_type, r.target_id, dict(r.details))
                for r in rows
            ]


def csrf_from(html: str) -> str:
    match = CSRF_RE.search(html)
    assert match, "no CSRF field in the page"
    return match.group(1)


def login(client: TestClient, username: str, password: str = PASSWORD, next: str = "/") -> Any:
    """Sign in through the real form (GET for the CSRF token, then POST)."""
    page = client.get("/login")
    assert page.status_code == 200
    return client.post(
        "/login",
        data={
            "username": username,
            "password": password,
            "next": next,
            "csrf_token": csrf_from(page.text),
        },
    )


def page_csrf(client: TestClient, path: str = "/account") -> str:
    r = client.get(path)
    assert r.status_code == 200, (path, r.status_code)
    return csrf_from(r.text)


@pytest.fixture
def web_settings(web_db_url: str, tmp_path: Path) -> Settings:
    return load_settings(
        env="test",
        data_dir=tmp_path,
        database_url=web_db_url,
        secret_key="test-secret-key-" + "x" * 32,
    )


def web_app(settings: Settings) -> Iterator[Web]:
    """The app for ``settings`` on a fake clock, its clients closed and its
    engine disposed after. Fixtures ``yield from web_app(settings)``."""
    from proctor.web.app import create_app

    clock = FakeClock()
    harness = Web(app=create_app(settings, clock=clock), clock=clock, settings=settings)
    yield harness
    for c in harness.clients:
        c.close()
    harness.app.state.web.engine.dispose()


@pytest.fixture
def web(web_settings: Settings) -> Iterator[Web]:
    yield from web_app(web_settings)
