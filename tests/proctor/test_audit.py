"""One ``Actor`` and one audit writer for every service, with the widths of
the audit table's columns applied once (on both databases)."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from proctor.core import audit
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import AuditLog
from proctor.scheduler import service as campaigns
from proctor.web.accounts import service as accounts
from proctor.web.auth.passwords import Passwords
from tests.scheduler import builders


def _rows(session: ProctorSession, action: str) -> list[AuditLog]:
    return list(session.scalars(sa.select(AuditLog).where(AuditLog.action == action)))


def test_every_service_acts_through_the_one_actor() -> None:
    assert campaigns.Actor is audit.Actor
    assert accounts.Actor is audit.Actor


def test_the_row_says_who_did_what_to_which_thing(db_session: ProctorSession) -> None:
    at = datetime(2026, 11, 24, 7, 0, tzinfo=UTC)
    row = audit.record_audit(
        db_session,
        actor=audit.Actor(user_id=None, label="cli:alice"),
        action="policy.update",
        target_type="policy",
        target_id=7,
        details={"name": "new"},
        at=at,
    )
    db_session.flush()
    (stored,) = _rows(db_session, "policy.update")
    assert stored is row
    assert (stored.actor_id, stored.actor_label, stored.target_type, stored.target_id) == (
        None,
        "cli:alice",
        "policy",
        "7",
    )
    assert stored.details == {"name": "new"} and stored.at == at


def test_long_labels_and_ids_are_cut_to_the_columns_by_every_service(
    db_session: ProctorSession,
) -> None:
    """The campaign service used to write its own rows uncut: a long actor
    label failed on PostgreSQL and was stored whole on SQLite."""
    long_label = "station:" + "x" * 300
    w = builders.world(db_session, 3)
    campaigns.create_campaign(
        db_session, protocol=builders.protocol(w), actor=audit.Actor(label=long_label)
    )
    accounts.create_user(
        session=db_session,
        passwords=Passwords(cheap=True),
        username="ada",
        password=None,
        actor=audit.Actor(label=long_label),
        now=datetime(2026, 11, 24, tzinfo=UTC),
    )
    audit.record_audit(db_session, actor=audit.Actor.cli(), action="a" * 100, target_id="t" * 100)
    db_session.flush()
    for action in ("campaign.create", "user.create"):
        (row,) = _rows(db_session, action)
        assert row.actor_label == long_label[: audit.LABEL_CHARS]
    (cut,) = _rows(db_session, "a" * audit.TEXT_CHARS)
    assert cut.target_id == "t" * audit.TEXT_CHARS and cut.actor_label == "cli"
