"""Shared fixtures: databases on both backends, artifact stores, settings.

Every test that asks for ``db_session`` runs twice: on SQLite and on the real
PostgreSQL at 127.0.0.1:5432. Each backend gets a fresh, migrated database
per test run (dropped at the end); each test runs inside a transaction that
is rolled back, so tests never see each other's rows.

PostgreSQL being down is a failure, not a skip: the suite's promise is that
it ran on both. ``PROCTOR_TEST_BACKENDS=sqlite`` narrows a local run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import migrate
from proctor.core.db.engine import ProctorSession, make_engine

# live server + headless Chromium fixtures for every service's browser tests; the
# runner's LeRobot environment for the runner's and the LeRobot export's tests; the
# policy servers and subprocesses the station's and the protocol layer's tests share
pytest_plugins = ["tests.browser", "tests.lerobot_env", "tests.policy_servers"]

PG_ADMIN_URL = os.environ.get(
    "PROCTOR_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
BACKENDS = [
    b.strip() for b in os.environ.get("PROCTOR_TEST_BACKENDS", "sqlite,postgresql").split(",")
]


class PostgresDatabases:
    """Creates and drops uniquely named databases on the test server."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.created: list[str] = []
        try:
            self._admin = make_engine(admin_url, isolation_level="AUTOCOMMIT")
            with self._admin.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
        except Exception as exc:
            pytest.fail(
                f"PostgreSQL at {make_url(admin_url).render_as_string(hide_password=True)} "
                f"is not reachable ({exc.__class__.__name__}); start it with "
                "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`",
                pytrace=False,
            )

    def create(self, label: str = "t") -> str:
        name = f"proctor_test_{label}_{uuid.uuid4().hex[:10]}"
        with self._admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        self.created.append(name)
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        with self._admin.connect() as conn:
            for name in self.created:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self._admin.dispose()


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[PostgresDatabases]:
    dbs = PostgresDatabases(PG_ADMIN_URL)
    yield dbs
    dbs.drop_all()


@pytest.fixture
def fresh_db_url(request: pytest.FixtureRequest, backend: str, tmp_path: Path) -> str:
    """An empty database (not migrated) that the test may commit to."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'fresh.db'}"
    return request.getfixturevalue("postgres_databases").create("fresh")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class MigratedEngines(dict[str, Engine]):
    """One migrated database per backend for the whole run, created on first use."""

    def __init__(self, request: pytest.FixtureRequest, tmp: pytest.TempPathFactory) -> None:
        super().__init__()
        self._request = request
        self._tmp = tmp

    def __missing__(self, backend: str) -> Engine:
        if backend == "sqlite":
            url = f"sqlite:///{self._tmp.mktemp('db') / 'suite.db'}"
        else:
            url = self._request.getfixturevalue("postgres_databases").create("suite")
        migrate.upgrade(url)
        self[backend] = engine = make_engine(url)
        return engine


@pytest.fixture(scope="session")
def migrated_engines(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MigratedEngines]:
    engines = MigratedEngines(request, tmp_path_factory)
    yield engines
    for engine in engines.values():
        engine.dispose()


@pytest.fixture
def db_engine(backend: str, migrated_engines: dict[str, Engine]) -> Engine:
    return migrated_engines[backend]


@pytest.fixture
def db_session(db_engine: Engine) -> Iterator[ProctorSession]:
    """A session inside an outer transaction that is rolled back after the
    test; the code under test may call ``commit()`` (it commits a savepoint)."""
    connection = db_engine.connect()
    outer = connection.begin()
    session = ProctorSession(bind=connection, join_transaction_mode="create_savepoint")
    try:
        yield session
    finally:
        session.close()
        outer.rollback()
        connection.close()


@pytest.fixture
def artifact_store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")
