"""Failure-mode tags over the review API, on both databases: a reviewer tags
a moment, the tag comes back in the review state and the explorer, a
retraction is a second record (the first is left as it was), and bad input
is refused with the field named."""

from __future__ import annotations

import threading
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from proctor.annotator.review import Reviewer
from proctor.annotator.tags import tag_failure
from proctor.core.db.models import AuditLog, ReviewAction
from proctor.core.domain import LabelStream, ReviewActionKind, Role
from proctor.core.errors import Conflict
from proctor.web.snapshots import service
from tests.web.conftest import Web
from tests.web.leaderboard_data import seed_campaign
from tests.web.review_support import bearer, queued_episode


def test_a_tag_round_trips_through_the_api_and_a_retraction_appends(web: Web) -> None:
    uid = queued_episode(web)
    user_id = web.add_user("rev", Role.reviewer)
    c = web.client()
    h = bearer(web.token("rev", ("reviewer",)))
    state = c.get(f"/api/review/episodes/{uid}", headers=h).json()
    assert state["tags"] == []
    assert "missed_grasp" in [m["key"] for m in state["failure_modes"]]

    r = c.post(
        f"/api/review/episodes/{uid}/tags",
        json={"mode": "missed_grasp", "t_s": 4.25, "note": "fingers shut on air"},
        headers=h,
    )
    assert r.status_code == 200, r.text
    [tag] = r.json()["tags"]
    assert (tag["mode"], tag["t_s"], tag["label"]) == ("missed_grasp", 4.25, "Missed grasp")
    assert tag["automatic"] is False and tag["retracted"] is False
    assert tag["who"] == "rev" and tag["note"] == "fingers shut on air"

    # the explorer shows it and links the moment
    explorer = c.get(f"/api/episodes/{uid}", headers=h).json()
    assert [(f["mode"], f["t_s"]) for f in explorer["failure_tags"]] == [("missed_grasp", 4.25)]

    # the same mode at the same moment twice is refused: it is there already
    again = c.post(
        f"/api/review/episodes/{uid}/tags", json={"mode": "missed_grasp", "t_s": 4.26}, headers=h
    )
    assert again.status_code == 409 and "already tagged" in again.json()["detail"]

    r = c.post(
        f"/api/review/episodes/{uid}/tags/{tag['id']}/retract",
        json={"note": "it was a slip"},
        headers=h,
    )
    assert r.status_code == 200, r.text
    [gone] = r.json()["tags"]
    assert gone["id"] == tag["id"] and gone["retracted"] is True
    assert c.get(f"/api/episodes/{uid}", headers=h).json()["failure_tags"] == []
    twice = c.post(f"/api/review/episodes/{uid}/tags/{tag['id']}/retract", json={}, headers=h)
    assert twice.status_code == 409

    with web.db() as s:
        rows = list(
            s.scalars(
                sa.select(ReviewAction)
                .where(
                    ReviewAction.action.in_(
                        [ReviewActionKind.tag_failure, ReviewActionKind.retract_tag]
                    )
                )
                .order_by(ReviewAction.id)
            )
        )
    assert [r.action for r in rows] == [ReviewActionKind.tag_failure, ReviewActionKind.retract_tag]
    first, second = rows
    # the tag's own record is untouched by the retraction
    assert first.after == {"mode": "missed_grasp", "t_s": 4.25} and first.reviewer_id == user_id
    assert second.before == {"tag_id": first.id, "mode": "missed_grasp", "t_s": 4.25}
    assert second.note == "it was a slip"


def test_bad_tags_are_refused_naming_the_field(web: Web) -> None:
    uid = queued_episode(web)
    web.add_user("rev", Role.reviewer)
    web.add_user("sub", Role.submitter)
    c = web.client()
    h = bearer(web.token("rev", ("reviewer",)))
    url = f"/api/review/episodes/{uid}/tags"
    r = c.post(url, json={"mode": "sneezed", "t_s": 1.0}, headers=h)
    assert r.status_code == 422 and "mode" in r.json()["detail"] and "sneezed" in r.json()["detail"]
    r = c.post(url, json={"mode": "stall", "t_s": 99.0}, headers=h)
    assert r.status_code == 422 and "t_s" in r.json()["detail"]
    r = c.post(url, json={"mode": "stall", "t_s": 1.0, "extra": 1}, headers=h)
    assert r.status_code == 422
    r = c.post(f"{url}/12345/retract", json={}, headers=h)
    assert r.status_code == 404 and "tag 12345" in r.json()["detail"]
    sub = bearer(web.token("sub", ("submitter",)))
    assert c.post(url, json={"mode": "stall", "t_s": 1.0}, headers=sub).status_code == 403
    assert c.post(url, json={"mode": "stall", "t_s": 1.0}).status_code == 401


def test_a_reviewer_retracts_only_their_own_tags_and_the_proposers(web: Web) -> None:
    """Withdrawing a colleague's tag would overrule them silently: a reviewer
    retracts their own and the software's; another reviewer's is an admin's."""
    uid = queued_episode(web)
    for name, role in (("rev1", Role.reviewer), ("rev2", Role.reviewer), ("root", Role.admin)):
        web.add_user(name, role)
    rev1, rev2 = bearer(web.token("rev1", ("reviewer",))), bearer(web.token("rev2", ("reviewer",)))
    root = bearer(web.token("root", ("admin",)))
    c = web.client()
    url = f"/api/review/episodes/{uid}/tags"
    mine = c.post(url, json={"mode": "stall", "t_s": 2.0}, headers=rev1).json()["tags"][0]["id"]
    with web.db() as s:
        proposed = tag_failure(
            s, uid=uid, mode="missed_grasp", t_s=3.0, reviewer=Reviewer(label="proposer")
        ).id
    r = c.post(f"{url}/{mine}/retract", json={}, headers=rev2)
    assert r.status_code == 403 and f"tag {mine}" in r.json()["detail"], r.text
    assert c.post(f"{url}/{proposed}/retract", json={}, headers=rev2).status_code == 200
    assert c.post(f"{url}/{mine}/retract", json={}, headers=root).status_code == 200
    with web.db() as s:
        retractions = s.scalar(
            sa.select(sa.func.count()).where(ReviewAction.action == ReviewActionKind.retract_tag)
        )
    assert retractions == 2


def test_the_same_moment_tagged_at_once_twice_is_one_tag(web: Web) -> None:
    """Two reviewers tagging one moment in the same instant: the second waits
    for the first's commit and is refused (on SQLite too, whose reads take no
    lock)."""
    uid = queued_episode(web)
    first_in = threading.Event()
    outcome: list[object] = []

    def second() -> None:
        try:
            with web.db() as s:
                tag_failure(s, uid=uid, mode="stall", t_s=2.0, reviewer=Reviewer(label="b"))
            outcome.append("tagged")
        except Conflict as exc:
            outcome.append(exc)

    with web.db() as s:
        tag_failure(s, uid=uid, mode="stall", t_s=2.0, reviewer=Reviewer(label="a"))
        first_in.set()
        thread = threading.Thread(target=second)
        thread.start()
        # the second is waiting on the first's lock: it has not finished
        thread.join(0.5)
        assert thread.is_alive() and outcome == []
    thread.join(30)
    assert not thread.is_alive()
    [answer] = outcome
    assert isinstance(answer, Conflict) and "already tagged" in str(answer), answer
    with web.db() as s:
        tags = s.scalar(
            sa.select(sa.func.count()).where(ReviewAction.action == ReviewActionKind.tag_failure)
        )
    assert tags == 1


@pytest.fixture
def released_episode(web: Web) -> tuple[int, str, str]:
    """(campaign id, a released episode's uid, its policy's label on the board)."""
    with web.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=2, seed=5)
        result = service.latest_row(
            s, campaign_id=seeded.campaign_id, stream=LabelStream.auto_and_reviewed
        ).result
    labels = {p["policy"] for p in result["policies"]}
    uid = next(u for u in seeded.episode_uids if seeded.episode_policy[u] in labels)
    return seeded.campaign_id, uid, seeded.episode_policy[uid]


def test_after_release_only_an_admin_changes_tags_and_it_is_audited(
    web: Web, released_episode: tuple[int, str, str]
) -> None:
    """A released campaign's behaviour section is published: one reviewer must
    not change it alone. Tags and retractions on its episodes are an admin's,
    audited; a reviewer's are refused and the public page stays as it was."""
    cid, uid, label = released_episode
    web.add_user("rev", Role.reviewer)
    web.add_user("root", Role.admin)
    rev, root = bearer(web.token("rev", ("reviewer",))), bearer(web.token("root", ("admin",)))
    c = web.client()
    url = f"/api/review/episodes/{uid}/tags"
    page = f"/api/leaderboard/{cid}/policies/{quote(label, safe='')}"
    assert c.get(page).json()["tagged_moments"] == []

    r = c.post(url, json={"mode": "stall", "t_s": 0.5}, headers=rev)
    assert r.status_code == 403 and "released" in r.json()["detail"], r.text
    assert c.get(page).json()["tagged_moments"] == []

    r = c.post(url, json={"mode": "stall", "t_s": 0.5, "note": "seen on video"}, headers=root)
    assert r.status_code == 200, r.text
    [tag] = r.json()["tags"]
    assert [m["t_s"] for m in c.get(page).json()["tagged_moments"]] == [0.5]
    r = c.post(f"{url}/{tag['id']}/retract", json={}, headers=rev)
    assert r.status_code == 403 and "released" in r.json()["detail"], r.text
    assert c.post(f"{url}/{tag['id']}/retract", json={}, headers=root).status_code == 200
    assert c.get(page).json()["tagged_moments"] == []

    with web.db() as s:
        audited = s.execute(
            sa.select(AuditLog.action, AuditLog.target_id, AuditLog.details)
            .where(AuditLog.action.like("review.%"))
            .order_by(AuditLog.id)
        ).all()
    assert [(a, t) for a, t, _ in audited] == [
        ("review.tag_after_release", uid),
        ("review.retract_after_release", uid),
    ]
    assert audited[0][2] == {"tag_id": tag["id"], "mode": "stall", "t_s": 0.5}
