"""The thin layer between the store and the analysis: episodes out of the
database as an :class:`~proctor.analysis.episodes.EpisodeTable` (the same records
the interchange reader produces), and leaderboard snapshots back in.

What counts, per label stream (``proctor.core.domain.LabelStream``):

* only ``closed`` episodes with an operator log (outcome and counts) and
  both clock times; ``duration_s = clock_end_s − clock_start_s``;
* only the episode that settled its run as ``done``: one slot, one counted
  episode (an episode of a requeued run is excluded with the reason);
* ``auto_and_reviewed``: ``reviewed`` episodes read the reviewer's
  ``confirmed`` placements, ``auto`` episodes the detector's ``accepted``
  ones; ``pending`` / ``needs_review`` / ``flagged`` episodes are excluded
  and listed;
* ``reviewed_only``: only ``reviewed`` episodes;
* ``detector_only``: the detector's ``accepted`` or ``proposed`` placements
  of every annotated episode (anything but ``pending``), reconciled with the
  operator's log as described in proctor/analysis/README.md;
* ``system`` episodes are passed through (the analysis excludes and lists
  them) whatever their labels.

Lost, dropped, outcome and items always come from the operator's log. An
episode whose times contradict its log (a count mismatch in a reviewed
stream, a placement after the end) is excluded with the reason, never
silently fixed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, fields, replace
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.analysis import ANALYSIS_VERSION
from proctor.analysis.drift import sentinel_drift
from proctor.analysis.episodes import (
    OPERATOR_STOP,
    POLICY_FAULT_CLASSES,
    SUCCESS,
    SYSTEM,
    Episode,
    EpisodeTable,
    Exclusion,
    validate_episode,
)
from proctor.analysis.latency import EpisodeCalls, calls_from_table
from proctor.analysis.leaderboard import analyze
from proctor.analysis.notes import REFERENCE_UNSCORED, REFERENCES_IN_SCOPE
from proctor.analysis.report import data_version, to_json
from proctor.analysis.resolution import Outcome, pair_crossings, policy_stops
from proctor.analysis.results import AnalysisProtocol
from proctor.analysis.sequential import start_times
from proctor.analysis.subsets import DOCUMENTED, Subset, filter_table, levels
from proctor.core.db.models import (
    AnalysisSnapshot,
    AnalysisSubsetResult,
    Assignment,
    Campaign,
    EpisodeEvent,
    ObjectType,
    PlacementEvent,
    Policy,
    Station,
)
from proctor.core.db.models import (
    Episode as EpisodeRow,
)
from proctor.core.domain import (
    AssignmentStatus,
    EpisodeState,
    LabelStatus,
    LabelStream,
    PlacementSource,
    PlacementStatus,
    PolicyKind,
)
from proctor.core.errors import ProctorError, UsageError

# the station's event holding an episode's per-call table (its
# ``keys.POLICY_CALLS_EVENT``; a test keeps the two in step)
POLICY_CALLS_EVENT = "policy_calls"

# which placement rows each stream reads for an episode of a given label status
_Sources = dict[LabelStatus, tuple[PlacementSource, set[PlacementStatus]]]
_STREAM_SOURCES: dict[LabelStream, _Sources] = {
    LabelStream.auto_and_reviewed: {
        LabelStatus.reviewed: (PlacementSource.reviewer, {PlacementStatus.confirmed}),
        LabelStatus.auto: (PlacementSource.detector, {PlacementStatus.accepted}),
    },
    LabelStream.reviewed_only: {
        LabelStatus.reviewed: (PlacementSource.reviewer, {PlacementStatus.confirmed}),
    },
    LabelStream.detector_only: {
        status: (PlacementSource.detector, {PlacementStatus.accepted, PlacementStatus.proposed})
        for status in (
            LabelStatus.auto,
            LabelStatus.needs_review,
            LabelStatus.reviewed,
            LabelStatus.flagged,
        )
    },
}


def code_version() -> str:
    """The code that computed a result, as results and snapshots record it
    (here, not in the pure core: it reads the installed Proctor's version)."""
    from proctor import __version__

    return f"proctor-{__version__}/analysis-{ANALYSIS_VERSION}"


def _value(x: Any) -> Any:
    return getattr(x, "value", x)


def load_episodes(
    session: Session, *, campaign_id: int | None, stream: LabelStream
) -> EpisodeTable:
    """The episodes of a campaign (``None``: every episode in the store) as
    the analysis reads them under ``stream``."""
    stream = LabelStream(stream)
    q = (
        sa.select(
            EpisodeRow,
            Policy,
            ObjectType,
            Station.name,
            Station.site,
            Assignment.status,
            Assignment.block_index,
            Assignment.sequence,
        )
        .outerjoin(Assignment, EpisodeRow.assignment_id == Assignment.id)
        .outerjoin(Policy, Assignment.policy_id == Policy.id)
        .join(ObjectType, EpisodeRow.object_type_id == ObjectType.id)
        .outerjoin(Station, EpisodeRow.station_id == Station.id)
        .order_by(EpisodeRow.id)
    )
    if campaign_id is not None:
        q = q.where(EpisodeRow.campaign_id == campaign_id)
    rows = session.execute(q).all()

    placements = _placements(session, [r[0].id for r in rows])
    calls = _calls(session, [r[0].id for r in rows])
    faults = _policy_faults(session, [r[0].id for r in rows])

    episodes: list[Episode] = []
    excluded: list[Exclusion] = []
    notes: list[str] = []
    reconciled = 0
    references: set[str] = set()
    sources = _STREAM_SOURCES[stream]
    for row, policy, obj, station_name, site, slot_status, block, sequence in rows:
        policy_name = policy.name if policy is not None else ""

        def skip(
            reason: str, *, uid: str = row.uid, who: str = policy_name, what: str = obj.name
        ) -> None:
            excluded.append(Exclusion(uid, who, what, reason))

        if policy is None:
            skip("no assignment: the episode's policy is unknown")
            continue
        if policy.kind == PolicyKind.reference:
            references.add(policy.name)
        unready = _unready(row) or _not_done(slot_status, row)
        if unready is not None:
            skip(unready)
            continue
        duration_s = row.duration_s
        if duration_s is None:
            skip("no clock times")
            continue
        base = dict(
            episode_id=row.uid,
            policy=policy.name,
            object=obj.name,
            items=row.items,
            duration_s=float(duration_s),
            lost=row.lost,
            dropped=row.dropped,
            outcome=_value(row.outcome),
            budget_s=float(row.budget_s),
            tote_placement=_value(row.tote_side),
            external_camera=_value(row.camera_side),
            station=station_name,
            # the station's site now: a station moved to another site takes its
            # past episodes along (stations are re-enrolled, not moved, in practice)
            site=site,
            started_at=row.started_at.isoformat() if row.started_at else None,
            reference=policy.kind == PolicyKind.reference,
            object_tags=tuple(sorted(obj.tags or ())),
            envelope_interventions=row.envelope_interventions,
            calls=calls.get(row.id),
            policy_fault=faults.get(row.id),
            # the slot's place in the allocation: sequential pairs match by it (§10)
            block=block,
            sequence=sequence,
        )
        if _value(row.outcome) == SYSTEM:
            # only its identity matters: the analysis lists it and scores nothing
            base.update(lost=0, dropped=0, duration_s=max(float(base["duration_s"]), 0.0))
            episodes.append(Episode(**base, placements_s=()))
            continue
        status = LabelStatus(row.label_status)
        if status not in sources:
            skip(f"labels not in stream {stream.value} (label status {status.value})")
            continue
        source, statuses = sources[status]
        times = tuple(
            t for t, src, st in placements.get(row.id, []) if src == source and st in statuses
        )
        if stream == LabelStream.detector_only:
            times, outcome, changed = _reconcile_detector(times, row)
            base["outcome"] = outcome
            reconciled += changed
        elif len(times) != row.placed:
            kinds = "/".join(sorted(st.value for st in statuses))
            skip(
                f"{len(times)} {source.value} placements ({kinds}) "
                f"but the operator logged {row.placed} placed"
            )
            continue
        ep = Episode(**base, placements_s=times)
        problems = validate_episode(ep)
        if problems:
            skip("; ".join(f"{p.field}: {p.reason}" for p in problems))
            continue
        episodes.append(ep)

    if reconciled:
        notes.append(
            f"detector_only: {reconciled} episodes' detector counts differ from the "
            "operator's log (reconciled: see proctor/analysis/README.md)"
        )
    reference, note = _reference(references, episodes, stream)
    if note is not None:
        notes.append(note)
    return EpisodeTable(
        episodes=tuple(episodes),
        reference=reference,
        excluded=tuple(excluded),
        notes=tuple(notes),
    )


def _reference(
    references: set[str], episodes: list[Episode], stream: LabelStream
) -> tuple[str | None, str | None]:
    """The reference policy of the scope, if exactly one is in it and it has
    scored episodes; and the note saying why there is none, if one is due."""
    if len(references) > 1:
        return None, REFERENCES_IN_SCOPE.render(references=references)
    if not references:
        return None, None
    reference = next(iter(references))
    if not any(e.policy == reference and e.outcome != SYSTEM for e in episodes):
        return None, REFERENCE_UNSCORED.render(reference=reference, stream=stream.value)
    return reference, None


def _placements(
    session: Session, ids: list[int]
) -> dict[int, list[tuple[float, PlacementSource, PlacementStatus]]]:
    """Every placement event of the episodes ``ids``, by episode, in time order."""
    placements: dict[int, list[tuple[float, PlacementSource, PlacementStatus]]] = defaultdict(list)
    for chunk in range(0, len(ids), 500):
        part = ids[chunk : chunk + 500]
        for ev in session.execute(
            sa.select(
                PlacementEvent.episode_id,
                PlacementEvent.t_s,
                PlacementEvent.source,
                PlacementEvent.status,
            )
            .where(PlacementEvent.episode_id.in_(part))
            .order_by(PlacementEvent.episode_id, PlacementEvent.t_s, PlacementEvent.id)
        ):
            placements[ev.episode_id].append(
                (float(ev.t_s), PlacementSource(ev.source), PlacementStatus(ev.status))
            )
    return placements


# the events that name the fault class behind a policy's system or charged
# ending (proctor.scheduler.claims): the station's ending event, the
# scheduler's runner-fault note, and the charge
_FAULT_EVENTS = ("system_fault", "policy_fault", "protocol_fault_charged")


def _policy_faults(session: Session, ids: list[int]) -> dict[int, str]:
    """The fault of the policy's own doing behind each episode of ``ids`` that
    has one (``proctor.analysis.policy_faults``)."""
    out: dict[int, str] = {}
    for chunk in range(0, len(ids), 500):
        part = ids[chunk : chunk + 500]
        for episode_id, details in session.execute(
            sa.select(EpisodeEvent.episode_id, EpisodeEvent.details).where(
                EpisodeEvent.episode_id.in_(part), EpisodeEvent.kind.in_(_FAULT_EVENTS)
            )
        ):
            fault = details.get("fault") if isinstance(details, dict) else None
            if fault in POLICY_FAULT_CLASSES:
                out[episode_id] = str(fault)
    return out


def _calls(session: Session, ids: list[int]) -> dict[int, EpisodeCalls]:
    """The per-call table of each episode ``ids`` that has one, from the
    station's ``policy_calls`` event (at most one an episode)."""
    out: dict[int, EpisodeCalls] = {}
    for chunk in range(0, len(ids), 500):
        part = ids[chunk : chunk + 500]
        for episode_id, details in session.execute(
            sa.select(EpisodeEvent.episode_id, EpisodeEvent.details).where(
                EpisodeEvent.episode_id.in_(part), EpisodeEvent.kind == POLICY_CALLS_EVENT
            )
        ):
            table = calls_from_table(details) if isinstance(details, dict) else None
            if table is not None:
                out[episode_id] = table
    return out


def stream_placements(
    session: Session, episodes: list[EpisodeRow], stream: LabelStream
) -> dict[int, tuple[float, ...]]:
    """The placement times ``stream`` reads for each episode (by id), as
    labelled — before any check of the analysis (an episode it excludes keeps
    its labels here); none for a label status the stream does not read."""
    sources = _STREAM_SOURCES[LabelStream(stream)]
    found = _placements(session, [e.id for e in episodes])
    times: dict[int, tuple[float, ...]] = {}
    for ep in episodes:
        status = LabelStatus(ep.label_status)
        if status not in sources:
            times[ep.id] = ()
            continue
        source, statuses = sources[status]
        times[ep.id] = tuple(
            t for t, src, st in found.get(ep.id, []) if src == source and st in statuses
        )
    return times


def _unready(row: EpisodeRow) -> str | None:
    """Why an episode cannot be read yet (not closed, no operator log), or
    None when it can."""
    if row.state != EpisodeState.closed:
        return f"not closed (state {_value(row.state)})"
    if row.outcome is None or row.placed is None or row.lost is None or row.dropped is None:
        return "no operator log (outcome and counts)"
    return None


def _not_done(slot_status: AssignmentStatus, row: EpisodeRow) -> str | None:
    """Why an episode's slot does not count it, or None when it does.

    One slot, one counted episode: only the episode that settled its run as
    ``done`` is scored. An episode whose run was requeued (a system ending,
    or settled while it ran, once a claim found it silent past the lease)
    had its slot run again under a fresh code, and counting both would give
    the policy an extra episode in that cell. A ``system`` episode is passed
    through as ever (the analysis lists it and scores nothing)."""
    if slot_status == AssignmentStatus.done or row.outcome == SYSTEM:
        return None
    return (
        f"its run {row.run_code} was {_value(slot_status)}, not done: the slot's "
        "replacement counts instead"
    )


def _reconcile_detector(
    times: tuple[float, ...], row: EpisodeRow
) -> tuple[tuple[float, ...], str, bool]:
    """The detector-only view of an episode: the detector's own count and
    times, with the operator's lost / dropped / outcome.

    * More detections than the log allows (count > items − lost − dropped):
      the latest extra times are dropped (more placements than items left
      is physically impossible).
    * Fewer detections than the operator's placed count: the unseen items
      stay unhandled, so for the detector the operation in progress at the
      end never finished — a ``ran_out_of_time``/``operator_stop`` episode
      gets its censored tail as usual, and a ``success`` episode is read as
      stopped (its outcome becomes ``operator_stop``, a censored tail).
    Returns (times, outcome, whether anything was reconciled)."""
    room = row.items - row.lost - row.dropped
    changed = len(times) != row.placed
    if len(times) > room:
        times = times[:room]
    outcome = _value(row.outcome)
    if outcome == SUCCESS and len(times) < room:
        outcome = OPERATOR_STOP
    return times, outcome, changed


# protocol fields a campaign may set in ``protocol_extra["analysis"]`` (τ is
# ``tau_s``; the reference is the policy of kind ``reference``) — the same
# convention as proctor/web/snapshots
_PROTOCOL_KEYS = {f.name for f in fields(AnalysisProtocol)} - {"tau", "reference"}


def campaign_protocol(campaign: Campaign) -> AnalysisProtocol:
    """The campaign's analysis protocol: τ = ``tau_s``, the other fields from
    ``protocol_extra["analysis"]`` when it names them, defaults otherwise."""
    given = (campaign.protocol_extra or {}).get("analysis") or {}
    if not isinstance(given, dict):
        raise UsageError(f"campaign {campaign.id}: protocol_extra.analysis must be a table")
    unknown = sorted(set(given) - _PROTOCOL_KEYS)
    if unknown:
        raise UsageError(
            f"campaign {campaign.id}: protocol_extra.analysis: unknown keys {', '.join(unknown)}"
        )
    extra = dict(given)
    if "success_at" in extra:
        extra["success_at"] = tuple(float(t) for t in extra["success_at"])
    try:
        return AnalysisProtocol(tau=float(campaign.tau_s), **extra)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"campaign {campaign.id}: protocol_extra.analysis: {exc}") from None


def snapshot_result(
    session: Session,
    *,
    campaign_id: int | None,
    stream: LabelStream,
    protocol: AnalysisProtocol | None = None,
) -> tuple[dict[str, Any], AnalysisProtocol, EpisodeTable]:
    """The result JSON for a campaign and stream (what a snapshot stores)."""
    campaign = session.get(Campaign, campaign_id) if campaign_id is not None else None
    if campaign_id is not None and campaign is None:
        raise UsageError(f"campaign {campaign_id}: no such campaign")
    if protocol is None:
        if campaign is None:
            raise UsageError("a protocol (at least τ) is needed without a campaign")
        protocol = campaign_protocol(campaign)
    table = load_episodes(session, campaign_id=campaign_id, stream=stream)
    try:
        lb = analyze(table, protocol)
    except ValueError as exc:
        raise ProctorError(f"cannot score campaign {campaign_id} ({stream.value}): {exc}") from None
    result = to_json(
        lb,
        code_version=code_version(),
        data_version=data_version(table),
        extra_protocol={"label_stream": LabelStream(stream).value, "campaign_id": campaign_id},
    )
    if campaign is not None:
        result["early_stops"] = early_stops(session, campaign)
        result["drift"] = campaign_drift(session, campaign, table, alpha=protocol.alpha)
    return result, protocol, table


def build_snapshot(
    session: Session,
    *,
    campaign_id: int | None,
    stream: LabelStream,
    protocol: AnalysisProtocol | None = None,
    created_by_id: int | None = None,
) -> AnalysisSnapshot:
    """Score a campaign under ``stream`` and add the leaderboard snapshot to
    the session (flushed, not committed: the caller owns the transaction).
    ``protocol`` defaults to :func:`campaign_protocol`."""
    result, _protocol, _table = snapshot_result(
        session, campaign_id=campaign_id, stream=stream, protocol=protocol
    )
    snap = AnalysisSnapshot(
        campaign_id=campaign_id,
        label_stream=LabelStream(stream),
        protocol=result["protocol"],
        code_version=result["code_version"],
        data_version=result["data_version"],
        result=result,
        created_by_id=created_by_id,
    )
    session.add(snap)
    session.flush()
    if campaign_id is not None:
        store_subsets(session, snap, _table, _protocol)
    return snap


# ------------------------------------------------- documented subsets
# The board on each documented factor level (proctor.analysis.subsets.DOCUMENTED),
# scored with its snapshot: the public reads these and never starts an analysis
# (security review round three, [N2]: 564 filter combinations at 0.5 s of CPU each).


class EmptySubset(ValueError):
    """No episode meets the subset's conditions."""


def subset_result(
    table: EpisodeTable,
    subset: Subset,
    protocol: AnalysisProtocol,
    *,
    stream: LabelStream,
    campaign_id: int,
) -> dict[str, Any]:
    """The result JSON of ``table`` filtered to ``subset`` (unlabelled: the
    reader blinds it). ``ValueError`` says why a subset cannot be scored."""
    part = filter_table(table, subset)
    if not part.episodes:
        raise EmptySubset(f"no episode of this campaign has {subset.describe()}")
    try:
        lb = analyze(part, protocol)
    except (ValueError, UsageError) as exc:
        raise ValueError(f"{subset.describe()}: {exc}") from None
    return to_json(
        lb,
        code_version=code_version(),
        data_version=data_version(part),
        extra_protocol={
            "label_stream": LabelStream(stream).value,
            "campaign_id": campaign_id,
            "subset": dict(subset.conditions),
        },
    )


def store_subsets(
    session: Session, snap: AnalysisSnapshot, table: EpisodeTable, protocol: AnalysisProtocol
) -> int:
    """Score every documented level of ``table`` and add the rows beside
    ``snap`` (flushed); returns how many. A level too small to score is
    stored with its reason, so the public gets the same refusal."""
    assert snap.campaign_id is not None
    n = 0
    for factor, values in levels(table, DOCUMENTED).items():
        for level in values:
            subset = Subset(((factor, level),))
            try:
                result, message = (
                    subset_result(
                        table,
                        subset,
                        protocol,
                        stream=snap.label_stream,
                        campaign_id=snap.campaign_id,
                    ),
                    "",
                )
            except ValueError as exc:
                result, message = None, str(exc)
            session.add(
                AnalysisSubsetResult(
                    snapshot_id=snap.id, factor=factor, level=level, result=result, message=message
                )
            )
            n += 1
    session.flush()
    return n


def has_subsets(session: Session, snapshot_id: int) -> bool:
    return (
        session.scalar(
            sa.select(AnalysisSubsetResult.id)
            .where(AnalysisSubsetResult.snapshot_id == snapshot_id)
            .limit(1)
        )
        is not None
    )


# ------------------------------------------------- recomputing stored boards
# Deciding whether a board must be rescored and rescoring it is computation
# over stored episodes, so it lives here; the web only schedules it (its
# worker) and reads the rows it leaves.

STREAMS: tuple[LabelStream, ...] = tuple(LabelStream)
# the protocol fields a result records (proctor.analysis.report.to_json) and that must
# match for an old snapshot to stand for a new computation
_COMPARED = ("tau", "bootstrap", "ks_resamples", "seed", "alpha", "success_at", "power_target")


def _protocol_json(p: AnalysisProtocol) -> dict[str, Any]:
    return {
        "tau": p.tau,
        "bootstrap": p.bootstrap,
        "ks_resamples": p.resamples,
        "seed": p.seed,
        "alpha": p.alpha,
        "success_at": list(p.success_at),
        "power_target": p.power_target,
    }


@dataclass(frozen=True)
class StreamOutcome:
    """What recomputing one label stream did."""

    stream: LabelStream
    status: str  # "created" | "unchanged" | "failed"
    snapshot_id: int | None
    data_version: str | None
    message: str = ""


def latest_row(
    session: Session, *, campaign_id: int, stream: LabelStream
) -> AnalysisSnapshot | None:
    """The latest stored snapshot of a (campaign, label stream), or None."""
    return session.scalar(
        sa.select(AnalysisSnapshot)
        .where(
            AnalysisSnapshot.campaign_id == campaign_id,
            AnalysisSnapshot.label_stream == LabelStream(stream),
        )
        .order_by(AnalysisSnapshot.id.desc())
        .limit(1)
    )


def recompute(
    session: Session,
    *,
    campaign_id: int,
    streams: tuple[LabelStream, ...] = STREAMS,
    protocol: AnalysisProtocol | None = None,
    created_by_id: int | None = None,
    force: bool = False,
) -> list[StreamOutcome]:
    """Score a campaign under each stream and store a snapshot for each whose
    input (data version), code version or protocol differs from its latest
    snapshot (``force``: always). A stream that cannot be scored (no
    episodes yet, a contradictory reference) is reported, not raised. Adds
    rows to the caller's transaction; never commits."""
    campaign = session.get(Campaign, campaign_id)
    if campaign is None:
        raise UsageError(f"campaign_id: no campaign {campaign_id}")
    protocol = protocol or campaign_protocol(campaign)
    wanted = _protocol_json(protocol)
    cv = code_version()
    out: list[StreamOutcome] = []
    for stream in streams:
        stream = LabelStream(stream)
        table = load_episodes(session, campaign_id=campaign_id, stream=stream)
        dv = data_version(table)
        latest = latest_row(session, campaign_id=campaign_id, stream=stream)
        if (
            not force
            and latest is not None
            and latest.data_version == dv
            and latest.code_version == cv
            and all(latest.protocol.get(k) == wanted[k] for k in _COMPARED)
        ):
            if not has_subsets(session, latest.id) and table.episodes:
                # scored before subsets were stored with snapshots: add them now
                store_subsets(session, latest, table, protocol)
            out.append(StreamOutcome(stream, "unchanged", latest.id, dv))
            continue
        try:
            # scores first, adds the row only once scored: a failure adds nothing
            snap = build_snapshot(
                session,
                campaign_id=campaign_id,
                stream=stream,
                protocol=protocol,
                created_by_id=created_by_id,
            )
        except ProctorError as exc:
            out.append(StreamOutcome(stream, "failed", None, dv, str(exc)))
            continue
        out.append(StreamOutcome(stream, "created", snap.id, snap.data_version))
    return out


def stale_campaigns(session: Session) -> list[int]:
    """Campaigns whose latest snapshot of some stream no longer matches the
    data it was scored from (its data version), e.g. a review committed just
    before a crash, whose queued recomputation was lost with the process.
    Compares data only: a new code version alone does not make a board stale
    here (it is recomputed with the next change, as before)."""
    latest = (
        sa.select(sa.func.max(AnalysisSnapshot.id))
        .where(AnalysisSnapshot.campaign_id.is_not(None))
        .group_by(AnalysisSnapshot.campaign_id, AnalysisSnapshot.label_stream)
    )
    rows = session.execute(
        sa.select(
            AnalysisSnapshot.campaign_id,
            AnalysisSnapshot.label_stream,
            AnalysisSnapshot.data_version,
        )
        .where(AnalysisSnapshot.id.in_(latest))
        .order_by(AnalysisSnapshot.campaign_id)
    )
    stale: list[int] = []
    for campaign_id, stream, stored in rows:
        # campaign_id is never None here (the query keeps campaigns' snapshots only)
        if campaign_id is None or campaign_id in stale:
            continue
        table = load_episodes(session, campaign_id=campaign_id, stream=LabelStream(stream))
        if data_version(table) != stored:
            stale.append(campaign_id)
    return stale


# ------------------------------------------------- adaptive campaigns' outcomes
# What the adaptive rule (proctor/scheduler/adaptive_rule.py, docs/methods.md §11)
# reads, and the board's view of its early stops. A block is *settled* when
# none of its slots is pending or claimed and every counted episode of it is
# readable in the detector stream; the rule reads blocks 0…F, F the last block
# before the first unsettled one. The detector's placements are fixed once the
# annotator has run, so a later review cannot change what a decision read,
# and re-reading after the reveal gives what the scheduler read.

ADAPTIVE_STREAM = LabelStream.detector_only
_OPEN_SLOTS = (AssignmentStatus.pending, AssignmentStatus.claimed)


@dataclass(frozen=True)
class Reading:
    """The outcomes of the settled blocks and the first block not settled
    (None: all settled)."""

    outcomes: list[Outcome]
    first_unsettled: int | None


def read_outcomes(session: Session, campaign_id: int) -> Reading:
    table = load_episodes(session, campaign_id=campaign_id, stream=ADAPTIVE_STREAM)
    loaded = {e.episode_id: e for e in table.episodes}
    rows = session.execute(
        sa.select(
            EpisodeRow.uid,
            Assignment.block_index,
            Assignment.sequence,
            Assignment.policy_id,
            Assignment.object_type_id,
        )
        .join(Assignment, EpisodeRow.assignment_id == Assignment.id)
        .where(Assignment.campaign_id == campaign_id, Assignment.status == AssignmentStatus.done)
    ).all()
    unsettled = set(
        session.scalars(
            sa.select(Assignment.block_index).where(
                Assignment.campaign_id == campaign_id, Assignment.status.in_(_OPEN_SLOTS)
            )
        )
    )
    outcomes: list[Outcome] = []
    for uid, block, seq, pid, oid in rows:
        ep = loaded.get(uid)
        if ep is None:
            unsettled.add(block)  # counted, but not readable yet (labels pending)
            continue
        # the rule reads ids, so names (and their blinding) play no part
        outcomes.append(Outcome(block, seq, replace(ep, policy=str(pid), object=str(oid))))
    first = min(unsettled) if unsettled else None
    if first is not None:
        outcomes = [o for o in outcomes if o.block_index < first]
    return Reading(outcomes=outcomes, first_unsettled=first)


def early_stops(session: Session, campaign: Campaign) -> dict[str, Any] | None:
    """For the board: which pairs resolved and which policies stopped, and
    when (block, and the pair's episodes then); None for a fixed campaign."""
    committed = campaign.allocation_protocol or {}
    rule = committed.get("adaptive")
    if not rule:
        return None
    policies = [int(p) for p in committed["policies"]]
    sentinels = [int(p) for p in rule["sentinels"]]
    names = dict(
        session.execute(sa.select(Policy.id, Policy.name).where(Policy.id.in_(policies))).all()
    )
    reading = read_outcomes(session, campaign.id)
    objects = [int(o) for o in committed["objects"]]
    crossings = pair_crossings(policies, objects, float(rule["alpha"]), reading.outcomes)
    stops = policy_stops(policies, sentinels, crossings)
    lag = int(rule["lag_blocks"])
    return {
        "rule": rule["rule"],
        "alpha": rule["alpha"],
        "lag_blocks": lag,
        "sentinels": [names[p] for p in sentinels],
        # the last block the rule has read (None: every block; -1: none yet)
        "blocks_read_through": None
        if reading.first_unsettled is None
        else reading.first_unsettled - 1,
        "pairs": [
            {
                "a": names[c.a],
                "b": names[c.b],
                "resolved_after_block": c.block,
                "episodes": c.episodes,
                "e_value": c.e_value,
            }
            for c in sorted(crossings, key=lambda c: (c.block, c.a, c.b))
        ],
        "stopped": [
            {"policy": names[p], "after_block": b, "no_slots_from_block": b + 1 + lag}
            for p, b in sorted(stops.items(), key=lambda kv: (kv[1], kv[0]))
        ],
    }


def campaign_drift(
    session: Session, campaign: Campaign, table: EpisodeTable, *, alpha: float
) -> list[dict[str, Any]] | None:
    """The drift sentinels' tests (proctor/analysis/drift.py) on the scored
    episodes: the reference, and the policies the protocol marks; None when
    the episodes lack start times (then there is no order to test)."""
    ids = (campaign.allocation_rule or {}).get("sentinels") or []
    names = set(session.scalars(sa.select(Policy.name).where(Policy.id.in_([int(i) for i in ids]))))
    if table.reference:
        names.add(table.reference)
    try:
        starts = start_times(table.episodes)
    except ValueError:
        return None
    return [d.to_json() for d in sentinel_drift(table.episodes, sorted(names), starts, alpha=alpha)]
