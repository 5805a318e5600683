"""The cache generation: one counter in the database that every write bumps.

Web processes keep what they rendered for anonymous visitors in memory
(``proctor.web.shared_cache``). Before this counter, each process cleared its own
cache after its own commits, so a write made by another process (a second
server worker, ``proctor campaign release``, a station finishing an
episode) stayed invisible there until the entry expired. Now every
``ProctorSession`` transaction that wrote anything also increments
``cache_generation.value`` *in the same transaction*: a reader that sees
the new value also sees the write, and a write that rolls back bumps
nothing. Readers poll the row (``read``) at most every few hundred
milliseconds; that interval bounds how stale another process's write can
look.

What counts as a write is what the session flushed or executed that is not
plainly a SELECT (erring towards clearing caches). The bump is one upsert on
a one-row table at commit: on PostgreSQL it holds that row's lock for the
commit itself only, so it serializes commits, not transactions; on SQLite
writers are serialized anyway.
"""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.orm import ORMExecuteState, Session

from proctor.core.db.models import CacheGeneration

_WROTE = "proctor.wrote"
# set on a session whose commit carried a bump, for after_commit listeners
# (a web process reads the row again at once after its own writes)
BUMPED = "proctor.generation_bumped"
_ROW_ID = 1
_table = cast(sa.Table, CacheGeneration.__table__)


def _mark_write(session: Session, *_: object) -> None:
    session.info[_WROTE] = True


def _mark_statement(state: ORMExecuteState) -> None:
    if not state.is_select:
        _mark_write(state.session)


def _bump_statement(dialect_name: str) -> Any:
    # an upsert, so that a database whose row is missing (made with create_all,
    # or a row deleted by hand) still counts, and two first writers do not collide
    insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    stmt = insert(_table).values(id=_ROW_ID, value=1)
    return stmt.on_conflict_do_update(
        index_elements=[_table.c.id], set_={"value": _table.c.value + 1}
    )


def bump(connection: Connection) -> None:
    """Increment the generation inside ``connection``'s transaction."""
    connection.execute(_bump_statement(connection.dialect.name))


def _before_commit(session: Session) -> None:
    # commit flushes what is pending after this hook: flush it now, so that
    # its writes are known and the bump joins the same transaction
    if session.new or session.dirty or session.deleted:
        session.flush()
    session.info.pop(BUMPED, None)
    if session.info.pop(_WROTE, False):
        # through the connection, not the session: no ORM events, no autoflush
        bump(session.connection())
        session.info[BUMPED] = True


def _after_soft_rollback(session: Session, previous_transaction: Any) -> None:
    # a savepoint rolled back leaves the outer transaction's writes in place
    if getattr(previous_transaction, "nested", False):
        return
    session.info.pop(_WROTE, None)
    session.info.pop(BUMPED, None)


def read(connection: Connection) -> int:
    """The current generation (0 when the row does not exist yet)."""
    value = connection.execute(
        sa.select(_table.c.value).where(_table.c.id == _ROW_ID)
    ).scalar_one_or_none()
    return int(value or 0)


def install(session_class: type[Session]) -> None:
    """Attach the bookkeeping to a Session class (idempotent)."""
    for name, fn in (
        ("after_flush", _mark_write),
        ("do_orm_execute", _mark_statement),
        ("before_commit", _before_commit),
        ("after_soft_rollback", _after_soft_rollback),
    ):
        if not event.contains(session_class, name, fn):
            event.listen(session_class, name, fn)
