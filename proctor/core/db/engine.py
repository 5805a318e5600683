"""Engines and sessions for SQLite (the embedded default) and PostgreSQL."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

from proctor.core.db import append_only, generation
from proctor.core.db.renamed import Adoption, adopt_renamed_file


class ProctorSession(Session):
    """The project's session class: the append-only guard is always attached."""


append_only.install(ProctorSession)
# every write bumps the cache generation that web processes watch
generation.install(ProctorSession)


def _sqlite_pragmas(dbapi_connection: Any, connection_record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # SQLite ignores foreign keys unless asked, per connection
    cursor.execute("PRAGMA foreign_keys=ON")
    # WAL lets the web app read while the station writes
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _private_database_file(path: Path) -> None:
    """The SQLite file (password hashes, encrypted keys) readable by its owner
    only: created 0600 here, before SQLite would create it 0644 under the usual
    umask; SQLite gives its -wal and -shm files the database file's mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        # one made before this rule: tighten it if it is ours
        if path.stat().st_uid == os.getuid() and path.stat().st_mode & 0o077:
            path.chmod(0o600)


def _audit_adoption(engine: Engine, adoption: Adoption) -> None:
    """The move of a misnamed database file, in that database's audit log
    (it has one: the release that misnamed it wrote the same schema)."""
    from proctor.core.audit import Actor, record_audit  # audit imports the models

    if not sa.inspect(engine).has_table("audit_log"):
        return  # a file with no schema yet holds nothing to account for
    with Session(engine) as session, session.begin():
        record_audit(
            session,
            actor=Actor(label="proctor"),
            action="db.file_renamed",
            target_type="database",
            target_id=adoption.moved_to.name,
            details=adoption.audit_details(),
        )


def make_engine(url: str, **kwargs: Any) -> Engine:
    parsed = make_url(url)
    # error messages and logs show the statement, never its values (token
    # hashes, password hashes, API keys)
    kwargs.setdefault("hide_parameters", True)
    if parsed.get_backend_name() == "sqlite":
        adoption = None
        if parsed.database and parsed.database != ":memory:":
            # every opening path comes here (commands, the web app, the demo):
            # the one place a misnamed embedded database is taken back
            adoption = adopt_renamed_file(Path(parsed.database))
            _private_database_file(Path(parsed.database))
        kwargs.setdefault("connect_args", {"check_same_thread": False, "timeout": 30})
        engine = sa.create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        if adoption is not None:
            _audit_adoption(engine, adoption)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return sa.create_engine(url, **kwargs)


def server_pool(*, connections: int, overflow: int, timeout_s: float) -> dict[str, Any]:
    """``make_engine`` keyword arguments for a server's pool: ``connections`` kept
    open, up to ``overflow`` more for a moment, and a checkout that gives up
    (``sqlalchemy.exc.TimeoutError``) after ``timeout_s``. Both backends use a
    QueuePool for a database file or server (SQLAlchemy's default would be 5 + 10
    connections and a 30 s wait, whatever the server's concurrency)."""
    return {
        "poolclass": sa.QueuePool,
        "pool_size": connections,
        "max_overflow": overflow,
        "pool_timeout": timeout_s,
    }


def make_session_factory(engine: Engine) -> sessionmaker[ProctorSession]:
    return sessionmaker(bind=engine, class_=ProctorSession, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[ProctorSession]) -> Iterator[ProctorSession]:
    """A unit of work owned by the caller (a request, a CLI command):
    committed when the block succeeds, rolled back when it raises."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def is_postgresql(engine: Engine) -> bool:
    return engine.dialect.name == "postgresql"
