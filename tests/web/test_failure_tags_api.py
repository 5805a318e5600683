"""Failure-mode tags over the review API, on both databases: a reviewer tags
a moment, the tag comes back in the review state and the explorer, a
retraction is a second record (the first is left as it was), and bad input
is refused with the field named."""

from __future__ import annotations

import sqlalchemy as sa

from proctor.core.db.models import ReviewAction
from proctor.core.domain import ReviewActionKind, Role
from tests.web.conftest import Web
from tests.web.test_review_api import bearer, queued_episode


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

    # the same mode at the same moment twice is refused
    again = c.post(
        f"/api/review/episodes/{uid}/tags", json={"mode": "missed_grasp", "t_s": 4.26}, headers=h
    )
    assert again.status_code == 422 and "already tagged" in again.json()["detail"]

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
