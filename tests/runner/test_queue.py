"""The runner queue on both databases: demand, claims, heartbeats, stale hosts."""

from __future__ import annotations

from datetime import timedelta

import pytest

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import ConformanceRun, RunnerServer, Submission
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    AssignmentStatus,
    CampaignStatus,
    ConformanceRunStatus,
    RunnerFailure,
    RunnerFault,
    RunnerStatus,
    SubmissionKind,
)
from proctor.runner import queue
from tests import factories


def _checkpoint(session: ProctorSession) -> Submission:
    sub = Submission(
        policy_id=factories.policy(session).id,
        kind=SubmissionKind.checkpoint,
        checkpoint_sha256="ab" * 32,
        manifest={"runner": {"framework": "command"}},
    )
    session.add(sub)
    session.flush()
    return sub


def test_request_serving_is_idempotent_while_a_server_lives(db_session: ProctorSession) -> None:
    sub = _checkpoint(db_session)
    first = queue.request_serving(db_session, sub.id, reason="conformance")
    again = queue.request_serving(db_session, sub.id, reason="campaign")
    assert again.id == first.id and first.status == RunnerStatus.queued
    queue.finish(db_session, first.id, now=utcnow(), failure=None, message="idle", diagnostics={})
    third = queue.request_serving(db_session, sub.id, reason="campaign")
    assert third.id != first.id and third.requested_for == "campaign"


def test_demand_comes_from_checks_and_running_campaigns_only(db_session: ProctorSession) -> None:
    checked, in_campaign, done, draft = (_checkpoint(db_session) for _ in range(4))
    db_session.add(ConformanceRun(submission_id=checked.id, status=ConformanceRunStatus.queued))
    obj = factories.object_type(db_session)
    running = factories.campaign(db_session, status=CampaignStatus.running)
    finished_runs = factories.campaign(db_session, status=CampaignStatus.running)
    drafted = factories.campaign(db_session, status=CampaignStatus.draft)
    for camp, sub, status in (
        (running, in_campaign, AssignmentStatus.pending),
        (finished_runs, done, AssignmentStatus.done),
        (drafted, draft, AssignmentStatus.pending),
    ):
        a = factories.assignment(
            db_session, camp, db_session.get(type(sub.policy), sub.policy_id), obj, 0
        )
        a.submission_id, a.status = sub.id, status
    db_session.flush()
    needed = queue.needed_submissions(db_session)
    assert needed.get(checked.id) == "conformance"
    assert needed.get(in_campaign.id) == "campaign"
    assert done.id not in needed and draft.id not in needed
    queued = queue.sync_demand(db_session, utcnow())
    assert {r.submission_id for r in queued} >= {checked.id, in_campaign.id}
    assert queue.sync_demand(db_session, utcnow()) == []  # already live: nothing new


def test_a_queued_server_is_claimed_once(db_session: ProctorSession) -> None:
    sub = _checkpoint(db_session)
    row = queue.request_serving(db_session, sub.id, reason="conformance")
    now = utcnow()
    got = queue.claim(db_session, host="a", worker="a:1", now=now)
    assert got is not None and got.id == row.id and got.status == RunnerStatus.building
    # the same row is no longer queued: a second host finds nothing of it
    other = queue.claim(db_session, host="b", worker="b:2", now=now)
    assert other is None or other.id != row.id


def test_only_the_holder_may_move_its_row(db_session: ProctorSession) -> None:
    sub = _checkpoint(db_session)
    row = queue.request_serving(db_session, sub.id, reason="conformance")
    queue.claim(db_session, host="a", worker="a:1", now=utcnow())
    assert not queue.set_stage(
        db_session, row.id, "b:2", "x", utcnow(), status=RunnerStatus.starting
    )
    assert queue.mark_ready(
        db_session, row.id, "a:1", url="ws://127.0.0.1:1", dialect="openpi", device="cpu",
        now=utcnow(),
    )  # fmt: skip
    assert not queue.finish(
        db_session, row.id, now=utcnow(), failure=RunnerFailure.inference_crash,
        message="x", diagnostics={}, worker="b:2",
    )  # fmt: skip
    assert db_session.get(RunnerServer, row.id).status == RunnerStatus.ready


def test_a_silent_host_is_the_platforms_fault_and_the_checkpoint_is_served_again(
    db_session: ProctorSession,
) -> None:
    sub = _checkpoint(db_session)
    db_session.add(ConformanceRun(submission_id=sub.id, status=ConformanceRunStatus.running))
    row = queue.request_serving(db_session, sub.id, reason="conformance")
    then = utcnow() - timedelta(minutes=5)
    queue.claim(db_session, host="a", worker="a:1", now=then)
    queue.mark_ready(
        db_session, row.id, "a:1", url="ws://127.0.0.1:1", dialect="openpi", device="cpu", now=then
    )
    now = utcnow()
    assert queue.fail_stale(db_session, now=now, stale_after_s=30) == [row.id]
    db_session.refresh(row)
    assert row.status == RunnerStatus.failed
    assert row.failure == RunnerFailure.runner_unresponsive and row.fault == RunnerFault.platform
    (again,) = [r for r in queue.sync_demand(db_session, now) if r.submission_id == sub.id]
    assert again.id != row.id and again.status == RunnerStatus.queued


@pytest.mark.parametrize(
    ("failure", "fault"),
    [
        (RunnerFailure.out_of_memory, RunnerFault.submitter),
        (RunnerFailure.inference_crash, RunnerFault.submitter),
        (RunnerFailure.host_error, RunnerFault.platform),
    ],
)
def test_a_failure_records_whose_fault_it_is(
    db_session: ProctorSession, failure: RunnerFailure, fault: RunnerFault
) -> None:
    sub = _checkpoint(db_session)
    row = queue.request_serving(db_session, sub.id, reason="conformance")
    assert queue.finish(
        db_session, row.id, now=utcnow(), failure=failure, message="m",
        diagnostics={"exit_code": 1},
    )  # fmt: skip
    db_session.refresh(row)
    assert (row.status, row.failure, row.fault) == (RunnerStatus.failed, failure, fault)
    assert row.diagnostics == {"exit_code": 1}


def test_the_database_holds_one_live_server_per_submission(db_session: ProctorSession) -> None:
    """Two askers racing past the "is one live?" read (two stations claiming at
    once) cannot both insert: the second live row is refused by the index, and
    request_serving returns the row that won."""
    import sqlalchemy as sa

    sub = _checkpoint(db_session)
    first = queue.request_serving(db_session, sub.id, reason="campaign")
    with pytest.raises(sa.exc.IntegrityError), db_session.begin_nested():
        db_session.add(
            RunnerServer(submission_id=sub.id, status=RunnerStatus.queued, diagnostics={})
        )
    # a finished life does not count: a new one may be queued beside it
    queue.finish(db_session, first.id, now=utcnow(), failure=None, message="", diagnostics={})
    with db_session.begin_nested():
        db_session.add(
            RunnerServer(submission_id=sub.id, status=RunnerStatus.queued, diagnostics={})
        )


def test_a_checks_server_failed_by_the_submitter_is_not_queued_again(
    db_session: ProctorSession,
) -> None:
    """The check fails with it; starting it again every tick would only run a
    failing (or hostile) checkpoint once more for nothing."""
    sub = _checkpoint(db_session)
    db_session.add(ConformanceRun(submission_id=sub.id, status=ConformanceRunStatus.queued))
    db_session.flush()
    (row,) = [r for r in queue.sync_demand(db_session, utcnow()) if r.submission_id == sub.id]
    queue.claim(db_session, host="a", worker="a:1", now=utcnow())
    assert queue.finish(
        db_session, row.id, now=utcnow(), failure=RunnerFailure.sandbox_refused,
        message="x", diagnostics={}, worker="a:1",
    )  # fmt: skip
    assert [r for r in queue.sync_demand(db_session, utcnow()) if r.submission_id == sub.id] == []


def test_a_ready_server_whose_host_went_silent_is_not_handed_out(
    db_session: ProctorSession,
) -> None:
    """Between a host's death and the row failing stale, the scheduler and the
    gateway must not treat the server as serving (a station would be sent to
    a server that is gone)."""
    from proctor.core.runner_rows import SILENT_AFTER_S, serving

    sub = _checkpoint(db_session)
    row = queue.request_serving(db_session, sub.id, reason="campaign")
    then = utcnow()
    queue.claim(db_session, host="a", worker="a:1", now=then)
    queue.mark_ready(
        db_session, row.id, "a:1", url="ws://127.0.0.1:1", dialect="openpi", device="cpu", now=then
    )
    assert serving(row, then + timedelta(seconds=1))
    assert not serving(row, then + timedelta(seconds=SILENT_AFTER_S + 1))
    queue.heartbeat(db_session, "a:1", [row.id], then + timedelta(seconds=SILENT_AFTER_S))
    db_session.refresh(row)
    assert serving(row, then + timedelta(seconds=SILENT_AFTER_S + 1))
