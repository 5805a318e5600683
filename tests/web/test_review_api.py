"""The review API and pages over HTTP, on both databases: who may review,
the decisions, their records, and the errors that name what is wrong."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from proctor.core.db.models import Episode, ReviewAction
from proctor.core.domain import LabelStatus, ReviewActionKind, Role
from tests.web.conftest import Web, login
from tests.web.review_support import bearer, queued_episode


def test_only_reviewers_and_admins_see_the_queue(web: Web) -> None:
    uid = queued_episode(web)
    for name, role in (("rev", Role.reviewer), ("root", Role.admin), ("sub", Role.submitter)):
        web.add_user(name, role)
    c = web.client()
    assert c.get("/api/review/queue").status_code == 401
    assert c.get(f"/api/review/episodes/{uid}").status_code == 401
    sub = web.token("sub", ("submitter",))
    r = c.get("/api/review/queue", headers=bearer(sub))
    assert r.status_code == 403 and "reviewer" in r.json()["detail"]
    for name, scope in (("rev", "reviewer"), ("root", "admin")):
        r = c.get("/api/review/queue", headers=bearer(web.token(name, (scope,))))
        assert r.status_code == 200
        [entry] = r.json()
        assert entry["uid"] == uid and entry["placed"] == 3 and entry["detected"] == 2
        assert entry["page"] == f"/review/{uid}"
    # the page: a sign-in redirect for strangers, the queue for reviewers
    page = c.get("/review")
    assert page.status_code == 303 and page.headers["location"].startswith("/login")
    reviewer = web.client("10.0.0.2")
    login(reviewer, "rev")
    page = reviewer.get("/review")
    assert page.status_code == 200 and uid in page.text and "review-queue" in page.text
    detail = reviewer.get(f"/review/{uid}")
    assert detail.status_code == 200 and 'data-uid="' + uid in detail.text
    assert reviewer.get("/review/nope").status_code == 404


def test_a_review_over_the_api_leaves_the_queue_with_its_records(web: Web) -> None:
    uid = queued_episode(web)
    user_id = web.add_user("rev", Role.reviewer)
    c = web.client()
    h = bearer(web.token("rev", ("reviewer",)))
    state = c.get(f"/api/review/episodes/{uid}", headers=h).json()
    assert state["label_status"] == "needs_review" and state["remaining"] == 3
    assert [x["verdict"] for x in state["candidates"]] == ["success", "neutral", "success"]
    assert state["telemetry_url"].startswith(f"/api/episodes/{uid}/telemetry")
    assert state["cameras"] == []  # hand-made telemetry: no video
    c1, _c2, c3 = state["candidates"]

    def post(action: str, body: dict[str, Any]) -> dict[str, Any]:
        r = c.post(f"/api/review/episodes/{uid}/{action}", json=body, headers=h)
        assert r.status_code == 200, r.text
        return r.json()

    state = post("move", {"candidate_id": c1["id"], "t_s": 3.25, "note": "fingers open later"})
    assert [p["t_s"] for p in state["confirmed"]] == [3.25]
    state = post("add", {"t_s": 6.5})
    state = post("confirm", {"candidate_id": c3["id"]})
    assert state["label_status"] == "reviewed" and not state["in_queue"]
    assert [a["action"] for a in state["actions"]] == ["move", "add", "confirm"]
    assert state["actions"][0]["who"] == "rev" and not state["actions"][0]["automatic"]
    assert c.get("/api/review/queue", headers=h).json() == []
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        assert ep is not None and ep.label_status == LabelStatus.reviewed
        rows = list(s.scalars(sa.select(ReviewAction).where(ReviewAction.episode_id == ep.id)))
        assert [r.action for r in rows] == [
            ReviewActionKind.move,
            ReviewActionKind.add,
            ReviewActionKind.confirm,
        ]
        assert {r.reviewer_id for r in rows} == {user_id}
        assert rows[0].note == "fingers open later"
        assert rows[0].at == web.clock()  # the request's time
    r = c.post(f"/api/review/episodes/{uid}/add", json={"t_s": 1.0}, headers=h)
    assert r.status_code == 409 and "not in the review queue" in r.json()["detail"]


def test_bad_decisions_are_refused_with_the_reason(web: Web) -> None:
    uid = queued_episode(web)
    web.add_user("rev", Role.reviewer)
    c = web.client()
    h = bearer(web.token("rev", ("reviewer",)))
    base = f"/api/review/episodes/{uid}"

    def fields(r: Any) -> list[str]:
        return [str(e["loc"][-1]) for e in r.json()["detail"]] if r.status_code == 422 else []

    r = c.post(f"{base}/add", json={"t_s": -1}, headers=h)
    assert r.status_code == 422 and "t_s" in fields(r)
    r = c.post(f"{base}/add", json={"t_s": 99.0}, headers=h)
    assert r.status_code == 422 and "outside the episode" in r.json()["detail"]
    r = c.post(f"{base}/add", json={"t_s": 2.0, "extra": 1}, headers=h)
    assert r.status_code == 422 and "extra" in fields(r)
    r = c.post(f"{base}/move", json={"t_s": 2.0, "candidate_id": 1, "placement_id": 1}, headers=h)
    assert r.status_code == 422 and "exactly one" in str(r.json()["detail"])
    r = c.post(f"{base}/confirm", json={"candidate_id": 999999}, headers=h)
    assert r.status_code == 404 and "candidate 999999 not found" in r.json()["detail"]
    r = c.post("/api/review/episodes/nope/add", json={"t_s": 1.0}, headers=h)
    assert r.status_code == 404
    r = c.post("/api/review/episodes/bad%20uid/add", json={"t_s": 1.0}, headers=h)
    assert r.status_code == 422
    r = c.post(f"{base}/flag", json={"note": ""}, headers=h)
    assert r.status_code == 422 and "note" in fields(r)
    # a read-only token may look but not decide
    web.add_user("ro", Role.reviewer)
    ro = bearer(web.token("ro", ("reviewer", "read-only")))
    assert c.get(f"{base}", headers=ro).status_code == 200
    assert c.post(f"{base}/add", json={"t_s": 2.0}, headers=ro).status_code == 403
    with web.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(ReviewAction)) == 0


def test_non_finite_numbers_are_refused_naming_the_field(web: Web) -> None:
    """[L6] NaN and 1e999 (infinity once parsed) in a body: a 422 naming the
    field. The error never echoes the input: a non-finite float in it could
    not be written as JSON (that was a 500), and the caller's bytes are not
    ours to repeat."""
    uid = queued_episode(web)
    web.add_user("rev", Role.reviewer)
    c = web.client()
    h = {**bearer(web.token("rev", ("reviewer",))), "Content-Type": "application/json"}
    for raw in ('{"t_s": NaN}', '{"t_s": 1e999}', '{"t_s": -Infinity}'):
        r = c.post(f"/api/review/episodes/{uid}/add", content=raw, headers=h)
        assert r.status_code == 422, (raw, r.text)
        [problem] = r.json()["detail"]
        assert problem["loc"] == ["body", "t_s"] and problem["msg"], raw
        assert "input" not in problem
    secretish = "s" * 2500  # over the note's 2000 characters: refused, not repeated
    r = c.post(f"/api/review/episodes/{uid}/add", json={"t_s": 1.0, "note": secretish}, headers=h)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "note"]
    assert r.json()["detail"][0]["ctx"] == {"max_length": 2000}
    assert secretish not in r.text
    # the connection is still usable afterwards (a 500 here used to reset it)
    assert c.get(f"/api/review/episodes/{uid}", headers=h).status_code == 200
    with web.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(ReviewAction)) == 0


def test_signed_in_pages_need_the_csrf_token(web: Web) -> None:
    uid = queued_episode(web)
    web.add_user("rev", Role.reviewer)
    c = web.client()
    login(c, "rev")
    r = c.post(f"/api/review/episodes/{uid}/add", json={"t_s": 2.0})
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]


def test_a_flag_goes_to_an_admin_who_resolves_it(web: Web) -> None:
    uid = queued_episode(web)
    web.add_user("rev", Role.reviewer)
    web.add_user("root", Role.admin)
    c = web.client()
    rev = bearer(web.token("rev", ("reviewer",)))
    root = bearer(web.token("root", ("admin",)))
    base = f"/api/review/episodes/{uid}"
    r = c.post(f"{base}/flag", json={"note": "only two went in"}, headers=rev)
    assert r.status_code == 200 and r.json()["label_status"] == "flagged"
    assert c.get("/api/review/queue", headers=rev).json() == []
    assert [e["uid"] for e in c.get("/api/review/queue", headers=root).json()] == [uid]
    assert c.post(f"{base}/add", json={"t_s": 2.0}, headers=rev).status_code == 409
    r = c.post(f"{base}/resolve", json={"note": "ok"}, headers=rev)
    assert r.status_code == 403
    r = c.post(f"{base}/resolve", json={"note": "x", "placed": 2}, headers=root)
    assert r.status_code == 422 and "together" in str(r.json()["detail"])
    r = c.post(
        f"{base}/resolve",
        json={"note": "x", "placed": 2, "lost": 0, "dropped": 0, "outcome": "nonsense"},
        headers=root,
    )
    assert r.status_code == 422 and "outcome" in r.json()["detail"]
    r = c.post(
        f"{base}/resolve",
        json={"note": "the video shows two", "placed": 2, "lost": 0, "dropped": 0},
        headers=root,
    )
    # a success with items unhandled contradicts itself: the log's own rule
    assert r.status_code == 422 and "outcome: 'success' means all 4" in r.json()["detail"]
    r = c.post(
        f"{base}/resolve",
        json={
            "note": "the video shows two",
            "placed": 2,
            "lost": 0,
            "dropped": 0,
            "outcome": "operator_stop",
        },
        headers=root,
    )
    assert r.status_code == 200, r.text
    state = r.json()
    assert state["placed"] == 2 and state["label_status"] == "needs_review"
    assert [a["action"] for a in state["actions"]] == ["flag_count", "correct_log", "resolve_flag"]
