"""Uploaded checkpoints in a campaign: their runner servers are asked for,
their runs wait (pending) until the server is ready, and a server failure
during an episode is charged to the policy only when it was the submitter's.

The ``RunnerServer`` rows written here stand in for the runner host
(``proctor/runner``, which has its own tests): a host moves a row from
``queued`` through ``building``/``starting`` to ``ready`` (url, dialect) and
ends it ``failed`` with a failure and whose fault it was.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

import sqlalchemy as sa

from proctor.core.db.models import (
    Assignment,
    Episode,
    EpisodeEvent,
    Policy,
    RunnerServer,
    Submission,
    User,
)
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    AssignmentStatus,
    ConformanceStatus,
    EndpointDialect,
    EpisodeState,
    Outcome,
    RunnerFailure,
    RunnerStatus,
    SubmissionKind,
)
from proctor.scheduler import claims, runners, service
from proctor.scheduler.claims import claim_next
from proctor.scheduler.schemas import CampaignStatusOut
from proctor.scheduler.service import Actor
from tests.scheduler import builders

ADMIN = Actor(label="test-admin")


def _checkpoint_policy(session) -> tuple[Policy, Submission]:
    owner = User(username=f"ckpt-owner-{secrets.token_hex(3)}")
    session.add(owner)
    session.flush()
    policy = Policy(name=f"ckpt-{secrets.token_hex(3)}", owner_id=owner.id)
    session.add(policy)
    session.flush()
    sub = Submission(
        policy_id=policy.id,
        kind=SubmissionKind.checkpoint,
        checkpoint_sha256=secrets.token_hex(32),
        conformance_status=ConformanceStatus.passed,
    )
    session.add(sub)
    session.flush()
    return policy, sub


def _campaign_with_checkpoint(session):
    w = builders.world(session, 1)
    policy, sub = _checkpoint_policy(session)
    proto = builders.protocol(w, policies=[w.policies[0].name, policy.name])
    c = service.create_campaign(session, protocol=proto, actor=ADMIN)
    service.start_campaign(session, campaign=c.id, actor=ADMIN)
    return w, c, policy, sub


def _servers(session, sub: Submission) -> list[RunnerServer]:
    return list(
        session.scalars(
            sa.select(RunnerServer)
            .where(RunnerServer.submission_id == sub.id)
            .order_by(RunnerServer.id)
        )
    )


def _host_moves(server: RunnerServer, status: RunnerStatus, **kw) -> None:
    """What the runner host writes (stands in for ``proctor/runner``),
    its heartbeat included."""
    server.status = status
    server.heartbeat_at = utcnow()
    for k, v in kw.items():
        setattr(server, k, v)


def test_starting_a_campaign_asks_for_its_checkpoints_runner(db_session) -> None:
    _, _, _, sub = _campaign_with_checkpoint(db_session)
    (server,) = _servers(db_session, sub)
    assert server.status == RunnerStatus.queued
    assert server.requested_for == "campaign"


def test_runs_of_a_checkpoint_wait_pending_until_its_runner_is_ready(db_session) -> None:
    _, c, _, sub = _campaign_with_checkpoint(db_session)
    st = builders.station(db_session)
    (server,) = _servers(db_session, sub)
    _host_moves(server, RunnerStatus.building, stage="building environment")
    db_session.flush()

    # the campaign's pages say why its runs are not handed out
    report = service.campaign_status(db_session, campaign=c.id)
    waiting = {cell.waiting for cell in report.cells}
    assert "waiting for runner: building environment" in waiting
    assert None in waiting  # the endpoint's and the reference's cells wait for nothing
    out = CampaignStatusOut.of(report)
    assert "waiting for runner: building environment" in {cell.waiting for cell in out.cells}

    ckpt_total = db_session.scalar(
        sa.select(sa.func.count()).where(Assignment.submission_id == sub.id)
    )
    others = db_session.scalar(
        sa.select(sa.func.count()).where(
            Assignment.campaign_id == c.id, Assignment.submission_id != sub.id
        )
    )
    handed: list[int] = []
    for _ in range(others):
        claim = claim_next(db_session, campaign_id=c.id, station_id=st.id)
        assert claim is not None
        a = db_session.scalars(
            sa.select(Assignment).where(Assignment.run_code == claim.run_code)
        ).one()
        handed.append(a.submission_id)
        claims.release_claim(db_session, run_code=claim.run_code, station_id=st.id)
        a.status = AssignmentStatus.done  # as if it ran; the next claim takes another
        db_session.flush()
    assert sub.id not in handed
    # only the checkpoint's runs are left: nothing to hand out, and none was skipped
    assert claim_next(db_session, campaign_id=c.id, station_id=st.id) is None
    statuses = db_session.scalars(
        sa.select(Assignment.status).where(Assignment.submission_id == sub.id)
    ).all()
    assert len(statuses) == ckpt_total
    assert set(statuses) == {AssignmentStatus.pending}

    _host_moves(
        server,
        RunnerStatus.ready,
        url="ws://127.0.0.1:18231",
        dialect="roboarena",
        ready_at=utcnow(),
        stage="ready",
    )
    db_session.flush()
    claim = claim_next(db_session, campaign_id=c.id, station_id=st.id)
    assert claim is not None
    a = db_session.scalars(sa.select(Assignment).where(Assignment.run_code == claim.run_code)).one()
    assert a.submission_id == sub.id
    # the station speaks the runner's wire through the gateway; nothing else of it
    assert claim.dialect == EndpointDialect.roboarena
    assert claim.teleop_url is None and "18231" not in repr(claim)


def test_a_failed_runner_is_asked_for_again_while_runs_are_left(db_session) -> None:
    _, c, _, sub = _campaign_with_checkpoint(db_session)
    st = builders.station(db_session)
    (server,) = _servers(db_session, sub)
    _host_moves(
        server,
        RunnerStatus.failed,
        failure=RunnerFailure.runner_unresponsive,
        fault=RunnerFailure.runner_unresponsive.fault,
        finished_at=utcnow(),
    )
    db_session.flush()
    claim_next(db_session, campaign_id=c.id, station_id=st.id)
    servers = _servers(db_session, sub)
    assert [s.status for s in servers] == [RunnerStatus.failed, RunnerStatus.queued]
    assert servers[1].requested_for == "campaign"
    # asking again while one is live adds nothing
    claim_next(db_session, campaign_id=c.id, station_id=st.id)
    assert len(_servers(db_session, sub)) == 2


def _runner_dropped_episode(session, c, sub, st, failure: RunnerFailure):
    """Claim a run of the checkpoint (its server ready), end the episode
    ``system`` (the station saw 1014) and fail the server meanwhile."""
    # the live server: the last claim asked for a new one after a failure
    server = runners.request_serving(session, sub.id, reason="campaign")
    now = utcnow()
    if server.status != RunnerStatus.ready:
        _host_moves(
            server,
            RunnerStatus.ready,
            url="ws://127.0.0.1:18232",
            dialect="openpi",
            ready_at=now - timedelta(minutes=5),
        )
        session.flush()
    while True:
        claim = claim_next(session, campaign_id=c.id, station_id=st.id)
        assert claim is not None
        a = session.scalars(
            sa.select(Assignment).where(Assignment.run_code == claim.run_code)
        ).one()
        if a.submission_id == sub.id:
            break
        ep = Episode(
            uid=secrets.token_hex(8),
            station_id=st.id,
            object_type_id=claim.object_type_id,
            items=claim.items,
            budget_s=claim.budget_s,
            tote_side=claim.tote_side,
            camera_side=claim.camera_side,
            outcome=Outcome.ran_out_of_time,
            state=EpisodeState.closed,
            run_code=claim.run_code,
            placed=0,
            lost=0,
            dropped=0,
        )
        session.add(ep)
        session.flush()
        claims.complete(session, run_code=claim.run_code, episode_id=ep.id)
    ep = Episode(
        uid=secrets.token_hex(8),
        station_id=st.id,
        object_type_id=claim.object_type_id,
        items=claim.items,
        budget_s=claim.budget_s,
        tote_side=claim.tote_side,
        camera_side=claim.camera_side,
        outcome=Outcome.system,
        outcome_reason="policy connection lost",
        state=EpisodeState.closed,
        run_code=claim.run_code,
        started_at=now - timedelta(seconds=30),
        ended_at=now,
    )
    session.add(ep)
    _host_moves(
        server,
        RunnerStatus.failed,
        failure=failure,
        fault=failure.fault,
        finished_at=now + timedelta(seconds=3),  # the host notices a few seconds later
    )
    session.flush()
    return claim, ep


def test_a_submitters_runner_failure_is_charged_like_a_protocol_fault(db_session) -> None:
    """The first ``free_protocol_faults`` are requeued like any system episode;
    the next counts against the policy, as a protocol failure would."""
    _, c, _, sub = _campaign_with_checkpoint(db_session)
    st = builders.station(db_session)
    seen = []
    for _ in range(2):
        claim, ep = _runner_dropped_episode(db_session, c, sub, st, RunnerFailure.inference_crash)
        seen.append(
            claims.complete(
                db_session, run_code=claim.run_code, episode_id=ep.id, free_protocol_faults=1
            )
        )
    assert seen == [AssignmentStatus.requeued, AssignmentStatus.done]
    charged = db_session.get(Episode, ep.id)
    assert charged.outcome == Outcome.safety
    assert "policy server failure, charged to the policy" in charged.outcome_reason
    events = db_session.scalars(sa.select(EpisodeEvent).where(EpisodeEvent.episode_id == ep.id))
    details = {e.kind: e.details for e in events}
    assert details["policy_fault"] == {"fault": claims.FAULT_POLICY_SERVER}
    assert details["protocol_fault_charged"]["fault"] == claims.FAULT_POLICY_SERVER
    # nothing of the runner is written on the episode: no url, host or failure name
    assert "18232" not in repr(details) and "inference_crash" not in repr(details)


def test_a_platform_runner_failure_is_never_charged(db_session) -> None:
    _, c, _, sub = _campaign_with_checkpoint(db_session)
    st = builders.station(db_session)
    for failure in (RunnerFailure.runner_unresponsive, RunnerFailure.host_error) * 2:
        claim, ep = _runner_dropped_episode(db_session, c, sub, st, failure)
        status = claims.complete(
            db_session, run_code=claim.run_code, episode_id=ep.id, free_protocol_faults=0
        )
        assert status == AssignmentStatus.requeued
        assert db_session.get(Episode, ep.id).outcome == Outcome.system
