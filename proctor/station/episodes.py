"""The station's database work: episode rows, their events and artifacts,
and the operator's post-rollout log.

Service functions take a keyword-only ``session`` and never commit: the
runner (or the API request, or the CLI command) owns each transaction.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Episode, EpisodeEvent, ObjectType, Station
from proctor.core.db.types import utcnow
from proctor.core.domain import ArtifactKind, EpisodeState, Outcome
from proctor.core.episode_record import (
    OPERATOR_LABEL_KEY,
    OperatorLog,
    bounded,
)
from proctor.core.errors import ProctorError, UsageError
from proctor.core.work import Work

# the states an episode passes through while the station still owns it
LIVE_STATES = (EpisodeState.armed, EpisodeState.running, EpisodeState.finishing)


class EpisodeNotFound(UsageError):
    pass


class WrongState(ProctorError):
    exit_code = 2
    http_status = 409


def new_uid() -> str:
    return secrets.token_hex(8)


def ensure_station(session: ProctorSession, *, name: str, profile: str) -> Station:
    station = session.scalar(sa.select(Station).where(Station.name == name))
    if station is None:
        station = Station(name=name, profile=profile)
        session.add(station)
        session.flush()
    station.last_seen_at = utcnow()
    return station


def ensure_object_type(
    session: ProctorSession,
    *,
    name: str,
    display_name: str = "",
    tags: list[str] | None = None,
    prompt: str = "",
) -> ObjectType:
    """The object type by name, created for an ad-hoc run if it does not exist yet."""
    obj = session.scalar(sa.select(ObjectType).where(ObjectType.name == name))
    if obj is None:
        obj = ObjectType(
            name=name,
            display_name=display_name or name.replace("_", " ").capitalize(),
            tags=list(tags or []),
            prompt=prompt,
        )
        session.add(obj)
        session.flush()
    return obj


def get_episode(session: ProctorSession, uid: str) -> Episode:
    episode = session.scalar(sa.select(Episode).where(Episode.uid == uid))
    if episode is None:
        raise EpisodeNotFound(f"episode: no episode '{uid}'")
    return episode


def add_event(
    session: ProctorSession,
    *,
    episode: Episode,
    kind: str,
    message: str = "",
    t_s: float | None = None,
    details: dict[str, Any] | None = None,
) -> EpisodeEvent:
    event = EpisodeEvent(
        episode_id=episode.id, kind=kind, message=bounded(message), t_s=t_s, details=details or {}
    )
    session.add(event)
    session.flush()
    return event


def create_episode(
    session: ProctorSession, *, work: Work, station: Station, object_type: ObjectType
) -> Episode:
    """An armed episode for ``work``. The policy URL is deliberately not stored."""
    episode = Episode(
        uid=new_uid(),
        station_id=station.id,
        assignment_id=work.assignment_id,
        campaign_id=work.campaign_id,
        run_code=work.run_code,
        object_type_id=object_type.id,
        items=work.items,
        budget_s=work.budget_s,
        tote_side=work.tote_side,
        camera_side=work.camera_side,
        sim_seed=work.sim_seed,
        state=EpisodeState.armed,
    )
    session.add(episode)
    session.flush()
    add_event(session, episode=episode, kind="armed", message=f"run {work.run_code} armed")
    return episode


def mark_running(session: ProctorSession, *, episode: Episode, clock_start_s: float) -> None:
    episode.state = EpisodeState.running
    episode.clock_start_s = clock_start_s
    episode.started_at = utcnow()
    add_event(session, episode=episode, kind="started", t_s=0.0, message="episode started")


def mark_finishing(
    session: ProctorSession,
    *,
    episode: Episode,
    clock_end_s: float,
    proposed: Outcome,
    reason: str,
    details: dict[str, Any] | None = None,
) -> None:
    episode.state = EpisodeState.finishing
    episode.clock_end_s = clock_end_s
    episode.ended_at = utcnow()
    episode.outcome_reason = bounded(reason)
    t_s = clock_end_s - episode.clock_start_s if episode.clock_start_s is not None else None
    add_event(
        session,
        episode=episode,
        kind="finished",
        t_s=t_s,
        message=reason,
        details={"proposed_outcome": proposed.value, **(details or {})},
    )


def envelope_interventions(block: Any) -> tuple[int | None, str | None]:
    """The count in a manifest's ``envelope`` block (``{"interventions": n,
    "by_reason": {...}, "limits": {...}}``, written by the station's safety
    envelope), and what was wrong with the block. No block: (None, None), the
    count is unknown (a station that does not count, a crashed episode's
    recovery); a malformed one: (None, the problem). An unknown count is stored
    as NULL, never as zero."""
    if block is None:
        return None, None
    n = block.get("interventions") if isinstance(block, dict) else None
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        return None, "manifest envelope: interventions is not a count; stored as unknown"
    return n, None


def proposed_outcome(session: ProctorSession, *, episode: Episode) -> Outcome | None:
    """What the runner proposed when the episode ended (the latest 'finished' event)."""
    event = session.scalar(
        sa.select(EpisodeEvent)
        .where(EpisodeEvent.episode_id == episode.id, EpisodeEvent.kind == "finished")
        .order_by(EpisodeEvent.id.desc())
        .limit(1)
    )
    if event is None or "proposed_outcome" not in event.details:
        return None
    return Outcome(event.details["proposed_outcome"])


@dataclass(frozen=True)
class StoredFile:
    kind: ArtifactKind
    sha256: str
    size_bytes: int
    uri: str
    media_type: str
    camera: str | None = None
    frame_count: int | None = None
    details: dict[str, Any] | None = None


def register_artifacts(
    session: ProctorSession, *, episode: Episode, files: list[StoredFile]
) -> list[Artifact]:
    rows = []
    for f in files:
        row = Artifact(
            episode_id=episode.id,
            kind=f.kind,
            camera=f.camera,
            uri=f.uri,
            sha256=f.sha256,
            size_bytes=f.size_bytes,
            media_type=f.media_type,
            frame_count=f.frame_count,
            details=f.details or {},
        )
        session.add(row)
        rows.append(row)
    session.flush()
    return rows


def mark_awaiting_log(session: ProctorSession, *, episode: Episode) -> None:
    episode.state = EpisodeState.awaiting_log


def mark_interrupted(session: ProctorSession, *, episode: Episode, reason: str) -> None:
    """The daemon died mid-episode: a station failure, so the outcome is ``system``."""
    episode.state = EpisodeState.interrupted
    episode.outcome = Outcome.system
    episode.outcome_reason = bounded(reason)
    if episode.ended_at is None:
        episode.ended_at = utcnow()
    add_event(session, episode=episode, kind="interrupted", message=reason)


def live_episodes(session: ProctorSession, *, station: Station) -> list[Episode]:
    """Episodes this station left armed, running or finishing (after a crash)."""
    return list(
        session.scalars(
            sa.select(Episode)
            .where(Episode.station_id == station.id, Episode.state.in_(LIVE_STATES))
            .order_by(Episode.id)
        )
    )


def awaiting_log(session: ProctorSession, *, station: Station) -> list[Episode]:
    return list(
        session.scalars(
            sa.select(Episode)
            .where(Episode.station_id == station.id, Episode.state == EpisodeState.awaiting_log)
            .order_by(Episode.id)
        )
    )


# -- the operator's log ------------------------------------------------------


def submit_log(
    session: ProctorSession,
    *,
    uid: str,
    log: OperatorLog,
    operator_id: int | None = None,
    label: str = "",
    operator_label: str | None = None,
) -> Episode:
    """Close an episode with the operator's counts and outcome.

    Only an episode awaiting its log accepts one; later corrections go
    through the review log (an admin's ``correct_log`` action), never here.
    ``label`` marks logs no person wrote (the demo's ground-truth helper).
    ``operator_label``: who logged it, as text (``operator_label(...)``),
    for a station whose ledger holds none of the server's users; it rides in
    the log event's details and the server keeps it there.
    """
    episode = get_episode(session, uid)
    if episode.state != EpisodeState.awaiting_log:
        if episode.state == EpisodeState.closed:
            raise WrongState(
                f"episode {uid}: already closed; corrections go through the review log"
            )
        raise WrongState(f"episode {uid}: is {episode.state.value}, not awaiting its log")
    log.check_against(episode.items)
    proposed = proposed_outcome(session, episode=episode)
    episode.placed, episode.lost, episode.dropped = log.placed, log.lost, log.dropped
    episode.outcome = log.outcome
    episode.operator_notes = log.notes
    episode.operator_id = operator_id
    episode.logged_at = utcnow()
    episode.state = EpisodeState.closed
    details: dict[str, Any] = {
        "placed": log.placed,
        "lost": log.lost,
        "dropped": log.dropped,
        "outcome": log.outcome.value,
        "proposed_outcome": proposed.value if proposed else None,
        "corrected": proposed is not None and proposed != log.outcome,
    }
    if label:
        details["label"] = label
    if operator_label:
        details[OPERATOR_LABEL_KEY] = operator_label
    add_event(
        session,
        episode=episode,
        kind="operator_log",
        message=label or "post-rollout log saved",
        details=details,
    )
    return episode
