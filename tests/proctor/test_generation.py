"""The cache generation (proctor.core.db.generation): every transaction that
writes through a ProctorSession bumps one row in that same transaction, so
that every process watching the row learns of the write; nothing else
does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from proctor.core.db import generation, migrate
from proctor.core.db.engine import make_engine, make_session_factory, session_scope
from proctor.core.db.models import ObjectType

REPO = Path(__file__).resolve().parents[2]


def _now(engine: Engine) -> int:
    with engine.connect() as conn:
        return generation.read(conn)


def _engine(url: str) -> Engine:
    migrate.upgrade(url)
    return make_engine(url)


def test_a_committed_write_bumps_it_and_nothing_else_does(fresh_db_url: str) -> None:
    engine = _engine(fresh_db_url)
    sessions = make_session_factory(engine)
    try:
        start = _now(engine)
        with session_scope(sessions) as s:  # a read-only transaction
            s.scalars(sa.select(ObjectType)).all()
        assert _now(engine) == start

        with session_scope(sessions) as s:  # an ORM insert, flushed by the commit
            s.add(ObjectType(name="spoons", display_name="Spoons", tags=["rigid"]))
        assert _now(engine) == start + 1

        with session_scope(sessions) as s:  # a bulk statement
            s.execute(sa.update(ObjectType).values(display_name="Spoons!"))
        assert _now(engine) == start + 2

        s = sessions()
        s.add(ObjectType(name="towels", display_name="Towels", tags=[]))
        s.flush()
        s.rollback()  # a write that never happened
        s.close()
        assert _now(engine) == start + 2

        with session_scope(sessions) as s:  # a savepoint undone, the outer write kept
            s.add(ObjectType(name="forks", display_name="Forks", tags=[]))
            nested = s.begin_nested()
            s.add(ObjectType(name="cups", display_name="Cups", tags=[]))
            s.flush()
            nested.rollback()
        assert _now(engine) == start + 3
    finally:
        engine.dispose()


def test_a_write_in_another_process_is_counted(fresh_db_url: str) -> None:
    engine = _engine(fresh_db_url)
    try:
        start = _now(engine)
        code = (
            "import sys\n"
            "from proctor.core.db.engine import make_engine, make_session_factory, session_scope\n"
            "from proctor.core.db.models import ObjectType\n"
            "e = make_engine(sys.argv[1])\n"
            "with session_scope(make_session_factory(e)) as s:\n"
            "    s.add(ObjectType(name='plates', display_name='Plates', tags=[]))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, fresh_db_url],
            cwd=REPO,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert _now(engine) == start + 1
    finally:
        engine.dispose()


def test_a_database_without_the_row_starts_counting(fresh_db_url: str) -> None:
    engine = _engine(fresh_db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("DELETE FROM cache_generation"))
        assert _now(engine) == 0
        with session_scope(make_session_factory(engine)) as s:
            s.add(ObjectType(name="bowls", display_name="Bowls", tags=[]))
        assert _now(engine) == 1
    finally:
        engine.dispose()
