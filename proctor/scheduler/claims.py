"""Stations claiming work: claim, complete, skip after a failed pre-flight.

All state is in the database, so a restarted station (or scheduler) resumes
exactly where it stopped: a station that still holds a claim gets that same
run back before anything new.

Concurrency: on PostgreSQL the next pending slot is picked with
``SELECT … FOR UPDATE SKIP LOCKED`` inside the claiming ``UPDATE``, so two
stations never take the same slot and never wait on each other. On SQLite
the same single ``UPDATE … WHERE id = (SELECT …) RETURNING`` statement runs
under SQLite's database-wide write lock, which serializes claimers (the
engine's ``busy_timeout`` makes the second one wait rather than fail).

Functions take a keyword-only ``session`` and never commit; commit right
after a claim so the row lock is released and other stations see it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.core.audit import Actor, record_audit
from proctor.core.db.models import (
    Assignment,
    Campaign,
    CampaignPolicy,
    Episode,
    EpisodeEvent,
    ObjectType,
    Station,
    Submission,
)
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    AssignmentStatus,
    CampaignStatus,
    EndpointDialect,
    EpisodeState,
    Outcome,
    RunnerFault,
    Side,
    SubmissionKind,
)
from proctor.core.episode_record import FAULT_POLICY_MOTION, FAULT_POLICY_PROTOCOL
from proctor.core.errors import FieldConflict, ProctorError, UsageError
from proctor.core.settings import SchedulerSettings
from proctor.core.work import LatencyBudget
from proctor.policywire.wire.spec import manifest_action_units, manifest_exterior_numbering
from proctor.scheduler import runners
from proctor.scheduler.adaptive_campaign import apply_plan
from proctor.scheduler.codes import new_endpoint_handle, unique_codes
from proctor.scheduler.service import CampaignNotFound, CampaignStateError, get_campaign

# Protocol failures (a malformed reply or metadata) a policy may have in one
# campaign before they are charged to it; the default of the scheduler's
# ``free_protocol_faults`` setting (docs/methods.md §1)
FREE_PROTOCOL_FAULTS = 3

# a checkpoint's runner server that failed by the submitter's fault during an
# episode (it crashed, ran out of memory, …): charged like a protocol failure
FAULT_POLICY_SERVER = "policy_server"
# an arm fault the station is blamed for, after the policy's own motion (a
# joint driven into its limit, an unreachable target): charged the same way,
# from the same allowance
POLICY_FAULTS = frozenset({FAULT_POLICY_PROTOCOL, FAULT_POLICY_SERVER, FAULT_POLICY_MOTION})
# how each charged fault is named in the episode's reason
CHARGED_AS = {
    FAULT_POLICY_PROTOCOL: "policy wire failure",
    FAULT_POLICY_SERVER: "policy server failure",
    FAULT_POLICY_MOTION: "arm fault after the policy's own motion",
}
# the event the scheduler adds to such an episode when it settles it
POLICY_FAULT_EVENT = "policy_fault"

# an endpoint that fails its pre-flight is usually down for minutes (a restart,
# a redeploy): retry its slot after 5 min, doubling per attempt, at most 1 h
PREFLIGHT_RETRY_S = 300.0
PREFLIGHT_RETRY_MAX_S = 3600.0

# the scheduler's ``claim_lease_s`` default, for callers with no settings at hand
CLAIM_LEASE_S = float(SchedulerSettings.model_fields["claim_lease_s"].default)


# an episode in one of these states has not ended as far as the server knows:
# the station may still be running it, or its operator still writing the log
LIVE_STATES = frozenset(
    {EpisodeState.armed, EpisodeState.running, EpisodeState.finishing, EpisodeState.awaiting_log}
)


class RunNotFound(ProctorError):
    """No assignment with that run code (the API answers 404)."""


class EpisodeLive(FieldConflict):
    """A claim while the station's held run has a live episode, synced within
    the lease (409): nothing is settled, and the held run stays the station's."""

    def __init__(
        self, field: str, run_code: str, ep: Episode, quiet_s: float, lease_s: float
    ) -> None:
        super().__init__(
            field,
            f"run {run_code}, which this station holds, has episode {ep.uid} "
            f"{ep.state.value} (last synced {quiet_s:.0f} s ago): sync it as closed or "
            "interrupted before claiming again; an episode not synced for "
            f"{lease_s:.0f} s is presumed dead and its run settled on the next claim",
        )
        self.run_code = run_code
        self.state = ep.state


@dataclass(frozen=True)
class Claim:
    """What a station needs to run one episode, and nothing that names the
    policy: no policy, submission, owner, endpoint, sequence or attempt."""

    run_code: str
    endpoint_handle: str  # the station connects to ws://<server>/policy/<handle>
    campaign_id: int
    object_type_id: int
    object_name: str
    object_display_name: str
    prompt: str  # the language instruction for this object
    items: int
    per_item_cap_s: float
    budget_s: float  # items × per-item cap
    tote_side: Side
    camera_side: Side
    # the wire dialect the policy server speaks (a protocol property, not an identity)
    dialect: EndpointDialect | None
    # the number of the endpoint's first exterior camera key (None: the station's
    # default): a wire setting the submitter chose, as protocol as the dialect
    exterior_numbering: int | None
    # the action units the endpoint (or the checkpoint's policy.toml) selects (None:
    # the server's metadata decides): how its velocities are read, not who sent them
    action_units: str | None
    # one initial scene per block (the LBM "test bundle"): every policy in a block
    # gets the same simulated layout; derived from the sealed seed, so it says nothing
    scene_seed: int
    resumed: bool  # this station held the claim already (it restarted)
    # the human reference's teleop server on the claiming station's own host (a
    # ``teleop`` submission): the station connects there, never through the gateway.
    # It tells the station this run is the reference, which the person driving the
    # arm knows anyway; None for every policy.
    teleop_url: str | None = None
    # the campaign's bound on the policy's round trip (None: none)
    latency_budget: LatencyBudget | None = None


def _claim(session: Session, a: Assignment, campaign: Campaign, *, resumed: bool) -> Claim:
    obj = session.get(ObjectType, a.object_type_id)
    if obj is None:  # a foreign key makes this impossible short of corruption
        raise ProctorError(f"run {a.run_code}: its object type is missing")
    sub = session.get(Submission, a.submission_id) if a.submission_id else None
    dialect = sub.endpoint_dialect if sub else None
    if sub is not None and sub.kind == SubmissionKind.checkpoint:
        # the wire its runner server speaks (the station talks it through the gateway)
        server = runners.ready_server(session, sub.id)
        dialect = EndpointDialect(server.dialect) if server and server.dialect else None
    return Claim(
        run_code=a.run_code,
        endpoint_handle=a.endpoint_handle,
        campaign_id=campaign.id,
        object_type_id=obj.id,
        object_name=obj.name,
        object_display_name=obj.display_name or obj.name,
        prompt=obj.prompt,
        items=campaign.items_per_episode,
        per_item_cap_s=campaign.per_item_cap_s,
        budget_s=campaign.items_per_episode * campaign.per_item_cap_s,
        tote_side=a.tote_side,
        camera_side=a.camera_side,
        dialect=dialect,
        exterior_numbering=manifest_exterior_numbering(sub.manifest) if sub else None,
        action_units=manifest_action_units(sub.manifest) if sub else None,
        scene_seed=scene_seed(campaign.allocation_seed or "", a.block_index),
        resumed=resumed,
        teleop_url=sub.endpoint_url if sub and sub.kind == SubmissionKind.teleop else None,
        latency_budget=_latency_budget(campaign.latency_budget),
    )


def _latency_budget(stored: dict[str, Any] | None) -> LatencyBudget | None:
    if not stored:
        return None
    return LatencyBudget(
        budget_ms=float(stored["budget_ms"]), tolerance=int(stored.get("tolerance", 0))
    )


def scene_seed(allocation_seed: str, block_index: int) -> int:
    """A 31-bit seed for the block's initial scene: SHA-256 of
    ``"{seed}/scene/{block}"``, first 4 bytes big-endian, top bit cleared."""
    digest = hashlib.sha256(f"{allocation_seed}/scene/{block_index}".encode("ascii")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def claim_next(
    session: Session,
    *,
    campaign_id: int,
    station_id: int,
    now: datetime | None = None,
    lease_s: float = CLAIM_LEASE_S,
) -> Claim | None:
    """The station's next run: the claim it already holds, else the first
    pending slot (by sequence) of an active policy that is due; None when
    nothing is claimable now (all taken, or waiting out a retry delay).

    A held run whose episode is live and was synced within ``lease_s`` is
    refused (``EpisodeLive``): nothing is settled."""
    campaign = session.get(Campaign, campaign_id)
    if campaign is None:
        raise CampaignNotFound(f"no campaign with id {campaign_id}")
    if campaign.status != CampaignStatus.running:
        raise CampaignStateError(
            f"campaign '{campaign.name}' is {campaign.status.value}; only a running "
            "campaign hands out work"
        )
    now = now or utcnow()
    if not session.execute(
        sa.update(Station).where(Station.id == station_id).values(last_seen_at=now)
    ).rowcount:
        raise UsageError(f"station_id: no station {station_id}")
    _check_cell_profile(session, campaign, station_id)
    held = session.scalars(
        sa.select(Assignment)
        .where(
            Assignment.campaign_id == campaign_id,
            Assignment.station_id == station_id,
            Assignment.status == AssignmentStatus.claimed,
        )
        .order_by(Assignment.sequence)
        .limit(1)
    ).first()
    if held is not None:
        ran = _episodes_of(session, held)
        if not ran:
            return _claim(session, held, campaign, resumed=True)
        # the station restarted after an episode began under this run and lost
        # track of it (recovered as interrupted, left awaiting a log it will
        # never get, or silent past the lease): settle the run from that
        # episode, then hand out the next; never while it is still heard from
        _refuse_if_live(held, ran[-1], now, lease_s)
        _settle(session, held, ran[-1])

    active = sa.select(CampaignPolicy.policy_id).where(
        CampaignPolicy.campaign_id == campaign_id, CampaignPolicy.active.is_(True)
    )
    # a checkpoint whose runner server is not ready yet cannot be reached: its
    # runs stay pending (asked for again here, so a runner host serves it) and
    # the station takes another run meanwhile
    waiting = runners.request_for_campaign(session, campaign_id, now=now)
    # an adaptive campaign re-plans the slots not handed out, and hands out
    # none beyond the blocks its rule has already decided
    horizon = apply_plan(session, campaign)
    pick = (
        sa.select(Assignment.id)
        .where(
            Assignment.campaign_id == campaign_id,
            Assignment.status == AssignmentStatus.pending,
            sa.or_(Assignment.not_before.is_(None), Assignment.not_before <= now),
            Assignment.policy_id.in_(active),
            Assignment.submission_id.not_in(list(waiting)),
            sa.true() if horizon is None else Assignment.block_index <= horizon,
        )
        .order_by(Assignment.sequence)
        .limit(1)
        # PostgreSQL: lock the row, skip rows other stations hold; SQLite omits it
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    claimed_id = session.execute(
        sa.update(Assignment)
        .where(Assignment.id == pick)
        .values(status=AssignmentStatus.claimed, station_id=station_id, claimed_at=now)
        .returning(Assignment.id),
        execution_options={"synchronize_session": False},
    ).scalar_one_or_none()
    if claimed_id is None:
        return None
    a = session.get(Assignment, claimed_id, populate_existing=True)
    if a is None:
        raise ProctorError("a claimed assignment vanished")  # impossible inside one transaction
    return _claim(session, a, campaign, resumed=False)


def _refuse_if_live(
    a: Assignment, ep: Episode, now: datetime, lease_s: float, *, field: str = "campaign"
) -> None:
    """Refuse a claim while the station's held run ``a`` has a live episode
    ``ep`` that its station synced within ``lease_s``.

    Settling such a run requeues its slot while the episode may still run to
    a counting end: a second claim (two daemons with one token, or a token
    holder choosing which runs get doubled) would give the policy an extra
    episode and break the balanced allocation. An episode the station host
    recovered after a crash is synced as ``interrupted`` before the daemon
    claims again, so a real restart is not refused; one silent past the lease
    (a host that lost its ledger) is presumed dead and settled as before.
    Episodes written directly by an in-process station (``synced_at`` None)
    are settled as before: that station holds the database itself. The
    caller's transaction is rolled back with the refusal, so it changes nothing.
    ``field``: the request's field the refusal names (the campaign claimed
    from, or the run code abandoned)."""
    if ep.state not in LIVE_STATES or ep.synced_at is None:
        return
    quiet_s = (now - ep.synced_at).total_seconds()
    if quiet_s < lease_s:
        raise EpisodeLive(field, a.run_code, ep, max(quiet_s, 0.0), lease_s)


class ProfileNotAccepted(CampaignStateError):
    """The station's cell profile is not one the campaign accepts: it gets no
    work from it (the station API and console answer with the reason)."""


def _check_cell_profile(session: Session, campaign: Campaign, station_id: int) -> None:
    """Refuse a station whose cell is not of a profile the campaign lists (a
    campaign listing none takes any station). Checked before a held claim is
    resumed too: a station re-declared as another kind of cell runs nothing."""
    accepted = campaign.cell_profiles
    if accepted is None:
        return
    name, profile = session.execute(
        sa.select(Station.name, Station.cell_profile).where(Station.id == station_id)
    ).one()
    if profile not in accepted:
        declared = f"cell profile '{profile}'" if profile else "no cell profile"
        raise ProfileNotAccepted(
            f"station '{name}' declares {declared}; campaign '{campaign.name}' accepts "
            f"only stations of cell profile {', '.join(repr(p) for p in accepted)} "
            "(set cell_profile in the station's config)"
        )


def _by_run_code(session: Session, run_code: str) -> Assignment:
    stmt = sa.select(Assignment).where(Assignment.run_code == run_code.strip().upper())
    a = session.scalars(stmt.with_for_update()).one_or_none()
    if a is None:
        raise RunNotFound(f"no run with code {run_code!r}")
    return a


def _episodes_of(session: Session, a: Assignment) -> list[Episode]:
    """Episodes that ran under this run, oldest first (the station links them by
    run code when it arms; completion links the assignment)."""
    return list(
        session.scalars(
            sa.select(Episode)
            .where(sa.or_(Episode.assignment_id == a.id, Episode.run_code == a.run_code))
            .order_by(Episode.id)
        )
    )


def _counts(ep: Episode) -> bool:
    """A closed episode with the operator's log and a non-system outcome counts."""
    return (
        ep.state == EpisodeState.closed and ep.outcome is not None and ep.outcome != Outcome.system
    )


def _settle(session: Session, a: Assignment, ep: Episode) -> AssignmentStatus:
    """Link ``ep`` to the run and close the slot: ``done`` if it counts, else
    ``requeued`` with a fresh slot appended."""
    ep.assignment_id, ep.campaign_id, ep.run_code = a.id, a.campaign_id, a.run_code
    a.completed_at = utcnow()
    a.status = AssignmentStatus.done if _counts(ep) else AssignmentStatus.requeued
    session.flush()
    if a.status == AssignmentStatus.requeued:
        _replace(session, a, not_before=None)
    return a.status


def _holder_check(a: Assignment, station_id: int | None) -> None:
    if a.status != AssignmentStatus.claimed:
        raise CampaignStateError(f"run {a.run_code} is {a.status.value}, not claimed")
    if station_id is not None and a.station_id != station_id:
        raise CampaignStateError(f"run {a.run_code} is claimed by another station")


def _replace(session: Session, a: Assignment, *, not_before: datetime | None) -> Assignment:
    """A fresh slot for the same (policy, object, configuration, block),
    appended after every other slot: new run code and handle, so nothing
    links it to the one it replaces."""
    # serialize sequence numbers per campaign (PostgreSQL row lock; SQLite's
    # write lock is already held by this transaction's earlier UPDATE). NO KEY
    # UPDATE, not UPDATE: every row written under the campaign holds a KEY SHARE
    # on it through its foreign key, and two settling stations each waiting for
    # the other's KEY SHARE deadlocked; NO KEY UPDATE still excludes its like
    session.execute(
        sa.select(Campaign.id).where(Campaign.id == a.campaign_id).with_for_update(key_share=True)
    ).scalar_one()
    last = session.scalar(
        sa.select(sa.func.max(Assignment.sequence)).where(Assignment.campaign_id == a.campaign_id)
    )
    issued = session.scalar(sa.select(sa.func.count()).select_from(Assignment)) or 0
    (code,) = unique_codes(
        1,
        already_issued=issued,
        taken=lambda cand: set(
            session.scalars(sa.select(Assignment.run_code).where(Assignment.run_code.in_(cand)))
        ),
    )
    fresh = Assignment(
        campaign_id=a.campaign_id,
        run_code=code,
        endpoint_handle=new_endpoint_handle(),
        policy_id=a.policy_id,
        submission_id=a.submission_id,
        object_type_id=a.object_type_id,
        tote_side=a.tote_side,
        camera_side=a.camera_side,
        block_index=a.block_index,
        slot=a.slot,
        sequence=(last or 0) + 1,
        status=AssignmentStatus.pending,
        replaces_id=a.id,
        attempt=a.attempt + 1,
        not_before=not_before,
    )
    session.add(fresh)
    session.flush()
    return fresh


def complete(
    session: Session,
    *,
    run_code: str,
    episode_id: int,
    station_id: int | None = None,
    free_protocol_faults: int = FREE_PROTOCOL_FAULTS,
) -> AssignmentStatus:
    """Link the episode to its run and settle the slot.

    A closed episode (operator log saved) counts: the slot is ``done``. A
    ``system`` episode, or one ``interrupted`` by a daemon crash, says
    nothing about the policy: the slot is ``requeued`` and a fresh slot
    replaces it — except a policy wire failure, or a checkpoint's runner
    server failing by the submitter's fault during the episode, once the
    policy has had ``free_protocol_faults`` of them in this campaign: that
    one is charged to the policy (``_charge_protocol_fault``) and counts. Repeating a
    completion that already happened is a no-op.
    """
    a = _by_run_code(session, run_code)
    ep = session.get(Episode, episode_id)
    if ep is None:
        raise UsageError(f"episode_id: no episode {episode_id}")
    if ep.assignment_id not in (None, a.id) or ep.run_code not in (None, a.run_code):
        raise UsageError(f"episode_id: episode {episode_id} belongs to another run")
    if a.status in (AssignmentStatus.done, AssignmentStatus.requeued) and ep.assignment_id == a.id:
        return a.status
    _holder_check(a, station_id)
    for name, got, want in (
        ("object_type_id", ep.object_type_id, a.object_type_id),
        ("tote_side", ep.tote_side, a.tote_side),
        ("camera_side", ep.camera_side, a.camera_side),
    ):
        if got != want:
            raise UsageError(
                f"episode {episode_id}.{name}: the episode ran with {got}, run {a.run_code} "
                f"prescribes {want}"
            )
    if ep.state == EpisodeState.closed and ep.outcome == Outcome.system:
        fault = _policy_fault(session, a, ep)
        if fault is not None and _free_protocol_faults_used(session, a, ep) >= free_protocol_faults:
            _charge_protocol_fault(session, a, ep, free_protocol_faults, station_id, fault=fault)
    requeue = ep.state == EpisodeState.interrupted or ep.outcome == Outcome.system
    if not requeue and not _counts(ep):
        raise CampaignStateError(
            f"episode {episode_id} is {ep.state.value}; it counts once the operator's log "
            "is saved and the episode is closed"
        )
    return _settle(session, a, ep)


def _protocol_fault_episodes(session: Session, *where: sa.ColumnElement[bool]) -> set[int]:
    """Ids of the episodes (among ``where``) whose system fault was the policy's:
    a protocol failure (the station's ``system_fault`` event), or its runner
    server failing by the submitter's fault (the ``policy_fault`` event
    ``_runner_fault`` writes)."""
    rows = session.execute(
        sa.select(EpisodeEvent.episode_id, EpisodeEvent.details)
        .join(Episode, Episode.id == EpisodeEvent.episode_id)
        .where(EpisodeEvent.kind.in_(("system_fault", POLICY_FAULT_EVENT)), *where)
    )
    # the fault class sits in the event's JSON details; read in Python, so the
    # query is the same on SQLite and PostgreSQL (a policy has few of these)
    return {eid for eid, details in rows if (details or {}).get("fault") in POLICY_FAULTS}


def _policy_fault(session: Session, a: Assignment, ep: Episode) -> str | None:
    """The policy's fault class behind this system episode, or None."""
    details = session.scalars(
        sa.select(EpisodeEvent.details).where(
            EpisodeEvent.episode_id == ep.id, EpisodeEvent.kind == "system_fault"
        )
    ).all()
    for d in details:
        fault = (d or {}).get("fault")
        if fault in POLICY_FAULTS:
            return str(fault)
    return _runner_fault(session, a, ep)


def _runner_fault(session: Session, a: Assignment, ep: Episode) -> str | None:
    """Whether the checkpoint's runner server failed by the submitter's fault
    during this episode (the station saw the connection drop: 1014, a system
    ending). If so, a ``policy_fault`` event records it on the episode (the
    fault class only: nothing of the runner) and the fault class is returned.
    A platform fault (the runner host stopped reporting, or failed itself) is
    never the policy's: that episode is requeued like any system episode."""
    server = runners.failed_during(session, a.submission_id, ep.started_at, ep.ended_at)
    if server is None or server.fault != RunnerFault.submitter:
        return None
    session.add(
        EpisodeEvent(
            episode_id=ep.id,
            kind=POLICY_FAULT_EVENT,
            message="the policy's server failed during the episode",
            details={"fault": FAULT_POLICY_SERVER},
        )
    )
    session.flush()
    return FAULT_POLICY_SERVER


def _free_protocol_faults_used(session: Session, a: Assignment, ep: Episode) -> int:
    """The policy's protocol failures in this campaign that were let go as ``system``."""
    mine = sa.select(Assignment.id).where(
        Assignment.campaign_id == a.campaign_id, Assignment.policy_id == a.policy_id
    )
    return len(
        _protocol_fault_episodes(
            session,
            Episode.assignment_id.in_(mine),
            Episode.outcome == Outcome.system,
            Episode.id != ep.id,
        )
    )


def _charge_protocol_fault(
    session: Session,
    a: Assignment,
    ep: Episode,
    allowance: int,
    station_id: int | None,
    *,
    fault: str = FAULT_POLICY_PROTOCOL,
) -> None:
    """A protocol failure past the policy's free ones counts against it.

    Requeueing every malformed reply would let a policy fail at will at no
    cost (and retry until a scene it likes comes up). The charged episode is
    recorded as a ``safety`` ending: the analysis makes the operation the
    policy abandoned a ghost (an unrecoverable failure), as it does for a
    safety stop. Its reason and a ``protocol_fault_charged`` event say why.
    """
    ep.outcome = Outcome.safety
    what = CHARGED_AS[fault]
    ep.outcome_reason = (
        f"{what}, charged to the policy (it had {allowance} free ones in this campaign)"
    )
    session.add(
        EpisodeEvent(
            episode_id=ep.id,
            kind="protocol_fault_charged",
            message=ep.outcome_reason,
            details={"fault": fault, "free_protocol_faults": allowance},
        )
    )
    # an outcome the operator logged is changed by rule: on the record, like every override
    record_audit(
        session,
        actor=Actor(label=f"station:{station_id}" if station_id is not None else "scheduler"),
        action="assignment.protocol_fault_charged",
        target_type="assignment",
        target_id=a.id,
        details={"episode": ep.uid, "free_protocol_faults": allowance},
    )
    session.flush()


def report_preflight_failure(
    session: Session,
    *,
    run_code: str,
    station_id: int,
    reason: str,
    actor: Actor | None = None,
    now: datetime | None = None,
    lease_s: float = CLAIM_LEASE_S,
    retry_s: float = PREFLIGHT_RETRY_S,
    retry_max_s: float = PREFLIGHT_RETRY_MAX_S,
) -> datetime | None:
    """The policy could not be reached before the episode: skip the run (the
    operator just moves on to the next code, learning nothing about whose it
    was) and reschedule its slot after a growing delay (``retry_s``, doubling
    with each attempt up to ``retry_max_s``: ``scheduler.preflight_retry_s``
    and ``preflight_retry_max_s``). Returns when; None
    if an episode had in fact begun under the run (it is settled instead,
    as ``complete`` would; refused with ``EpisodeLive`` while it is live and
    synced within ``lease_s``)."""
    a = _by_run_code(session, run_code)
    _holder_check(a, station_id)
    ran = _episodes_of(session, a)
    now = now or utcnow()
    if ran:
        # it did start after all: an episode that ran is settled, never skipped,
        # and never while it is still heard from (as a second claim would)
        _refuse_if_live(a, ran[-1], now, lease_s, field="run_code")
        _settle(session, a, ran[-1])
        return None
    delay = min(retry_s * 2 ** (a.attempt - 1), retry_max_s)
    a.status = AssignmentStatus.skipped
    a.completed_at = now
    session.flush()
    retry_at = now + timedelta(seconds=delay)
    _replace(session, a, not_before=retry_at)
    record_audit(
        session,
        actor=actor or Actor(label=f"station:{station_id}"),
        action="assignment.preflight_failed",
        target_type="assignment",
        target_id=a.id,
        details={"reason": reason[:500], "attempt": a.attempt, "retry_after_s": delay},
    )
    return retry_at


def release_claim(session: Session, *, run_code: str, station_id: int) -> None:
    """Hand a claimed run back untouched (nothing ran under it): it becomes
    pending again, same code, same place in the order."""
    a = _by_run_code(session, run_code)
    _holder_check(a, station_id)
    if _episodes_of(session, a):
        raise CampaignStateError(
            f"run {a.run_code} already has an episode; complete it instead of releasing it"
        )
    a.status = AssignmentStatus.pending
    a.station_id = None
    a.claimed_at = None
    session.flush()


def free_station(
    session: Session, *, campaign: int | str, station: str, actor: Actor
) -> tuple[int, int]:
    """An admin's remedy for a station that died holding a claim and is not
    coming back: runs it held with no episode go back to pending (same code,
    same place); runs with an episode are settled from it (requeued as a fresh
    slot at the end unless it was closed and counts). Returns (released,
    requeued); audit-logged."""
    c = get_campaign(session, campaign)
    st = session.scalar(sa.select(Station).where(Station.name == station))
    if st is None:
        raise UsageError(f"station: no station named '{station}'")
    held = list(
        session.scalars(
            sa.select(Assignment)
            .where(
                Assignment.campaign_id == c.id,
                Assignment.station_id == st.id,
                Assignment.status == AssignmentStatus.claimed,
            )
            .with_for_update()
        )
    )
    released = requeued = 0
    for a in held:
        ran = _episodes_of(session, a)
        if not ran:
            a.status, a.station_id, a.claimed_at = AssignmentStatus.pending, None, None
            released += 1
        elif _settle(session, a, ran[-1]) == AssignmentStatus.requeued:
            requeued += 1
    session.flush()
    record_audit(
        session,
        actor=actor,
        action="campaign.free_station",
        target_type="campaign",
        target_id=c.id,
        details={"station": station, "released": released, "requeued": requeued},
    )
    return released, requeued
