"""Audit rows: who did what to which thing, in the caller's transaction.

One ``Actor`` and one writer for every service (accounts, submissions,
campaigns, the login throttle, the conformance worker). The ``audit_log``
table is append-only; its text columns have fixed widths, so the limits are
applied here, once, rather than failing on PostgreSQL (and silently storing
more on SQLite) when a label or a target id is long.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from proctor.core.db.models import AuditLog

if TYPE_CHECKING:
    from proctor.core.db.models import User

# the widths of audit_log's columns (proctor/core/db/models/people.py)
LABEL_CHARS = 128
TEXT_CHARS = 64


@dataclass(frozen=True)
class Actor:
    """Who acts: a signed-in user (``user_id``), or a label when nobody is
    (``cli``, ``cli:alice``, a station's name, ``anonymous``)."""

    user_id: int | None = None
    label: str = ""

    @classmethod
    def cli(cls) -> Actor:
        return cls(label="cli")

    @classmethod
    def of(cls, user: User | None, *, label: str = "") -> Actor:
        """The signed-in ``user``, or ``label`` when there is none."""
        return cls(user_id=user.id if user is not None else None, label=label)


def record_audit(
    session: Session,
    *,
    actor: Actor,
    action: str,
    target_type: str = "",
    target_id: object = "",
    details: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> AuditLog:
    """Add one audit row to the caller's transaction (never commits).
    ``at`` defaults to the time of the insert (``utcnow``)."""
    row = AuditLog(
        actor_id=actor.user_id,
        actor_label=actor.label[:LABEL_CHARS],
        action=action[:TEXT_CHARS],
        target_type=target_type[:TEXT_CHARS],
        target_id=str(target_id)[:TEXT_CHARS],
        details=details or {},
    )
    if at is not None:
        row.at = at
    session.add(row)
    return row
