"""A reviewer reviews one queued episode end to end in headless Chromium.

The episode is recorded on the simulated cell *with* both cameras (real
MP4s and frame tables, served by the recordings API with Range requests),
closed with the station's labelled ground-truth log and annotated with
thresholds that call every landing a coin toss (``rim_margin`` wider than
the bins), so the detector proposes no success and the episode is queued.
The reviewer jumps to a candidate and checks the video shows exactly that
frame (read back with requestVideoFrameCallback), steps one frame, moves
the candidate there, adds a missing placement at the current frame,
confirms the last candidate, and the episode leaves the queue with its
review records in the database.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import sqlalchemy as sa

from proctor.annotator.config import load_thresholds
from proctor.annotator.reconcile import annotate_episode, find_episode
from proctor.core.db.models import Episode, PlacementEvent, ReviewAction
from proctor.core.domain import (
    LabelStatus,
    PlacementSource,
    PlacementStatus,
    ReviewActionKind,
    Role,
    Side,
)
from proctor.core.recording.reader import load_ground_truth
from proctor.demo.simulated_episodes import EpisodeSpec, simulate
from tests.browser import LiveServer, sign_in

pytestmark = pytest.mark.browser


def record_queued_episode(live_server: LiveServer, tmp_path: Any) -> str:
    state = live_server.app.state.web
    spec = EpisodeSpec(
        profile="reference",
        object_name="towels",
        items=3,
        tote_side=Side.left,
        camera_side=Side.right,
        sim_seed=11,
    )
    [done] = simulate(
        [spec],
        sessions=state.session_factory,
        store=state.store,
        spool_root=tmp_path / "spool",
        cameras=True,
    )
    assert len(done.true_placements_s) == 3, done.ground_truth["final"]
    shipped = load_thresholds()
    doubtful = dataclasses.replace(
        shipped, classifier=dataclasses.replace(shipped.classifier, rim_margin=0.5)
    )
    with live_server.db() as s:
        result = annotate_episode(
            s, store=state.store, episode=find_episode(s, done.uid), thresholds=doubtful
        )
        assert result.label_status == LabelStatus.needs_review
        assert result.candidates == 3 and result.successes == 0
    return done.uid


def shown_frame(page: Any, camera: str) -> int:
    return int(page.get_attribute(f'video[data-camera="{camera}"]', "data-shown-frame") or -1)


def wait_for_frame(page: Any, camera: str, frame: int) -> None:
    page.wait_for_function(
        '([cam, f]) => document.querySelector(`video[data-camera="${cam}"]`)'
        "?.dataset.shownFrame === String(f)",
        arg=[camera, frame],
    )


def test_review_one_queued_episode_end_to_end(
    live_server: LiveServer, page: Any, tmp_path: Any
) -> None:
    uid = record_queued_episode(live_server, tmp_path)
    reviewer_id = live_server.add_user("rev", Role.reviewer)
    sign_in(page, "rev")

    page.goto("/review")
    row = page.locator(f'[data-testid="review-queue"] tr[data-uid="{uid}"]')
    assert row.count() == 1
    row.locator("a").click()
    page.wait_for_selector("#review[data-ready]", state="attached")
    ready = page.get_attribute("#review", "data-ready")
    assert ready == "true", (
        page.locator('[data-testid="error"]').inner_text(),
        page.page_errors,  # type: ignore[attr-defined]
    )
    assert page.locator('[data-testid="label-status"]').inner_text() == "needs review"
    frames = int(page.get_attribute("#review", "data-frames") or 0)
    assert frames > 30
    cameras = page.eval_on_selector_all("video[data-camera]", "vs => vs.map(v => v.dataset.camera)")
    assert sorted(cameras) == ["exterior", "wrist"]

    # scrub to candidate #1: the cursor and both videos land on its frame
    candidates = page.locator('[data-testid="candidates"] tbody tr')
    assert candidates.count() == 3
    c1 = candidates.nth(0)
    c1.locator('[data-act="jump"]').click()
    k = int(page.get_attribute("#review", "data-frame") or -1)
    t_c1 = float(c1.get_attribute("data-t") or "nan")
    t_cursor = float(page.get_attribute("#review", "data-t") or "nan")
    assert abs(t_cursor - t_c1) <= 1 / 15 / 2 + 1e-6  # the nearest frame at 15 fps
    wait_for_frame(page, "exterior", k)
    assert "frame" in page.locator('[data-testid="clock"]').inner_text()

    # one frame forward, and the video follows frame-accurately
    page.click('[data-testid="step-forward"]')
    assert int(page.get_attribute("#review", "data-frame") or -1) == k + 1
    wait_for_frame(page, "exterior", k + 1)
    t_moved = float(page.get_attribute("#review", "data-t") or "nan")
    assert t_moved > t_cursor

    # move candidate #1 to this frame
    c1.locator('[data-act="move"]').click()
    confirmed = page.locator('[data-testid="confirmed"] tbody tr[data-placement-row]')
    confirmed.first.wait_for()
    assert confirmed.count() == 1
    assert float(confirmed.first.get_attribute("data-t") or "nan") == pytest.approx(
        t_moved, abs=1e-4
    )

    # a placement the detector "missed": scrub to candidate #2's frame and add it
    c2 = candidates.nth(1)
    c2.locator('[data-act="jump"]').click()
    t_add = float(page.get_attribute("#review", "data-t") or "nan")
    page.click('[data-testid="add"]')
    page.wait_for_function(
        "() => document.querySelectorAll('[data-testid=\"confirmed\"] tr[data-placement-row]')"
        ".length === 2"
    )
    assert "2 of 3" in page.locator('[data-testid="progress"]').inner_text()

    # confirm candidate #3: three confirmed = the operator's count
    candidates.nth(2).locator('[data-act="confirm"]').click()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"label-status\"]').textContent === 'reviewed'"
    )
    assert "left the queue" in page.locator('[data-testid="progress"]').inner_text()
    assert page.locator('[data-testid="add"]').is_disabled()
    assert [
        a.get_attribute("data-action")
        for a in page.locator('[data-testid="history"] tbody tr').all()
    ] == ["confirm", "add", "move"]
    assert not page.page_errors  # type: ignore[attr-defined]

    page.goto("/review")
    assert page.locator(f'tr[data-uid="{uid}"]').count() == 0

    with live_server.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        assert ep is not None and ep.label_status == LabelStatus.reviewed
        rows = list(
            s.scalars(
                sa.select(ReviewAction)
                .where(ReviewAction.episode_id == ep.id)
                .order_by(ReviewAction.id)
            )
        )
        assert [r.action for r in rows] == [
            ReviewActionKind.move,
            ReviewActionKind.add,
            ReviewActionKind.confirm,
        ]
        assert {r.reviewer_id for r in rows} == {reviewer_id}
        assert rows[0].before["t_s"] == pytest.approx(t_c1)
        assert rows[0].after["t_s"] == pytest.approx(t_moved, abs=1e-4)
        assert rows[1].after["t_s"] == pytest.approx(t_add, abs=1e-4)
        placed = list(
            s.scalars(
                sa.select(PlacementEvent.t_s)
                .where(
                    PlacementEvent.episode_id == ep.id,
                    PlacementEvent.source == PlacementSource.reviewer,
                    PlacementEvent.status == PlacementStatus.confirmed,
                )
                .order_by(PlacementEvent.t_s)
            )
        )
        assert len(placed) == 3
        truth = load_ground_truth(s, live_server.app.state.web.store, uid)
        assert truth is not None
        # what the reviewer placed lies within a frame or two of the true times
        for t_true, t_rev in zip(sorted(truth["placements_s"]), placed, strict=True):
            assert abs(t_true - t_rev) < 0.2


def test_without_video_scrub_by_telemetry_flag_and_resolve(
    live_server: LiveServer, page: Any
) -> None:
    """A recording with telemetry only: the page scrubs sample by sample; a
    reviewer flags the operator's count, an admin corrects it on the page."""
    from proctor.annotator.config import Thresholds
    from tests.annotator.helpers import SOURCE_XY, Op, store_episode

    state = live_server.app.state.web
    with live_server.db() as s:
        ep = store_episode(
            s,
            state.store,
            ops=[Op(1.0, 3.0), Op(7.0, 9.0, release_xy=SOURCE_XY), Op(10, 12)],
            duration=14,
            items=4,
            placed=3,
        )
        annotate_episode(s, store=state.store, episode=ep, thresholds=Thresholds(version="t"))
        uid = ep.uid
    live_server.add_user("rev", Role.reviewer)
    live_server.add_user("root", Role.admin)
    sign_in(page, "rev")
    page.goto(f"/review/{uid}")
    page.wait_for_selector('#review[data-ready="true"]', state="attached")
    assert page.locator("video").count() == 0
    assert int(page.get_attribute("#review", "data-frames") or 0) == 1401  # 100 Hz, 14 s
    page.locator('[data-testid="candidates"] tbody tr').nth(0).locator('[data-act="jump"]').click()
    t0 = float(page.get_attribute("#review", "data-t") or "nan")
    page.keyboard.press("ArrowRight")
    assert float(page.get_attribute("#review", "data-t") or "nan") == pytest.approx(t0 + 0.01)

    page.locator("details.flag summary").click()
    page.fill("#flag-note", "only two items went in")
    page.click('[data-testid="flag-form"] button[type=submit]')
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"label-status\"]').textContent === 'flagged'"
    )
    assert page.locator('[data-testid="add"]').is_disabled()

    page.context.clear_cookies()  # sign out: the admin takes over
    sign_in(page, "root")
    page.goto("/review")
    assert page.locator(f'tr[data-uid="{uid}"]').count() == 1  # admins see flagged counts
    page.goto(f"/review/{uid}")
    page.wait_for_selector('#review[data-ready="true"]', state="attached")
    form = page.locator('[data-testid="resolve-form"]')
    form.locator("textarea").fill("the video shows two")
    form.locator('input[name="placed"]').fill("2")
    form.locator('input[name="lost"]').fill("0")
    form.locator('input[name="dropped"]').fill("0")
    form.locator('select[name="outcome"]').select_option("operator_stop")
    form.locator("button[type=submit]").click()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"label-status\"]').textContent"
        " === 'needs review'"
    )
    assert "0 of 2" in page.locator('[data-testid="progress"]').inner_text()
    with live_server.db() as s:
        row = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        assert row is not None and row.placed == 2
        kinds = list(
            s.scalars(
                sa.select(ReviewAction.action)
                .where(ReviewAction.episode_id == row.id)
                .order_by(ReviewAction.id)
            )
        )
        assert kinds == [
            ReviewActionKind.flag_count,
            ReviewActionKind.correct_log,
            ReviewActionKind.resolve_flag,
        ]
    assert not page.page_errors  # type: ignore[attr-defined]
