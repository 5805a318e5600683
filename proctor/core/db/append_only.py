"""Append-only tables: review actions and the audit log.

Enforced twice, because either alone can be bypassed: an ORM guard here
(refuses flushes that update or delete such rows, and bulk UPDATE/DELETE
statements aimed at them), and database triggers created by the migration
(refuse UPDATE/DELETE from any client).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session

from proctor.core.db.models import AuditLog, ReviewAction
from proctor.core.errors import AppendOnlyViolation

APPEND_ONLY_TABLES: tuple[str, ...] = (ReviewAction.__tablename__, AuditLog.__tablename__)
_APPEND_ONLY_CLASSES = (ReviewAction, AuditLog)


def _guard_flush(session: Session, flush_context: Any, instances: Any) -> None:
    for obj in list(session.dirty) + list(session.deleted):
        if isinstance(obj, _APPEND_ONLY_CLASSES) and (
            obj in session.deleted or session.is_modified(obj, include_collections=False)
        ):
            raise AppendOnlyViolation(
                f"{type(obj).__tablename__} rows cannot be changed or deleted"
            )


def _guard_bulk(state: ORMExecuteState) -> None:
    if not (state.is_update or state.is_delete):
        return
    statement = state.statement
    table = getattr(statement, "table", None)
    if isinstance(table, sa.Table) and table.name in APPEND_ONLY_TABLES:
        raise AppendOnlyViolation(f"{table.name} rows cannot be changed or deleted")


def install(session_class: type[Session] = Session) -> None:
    """Attach the guard to a Session class (idempotent)."""
    if not event.contains(session_class, "before_flush", _guard_flush):
        event.listen(session_class, "before_flush", _guard_flush)
    if not event.contains(session_class, "do_orm_execute", _guard_bulk):
        event.listen(session_class, "do_orm_execute", _guard_bulk)
