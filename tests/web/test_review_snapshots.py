"""Reviews feed the leaderboard: a decision that finishes an episode (it
becomes ``reviewed``) or an admin's resolved flag queues the campaign for a
background recomputation of its snapshots once the request commits; a
decision that leaves the episode in the queue, and a review that rolls back,
queue nothing. The worker is the app's real one (a thread of this process);
the tests wait on it."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from proctor.annotator import review as svc
from proctor.core.db.models import Episode
from proctor.core.domain import LabelStatus, LabelStream, Role
from proctor.web.review.routes import after_decision
from proctor.web.snapshots.worker import SnapshotWorker
from tests.web.conftest import Web
from tests.web.leaderboard_data import seed_campaign
from tests.web.review_support import WAIT_S, back_to_review, latest_snapshot, snapshot_worker


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _idle_with_no_runs(worker: SnapshotWorker) -> None:
    assert worker.wait_idle(WAIT_S)
    status = worker.status()
    assert (status.pending, status.running, status.recent) == ([], None, [])


def test_a_review_that_finishes_an_episode_recomputes_the_leaderboard(web: Web) -> None:
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=41)
    uid = back_to_review(web, seeded, min_placed=2)
    worker = snapshot_worker(web)
    before = latest_snapshot(web, seeded.campaign_id, LabelStream.auto_and_reviewed)
    web.add_user("rev", Role.reviewer)
    c = web.client()
    h = bearer(web.token("rev", ("reviewer",)))

    def post(action: str, body: dict[str, Any]) -> dict[str, Any]:
        r = c.post(f"/api/review/episodes/{uid}/{action}", json=body, headers=h)
        assert r.status_code == 200, r.text
        return r.json()

    state = c.get(f"/api/review/episodes/{uid}", headers=h).json()
    successes = [x for x in state["candidates"] if x["verdict"] == "success"]
    assert len(successes) == state["placed"] >= 2
    # the first decision moves a placement: the episode stays in the queue, nothing is queued
    first, *rest = successes
    state = post("move", {"candidate_id": first["id"], "t_s": round(first["t_s"] + 0.25, 3)})
    assert state["label_status"] == "needs_review"
    _idle_with_no_runs(worker)
    # the last confirmation finishes it: once the request committed, the worker recomputes
    for x in rest:
        state = post("confirm", {"candidate_id": x["id"]})
    assert state["label_status"] == "reviewed"
    assert worker.wait_idle(WAIT_S)
    [run] = worker.status().recent
    assert run.campaign_id == seeded.campaign_id and run.error is None
    by_stream = {o.stream: o for o in run.outcomes}
    assert set(by_stream) == set(LabelStream)
    # the moved time changes what every stream that reads the reviewer's labels scores
    for stream in (LabelStream.auto_and_reviewed, LabelStream.reviewed_only):
        assert by_stream[stream].status == "created", by_stream[stream]
    after = latest_snapshot(web, seeded.campaign_id, LabelStream.auto_and_reviewed)
    assert after[0] == by_stream[LabelStream.auto_and_reviewed].snapshot_id
    assert after[0] > before[0] and after[1] != before[1]
    # the leaderboard reads the new snapshot
    web.add_user("root", Role.admin)
    board = c.get(
        f"/api/leaderboard/{seeded.campaign_id}", headers=bearer(web.token("root", ("admin",)))
    )
    assert board.status_code == 200 and board.json()["snapshot"]["id"] == after[0]


def test_a_resolved_flag_recomputes_and_a_flag_alone_does_not(web: Web) -> None:
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=43)
    uid = back_to_review(web, seeded, min_placed=1)
    worker = snapshot_worker(web)
    web.add_user("rev", Role.reviewer)
    web.add_user("root", Role.admin)
    c = web.client()
    r = c.post(
        f"/api/review/episodes/{uid}/flag",
        json={"note": "the log says one more than the video shows"},
        headers=bearer(web.token("rev", ("reviewer",))),
    )
    assert r.status_code == 200 and r.json()["label_status"] == "flagged"
    _idle_with_no_runs(worker)
    r = c.post(
        f"/api/review/episodes/{uid}/resolve",
        json={"note": "the count stands"},
        headers=bearer(web.token("root", ("admin",))),
    )
    assert r.status_code == 200, r.text
    assert worker.wait_idle(WAIT_S)
    [run] = worker.status().recent
    assert run.campaign_id == seeded.campaign_id and run.error is None


def test_a_rolled_back_review_queues_nothing(web: Web) -> None:
    """The routes' hook inside a transaction that rolls back (a failed commit,
    an error after the decision): the worker is never asked."""
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=47)
    uid = back_to_review(web, seeded, min_placed=1)
    worker = snapshot_worker(web)
    reviewer = svc.Reviewer(label="rollback test")
    with web.app.state.web.session_factory() as s:
        state = svc.review_state(s, uid=uid)
        for cand in state.candidates:
            if cand.verdict == "success":
                state = svc.confirm(s, uid=uid, candidate_id=cand.id, reviewer=reviewer)
        assert state.label_status == LabelStatus.reviewed
        assert after_decision(s, state) is True  # asked for, pending the commit
        s.rollback()
    _idle_with_no_runs(worker)
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        assert ep is not None and ep.label_status == LabelStatus.needs_review
    # the same decisions committed do queue it (so the check above can fail)
    with web.app.state.web.session_factory() as s:
        state = svc.review_state(s, uid=uid)
        for cand in state.candidates:
            if cand.verdict == "success":
                state = svc.confirm(s, uid=uid, candidate_id=cand.id, reviewer=reviewer)
        assert after_decision(s, state) is True
        s.commit()
    assert worker.wait_idle(WAIT_S)
    assert [r.campaign_id for r in worker.status().recent] == [seeded.campaign_id]
