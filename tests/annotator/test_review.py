"""The review service on both databases: decisions, records, the queue, flags."""

from __future__ import annotations

import math

import pytest
import sqlalchemy as sa

from proctor.annotator import review as svc
from proctor.annotator.config import Thresholds
from proctor.annotator.reconcile import annotate_episode, placements_of
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Episode, EpisodeEvent, ReviewAction
from proctor.core.domain import (
    LabelStatus,
    Outcome,
    PlacementSource,
    PlacementStatus,
    ReviewActionKind,
    Role,
)
from proctor.core.errors import AppendOnlyViolation
from tests import factories
from tests.annotator.helpers import SOURCE_XY, Op, store_episode

TH = Thresholds(version="test-1")
# detector: success at 3.01, neutral (source bin) at 9.01, success at 12.01
OPS = [Op(1.0, 3.0), Op(7.0, 9.0, release_xy=SOURCE_XY), Op(10, 12)]


@pytest.fixture
def queued(db_session: ProctorSession, artifact_store: ArtifactStore) -> Episode:
    """An episode whose operator logged 3 placed where the detector saw 2."""
    ep = store_episode(db_session, artifact_store, ops=OPS, duration=14, items=4, placed=3)
    annotate_episode(db_session, store=artifact_store, episode=ep, thresholds=TH)
    assert ep.label_status == LabelStatus.needs_review
    return ep


@pytest.fixture
def reviewer(db_session: ProctorSession) -> svc.Reviewer:
    user = factories.user(db_session, None, Role.reviewer)
    return svc.Reviewer(user_id=user.id)


def actions(session: ProctorSession, ep: Episode) -> list[ReviewAction]:
    return list(
        session.scalars(
            sa.select(ReviewAction)
            .where(ReviewAction.episode_id == ep.id)
            .order_by(ReviewAction.id)
        )
    )


def test_move_add_confirm_completes_the_review(
    db_session: ProctorSession, queued: Episode, reviewer: svc.Reviewer
) -> None:
    state = svc.review_state(db_session, uid=queued.uid)
    c1, _c2, c3 = state.candidates
    assert [c.verdict for c in state.candidates] == ["success", "neutral", "success"]
    assert state.remaining == 3 and state.in_queue

    state = svc.move(db_session, uid=queued.uid, candidate_id=c1.id, t_s=3.2, reviewer=reviewer)
    assert [p.t_s for p in state.confirmed] == [3.2]
    assert state.candidates[0].state == "confirmed"
    state = svc.add(db_session, uid=queued.uid, t_s=7.5, reviewer=reviewer, note="missed one")
    assert state.remaining == 1 and state.label_status == LabelStatus.needs_review
    state = svc.confirm(db_session, uid=queued.uid, candidate_id=c3.id, reviewer=reviewer)

    assert state.label_status == LabelStatus.reviewed and not state.in_queue
    assert [p.t_s for p in state.confirmed] == [3.2, 7.5, pytest.approx(c3.t_s)]
    assert svc.review_queue(db_session) == []
    rows = actions(db_session, queued)
    assert [a.action for a in rows] == [
        ReviewActionKind.move,
        ReviewActionKind.add,
        ReviewActionKind.confirm,
    ]
    assert all(a.reviewer_id == reviewer.user_id and a.reviewer_label == "" for a in rows)
    assert rows[0].before == {"candidate_id": c1.id, "t_s": c1.t_s, "verdict": "success"}
    assert rows[0].after["t_s"] == 3.2
    assert rows[1].before == {} and rows[1].note == "missed one"
    assert rows[2].after["placement_id"] == state.confirmed[2].id
    # the detector's stream is untouched: still its two proposals
    det = placements_of(db_session, queued, source=PlacementSource.detector)
    assert [(p.t_s, p.status) for p in det] == [
        (c1.t_s, PlacementStatus.proposed),
        (c3.t_s, PlacementStatus.proposed),
    ]
    done = db_session.scalar(
        sa.select(EpisodeEvent).where(
            EpisodeEvent.episode_id == queued.id, EpisodeEvent.kind == "review_complete"
        )
    )
    assert done is not None and done.details["placements_s"] == [3.2, 7.5, c3.t_s]
    # a reviewed episode takes no more decisions
    with pytest.raises(svc.Conflict, match="not in the review queue"):
        svc.add(db_session, uid=queued.uid, t_s=1.0, reviewer=reviewer)


def test_moving_a_confirmed_placement_supersedes_it(
    db_session: ProctorSession, queued: Episode, reviewer: svc.Reviewer
) -> None:
    c1 = svc.review_state(db_session, uid=queued.uid).candidates[0]
    state = svc.confirm(db_session, uid=queued.uid, candidate_id=c1.id, reviewer=reviewer)
    [first] = state.confirmed
    state = svc.move(db_session, uid=queued.uid, placement_id=first.id, t_s=2.9, reviewer=reviewer)
    [moved] = state.confirmed
    assert moved.t_s == 2.9 and moved.candidate_id == c1.id and moved.id != first.id
    rows = placements_of(db_session, queued, source=PlacementSource.reviewer)
    assert [(p.t_s, p.status) for p in rows] == [
        (2.9, PlacementStatus.confirmed),
        (c1.t_s, PlacementStatus.superseded),
    ]
    last = actions(db_session, queued)[-1]
    assert last.action == ReviewActionKind.move
    assert last.before == {"placement_id": first.id, "t_s": c1.t_s, "candidate_id": c1.id}
    assert last.after == {"placement_id": moved.id, "t_s": 2.9}


def test_rejecting_and_changing_ones_mind(
    db_session: ProctorSession, queued: Episode, reviewer: svc.Reviewer
) -> None:
    c1 = svc.review_state(db_session, uid=queued.uid).candidates[0]
    state = svc.reject(db_session, uid=queued.uid, candidate_id=c1.id, reviewer=reviewer)
    assert state.candidates[0].state == "rejected" and state.confirmed == []
    state = svc.confirm(db_session, uid=queued.uid, candidate_id=c1.id, reviewer=reviewer)
    assert state.candidates[0].state == "confirmed"
    # rejecting a confirmed candidate rejects its placement
    state = svc.reject(db_session, uid=queued.uid, candidate_id=c1.id, reviewer=reviewer)
    assert state.confirmed == [] and state.candidates[0].state == "rejected"
    [rejected] = placements_of(db_session, queued, source=PlacementSource.reviewer)
    assert rejected.status == PlacementStatus.rejected
    kinds = [a.action for a in actions(db_session, queued)]
    assert kinds == [ReviewActionKind.reject, ReviewActionKind.confirm, ReviewActionKind.reject]


@pytest.mark.parametrize(
    ("t_s", "message"),
    [(-0.5, "outside the episode"), (14.5, "outside the episode"), (math.nan, "number"),
     (True, "number"), ("3", "number")],
)  # fmt: skip
def test_times_outside_the_episode_are_refused(
    db_session: ProctorSession, queued: Episode, reviewer: svc.Reviewer, t_s: object, message: str
) -> None:
    with pytest.raises(svc.ReviewError, match=f"t_s: .*{message}"):
        svc.add(db_session, uid=queued.uid, t_s=t_s, reviewer=reviewer)  # type: ignore[arg-type]
    assert actions(db_session, queued) == []


def test_decisions_that_cannot_apply_say_why(
    db_session: ProctorSession,
    artifact_store: ArtifactStore,
    queued: Episode,
    reviewer: svc.Reviewer,
) -> None:
    state = svc.review_state(db_session, uid=queued.uid)
    c1, _c2, c3 = state.candidates
    svc.confirm(db_session, uid=queued.uid, candidate_id=c1.id, reviewer=reviewer)
    with pytest.raises(svc.ReviewError, match="already confirmed"):
        svc.confirm(db_session, uid=queued.uid, candidate_id=c1.id, reviewer=reviewer)
    with pytest.raises(svc.ReviewError, match="two items cannot land at the same instant"):
        svc.add(db_session, uid=queued.uid, t_s=c1.t_s, reviewer=reviewer)
    with pytest.raises(svc.ReviewError, match="exactly one of placement_id and candidate_id"):
        svc.move(db_session, uid=queued.uid, t_s=5.0, reviewer=reviewer)
    with pytest.raises(svc.NotFound, match="episode 'nope' not found"):
        svc.add(db_session, uid="nope", t_s=1.0, reviewer=reviewer)
    other = store_episode(db_session, artifact_store, ops=OPS, duration=14, items=4, placed=3)
    annotate_episode(db_session, store=artifact_store, episode=other, thresholds=TH)
    foreign = svc.review_state(db_session, uid=other.uid).candidates[0]
    with pytest.raises(svc.NotFound, match=f"candidate {foreign.id} not found"):
        svc.confirm(db_session, uid=queued.uid, candidate_id=foreign.id, reviewer=reviewer)
    # the detector's own rows cannot be edited as if they were a reviewer's
    det = placements_of(db_session, queued, source=PlacementSource.detector)[0]
    with pytest.raises(svc.ReviewError, match="only a reviewer's confirmed placement"):
        svc.move(db_session, uid=queued.uid, placement_id=det.id, t_s=4.0, reviewer=reviewer)
    svc.add(db_session, uid=queued.uid, t_s=5.0, reviewer=reviewer)
    svc.confirm(db_session, uid=queued.uid, candidate_id=c3.id, reviewer=reviewer)
    # three confirmed = the operator's count: the review is complete
    assert svc.review_state(db_session, uid=queued.uid).label_status == LabelStatus.reviewed


def test_no_more_confirmed_than_the_operator_logged(
    db_session: ProctorSession, artifact_store: ArtifactStore, reviewer: svc.Reviewer
) -> None:
    ep = store_episode(db_session, artifact_store, ops=OPS, duration=14, items=4, placed=1)
    annotate_episode(db_session, store=artifact_store, episode=ep, thresholds=TH)
    c1, _c2, _c3 = svc.review_state(db_session, uid=ep.uid).candidates
    state = svc.confirm(db_session, uid=ep.uid, candidate_id=c1.id, reviewer=reviewer)
    assert state.label_status == LabelStatus.reviewed  # 1 = 1
    assert ep.label_status == LabelStatus.reviewed


def test_an_automatic_reviewer_is_labelled_never_a_person(
    db_session: ProctorSession, queued: Episode
) -> None:
    bot = svc.Reviewer(label="automatic reviewer (test)")
    svc.add(db_session, uid=queued.uid, t_s=5.0, reviewer=bot)
    [row] = actions(db_session, queued)
    assert row.reviewer_id is None and row.reviewer_label == "automatic reviewer (test)"
    [view] = svc.review_state(db_session, uid=queued.uid).actions
    assert view.automatic and view.who == "automatic reviewer (test)"
    with pytest.raises(ValueError, match="exactly one"):
        svc.Reviewer()
    with pytest.raises(ValueError, match="exactly one"):
        svc.Reviewer(user_id=1, label="both")


def test_review_records_are_append_only(
    db_session: ProctorSession, queued: Episode, reviewer: svc.Reviewer
) -> None:
    svc.add(db_session, uid=queued.uid, t_s=5.0, reviewer=reviewer)
    [row] = actions(db_session, queued)
    row.note = "rewritten history"
    with pytest.raises(AppendOnlyViolation):
        db_session.flush()
    db_session.rollback()


def test_a_flagged_count_goes_to_an_admin_and_back(
    db_session: ProctorSession, queued: Episode, reviewer: svc.Reviewer
) -> None:
    admin_user = factories.user(db_session, None, Role.admin)
    admin = svc.Reviewer(user_id=admin_user.id, admin=True)
    with pytest.raises(svc.ReviewError, match="note"):
        svc.flag_count(db_session, uid=queued.uid, reviewer=reviewer, note="  ")
    state = svc.flag_count(
        db_session, uid=queued.uid, reviewer=reviewer, note="I see only two placements"
    )
    assert state.label_status == LabelStatus.flagged
    assert svc.review_queue(db_session, admin=False) == []
    assert [e.uid for e in svc.review_queue(db_session, admin=True)] == [queued.uid]
    with pytest.raises(svc.Conflict, match="an admin must resolve"):
        svc.add(db_session, uid=queued.uid, t_s=5.0, reviewer=reviewer)
    with pytest.raises(svc.Forbidden, match="admin"):
        svc.resolve_flag(db_session, uid=queued.uid, reviewer=reviewer, note="fine")
    with pytest.raises(svc.ReviewError, match="placed \\+ lost \\+ dropped"):
        svc.resolve_flag(
            db_session,
            uid=queued.uid,
            reviewer=admin,
            note="correct it",
            correction=svc.CountCorrection(placed=3, lost=1, dropped=1),
        )
    assert queued.placed == 3 and queued.label_status == LabelStatus.flagged
    state = svc.resolve_flag(
        db_session,
        uid=queued.uid,
        reviewer=admin,
        note="video shows two",
        correction=svc.CountCorrection(placed=2, lost=0, dropped=0, outcome=Outcome.operator_stop),
    )
    assert (queued.placed, queued.outcome) == (2, Outcome.operator_stop)
    assert state.label_status == LabelStatus.needs_review and state.placed == 2
    kinds = [a.action for a in actions(db_session, queued)]
    assert kinds == [
        ReviewActionKind.flag_count,
        ReviewActionKind.correct_log,
        ReviewActionKind.resolve_flag,
    ]
    correct = actions(db_session, queued)[1]
    assert correct.before == {"placed": 3, "lost": 0, "dropped": 0, "outcome": "success"}
    assert correct.after == {"placed": 2, "lost": 0, "dropped": 0, "outcome": "operator_stop"}
    c1, _c2, c3 = state.candidates
    svc.confirm(db_session, uid=queued.uid, candidate_id=c1.id, reviewer=reviewer)
    state = svc.confirm(db_session, uid=queued.uid, candidate_id=c3.id, reviewer=reviewer)
    assert state.label_status == LabelStatus.reviewed


def test_the_queue_is_oldest_first(
    db_session: ProctorSession, artifact_store: ArtifactStore
) -> None:
    eps = []
    for _ in range(3):
        ep = store_episode(db_session, artifact_store, ops=OPS, duration=14, items=4, placed=3)
        annotate_episode(db_session, store=artifact_store, episode=ep, thresholds=TH)
        eps.append(ep)
    assert [e.uid for e in svc.review_queue(db_session)] == [e.uid for e in eps]
