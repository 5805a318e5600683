"""Everything the run explorer shows of one episode, gathered once.

Identity follows ``proctor.web.artifacts.access`` and ``proctor.scheduler.naming``:
the policy's name appears only when the campaign is released and its
submitter opted in to the public board (the reference: always); a withheld
one shows its arm label with the note "identity withheld by the submitter"
(its owner and admins also see the name). An admin previewing an unreleased
campaign sees the episode's blinded arm label; reviewers and operators see
neither (knowing which episodes share an arm would bias a review). Reviewer names
are shown to staff; the public sees "a reviewer" (or the label of an
automatic reviewer, which says what it is).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from pydantic import BaseModel, Field

from proctor.analysis.store import POLICY_CALLS_EVENT
from proctor.annotator.tags import tags_of
from proctor.annotator.taxonomy import load_taxonomy
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    AnnotationCandidate,
    Artifact,
    Assignment,
    Campaign,
    Episode,
    EpisodeEvent,
    ObjectType,
    PlacementEvent,
    Policy,
    ReviewAction,
    Station,
    User,
)
from proctor.core.domain import ArtifactKind, CampaignStatus, PolicyKind, Visibility
from proctor.core.episode_record import OPERATOR_LABEL_KEY
from proctor.scheduler.naming import WITHHELD_NOTE, campaign_naming
from proctor.web.artifacts import redaction
from proctor.web.artifacts.access import EpisodeAccess, is_staff
from proctor.web.auth.identity import Principal, viewer
from proctor.web.explorer.calls import CallsOut, calls_view
from proctor.web.explorer.export import cached_rrd

# how the public (and the export) names a person who reviewed an episode
ANONYMOUS_REVIEWER = "a reviewer"


class CameraOut(BaseModel):
    name: str
    video_sha256: str
    frames_sha256: str | None
    frames: int | None
    width: int | None
    height: int | None
    fps: float | None
    video_url: str
    frames_url: str


class EventOut(BaseModel):
    t_s: float | None = Field(description="s since the episode start (station clock)")
    at: datetime
    kind: str
    message: str
    reason: str | None = Field(
        default=None,
        description="an envelope intervention's reason (kind 'envelope'); null for other "
        "events and, before release, for operators and reviewers",
    )


class CandidateOut(BaseModel):
    id: int
    t_s: float
    kind: str
    zone: str
    verdict: str
    rule: str
    score: float | None


class PlacementOut(BaseModel):
    id: int
    t_s: float
    source: str
    status: str
    candidate_id: int | None


class ReviewOut(BaseModel):
    at: datetime
    action: str
    reviewer: str
    placement_event_id: int | None
    before: dict[str, Any]
    after: dict[str, Any]
    note: str


class FailureTagOut(BaseModel):
    id: int
    mode: str
    label: str
    t_s: float
    automatic: bool = Field(description="proposed from telemetry by software, not a reviewer")


class EpisodeOut(BaseModel):
    uid: str
    run_code: str | None
    campaign: dict[str, Any] | None
    released: bool
    policy: str | None = Field(
        description="the policy's name: once the campaign is released, if its submitter opted "
        "in to the public board (its owner and admins: always after release)"
    )
    arm: str | None = Field(
        description="the blinded arm label: admins before release; everyone after release when "
        "the policy's identity is withheld"
    )
    identity_withheld: bool = Field(
        description="released, but the submitter has not opted in to the public board"
    )
    note: str | None = Field(description="'identity withheld by the submitter' where it is")
    object: str
    object_display: str
    items: int
    budget_s: float
    configuration: dict[str, str]
    station: str | None
    state: str
    outcome: str | None
    outcome_reason: str
    placed: int | None
    dropped: int | None
    lost: int | None
    envelope_interventions: int | None = Field(
        description="commands the station's safety envelope clamped or stopped (the "
        "manifest's count); null: the station did not count them. Each is also an event "
        "of kind 'envelope'"
    )
    duration_s: float | None
    clock_start_s: float | None
    started_at: datetime | None
    label_status: str
    operator_notes: str
    logged_by: str | None = Field(
        default=None,
        description="who wrote the operator's log, for staff only: a server user's name, "
        "or a station host's label for its own account (cell-a:alice); null otherwise",
    )
    events: list[EventOut]
    candidates: list[CandidateOut]
    placements: list[PlacementOut]
    reviews: list[ReviewOut]
    failure_tags: list[FailureTagOut] = Field(
        default_factory=list, description="live behavioural failure-mode tags, by time"
    )
    cameras: list[CameraOut]
    telemetry_sha256: str | None
    telemetry_rows: int | None
    links: dict[str, str]
    calls: CallsOut | None = Field(
        default=None,
        description="every policy call: round trip, the server's time, its chunk's "
        "lateness and stale actions (null: the station tabled none)",
    )


def _logged_by(session: ProctorSession, episode: Episode) -> str | None:
    """The operator's user, or the label a station host sent for its own
    account (not a policy's identity: no blinding rests on it)."""
    if episode.operator_id is not None:
        user = session.get(User, episode.operator_id)
        return user.username if user else f"user {episode.operator_id}"
    details = session.scalar(
        sa.select(EpisodeEvent.details)
        .where(EpisodeEvent.episode_id == episode.id, EpisodeEvent.kind == "operator_log")
        .order_by(EpisodeEvent.id.desc())
        .limit(1)
    )
    label = (details or {}).get(OPERATOR_LABEL_KEY)
    return label if isinstance(label, str) and label else None


def _failure_tags(session: ProctorSession, episode: Episode) -> list[FailureTagOut]:
    taxonomy = load_taxonomy()
    return [
        FailureTagOut(
            id=t.id, mode=t.mode, label=taxonomy.label(t.mode), t_s=t.t_s, automatic=t.automatic
        )
        for t in sorted(tags_of(session, [episode.id]), key=lambda t: (t.t_s, t.id))
    ]


def episode_bundle(
    session: ProctorSession, episode: Episode, access: EpisodeAccess, who: Principal | None
) -> EpisodeOut:
    obj = session.get(ObjectType, episode.object_type_id)
    station = session.get(Station, episode.station_id) if episode.station_id else None
    campaign = session.get(Campaign, episode.campaign_id) if episode.campaign_id else None
    released = campaign is not None and campaign.status == CampaignStatus.released
    policy_name = arm = label = None
    withheld = False
    if (
        episode.assignment_id is not None
        and campaign is not None
        and (released or (who and who.is_admin))
    ):
        policy_id = session.scalar(
            sa.select(Assignment.policy_id).where(Assignment.id == episode.assignment_id)
        )
        naming = campaign_naming(session, campaign)
        entry = next((a for a in naming.arms if a.policy_id == policy_id), None)
        if entry is not None:
            label = naming.label(entry)
            if not released:
                arm = entry.arm  # an admin's preview
            elif naming.named(entry):
                policy_name = entry.name
            else:
                withheld = True
                arm = entry.arm
                policy_name = naming.known_to(viewer(who)).get(entry.arm)  # its owner, admins
        elif released:  # not one of the campaign's arms: named only if it opted in
            policy = session.get(Policy, policy_id) if policy_id is not None else None
            if policy is not None and (
                policy.kind == PolicyKind.reference or policy.visibility == Visibility.public
            ):
                policy_name = label = policy.name
            else:
                withheld = True
    staff = is_staff(who)
    reviewers: dict[int, str] = {}
    reviews = []
    for r in session.scalars(
        sa.select(ReviewAction)
        .where(ReviewAction.episode_id == episode.id)
        .order_by(ReviewAction.at, ReviewAction.id)
    ):
        if r.reviewer_label:
            name = r.reviewer_label
        elif staff and r.reviewer_id is not None:
            if r.reviewer_id not in reviewers:
                u = session.get(User, r.reviewer_id)
                reviewers[r.reviewer_id] = u.username if u else f"user {r.reviewer_id}"
            name = reviewers[r.reviewer_id]
        else:
            name = ANONYMOUS_REVIEWER
        reviews.append(
            ReviewOut(
                at=r.at,
                action=r.action.value,
                reviewer=name,
                placement_event_id=r.placement_event_id,
                before=r.before or {},
                after=r.after or {},
                note=r.note or "",
            )
        )
    artifacts = list(
        session.scalars(
            sa.select(Artifact).where(Artifact.episode_id == episode.id).order_by(Artifact.id)
        )
    )
    videos = {a.camera: a for a in artifacts if a.kind == ArtifactKind.video and a.camera}
    tables = {a.camera: a for a in artifacts if a.kind == ArtifactKind.frame_index and a.camera}
    telemetry = [a for a in artifacts if a.kind == ArtifactKind.telemetry]
    cameras = []
    for name in sorted(videos, key=lambda n: (n != "exterior", n)):
        v = videos[name]
        details = v.details or {}
        cameras.append(
            CameraOut(
                name=name,
                video_sha256=v.sha256,
                frames_sha256=tables[name].sha256 if name in tables else None,
                frames=v.frame_count,
                width=details.get("width"),
                height=details.get("height"),
                fps=details.get("fps"),
                video_url=f"/api/artifacts/{v.sha256}",
                frames_url=f"/api/episodes/{episode.uid}/frames/{name}",
            )
        )
    links = {
        "page": f"/episodes/{episode.uid}",
        "api": f"/api/episodes/{episode.uid}",
        "telemetry": f"/api/episodes/{episode.uid}/telemetry",
    }
    # the .rrd is built on a signed-in user's first request and then served to all;
    # a visitor gets the link only once it exists (else a 401 saved as the file)
    if who is not None or cached_rrd(session, episode, redacted=access.redacted) is not None:
        links["rrd"] = f"/api/episodes/{episode.uid}/rrd"
    if campaign is not None and (released or (who and who.is_admin)):
        links["leaderboard"] = f"/leaderboard/{campaign.id}"
        if label is not None:
            links["policy"] = f"/leaderboard/{campaign.id}/policies/{quote(label, safe='')}"
    return EpisodeOut(
        uid=episode.uid,
        run_code=episode.run_code,
        campaign=(
            {"id": campaign.id, "name": campaign.name, "status": campaign.status.value}
            if campaign is not None and (released or staff)
            else None
        ),
        released=released,
        policy=policy_name,
        arm=arm,
        identity_withheld=withheld,
        note=WITHHELD_NOTE if withheld else None,
        object=obj.name if obj else "?",
        object_display=(obj.display_name or obj.name) if obj else "?",
        items=episode.items,
        budget_s=episode.budget_s,
        configuration={"tote": episode.tote_side.value, "camera": episode.camera_side.value},
        station=station.name if station else None,
        state=episode.state.value,
        outcome=episode.outcome.value if episode.outcome else None,
        outcome_reason=episode.outcome_reason or "",
        placed=episode.placed,
        dropped=episode.dropped,
        lost=episode.lost,
        envelope_interventions=episode.envelope_interventions,
        duration_s=episode.duration_s,
        clock_start_s=episode.clock_start_s,
        started_at=episode.started_at,
        label_status=episode.label_status.value,
        operator_notes=episode.operator_notes or "",
        logged_by=_logged_by(session, episode) if staff else None,
        events=[
            EventOut(
                t_s=e.t_s,
                at=e.at,
                kind=e.kind,
                message=redaction.event_message(e.kind, e.message, redacted=access.redacted),
                reason=redaction.envelope_reason(e.kind, e.details, redacted=access.redacted),
            )
            for e in session.scalars(
                sa.select(EpisodeEvent)
                .where(EpisodeEvent.episode_id == episode.id)
                .order_by(EpisodeEvent.t_s.asc().nulls_last(), EpisodeEvent.id)
            )
        ],
        candidates=[
            CandidateOut(
                id=c.id,
                t_s=c.t_s,
                kind=c.kind,
                zone=c.zone,
                verdict=c.verdict.value,
                rule=c.rule,
                score=c.score,
            )
            for c in session.scalars(
                sa.select(AnnotationCandidate)
                .where(AnnotationCandidate.episode_id == episode.id)
                .order_by(AnnotationCandidate.t_s, AnnotationCandidate.id)
            )
        ],
        placements=[
            PlacementOut(
                id=p.id,
                t_s=p.t_s,
                source=p.source.value,
                status=p.status.value,
                candidate_id=p.candidate_id,
            )
            for p in session.scalars(
                sa.select(PlacementEvent)
                .where(PlacementEvent.episode_id == episode.id)
                .order_by(PlacementEvent.t_s, PlacementEvent.id)
            )
        ],
        reviews=reviews,
        failure_tags=_failure_tags(session, episode),
        cameras=cameras,
        telemetry_sha256=telemetry[-1].sha256 if telemetry else None,
        telemetry_rows=(telemetry[-1].details or {}).get("rows") if telemetry else None,
        links=links,
        # the per-call timings could single out an arm (proctor.web.artifacts.redaction)
        calls=None if access.redacted else _calls(session, episode),
    )


def _calls(session: ProctorSession, episode: Episode) -> CallsOut | None:
    details = session.scalar(
        sa.select(EpisodeEvent.details)
        .where(EpisodeEvent.episode_id == episode.id, EpisodeEvent.kind == POLICY_CALLS_EVENT)
        .order_by(EpisodeEvent.id.desc())
        .limit(1)
    )
    return calls_view(details) if isinstance(details, dict) else None
