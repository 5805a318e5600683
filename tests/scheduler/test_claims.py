"""Claiming on both databases, in one session: order, resume, completion,
system requeue, pre-flight skip with delayed rescheduling, release."""

from __future__ import annotations

import secrets
from dataclasses import fields
from datetime import timedelta

import pytest
import sqlalchemy as sa

from proctor.core.db.models import Assignment, AuditLog, CampaignPolicy, Episode, EpisodeEvent
from proctor.core.db.types import utcnow
from proctor.core.domain import AssignmentStatus, EpisodeState, Outcome, Side
from proctor.core.episode_record import FAULT_POLICY_MOTION, FAULT_POLICY_PROTOCOL
from proctor.core.errors import UsageError
from proctor.scheduler import claims, service
from proctor.scheduler.claims import Claim, claim_next
from proctor.scheduler.service import Actor, CampaignStateError
from tests.scheduler import builders

ADMIN = Actor(label="test-admin")


def _running(session, n_policies=2, **kw):
    w = builders.world(session, n_policies)
    c = service.create_campaign(session, protocol=builders.protocol(w, **kw), actor=ADMIN)
    service.start_campaign(session, campaign=c.id, actor=ADMIN)
    return w, c


def _assignment(session, run_code: str) -> Assignment:
    return session.scalars(sa.select(Assignment).where(Assignment.run_code == run_code)).one()


def _episode(session, claim: Claim, station_id: int, outcome: Outcome | None, **kw) -> Episode:
    ep = Episode(
        uid=secrets.token_hex(8),
        station_id=station_id,
        object_type_id=claim.object_type_id,
        items=claim.items,
        budget_s=claim.budget_s,
        tote_side=claim.tote_side,
        camera_side=claim.camera_side,
        outcome=outcome,
        state=kw.pop("state", EpisodeState.closed),
        run_code=claim.run_code,
        **kw,
    )
    if outcome is not None and outcome != Outcome.system:
        ep.placed, ep.lost, ep.dropped = claim.items, 0, 0
    session.add(ep)
    session.flush()
    return ep


def test_claims_follow_the_sequence_and_carry_nothing_that_names_the_policy(db_session) -> None:
    w, c = _running(db_session)
    st = builders.station(db_session)
    names = {p.name for p in w.arms}
    urls = {s.endpoint_url for s in w.submissions.values()}
    field_names = {f.name for f in fields(Claim)}
    assert not field_names & {"policy_id", "submission_id", "sequence", "attempt", "block_index"}

    order = list(
        db_session.scalars(
            sa.select(Assignment.run_code)
            .where(Assignment.campaign_id == c.id)
            .order_by(Assignment.sequence)
        )
    )
    seen = []
    for _ in range(len(order)):
        claim = claim_next(db_session, campaign_id=c.id, station_id=st.id)
        assert claim is not None and not claim.resumed
        text = repr(claim)
        assert not any(n in text for n in names | urls)
        a = _assignment(db_session, claim.run_code)
        assert (claim.object_type_id, claim.tote_side, claim.camera_side) == (
            a.object_type_id,
            a.tote_side,
            a.camera_side,
        )
        assert claim.budget_s == claim.items * 30.0
        ep = _episode(db_session, claim, st.id, Outcome.success)
        status = claims.complete(
            db_session, run_code=claim.run_code, episode_id=ep.id, station_id=st.id
        )
        assert status == AssignmentStatus.done
        db_session.refresh(ep)
        assert (ep.assignment_id, ep.campaign_id) == (a.id, c.id)
        seen.append(claim.run_code)
    assert seen == order
    assert claim_next(db_session, campaign_id=c.id, station_id=st.id) is None
    report = service.campaign_status(db_session, campaign=c.id)
    assert report.done == report.slots and report.blocks_complete == report.blocks
    assert {cell.done for cell in report.cells} == {cell.target for cell in report.cells} == {4}
    assert report.config_spread == 0  # 4 episodes over 4 configurations: one each


def test_a_station_gets_its_held_claim_back(db_session) -> None:
    _, c = _running(db_session)
    a, b = builders.station(db_session), builders.station(db_session)
    first = claim_next(db_session, campaign_id=c.id, station_id=a.id)
    again = claim_next(db_session, campaign_id=c.id, station_id=a.id)
    assert again is not None and first is not None
    assert again.run_code == first.run_code and again.resumed
    other = claim_next(db_session, campaign_id=c.id, station_id=b.id)
    assert other is not None and other.run_code != first.run_code

    claims.release_claim(db_session, run_code=first.run_code, station_id=a.id)
    assert _assignment(db_session, first.run_code).status == AssignmentStatus.pending
    # released, it is the first pending slot again, for whoever asks next
    assert claim_next(db_session, campaign_id=c.id, station_id=b.id).run_code == other.run_code
    taken = claim_next(db_session, campaign_id=c.id, station_id=a.id)
    assert taken.run_code == first.run_code and not taken.resumed


def test_system_episode_requeues_a_fresh_slot_that_does_not_count(db_session) -> None:
    _, c = _running(db_session)
    st = builders.station(db_session)
    claim = claim_next(db_session, campaign_id=c.id, station_id=st.id)
    original = _assignment(db_session, claim.run_code)
    ep = _episode(db_session, claim, st.id, Outcome.system, outcome_reason="policy timeout")
    assert claims.complete(db_session, run_code=claim.run_code, episode_id=ep.id) == (
        AssignmentStatus.requeued
    )
    # repeating the completion is harmless
    assert claims.complete(db_session, run_code=claim.run_code, episode_id=ep.id) == (
        AssignmentStatus.requeued
    )
    fresh = db_session.scalars(
        sa.select(Assignment).where(Assignment.replaces_id == original.id)
    ).one()
    last = db_session.scalar(
        sa.select(sa.func.max(Assignment.sequence)).where(Assignment.campaign_id == c.id)
    )
    assert fresh.sequence == last and fresh.status == AssignmentStatus.pending
    assert (fresh.policy_id, fresh.object_type_id, fresh.tote_side, fresh.camera_side) == (
        original.policy_id,
        original.object_type_id,
        original.tote_side,
        original.camera_side,
    )
    assert fresh.block_index == original.block_index and fresh.attempt == 2
    assert fresh.run_code != original.run_code
    assert fresh.endpoint_handle != original.endpoint_handle
    assert fresh.not_before is None
    report = service.campaign_status(db_session, campaign=c.id)
    assert report.done == 0 and report.requeued == 1 and report.slots == 3 * 2 * 4 + 1

    # an interrupted episode (daemon crash) requeues too, whatever its outcome field says
    claim2 = claim_next(db_session, campaign_id=c.id, station_id=st.id)
    ep2 = _episode(db_session, claim2, st.id, None, state=EpisodeState.interrupted)
    assert claims.complete(db_session, run_code=claim2.run_code, episode_id=ep2.id) == (
        AssignmentStatus.requeued
    )


def test_completion_refuses_what_does_not_fit(db_session) -> None:
    _, c = _running(db_session)
    st, other = builders.station(db_session), builders.station(db_session)
    claim = claim_next(db_session, campaign_id=c.id, station_id=st.id)
    open_ep = _episode(db_session, claim, st.id, Outcome.success, state=EpisodeState.awaiting_log)
    with pytest.raises(CampaignStateError, match="operator's log is saved"):
        claims.complete(db_session, run_code=claim.run_code, episode_id=open_ep.id)
    with pytest.raises(CampaignStateError, match="claimed by another station"):
        claims.complete(
            db_session, run_code=claim.run_code, episode_id=open_ep.id, station_id=other.id
        )
    wrong_side = Side.left if claim.tote_side == Side.right else Side.right
    bad = _episode(db_session, claim, st.id, Outcome.success)
    bad.tote_side = wrong_side
    db_session.flush()
    with pytest.raises(UsageError, match=r"tote_side: the episode ran with"):
        claims.complete(db_session, run_code=claim.run_code, episode_id=bad.id)
    with pytest.raises(UsageError, match="episode_id: no episode"):
        claims.complete(db_session, run_code=claim.run_code, episode_id=10**9)
    with pytest.raises(claims.RunNotFound):
        claims.complete(db_session, run_code="R-NOPE", episode_id=bad.id)
    pending = db_session.scalars(
        sa.select(Assignment.run_code).where(
            Assignment.campaign_id == c.id, Assignment.status == AssignmentStatus.pending
        )
    ).first()
    with pytest.raises(UsageError, match="belongs to another run"):
        claims.complete(db_session, run_code=pending, episode_id=bad.id)
    bad.run_code = None
    db_session.flush()
    with pytest.raises(CampaignStateError, match="is pending, not claimed"):
        claims.complete(db_session, run_code=pending, episode_id=bad.id)


def test_preflight_failure_skips_and_reschedules_after_a_delay(db_session) -> None:
    _, c = _running(db_session, episodes_per_cell=1)
    st = builders.station(db_session)
    t0 = utcnow()
    claim = claim_next(db_session, campaign_id=c.id, station_id=st.id, now=t0)
    original = _assignment(db_session, claim.run_code)
    retry_at = claims.report_preflight_failure(
        db_session,
        run_code=claim.run_code,
        station_id=st.id,
        reason="1013 policy unavailable",
        now=t0,
    )
    assert retry_at == t0 + timedelta(seconds=claims.PREFLIGHT_RETRY_S)
    assert original.status == AssignmentStatus.skipped
    fresh = db_session.scalars(
        sa.select(Assignment).where(Assignment.replaces_id == original.id)
    ).one()
    (row,) = db_session.scalars(
        sa.select(AuditLog).where(AuditLog.action == "assignment.preflight_failed")
    )
    assert row.details["reason"] == "1013 policy unavailable"

    # everything else runs first; the rescheduled slot waits out its delay
    served = []
    while (nxt := claim_next(db_session, campaign_id=c.id, station_id=st.id, now=t0)) is not None:
        served.append(nxt.run_code)
        ep = _episode(db_session, nxt, st.id, Outcome.success)
        claims.complete(db_session, run_code=nxt.run_code, episode_id=ep.id)
    assert fresh.run_code not in served and len(served) == 3 * 2 - 1
    later = claim_next(db_session, campaign_id=c.id, station_id=st.id, now=retry_at)
    assert later is not None and later.run_code == fresh.run_code

    # a second failure doubles the delay
    again = claims.report_preflight_failure(
        db_session, run_code=later.run_code, station_id=st.id, reason="down", now=retry_at
    )
    assert again == retry_at + timedelta(seconds=2 * claims.PREFLIGHT_RETRY_S)


def test_inactive_policies_are_not_handed_out_and_closed_campaigns_hand_out_nothing(
    db_session,
) -> None:
    w, c = _running(db_session)
    st = builders.station(db_session)
    dropped = w.policies[0]
    cp = db_session.get(CampaignPolicy, (c.id, dropped.id))
    cp.active = False
    db_session.flush()
    got = set()
    while (nxt := claim_next(db_session, campaign_id=c.id, station_id=st.id)) is not None:
        got.add(_assignment(db_session, nxt.run_code).policy_id)
        ep = _episode(db_session, nxt, st.id, Outcome.success)
        claims.complete(db_session, run_code=nxt.run_code, episode_id=ep.id)
    assert dropped.id not in got and len(got) == 2

    service.close_campaign(db_session, campaign=c.id, actor=ADMIN)
    with pytest.raises(CampaignStateError, match="is closed; only a running campaign"):
        claim_next(db_session, campaign_id=c.id, station_id=st.id)


def test_a_dead_stations_claims_can_be_freed(db_session) -> None:
    _, c = _running(db_session)
    dead, alive = builders.station(db_session), builders.station(db_session)
    idle = claim_next(db_session, campaign_id=c.id, station_id=dead.id)
    db_session.refresh(dead)
    assert dead.last_seen_at is not None
    # a second campaign's claim, started but never finished, by the same station
    _, c2 = _running(db_session)
    started = claim_next(db_session, campaign_id=c2.id, station_id=dead.id)
    _episode(db_session, started, dead.id, None, state=EpisodeState.running)

    assert claims.free_station(db_session, campaign=c.id, station=dead.name, actor=ADMIN) == (1, 0)
    assert _assignment(db_session, idle.run_code).status == AssignmentStatus.pending
    taken = claim_next(db_session, campaign_id=c.id, station_id=alive.id)
    assert taken.run_code == idle.run_code  # same code, same place in the order

    assert claims.free_station(db_session, campaign=c2.id, station=dead.name, actor=ADMIN) == (0, 1)
    assert _assignment(db_session, started.run_code).status == AssignmentStatus.requeued
    with pytest.raises(UsageError, match="no station named"):
        claims.free_station(db_session, campaign=c.id, station="nowhere", actor=ADMIN)
    with pytest.raises(UsageError, match="station_id: no station"):
        claim_next(db_session, campaign_id=c.id, station_id=10**9)


def test_a_restarted_station_settles_the_run_it_lost_track_of(db_session) -> None:
    _, c = _running(db_session)
    st = builders.station(db_session)

    # crashed mid-episode: the station's recovery marked it interrupted
    held = claim_next(db_session, campaign_id=c.id, station_id=st.id)
    _episode(db_session, held, st.id, Outcome.system, state=EpisodeState.interrupted)
    nxt = claim_next(db_session, campaign_id=c.id, station_id=st.id)
    assert nxt is not None and nxt.run_code != held.run_code and not nxt.resumed
    lost = _assignment(db_session, held.run_code)
    assert lost.status == AssignmentStatus.requeued
    ep = db_session.scalars(sa.select(Episode).where(Episode.run_code == held.run_code)).one()
    assert ep.assignment_id == lost.id
    assert db_session.scalars(sa.select(Assignment).where(Assignment.replaces_id == lost.id)).one()

    # crashed after the log was saved, before it was reported: it counts
    _episode(db_session, nxt, st.id, Outcome.success)
    third = claim_next(db_session, campaign_id=c.id, station_id=st.id)
    assert _assignment(db_session, nxt.run_code).status == AssignmentStatus.done
    assert third is not None and third.run_code not in (held.run_code, nxt.run_code)

    # an abandoned run under which an episode did begin is settled, not skipped
    _episode(db_session, third, st.id, None, state=EpisodeState.awaiting_log)
    assert (
        claims.report_preflight_failure(
            db_session, run_code=third.run_code, station_id=st.id, reason="arming failed"
        )
        is None
    )
    assert _assignment(db_session, third.run_code).status == AssignmentStatus.requeued


def _protocol_fault(session, claim: Claim, station_id: int) -> Episode:
    """A closed ``system`` episode whose fault the station classed as the policy's
    protocol failure (a malformed reply), as the runner records it."""
    ep = _episode(
        session, claim, station_id, Outcome.system, outcome_reason="malformed policy reply"
    )
    ep.placed, ep.lost, ep.dropped = 0, 0, 0  # the operator's log has counts
    session.add(
        EpisodeEvent(
            episode_id=ep.id,
            kind="system_fault",
            message="malformed policy reply",
            details={"fault": FAULT_POLICY_PROTOCOL},
        )
    )
    session.flush()
    return ep


def test_arm_faults_after_the_policys_motion_are_charged_like_protocol_failures(
    db_session,
) -> None:
    """Hardware review #4: a joint driven into its limit is the station's fault
    (``system``), but a policy that does it every episode must not void its
    episodes for free. The station classes it ``policy_motion``; the first
    ``free_protocol_faults`` are requeued, the next is charged and counts."""
    _, c = _running(db_session)
    st = builders.station(db_session)
    free, target, outcomes = 1, None, []
    while len(outcomes) < free + 1:
        claim = claim_next(db_session, campaign_id=c.id, station_id=st.id)
        assert claim is not None
        policy_id = _assignment(db_session, claim.run_code).policy_id
        target = target or policy_id
        if policy_id != target:
            ep = _episode(db_session, claim, st.id, Outcome.ran_out_of_time)
            claims.complete(db_session, run_code=claim.run_code, episode_id=ep.id)
            continue
        ep = _episode(db_session, claim, st.id, Outcome.system, outcome_reason="joint limit")
        ep.placed, ep.lost, ep.dropped = 0, 0, 0
        db_session.add(
            EpisodeEvent(
                episode_id=ep.id,
                kind="system_fault",
                message="arm fault: joint_position_limits_violation",
                details={"fault": FAULT_POLICY_MOTION},
            )
        )
        db_session.flush()
        outcomes.append(
            claims.complete(
                db_session, run_code=claim.run_code, episode_id=ep.id, free_protocol_faults=free
            )
        )
    assert outcomes == [AssignmentStatus.requeued, AssignmentStatus.done]
    charged = db_session.get(Episode, ep.id)
    assert charged.outcome == Outcome.safety
    assert charged.outcome_reason.startswith(
        "arm fault after the policy's own motion, charged to the policy"
    )


def test_protocol_failures_past_the_free_ones_are_charged_to_the_policy(db_session) -> None:
    """A policy that keeps breaking the protocol cannot have its slots requeued
    for ever: after ``free_protocol_faults`` of them in the campaign, the next
    counts against it as an unrecoverable ending (``safety``: a ghost)."""
    _, c = _running(db_session)
    st = builders.station(db_session)
    free = 2
    target = None
    seen: list[AssignmentStatus] = []
    other_policy_faults = 0
    while len(seen) < free + 2:
        claim = claim_next(db_session, campaign_id=c.id, station_id=st.id)
        assert claim is not None
        policy_id = _assignment(db_session, claim.run_code).policy_id
        target = target or policy_id
        if policy_id != target:
            if other_policy_faults == 0:  # another policy's first failure stays free
                ep = _protocol_fault(db_session, claim, st.id)
                status = claims.complete(
                    db_session,
                    run_code=claim.run_code,
                    episode_id=ep.id,
                    free_protocol_faults=free,
                )
                assert status == AssignmentStatus.requeued
                other_policy_faults += 1
            else:
                ep = _episode(db_session, claim, st.id, Outcome.ran_out_of_time)
                claims.complete(db_session, run_code=claim.run_code, episode_id=ep.id)
            continue
        if len(seen) == free:
            # a timeout is the station's or the network's doing: never charged
            ep = _episode(db_session, claim, st.id, Outcome.system, outcome_reason="timeout")
        else:
            ep = _protocol_fault(db_session, claim, st.id)
        seen.append(
            claims.complete(
                db_session, run_code=claim.run_code, episode_id=ep.id, free_protocol_faults=free
            )
        )
    assert seen == [AssignmentStatus.requeued] * (free + 1) + [AssignmentStatus.done]
    charged = db_session.get(Episode, ep.id)
    assert charged.outcome == Outcome.safety and "charged to the policy" in charged.outcome_reason
    kinds = db_session.scalars(
        sa.select(EpisodeEvent.kind).where(EpisodeEvent.episode_id == ep.id)
    ).all()
    assert "protocol_fault_charged" in kinds
    charged_audit = db_session.scalars(
        sa.select(AuditLog).where(AuditLog.action == "assignment.protocol_fault_charged")
    ).all()
    assert [r.details["episode"] for r in charged_audit] == [charged.uid]
    # the slot counts, like any other closed episode; no fresh slot replaces it
    a = _assignment(db_session, charged.run_code)
    assert a.status == AssignmentStatus.done
    assert (
        db_session.scalar(
            sa.select(sa.func.count()).select_from(Assignment).where(Assignment.replaces_id == a.id)
        )
        == 0
    )
