"""The station API's service: what the server does for a station host.

A station host is a client of the server (``proctor.core.station_api_wire``
is the wire both sides import); the routes in ``proctor.web.stationapi``
call these functions with the calling station's id, proven by its token.
Each function takes a ``session`` and never commits: the route's request is
one transaction, so a refused call writes nothing.

* ``hello``: register or heartbeat; the station's profile, site, cell
  profile, software, layout hash and clock offset are written to its row,
  and the episodes it names ``live`` are marked heard from (``synced_at``).
* ``claim``: the station's next run (``claims.claim_next``), blinded: an
  opaque run code and a gateway path whose handle only the server resolves.
* ``abandon``: a claimed run never started (``claims.report_preflight_failure``).
* ``sync_episode``: the episode as the station's ledger holds it now,
  upserted by uid. ``rev`` orders the station's snapshots: a repeated or
  older one changes nothing. Station wall times are mapped to the server's
  clock with the episode's ``clock_offset_s``; each event is stored once,
  keyed by its place in the station's ledger. A closed (operator-logged) or
  interrupted episode settles its run once (``claims.complete``). Each accepted
  revision marks the episode heard from (``synced_at``): a claim while the
  held run's episode is live and heard from within the lease is refused
  (``claims.EpisodeLive``, 409). Two first
  snapshots of one uid at once store one row: the later insert is answered
  as a replay. Who logged it is a label (``operator_label``, kept in the
  ``operator_log`` event's details), never an id: a station's
  ``operator_id`` is refused.
* ``release_lapsed_claims``: the lease. A station whose tokens were all
  revoked (or expired) cannot come back for its claim; once it has been
  silent for ``lease_s`` its claims go back to the scheduler. A station with
  a live token keeps its claim however long it is offline. Checked on hello
  and claim, and by the web app's sweep (``station_sweeps``).
* ``once``: the answer to a request under an ``Idempotency-Key``, kept, so a
  retried claim or abandon (its first reply lost) acts no second time.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.core import station_credentials
from proctor.core.audit import Actor
from proctor.core.db.models import (
    Assignment,
    Episode,
    EpisodeEvent,
    ObjectType,
    Station,
    StationRequest,
    StationToken,
)
from proctor.core.db.types import utcnow
from proctor.core.domain import AssignmentStatus, CampaignStatus, EpisodeState, Outcome, Side
from proctor.core.episode_record import OPERATOR_LABEL_KEY, OperatorLog, bounded
from proctor.core.errors import FieldConflict, FieldError, FieldForbidden
from proctor.core.labels import label_problem
from proctor.core.settings import SchedulerSettings
from proctor.core.station_api_wire import (
    ClaimReply,
    ClaimRequest,
    EpisodeReply,
    EpisodeWire,
    Hello,
    HelloReply,
    LatencyBudgetWire,
    Wire,
    WorkWire,
)
from proctor.scheduler import claims
from proctor.scheduler.gateway import GATEWAY_PATH
from proctor.scheduler.service import CampaignNotFound, CampaignStateError, get_campaign

# the database's integer columns (ids, revisions, seeds) hold 32 bits
INT_MAX = 2**31 - 1
# who releases a lapsed claim, in the audit log
LEASE_ACTOR = Actor(label="scheduler:lease")
_TERMINAL = (EpisodeState.closed, EpisodeState.interrupted)
# the operator's log: once the episode is closed, corrections go through the review log
_LOG_FIELDS = ("state", "outcome", "placed", "lost", "dropped")


def gateway_path(handle: str) -> str:
    """The gateway's path for a handle, relative: the station joins it to the
    server origin it already talks to."""
    return GATEWAY_PATH.format(handle=handle)


def check_text(value: Any, field: str) -> None:
    """Refuse a NUL character anywhere in ``value`` (a wire model, its
    lists, dicts and strings): PostgreSQL cannot store one in text or JSON."""
    if isinstance(value, Wire):
        for name in type(value).model_fields:
            check_text(getattr(value, name), f"{field}.{name}" if field else name)
    elif isinstance(value, dict):
        for k, v in value.items():
            check_text(k, field)
            check_text(v, f"{field}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_text(v, f"{field}[{i}]")
    elif isinstance(value, str) and "\x00" in value:
        raise FieldError(field, "text may not contain NUL characters")


def _check_int(field: str, value: int | None) -> None:
    if value is not None and not -INT_MAX - 1 <= value <= INT_MAX:
        raise FieldError(field, f"out of range (at most {INT_MAX})")


# -- hello ---------------------------------------------------------------------------


def hello(
    session: Session,
    caller_station_id: int,
    msg: Hello,
    now: datetime,
    *,
    settings: SchedulerSettings,
) -> HelloReply:
    """Register or heartbeat: write what the station declares to its row."""
    check_text(msg, "")
    release_lapsed_claims(session, now, settings.claim_lease_s)
    station = session.get(Station, caller_station_id)
    if station is None or station.name != msg.station:
        raise FieldForbidden("station", "not the station this token belongs to")
    for field, value in (("site", msg.site), ("cell_profile", msg.cell_profile)):
        problem = None if value is None else label_problem(value)
        if problem is not None:
            raise FieldError(field, problem)
    station.profile, station.site, station.cell_profile = msg.profile, msg.site, msg.cell_profile
    station.software_version, station.layout_hash = msg.software_version, msg.layout_hash
    station.clock_offset_s = msg.clock_offset_s
    station.last_seen_at = now
    if msg.live:
        # the daemon is running these: they hold their run against a second claim
        # (only this station's, and only while the server too holds them live)
        session.execute(
            sa.update(Episode)
            .where(
                Episode.uid.in_(msg.live),
                Episode.station_id == station.id,
                Episode.state.in_(claims.LIVE_STATES),
            )
            .values(synced_at=now)
        )
    session.flush()
    return HelloReply(
        station_id=station.id,
        server_time=now,
        heartbeat_s=settings.station_heartbeat_s,
        lease_s=settings.claim_lease_s,
    )


# -- claims --------------------------------------------------------------------------


def claim(
    session: Session,
    station_id: int,
    req: ClaimRequest,
    gateway_path_for_handle: Callable[[str], str] = gateway_path,
    *,
    now: datetime,
    lease_s: float,
) -> ClaimReply:
    """The station's next run of the campaign (the one it holds first), or
    why there is none. Nothing in it names the policy."""
    check_text(req, "")
    release_lapsed_claims(session, now, lease_s)
    # the station is heard from, whatever the answer (the lease counts silence)
    session.execute(sa.update(Station).where(Station.id == station_id).values(last_seen_at=now))
    campaign = get_campaign(session, _campaign_ref(req.campaign))
    if campaign.status in (CampaignStatus.closed, CampaignStatus.released):
        return ClaimReply(work=None, reason=f"campaign '{campaign.name}' is {campaign.status}")
    try:
        got = claims.claim_next(
            session, campaign_id=campaign.id, station_id=station_id, now=now, lease_s=lease_s
        )
    except CampaignStateError as exc:
        # a draft campaign, or a cell profile the campaign does not take: the
        # console shows why, and the station asks again later
        return ClaimReply(work=None, reason=str(exc))
    if got is None:
        return ClaimReply(work=None, reason="nothing to run now")
    return ClaimReply(work=_work(got, gateway_path_for_handle))


def _campaign_ref(ref: int | str) -> int | str:
    """An id the database can hold (a larger one names no campaign)."""
    if isinstance(ref, str) and ref.isdigit() and not ref.isascii():
        raise CampaignNotFound(f"no campaign named {ref!r}")  # '²' is a digit, not a number
    if (isinstance(ref, int) or ref.isdigit()) and abs(int(ref)) > INT_MAX:
        raise CampaignNotFound(f"no campaign with id {ref}")
    return ref


def _work(got: claims.Claim, path_for: Callable[[str], str]) -> WorkWire:
    budget = got.latency_budget
    return WorkWire(
        run_code=got.run_code,
        campaign_id=got.campaign_id,
        object=got.object_name,
        object_display_name=got.object_display_name,
        object_prompt=got.prompt,
        items=got.items,
        per_item_cap_s=got.per_item_cap_s,
        tote_side=got.tote_side.value,
        camera_side=got.camera_side.value,
        sim_seed=got.scene_seed,
        prompt=got.prompt,
        dialect=got.dialect.value if got.dialect is not None else None,
        exterior_numbering=got.exterior_numbering,
        action_units=got.action_units,
        latency_budget=(
            LatencyBudgetWire(budget_ms=budget.budget_ms, tolerance=budget.tolerance)
            if budget is not None
            else None
        ),
        # the human reference's teleop server is on the station host itself: the
        # gateway never relays it (the server never connects to a loopback address)
        gateway_path=None if got.teleop_url is not None else path_for(got.endpoint_handle),
        teleop_url=got.teleop_url,
    )


def _held_run(session: Session, station_id: int, run_code: str) -> Assignment:
    """The run ``run_code`` if this station claimed it (it may be settled since);
    an unknown code is answered like another station's, so a station learns
    nothing by guessing codes."""
    a = session.scalars(
        sa.select(Assignment).where(Assignment.run_code == run_code.strip().upper())
    ).one_or_none()
    if a is None or a.station_id != station_id:
        raise FieldForbidden("run_code", f"run {run_code} is not one this station claimed")
    return a


def abandon(
    session: Session,
    station_id: int,
    run_code: str,
    reason: str,
    *,
    now: datetime,
    lease_s: float = claims.CLAIM_LEASE_S,
    retry_s: float = claims.PREFLIGHT_RETRY_S,
    retry_max_s: float = claims.PREFLIGHT_RETRY_MAX_S,
) -> bool:
    """A claimed run that never started: skipped and rescheduled later. Returns
    False if an episode had begun under it after all (it was settled instead)."""
    check_text(reason, "reason")
    a = _held_run(session, station_id, run_code)
    if a.status != AssignmentStatus.claimed:
        raise FieldConflict("run_code", f"run {a.run_code} is {a.status}, not claimed")
    name = session.scalar(sa.select(Station.name).where(Station.id == station_id))
    retry_at = claims.report_preflight_failure(
        session,
        run_code=a.run_code,
        station_id=station_id,
        reason=reason,
        actor=Actor(label=f"station:{name}"),
        now=now,
        lease_s=lease_s,
        retry_s=retry_s,
        retry_max_s=retry_max_s,
    )
    return retry_at is not None


# -- the lease -----------------------------------------------------------------------


def release_lapsed_claims(session: Session, now: datetime, lease_s: float) -> list[str]:
    """Hand back to the scheduler the claims of stations that had tokens, have
    no live one now, and have been silent for ``lease_s``: such a station cannot
    come back for its run. A run with no episode is pending again (same code);
    one with an episode is settled from it (``claims.free_station``). Returns
    the run codes released; audit-logged as ``scheduler:lease``."""
    had = sa.select(StationToken.id).where(StationToken.station_id == Station.id)
    live = had.where(station_credentials.live_clause(now))
    lapsed = session.execute(
        sa.select(Assignment.campaign_id, Station.name, Assignment.run_code)
        .join(Station, Station.id == Assignment.station_id)
        .where(
            Assignment.status == AssignmentStatus.claimed,
            had.exists(),
            ~live.exists(),
            sa.or_(
                Station.last_seen_at.is_(None),
                Station.last_seen_at < now - timedelta(seconds=lease_s),
            ),
        )
    ).all()
    for campaign_id, name in sorted({(row[0], row[1]) for row in lapsed}):
        claims.free_station(session, campaign=campaign_id, station=name, actor=LEASE_ACTOR)
    return sorted(row[2] for row in lapsed)


# -- episodes ------------------------------------------------------------------------


def sync_episode(
    session: Session,
    station_id: int,
    wire: EpisodeWire,
    settings: SchedulerSettings,
    *,
    now: datetime | None = None,
) -> EpisodeReply:
    """Upsert the episode as the station's ledger holds it (see the module's
    docstring). Everything is checked before anything is written.

    A later revision of an episode whose run was settled without it (its
    slot requeued while it ran: a claim after the episode went silent past
    the lease) is stored, never refused: the recording and the operator's
    log of an episode that really ran stay on the record, shown labelled as
    excluded, and the station's outbox is not left with a refusal. It never
    counts: the analysis scores only the episode that settled a ``done``
    run (``analysis.store.load_episodes``), and the slot's replacement runs."""
    _check_int("rev", wire.rev)
    for i, e in enumerate(wire.events):
        _check_int(f"events[{i}].seq", e.seq)
    a = _held_run(session, station_id, wire.run_code)
    ep = session.scalar(sa.select(Episode).where(Episode.uid == wire.uid))
    if ep is not None and ep.station_id != station_id:
        raise FieldForbidden("uid", f"episode {wire.uid} is another station's")
    if ep is not None and ep.run_code != a.run_code:
        raise FieldConflict("run_code", f"episode {wire.uid} ran under run {ep.run_code}")
    if ep is not None and ep.sync_rev is not None and wire.rev <= ep.sync_rev:
        # a replay, or a snapshot older than the one stored: nothing changes
        return _reply(ep, a)
    outcome = _check(session, a, ep, wire)
    first = ep is None
    if ep is None:
        ep = Episode(uid=wire.uid, station_id=station_id, run_code=a.run_code)
    _write(ep, a, wire, outcome)
    # heard from now: a live episode holds its run against a second claim
    ep.synced_at = now or utcnow()
    if first and not _inserted(session, ep):
        # the same first snapshot, sent twice at once, and the other got in
        # first: this one is answered as the one that came second
        session.expire_all()
        return sync_episode(session, station_id, wire, settings, now=now)
    session.flush()
    _add_events(session, ep, wire, timedelta(seconds=wire.clock_offset_s))
    if ep.state in _TERMINAL and a.status == AssignmentStatus.claimed:
        claims.complete(
            session,
            run_code=a.run_code,
            episode_id=ep.id,
            station_id=station_id,
            free_protocol_faults=settings.free_protocol_faults,
        )
    return _reply(ep, a)


def _inserted(session: Session, ep: Episode) -> bool:
    """Insert the new episode; False if a concurrent call inserted its uid
    first (the unique index refuses the second row, and only this insert is
    undone). pysqlite would commit a savepoint opened before the transaction
    wrote anything: the route has written already (``record_use``, every call)."""
    try:
        with session.begin_nested():
            session.add(ep)
    except sa.exc.IntegrityError:
        if session.scalar(sa.select(Episode.id).where(Episode.uid == ep.uid)) is None:
            raise  # not the uid's race: a real fault, answered as one
        return False
    return True


def _reply(ep: Episode, a: Assignment) -> EpisodeReply:
    settled = ep.assignment_id == a.id and a.status != AssignmentStatus.claimed
    return EpisodeReply(uid=ep.uid, rev=ep.sync_rev or 0, state=ep.state, settled=settled)


def _check(
    session: Session, a: Assignment, ep: Episode | None, wire: EpisodeWire
) -> Outcome | None:
    """Refuse what cannot be stored; the outcome, parsed."""
    if ep is None and a.status != AssignmentStatus.claimed:
        raise FieldConflict("run_code", f"run {a.run_code} is {a.status}; it takes no episode")
    _check_run(session, a, wire)
    _check_times(wire)
    check_text(wire, "")
    if wire.operator_id is not None:
        # the station host's accounts are its own: an id would name whoever
        # holds that number in the server's users table
        raise FieldError("operator_id", "a station cannot name a server user; send operator_label")
    _check_int("sim_seed", wire.sim_seed)
    _check_int("envelope_interventions", wire.envelope_interventions)
    outcome = _outcome(wire)
    _check_counts(wire, outcome)
    if ep is not None and ep.state in _TERMINAL:
        _check_unchanged_log(ep, wire, outcome)
    return outcome


def _check_run(session: Session, a: Assignment, wire: EpisodeWire) -> None:
    """The episode ran what its run prescribes (``claims.complete`` would refuse it later)."""
    obj = session.get(ObjectType, a.object_type_id)
    if obj is None or obj.name != wire.object:
        raise FieldError("object", f"run {a.run_code} prescribes another object")
    for field, got, want in (
        ("tote_side", wire.tote_side, a.tote_side),
        ("camera_side", wire.camera_side, a.camera_side),
    ):
        if Side(got) != want:
            raise FieldError(field, f"run {a.run_code} prescribes {want}")


def _check_times(wire: EpisodeWire) -> None:
    """A wall time without a time zone cannot be mapped to the server's clock."""
    times = [("started_at", wire.started_at), ("ended_at", wire.ended_at)]
    times += [("logged_at", wire.logged_at)]
    times += [(f"events[{i}].at", e.at) for i, e in enumerate(wire.events)]
    offset = timedelta(seconds=wire.clock_offset_s)
    for field, at in times:
        if at is not None and at.tzinfo is None:
            raise FieldError(field, "a time with its UTC offset (e.g. 2031-05-04T09:00:00Z)")
        try:
            _server_time(at, offset)
        except OverflowError:
            raise FieldError(field, "out of range once mapped to the server's clock") from None


def _outcome(wire: EpisodeWire) -> Outcome | None:
    if wire.outcome is None:
        # an interrupted episode is a station failure (as the station's recovery marks it)
        return Outcome.system if wire.state == EpisodeState.interrupted else None
    try:
        return Outcome(wire.outcome)
    except ValueError:
        known = ", ".join(o.value for o in Outcome)
        raise FieldError("outcome", f"must be one of {known}, got {wire.outcome!r}") from None


def _check_counts(wire: EpisodeWire, outcome: Outcome | None) -> None:
    """The operator's log, as the station's own form checks it: all three
    counts or none, within the items, and a closed episode has them."""
    counts = {"placed": wire.placed, "lost": wire.lost, "dropped": wire.dropped}
    given = [k for k, v in counts.items() if v is not None]
    if wire.state == EpisodeState.closed:
        if outcome is None:
            raise FieldError("outcome", "required once the episode is closed")
        if len(given) < 3 and outcome != Outcome.system:
            missing = next(k for k, v in counts.items() if v is None)
            raise FieldError(missing, "required once the episode is closed")
    if given and len(given) < 3:
        missing = next(k for k, v in counts.items() if v is None)
        raise FieldError(missing, "the operator's log has all three counts or none")
    if given and outcome is not None:
        log = OperatorLog(wire.placed or 0, wire.lost or 0, wire.dropped or 0, outcome)
        log.check_against(wire.items)
    elif given and sum(v or 0 for v in counts.values()) > wire.items:
        raise FieldError("placed + lost + dropped", f"more than the {wire.items} items set out")


def _check_unchanged_log(ep: Episode, wire: EpisodeWire, outcome: Outcome | None) -> None:
    sent: dict[str, Any] = {
        "state": EpisodeState(wire.state),
        "outcome": outcome,
        "placed": wire.placed,
        "lost": wire.lost,
        "dropped": wire.dropped,
    }
    for field in _LOG_FIELDS:
        if getattr(ep, field) != sent[field]:
            raise FieldConflict(
                field, f"episode {ep.uid} is {ep.state}; corrections go through the review log"
            )


def _write(ep: Episode, a: Assignment, wire: EpisodeWire, outcome: Outcome | None) -> None:
    offset = timedelta(seconds=wire.clock_offset_s)
    ep.campaign_id, ep.object_type_id = a.campaign_id, a.object_type_id
    ep.items, ep.budget_s, ep.sim_seed = wire.items, wire.budget_s, wire.sim_seed
    ep.tote_side, ep.camera_side = Side(wire.tote_side), Side(wire.camera_side)
    ep.state = EpisodeState(wire.state)
    ep.clock_start_s, ep.clock_end_s = wire.clock_start_s, wire.clock_end_s
    ep.started_at = _server_time(wire.started_at, offset)
    ep.ended_at = _server_time(wire.ended_at, offset)
    ep.outcome, ep.outcome_reason = outcome, bounded(wire.outcome_reason)
    ep.envelope_interventions = wire.envelope_interventions
    ep.placed, ep.lost, ep.dropped = wire.placed, wire.lost, wire.dropped
    ep.operator_notes = wire.operator_notes.strip()
    ep.logged_at = _server_time(wire.logged_at, offset)
    ep.sync_rev = wire.rev


def _server_time(at: datetime | None, offset: timedelta) -> datetime | None:
    return None if at is None else at + offset


def _add_events(session: Session, ep: Episode, wire: EpisodeWire, offset: timedelta) -> None:
    """Each event once, by its place in the station's ledger; the operator's
    log names who wrote it as the episode's ``operator_label`` says."""
    stored = set(
        session.scalars(
            sa.select(EpisodeEvent.station_seq).where(
                EpisodeEvent.episode_id == ep.id, EpisodeEvent.station_seq.is_not(None)
            )
        )
    )
    for e in wire.events:
        if e.seq in stored:
            continue
        details = dict(e.details)
        if e.kind == "operator_log":
            details.pop(OPERATOR_LABEL_KEY, None)
            if wire.operator_label:
                details[OPERATOR_LABEL_KEY] = wire.operator_label
        session.add(
            EpisodeEvent(
                episode_id=ep.id,
                station_seq=e.seq,
                t_s=e.t_s,
                at=e.at + offset,
                kind=e.kind,
                message=e.message,
                details=details,
            )
        )
    session.flush()


# -- idempotency ---------------------------------------------------------------------


def once(
    session: Session,
    *,
    station_id: int,
    key: str,
    route: str,
    now: datetime,
    act: Callable[[], Wire],
) -> dict[str, Any]:
    """The answer to ``route`` under the station's ``key``: the stored one if
    the key was used before (nothing is done again), else ``act``'s, stored in
    the same transaction as what it did. A key used for another call is 409.
    Only answers are kept: a refused call wrote nothing and may be retried."""
    stored = session.scalar(
        sa.select(StationRequest).where(
            StationRequest.station_id == station_id, StationRequest.key == key
        )
    )
    if stored is not None:
        if stored.route != route:
            raise FieldConflict("Idempotency-Key", f"already used for {stored.route}")
        return dict(stored.response)
    answer = act().model_dump(mode="json")
    session.flush()
    row = StationRequest(
        station_id=station_id,
        key=key,
        route=route,
        status_code=200,
        response=answer,
        created_at=now,
    )
    # no savepoint: a refusal rolls the whole request back (and pysqlite would
    # commit at once a savepoint opened before the transaction wrote anything)
    session.add(row)
    try:
        session.flush()
    except sa.exc.IntegrityError:
        # the same key, sent again while the first call was still running, got in
        # first: this call's work is rolled back with the request, and its retry
        # gets the first call's answer
        raise FieldConflict("Idempotency-Key", "a call with this key is under way") from None
    return answer
