"""Behavioural failure-mode tags: review records that say *why* an
operation failed or was slow.

A tag is one ``ReviewAction`` (``tag_failure``) naming a mode of the
taxonomy (``proctor.annotator.taxonomy``) and the moment ``t_s`` in the
episode it refers to; withdrawing it is a second record (``retract_tag``)
pointing at the first. Nothing is edited or deleted, so the tag history is
the review log itself. Tags may be made on any closed episode — reviewed or
not — because a slow operation among successes is worth a tag too.

A tag made by software (the telemetry proposer, ``proctor.annotator.proposals``)
carries the proposer's label instead of a user id and its evidence in
``after.evidence``; a reviewer who disagrees retracts it and tags what they
saw. Like the other decisions, nothing here commits.

Who may change them:

* a reviewer retracts their own tags and the software's; another
  reviewer's tag is withdrawn by an admin (or its author), so nobody
  overrules a colleague silently;
* once the episode's campaign is released, its tags are published (the
  policy page's behaviour section and tagged moments read them), so tags and
  retractions on its episodes are an admin's, and each is audited
  (``review.tag_after_release``, ``review.retract_after_release``);
  software reviewers (the proposer) are the server's own and pass;
* one mode at one moment (within ``SAME_MOMENT_S``) is one tag: a second is
  refused as a conflict, also when both arrive at once (the episode is
  locked while its tags are read).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from proctor.annotator.review import Reviewer, ReviewError, _check_time, _episode, _record, _who
from proctor.annotator.taxonomy import Taxonomy, load_taxonomy
from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Campaign, Episode, ReviewAction
from proctor.core.domain import EpisodeState, ReviewActionKind
from proctor.core.errors import Conflict, Forbidden, NotFound

# two tags of one mode closer than this are one moment tagged twice
SAME_MOMENT_S = 0.05


@dataclass(frozen=True)
class FailureTag:
    id: int  # the tag_failure record's id
    episode_id: int
    uid: str
    mode: str
    t_s: float
    who: str
    automatic: bool
    at: datetime
    note: str
    retracted: bool
    evidence: dict[str, Any] = field(default_factory=dict)
    reviewer_id: int | None = None  # the user who tagged (None: software)


def _tag_rows(session: ProctorSession, episode_ids: Collection[int]) -> list[ReviewAction]:
    if not episode_ids:
        return []
    return list(
        session.scalars(
            sa.select(ReviewAction)
            .where(
                ReviewAction.episode_id.in_(list(episode_ids)),
                ReviewAction.action.in_(
                    [ReviewActionKind.tag_failure, ReviewActionKind.retract_tag]
                ),
            )
            .order_by(ReviewAction.id)
        )
    )


def tags_of(
    session: ProctorSession, episode_ids: Collection[int], *, live_only: bool = True
) -> list[FailureTag]:
    """The tags on these episodes in record order (``live_only``: without
    the retracted ones)."""
    rows = _tag_rows(session, episode_ids)
    retracted = {
        int(r.before["tag_id"])
        for r in rows
        if r.action == ReviewActionKind.retract_tag and "tag_id" in (r.before or {})
    }
    uids: dict[int, str] = {
        int(eid): str(uid)
        for eid, uid in session.execute(
            sa.select(Episode.id, Episode.uid).where(Episode.id.in_(list(episode_ids)))
        )
    }
    out = []
    for r in rows:
        if r.action != ReviewActionKind.tag_failure or (live_only and r.id in retracted):
            continue
        who, automatic = _who(session, r)
        after = dict(r.after or {})
        out.append(
            FailureTag(
                id=r.id,
                episode_id=r.episode_id,
                uid=uids.get(r.episode_id, ""),
                mode=str(after.get("mode", "")),
                t_s=float(after.get("t_s", 0.0)),
                who=who,
                automatic=automatic,
                at=r.at,
                note=r.note,
                retracted=r.id in retracted,
                evidence=dict(after.get("evidence") or {}),
                reviewer_id=r.reviewer_id,
            )
        )
    return out


def _released(session: ProctorSession, episode: Episode) -> bool:
    if episode.campaign_id is None:
        return False
    campaign = session.get(Campaign, episode.campaign_id)
    return campaign is not None and campaign.released_at is not None


def _published_change(
    session: ProctorSession, episode: Episode, reviewer: Reviewer, what: str
) -> bool:
    """Whether this change is to a released campaign's published tags (then
    audited); refused unless an admin (or the server's software) makes it."""
    if not _released(session, episode):
        return False
    if reviewer.user_id is not None and not reviewer.admin:
        raise Forbidden(
            f"episode {episode.uid}: its campaign's results are released, and its tags are "
            f"published with them; {what} on it is an admin's (audited)"
        )
    return True


def _audit(
    session: ProctorSession,
    episode: Episode,
    reviewer: Reviewer,
    action: str,
    details: dict[str, Any],
    now: datetime | None,
) -> None:
    record_audit(
        session,
        actor=Actor(user_id=reviewer.user_id, label=reviewer.label),
        action=action,
        target_type="episode",
        target_id=episode.uid,
        details=details,
        at=now,
    )


def episode_tags(session: ProctorSession, *, uid: str) -> list[FailureTag]:
    """Every tag on one episode, the retracted ones included (marked)."""
    episode = _episode(session, uid)
    return tags_of(session, [episode.id], live_only=False)


def tag_failure(
    session: ProctorSession,
    *,
    uid: str,
    mode: str,
    t_s: float,
    reviewer: Reviewer,
    taxonomy: Taxonomy | None = None,
    evidence: dict[str, Any] | None = None,
    note: str = "",
    now: datetime | None = None,
) -> FailureTag:
    """Tag the moment ``t_s`` of a closed episode with failure mode ``mode``."""
    taxonomy = taxonomy or load_taxonomy()
    if not isinstance(mode, str) or taxonomy.get(mode) is None:
        raise ReviewError(f"mode: {mode!r} is not in the taxonomy ({', '.join(taxonomy.keys)})")
    episode = _episode(session, uid, lock=True)
    if episode.state != EpisodeState.closed:
        raise Conflict(f"episode {uid}: is not closed; tag its failures once it is")
    t_new = _check_time(episode, t_s)
    published = _published_change(session, episode, reviewer, "tagging a moment")
    for tag in tags_of(session, [episode.id]):
        if tag.mode == mode and abs(tag.t_s - t_new) < SAME_MOMENT_S:
            raise Conflict(
                f"t_s: {mode} is already tagged at {tag.t_s:.3f} s (tag {tag.id}); "
                "retract that one to change it"
            )
    after: dict[str, Any] = {"mode": mode, "t_s": t_new}
    if evidence:
        after["evidence"] = evidence
    row = _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.tag_failure,
        before={},
        after=after,
        note=note,
        now=now,
    )
    if published:
        details = {"tag_id": row.id, "mode": mode, "t_s": t_new}
        _audit(session, episode, reviewer, "review.tag_after_release", details, now)
    return next(t for t in tags_of(session, [episode.id]) if t.id == row.id)


def retract_tag(
    session: ProctorSession,
    *,
    uid: str,
    tag_id: int,
    reviewer: Reviewer,
    note: str = "",
    now: datetime | None = None,
) -> None:
    """Withdraw tag ``tag_id`` (a new record; the tag's own row stays)."""
    if isinstance(tag_id, bool) or not isinstance(tag_id, int):
        raise ReviewError(f"tag_id: must be an integer, got {tag_id!r}")
    episode = _episode(session, uid, lock=True)
    tag = next((t for t in tags_of(session, [episode.id], live_only=False) if t.id == tag_id), None)
    if tag is None:
        raise NotFound(f"tag {tag_id} not found in episode {uid}")
    if tag.retracted:
        raise Conflict(f"tag {tag_id}: already retracted")
    published = _published_change(session, episode, reviewer, "retracting a tag")
    if (
        reviewer.user_id is not None
        and not reviewer.admin
        and tag.reviewer_id is not None
        and tag.reviewer_id != reviewer.user_id
    ):
        raise Forbidden(
            f"tag_id: tag {tag_id} is another reviewer's; they or an admin may retract it"
        )
    _record(
        session,
        episode=episode,
        reviewer=reviewer,
        action=ReviewActionKind.retract_tag,
        before={"tag_id": tag.id, "mode": tag.mode, "t_s": tag.t_s},
        after={"retracted": True},
        note=note,
        now=now,
    )
    if published:
        details = {"tag_id": tag.id, "mode": tag.mode, "t_s": tag.t_s}
        _audit(session, episode, reviewer, "review.retract_after_release", details, now)
