"""Constraints the schema promises, on both databases."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError, IntegrityError

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import AuditLog, ReviewAction
from proctor.core.domain import ReviewActionKind
from proctor.core.errors import AppendOnlyViolation
from tests import factories as f


def test_counts_may_not_exceed_items(db_session: ProctorSession) -> None:
    obj = f.object_type(db_session)
    ok = f.episode(db_session, obj, items=8, placed=5, lost=2, dropped=1)
    assert ok.id is not None
    with pytest.raises(IntegrityError, match="counts_within_items"), db_session.begin_nested():
        f.episode(db_session, obj, items=8, placed=6, lost=2, dropped=1)


def test_negative_counts_rejected(db_session: ProctorSession) -> None:
    obj = f.object_type(db_session)
    with pytest.raises(IntegrityError, match="counts_within_items"), db_session.begin_nested():
        f.episode(db_session, obj, items=8, placed=-1, lost=0, dropped=0)


def test_run_codes_are_unique(db_session: ProctorSession) -> None:
    obj, pol, camp = f.object_type(db_session), f.policy(db_session), f.campaign(db_session)
    f.assignment(db_session, camp, pol, obj, sequence=0, run_code="R-7F3K")
    with pytest.raises(IntegrityError, match="run_code"), db_session.begin_nested():
        f.assignment(db_session, camp, pol, obj, sequence=1, run_code="R-7F3K")


def _review_action(session: ProctorSession) -> ReviewAction:
    ep = f.episode(session, f.object_type(session))
    action = ReviewAction(episode_id=ep.id, action=ReviewActionKind.confirm, after={"t_s": 1.0})
    session.add(action)
    session.flush()
    return action


@pytest.mark.parametrize("model", ["review", "audit"])
def test_append_only_rows_cannot_be_updated_through_the_orm(
    db_session: ProctorSession, model: str
) -> None:
    row = _review_action(db_session) if model == "review" else _audit_row(db_session)
    if isinstance(row, ReviewAction):
        row.note = "tampered"
    else:
        row.action = "tampered"
    with pytest.raises(AppendOnlyViolation):
        db_session.flush()
    db_session.rollback()


@pytest.mark.parametrize("model", ["review", "audit"])
def test_append_only_rows_cannot_be_deleted_through_the_orm(
    db_session: ProctorSession, model: str
) -> None:
    row = _review_action(db_session) if model == "review" else _audit_row(db_session)
    db_session.delete(row)
    with pytest.raises(AppendOnlyViolation):
        db_session.flush()
    db_session.rollback()


@pytest.mark.parametrize("model", [ReviewAction, AuditLog])
def test_bulk_update_and_delete_are_refused(db_session: ProctorSession, model: type) -> None:
    with pytest.raises(AppendOnlyViolation):
        db_session.execute(sa.update(model).values(id=model.id))
    with pytest.raises(AppendOnlyViolation):
        db_session.execute(sa.delete(model))


@pytest.mark.parametrize("table", ["review_actions", "audit_log"])
def test_database_triggers_refuse_raw_sql(db_session: ProctorSession, table: str) -> None:
    """Even a client that bypasses the ORM cannot rewrite history."""
    _review_action(db_session)
    _audit_row(db_session)
    with pytest.raises(DBAPIError, match="append-only"), db_session.begin_nested():
        db_session.execute(sa.text(f"UPDATE {table} SET id = id"))
    with pytest.raises(DBAPIError, match="append-only"), db_session.begin_nested():
        db_session.execute(sa.text(f"DELETE FROM {table}"))


def test_new_append_only_rows_can_be_added(db_session: ProctorSession) -> None:
    _review_action(db_session)
    _audit_row(db_session)
    db_session.add(AuditLog(action="second", actor_label="cli"))
    db_session.flush()
    assert db_session.scalar(sa.select(sa.func.count()).select_from(AuditLog)) == 2


def _audit_row(session: ProctorSession) -> AuditLog:
    row = AuditLog(action="campaign.reveal", actor_label="cli", details={"campaign": 1})
    session.add(row)
    session.flush()
    return row
