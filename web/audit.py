"""Writing audit rows from the web app and its CLI (append-only table)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from proctor.db.engine import ProctorSession
from proctor.db.models import AuditLog, User

_TEXT = 64


def record(
    *,
    session: ProctorSession,
    action: str,
    now: datetime,
    actor: User | None = None,
    actor_label: str = "",
    target_type: str = "",
    target_id: str | int = "",
    details: dict[str, Any] | None = None,
) -> AuditLog:
    """Add one audit row to the caller's transaction (never commits).

    ``actor`` is the signed-in user who acted; ``actor_label`` says who acted
    when no user did ("cli", "anonymous").
    """
    row = AuditLog(
        at=now,
        actor_id=actor.id if actor is not None else None,
        actor_label=actor_label[:128],
        action=action[:_TEXT],
        target_type=target_type[:_TEXT],
        target_id=str(target_id)[:_TEXT],
        details=details or {},
    )
    session.add(row)
    return row
