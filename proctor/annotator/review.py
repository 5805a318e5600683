"""The review service: the queue, one episode's review state, and the
reviewer's decisions.

Every decision is a function with a keyword-only ``session`` that never
commits (the API request, the CLI command or the demo's automatic reviewer
owns the transaction), and every decision appends one ``ReviewAction`` row
(who, when, before, after; append-only in the database). Placement rows are
never deleted: a reviewer's placement is ``confirmed``; moving it marks the
old row ``superseded`` and adds a new one; rejecting it marks it
``rejected``. The detector's own rows are never touched, so the detector
stream stays as the detector left it.

Who may act:

* ``needs_review`` episodes: any reviewer (confirm, move, reject, add, flag);
* ``flagged`` episodes (a reviewer said the operator's count is wrong): an
  admin, who resolves the flag — the count stands, or is corrected (a
  ``correct_log`` record with the old and new counts) — and the episode
  returns to the queue.

When the reviewer's confirmed placements number the operator's ``placed``
count, the episode becomes ``reviewed`` and leaves the queue.

A decision made by software (the demo's automatic reviewer) carries a
``label`` instead of a user id, so it can never pass for a person's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    AnnotationCandidate,
    Episode,
    EpisodeEvent,
    ObjectType,
    PlacementEvent,
    ReviewAction,
    User,
)
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    EpisodeState,
    LabelStatus,
    Outcome,
    PlacementSource,
    PlacementStatus,
    ReviewActionKind,
)
from proctor.core.errors import Conflict, Forbidden, NotFound, UsageError

# two placements closer than this are one placement counted twice
MIN_SEPARATION_S = 0.001


class ReviewError(UsageError):
    """A review decision that cannot be applied; the message says why."""


@dataclass(frozen=True)
class Reviewer:
    """Who decides: a user (``user_id``), or software with a ``label``."""

    user_id: int | None = None
    label: str = ""
    admin: bool = False

    def __post_init__(self) -> None:
        if (self.user_id is None) == (not self.label.strip()):
            raise ValueError("a reviewer is either a user id or a label, exactly one")
        if len(self.label) > 128:
            raise ValueError("reviewer label: at most 128 characters")


# -- what the pages and the API show ---------------------------------------------


@dataclass(frozen=True)
class QueueEntry:
    uid: str
    run_code: str | None
    object: str
    items: int
    placed: int
    detected: int  # the detector's success count
    confirmed: int  # the reviewer's confirmed placements so far
    label_status: LabelStatus
    logged_at: datetime | None


@dataclass(frozen=True)
class CandidateView:
    id: int
    t_s: float
    kind: str
    zone: str
    verdict: str
    rule: str
    score: float | None
    features: dict[str, Any]
    state: str  # open | confirmed | rejected
    placement_id: int | None  # the reviewer's confirmed placement from it, if any


@dataclass(frozen=True)
class PlacementView:
    id: int
    t_s: float
    source: str
    status: str
    candidate_id: int | None


@dataclass(frozen=True)
class ActionView:
    id: int
    at: datetime
    action: str
    who: str
    automatic: bool
    placement_id: int | None
    before: dict[str, Any]
    after: dict[str, Any]
    note: str


@dataclass(frozen=True)
class ReviewState:
    uid: str
    run_code: str | None
    object: str
    items: int
    placed: int
    lost: int
    dropped: int
    outcome: str | None
    duration_s: float
    label_status: LabelStatus
    candidates: list[CandidateView] = field(default_factory=list)
    confirmed: list[PlacementView] = field(default_factory=list)
    detector: list[PlacementView] = field(default_factory=list)
    actions: list[ActionView] = field(default_factory=list)

    @property
    def remaining(self) -> int:
        return self.placed - len(self.confirmed)

    @property
    def in_queue(self) -> bool:
        return self.label_status in (LabelStatus.needs_review, LabelStatus.flagged)


# -- reading ---------------------------------------------------------------------------


def review_queue(session: ProctorSession, *, admin: bool = False) -> list[QueueEntry]:
    """Episodes waiting for a reviewer, oldest first; flagged ones (waiting
    for an admin) too when ``admin``."""
    statuses = [LabelStatus.needs_review] + ([LabelStatus.flagged] if admin else [])
    rows = session.execute(
        sa.select(Episode, ObjectType.name)
        .join(ObjectType, Episode.object_type_id == ObjectType.id)
        .where(Episode.label_status.in_(statuses))
        .order_by(sa.func.coalesce(Episode.logged_at, Episode.created_at), Episode.id)
    ).all()
    if not rows:
        return []
    ids = [ep.id for ep, _ in rows]
    counts: dict[tuple[int, str], int] = {}
    for episode_id, source, n in session.execute(
        sa.select(PlacementEvent.episode_id, PlacementEvent.source, sa.func.count())
        .where(
            PlacementEvent.episode_id.in_(ids),
            sa.or_(
                sa.and_(
                    PlacementEvent.source == PlacementSource.detector,
                    PlacementEvent.status.in_([PlacementStatus.proposed, PlacementStatus.accepted]),
                ),
                sa.and_(
                    PlacementEvent.source == PlacementSource.reviewer,
                    PlacementEvent.status == PlacementStatus.confirmed,
                ),
            ),
        )
        .group_by(PlacementEvent.episode_id, PlacementEvent.source)
    ):
        counts[(episode_id, PlacementSource(source).value)] = int(n)
    return [
        QueueEntry(
            uid=ep.uid,
            run_code=ep.run_code,
            object=obj,
            items=ep.items,
            placed=int(ep.placed or 0),
            detected=counts.get((ep.id, PlacementSource.detector.value), 0),
            confirmed=counts.get((ep.id, PlacementSource.reviewer.value), 0),
            label_status=LabelStatus(ep.label_status),
            logged_at=ep.logged_at,
        )
        for ep, obj in rows
    ]


def _episode(session: ProctorSession, uid: str, *, lock: bool = False) -> Episode:
    q = sa.select(Episode).where(Episode.uid == uid)
    if lock:
        # two reviewers on one episode: the second waits for the first's commit
        q = q.with_for_update()
        _sqlite_write_lock(session)
    episode = session.scalar(q)
    if episode is None:
        raise NotFound(f"episode '{uid}' not found")
    return episode


def _sqlite_write_lock(session: ProctorSession) -> None:
    """SQLite has no row locks (``FOR UPDATE`` is dropped) and its driver
    begins a transaction only at the first write, so a decision's reads (is
    this moment tagged already?) would see no one else's uncommitted work:
    take the database's write lock before reading, as the login throttle
    does. A connection that has written already holds it."""
    conn = session.connection()
    if conn.dialect.name != "sqlite":
        return
    if not conn.connection.dbapi_connection.in_transaction:  # type: ignore[union-attr]
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def _who(session: ProctorSession, action: ReviewAction) -> tuple[str, bool]:
    if action.reviewer_id is None:
        return action.reviewer_label, True
    user = session.get(User, action.reviewer_id)
    name = (
        (user.display_name or user.username) if user is not None else f"user {action.reviewer_id}"
    )
    return name, False


def review_state(session: ProctorSession, *, uid: str) -> ReviewState:
    """Everything the review page shows for one episode."""
    episode = _episode(session, uid)
    return _state(session, episode)


def _state(session: ProctorSession, episode: Episode) -> ReviewState:
    obj = session.get(ObjectType, episode.object_type_id)
    candidates = list(
        session.scalars(
            sa.select(AnnotationCandidate)
            .where(AnnotationCandidate.episode_id == episode.id)
            .order_by(AnnotationCandidate.t_s, AnnotationCandidate.id)
        )
    )
    placements = list(
        session.scalars(
            sa.select(PlacementEvent)
            .where(PlacementEvent.episode_id == episode.id)
            .order_by(PlacementEvent.t_s, PlacementEvent.id)
        )
    )
    actions = list(
        session.scalars(
            sa.select(ReviewAction)
            .where(ReviewAction.episode_id == episode.id)
            .order_by(ReviewAction.id)
        )
    )
    confirmed = [
        p
        for p in placements
        if p.source == PlacementSource.reviewer and p.status == PlacementStatus.confirmed
    ]
    active_by_candidate = {p.candidate_id: p for p in confirmed if p.candidate_id is not None}
    rejected_candidates = {
        int(a.before["candidate_id"])
        for a in actions
        if a.action == ReviewActionKind.reject and "candidate_id" in (a.before or {})
    } | {
        p.candidate_id
        for p in placements
        if p.source == PlacementSource.reviewer
        and p.status == PlacementStatus.rejected
        and p.candidate_id is not None
    }

    def view(p: PlacementEvent) -> PlacementView:
        return PlacementView(
            p.id,
            float(p.t_s),
            PlacementSource(p.source).value,
            PlacementStatus(p.status).value,
            p.candidate_id,
        )

    cviews = []
    for c in candidates:
        active = active_by_candidate.get(c.id)
        state = "confirmed" if active else ("rejected" if c.id in rejected_candidates else "open")
        cviews.append(
            CandidateView(
                id=c.id,
                t_s=float(c.t_s),
                kind=c.kind,
                zone=c.zone,
                verdict=c.verdict.value,
                rule=c.rule,
                score=c.score,
                features=dict(c.features or {}),
                state=state,
                placement_id=active.id if active else None,
            )
        )
    aviews = []
    for a in actions:
        who, automatic = _who(session, a)
        aviews.append(
            ActionView(
                id=a.id,
                at=a.at,
                action=ReviewActionKind(a.action).value,
                who=who,
                automatic=automatic,
                placement_id=a.placement_event_id,
                before=dict(a.before or {}),
                after=dict(a.after or {}),
                note=a.note,
            )
        )
    return ReviewState(
        uid=episode.uid,
        run_code=episode.run_code,
        object=obj.name if obj is not None else "",
        items=episode.items,
        placed=int(episode.placed or 0),
        lost=int(episode.lost or 0),
        dropped=int(episode.dropped or 0),
        outcome=Outcome(episode.outcome).value if episode.outcome is not None else None,
        duration_s=float(episode.duration_s or 0.0),
        label_status=LabelStatus(episode.label_status),
        candidates=cviews,
        confirmed=[view(p) for p in confirmed],
        detector=[
            view(p)
            for p in placements
            if p.source == PlacementSource.detector
            and p.status in (PlacementStatus.proposed, PlacementStatus.accepted)
        ],
        actions=aviews,
    )


# -- deciding ------------------------------------------------------------------------------


def _open_for_review(episode: Episode) -> None:
    status = LabelStatus(episode.label_status)
    if status == LabelStatus.needs_review:
        return
    if status == LabelStatus.flagged:
        raise Conflict(
            f"episode {episode.uid}: its operator count is flagged; an admin must resolve the "
            "flag before the review continues"
        )
    raise Conflict(
        f"episode {episode.uid}: is not in the review queue (label status {status.value})"
    )


def _check_time(episode: Episode, t_s: Any) -> float:
    if isinstance(t_s, bool) or not isinstance(t_s, int | float) or not math.isfinite(t_s):
        raise ReviewError(f"t_s: must be a number of seconds, got {t_s!r}")
    duration = float(episode.duration_s or 0.0)
    if t_s < 0 or t_s > duration:
        raise ReviewError(f"t_s: {t_s:.3f} s is outside the episode (0 … {duration:.3f} s)")
    return round(float(t_s), 4)


def _confirmed(session: ProctorSession, episode: Episode) -> list[PlacementEvent]:
    return list(
        session.scalars(
            sa.select(PlacementEvent)
            .where(
                PlacementEvent.episode_id == episode.id,
                PlacementEvent.source == PlacementSource.reviewer,
                PlacementEvent.status == PlacementStatus.confirmed,
            )
            .order_by(PlacementEvent.t_s, PlacementEvent.id)
        )
    )


def _check_free(active: list[PlacementEvent], t_s: float, *, ignore: int | None = None) -> None:
    for p in active:
        if p.id != ignore and abs(float(p.t_s) - t_s) < MIN_SEPARATION_S:
            raise ReviewError(
                f"t_s: placement {p.id} is already confirmed at {float(p.t_s):.3f} s; "
                "two items cannot land at the same instant"
            )


def _check_room(episode: Episode, active: list[PlacementEvent]) -> None:
    placed = int(episode.placed or 0)
    if len(active) >= placed:
        raise ReviewError(
            f"the operator logged {placed} placed and {len(active)} are confirmed already: "
            "reject one first, or flag the operator's count"
        )


def _candidate(session: ProctorSession, episode: Episode, candidate_id: Any) -> AnnotationCandidate:
    if isinstance(candidate_id, bool) or not isinstance(candidate_id, int):
        raise ReviewError(f"candidate_id: must be an integer, got {candidate_id!r}")
    c = session.get(AnnotationCandidate, candidate_id)
    if c is None or c.episode_id != episode.id:
        raise NotFound(f"candidate {candidate_id} not found in episode {episode.uid}")
    return c


def _placement(session: ProctorSession, episode: Episode, placement_id: Any) -> PlacementEvent:
    if isinstance(placement_id, bool) or not isinstance(placement_id, int):
        raise ReviewError(f"placement_id: must be an integer, got {placement_id!r}")
    p = session.get(PlacementEvent, placement_id)
    if p is None or p.episode_id != episode.id:
        raise NotFound(f"placement {placement_id} not found in episode {episode.uid}")
    if p.source != PlacementSource.reviewer or p.status != PlacementStatus.confirmed:
        raise ReviewError(
            f"placement {placement_id}: only a reviewer's confirmed placement can be changed "
            f"(this one is {PlacementSource(p.source).value}, {PlacementStatus(p.status).value}); "
            "act on its candidate instead"
        )
    return p


def _record(
    session: ProctorSession,
    *,
    episode: Episode,
    reviewer: Reviewer,
    action: ReviewActionKind,
    before: dict[str, Any],
    after: dict[str, Any],
    placement: PlacementEvent | None = None,
    note: str = "",
    now: datetime | None = None,
) -> ReviewAction:
    if not isinstance(note, str):
        raise ReviewError("note: must be text")
    if len(note) > 2000:
        raise ReviewError(f"note: at most 2000 characters, got {len(note)}")
    row = ReviewAction(
        episode_id=episode.id,
        reviewer_id=reviewer.user_id,
        reviewer_label=reviewer.label,
        action=action,
        placement_event_id=placement.id if placement is not None else None,
        before=before,
        after=after,
        note=note.strip(),
        at=now or utcnow(),
    )
    session.add(row)
    session.flush()
    return row


def _new_placement(
    session: ProctorSession, episode: Episode, t_s: float, candidate_id: int | None
) -> PlacementEvent:
    p = PlacementEvent(
        episode_id=episode.id,
        t_s=t_s,
        source=PlacementSource.reviewer,
        status=PlacementStatus.confirmed,
        candidate_id=candidate_id,
    )
    session.add(p)
    session.flush()
    return p


def _finish_if_complete(
    session: ProctorSession, episode: Episode, reviewer: Reviewer, now: datetime | None
) -> None:
    active = _confirmed(session, episode)
    if LabelStatus(episode.label_status) == LabelStatus.needs_review and len(active) == int(
        episode.placed or 0
    ):
        episode.label_status = LabelStatus.reviewed
        session.add(
            EpisodeEvent(
                episode_id=episode.id,
                kind="review_complete",
                message=f"review complete: {len(active)} placement(s) confirmed",
                details={
                    "placements_s": [float(p.t_s) for p in active],
                    "reviewer_id": reviewer.user_id,
                    "reviewer_label": reviewer.label,
                },
                at=now or utcnow(),
            )
        )
        session.flush()


def confirm(
    session: ProctorSession,
    *,
    uid: str,
    candidate_id: int,
    reviewer: Reviewer,
    note: str = "",
    now: datetime | None = None,
) -> ReviewState:
    """Confirm a candidate: a placement at the candidate's time."""
    episode = _episode(session, uid, lock=True)
    _open_for_review(episode)
    c = _candidate(session, episode, candidate_id)
    t_s = _check_time(episode, float(c.t_s))
    p = _place_candidate(session, episode, _confirmed(session, episode), c, t_s)
    _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.confirm,
        before={"candidate_id": c.id, "t_s": float(c.t_s), "verdict": c.verdict.value},
        after={"placement_id": p.id, "t_s": t_s},
        placement=p,
        note=note,
        now=now,
    )
    _finish_if_complete(session, episode, reviewer, now)
    return _state(session, episode)


def _place_candidate(
    session: ProctorSession,
    episode: Episode,
    active: list[PlacementEvent],
    c: AnnotationCandidate,
    t_s: float,
) -> PlacementEvent:
    """Confirm candidate ``c`` as a placement at ``t_s`` (its own time, or
    where a reviewer moved it): once only, within the operator's count, and
    not on top of another confirmed placement."""
    already = next((q for q in active if q.candidate_id == c.id), None)
    if already is not None:
        raise ReviewError(
            f"candidate {c.id}: already confirmed as placement {already.id}; move that"
        )
    _check_room(episode, active)
    _check_free(active, t_s)
    return _new_placement(session, episode, t_s, c.id)


def move(
    session: ProctorSession,
    *,
    uid: str,
    t_s: float,
    reviewer: Reviewer,
    placement_id: int | None = None,
    candidate_id: int | None = None,
    note: str = "",
    now: datetime | None = None,
) -> ReviewState:
    """Move a placement to ``t_s``: a confirmed one (``placement_id``; the old
    row is superseded), or a candidate (``candidate_id``: confirmed at the new
    time)."""
    if (placement_id is None) == (candidate_id is None):
        raise ReviewError("give exactly one of placement_id and candidate_id")
    episode = _episode(session, uid, lock=True)
    _open_for_review(episode)
    t_new = _check_time(episode, t_s)
    active = _confirmed(session, episode)
    if placement_id is not None:
        old = _placement(session, episode, placement_id)
        _check_free(active, t_new, ignore=old.id)
        old.status = PlacementStatus.superseded
        session.flush()
        p = _new_placement(session, episode, t_new, old.candidate_id)
        before: dict[str, Any] = {"placement_id": old.id, "t_s": float(old.t_s)}
        if old.candidate_id is not None:
            before["candidate_id"] = old.candidate_id
    else:
        c = _candidate(session, episode, candidate_id)
        p = _place_candidate(session, episode, active, c, t_new)
        before = {"candidate_id": c.id, "t_s": float(c.t_s), "verdict": c.verdict.value}
    _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.move,
        before=before,
        after={"placement_id": p.id, "t_s": t_new},
        placement=p,
        note=note,
        now=now,
    )
    _finish_if_complete(session, episode, reviewer, now)
    return _state(session, episode)


def reject(
    session: ProctorSession,
    *,
    uid: str,
    reviewer: Reviewer,
    placement_id: int | None = None,
    candidate_id: int | None = None,
    note: str = "",
    now: datetime | None = None,
) -> ReviewState:
    """Reject a confirmed placement (it stops counting) or a candidate (the
    reviewer says it is no placement; the detector's own row is untouched)."""
    if (placement_id is None) == (candidate_id is None):
        raise ReviewError("give exactly one of placement_id and candidate_id")
    episode = _episode(session, uid, lock=True)
    _open_for_review(episode)
    if candidate_id is not None:
        c = _candidate(session, episode, candidate_id)
        active = next((p for p in _confirmed(session, episode) if p.candidate_id == c.id), None)
        if active is None:
            _record(
                session,
                episode=episode,
                reviewer=reviewer,
                action=ReviewActionKind.reject,
                before={"candidate_id": c.id, "t_s": float(c.t_s), "verdict": c.verdict.value},
                after={"rejected": True},
                note=note,
                now=now,
            )
            return _state(session, episode)
        placement_id = active.id
    p = _placement(session, episode, placement_id)
    p.status = PlacementStatus.rejected
    session.flush()
    before = {"placement_id": p.id, "t_s": float(p.t_s), "status": PlacementStatus.confirmed.value}
    if p.candidate_id is not None:
        before["candidate_id"] = p.candidate_id
    _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.reject,
        before=before,
        after={"status": PlacementStatus.rejected.value},
        placement=p,
        note=note,
        now=now,
    )
    return _state(session, episode)


def add(
    session: ProctorSession,
    *,
    uid: str,
    t_s: float,
    reviewer: Reviewer,
    note: str = "",
    now: datetime | None = None,
) -> ReviewState:
    """A placement the detector missed, at ``t_s`` (the current video frame)."""
    episode = _episode(session, uid, lock=True)
    _open_for_review(episode)
    t_new = _check_time(episode, t_s)
    active = _confirmed(session, episode)
    _check_room(episode, active)
    _check_free(active, t_new)
    p = _new_placement(session, episode, t_new, None)
    _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.add,
        before={},
        after={"placement_id": p.id, "t_s": t_new},
        placement=p,
        note=note,
        now=now,
    )
    _finish_if_complete(session, episode, reviewer, now)
    return _state(session, episode)


def flag_count(
    session: ProctorSession,
    *,
    uid: str,
    reviewer: Reviewer,
    note: str,
    now: datetime | None = None,
) -> ReviewState:
    """The reviewer says the operator's count is wrong: the episode goes to an admin."""
    if not isinstance(note, str) or not note.strip():
        raise ReviewError("note: say what is wrong with the operator's count")
    episode = _episode(session, uid, lock=True)
    _open_for_review(episode)
    before = {
        "label_status": LabelStatus.needs_review.value,
        "placed": episode.placed,
        "lost": episode.lost,
        "dropped": episode.dropped,
        "confirmed": len(_confirmed(session, episode)),
    }
    episode.label_status = LabelStatus.flagged
    _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.flag_count,
        before=before,
        after={"label_status": LabelStatus.flagged.value},
        note=note,
        now=now,
    )
    return _state(session, episode)


@dataclass(frozen=True)
class CountCorrection:
    """An admin's corrected operator log."""

    placed: int
    lost: int
    dropped: int
    outcome: Outcome | None = None  # None: keep the logged outcome


def resolve_flag(
    session: ProctorSession,
    *,
    uid: str,
    reviewer: Reviewer,
    note: str,
    correction: CountCorrection | None = None,
    now: datetime | None = None,
) -> ReviewState:
    """An admin's answer to a flag: the count stands (``correction`` None) or
    is corrected; either way the episode returns to the review queue (and is
    ``reviewed`` at once if the confirmed placements already match)."""
    if not reviewer.admin:
        raise Forbidden("resolving a flagged count needs the admin role")
    if not isinstance(note, str) or not note.strip():
        raise ReviewError("note: give the reason for the decision")
    episode = _episode(session, uid, lock=True)
    if LabelStatus(episode.label_status) != LabelStatus.flagged:
        raise Conflict(
            f"episode {uid}: is not flagged (label status "
            f"{LabelStatus(episode.label_status).value})"
        )
    if episode.state != EpisodeState.closed:
        raise Conflict(f"episode {uid}: is not closed")
    if correction is not None:
        _correct_log(session, episode, reviewer, correction, note, now)
    episode.label_status = LabelStatus.needs_review
    _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.resolve_flag,
        before={"label_status": LabelStatus.flagged.value},
        after={"label_status": LabelStatus.needs_review.value, "corrected": correction is not None},
        note=note,
        now=now,
    )
    _finish_if_complete(session, episode, reviewer, now)
    return _state(session, episode)


def _correct_log(
    session: ProctorSession,
    episode: Episode,
    reviewer: Reviewer,
    correction: CountCorrection,
    note: str,
    now: datetime | None,
) -> None:
    from proctor.core.episode_record import LogRejected, OperatorLog

    outcome = correction.outcome or (Outcome(episode.outcome) if episode.outcome else None)
    try:
        log = OperatorLog.parse(
            {
                "placed": correction.placed,
                "lost": correction.lost,
                "dropped": correction.dropped,
                "outcome": outcome.value if outcome else None,
            }
        )
        log.check_against(episode.items)
    except LogRejected as exc:
        raise ReviewError(str(exc)) from None
    before = {
        "placed": episode.placed,
        "lost": episode.lost,
        "dropped": episode.dropped,
        "outcome": Outcome(episode.outcome).value if episode.outcome else None,
    }
    episode.placed, episode.lost, episode.dropped = log.placed, log.lost, log.dropped
    episode.outcome = log.outcome
    session.flush()
    _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.correct_log,
        before=before,
        after={
            "placed": log.placed,
            "lost": log.lost,
            "dropped": log.dropped,
            "outcome": log.outcome.value,
        },
        note=note,
        now=now,
    )
