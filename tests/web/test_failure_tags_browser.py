"""Failure-mode tags round-trip through the review page in headless
Chromium: the proposer's tags are listed as automatic, a reviewer retracts
one, tags the current frame with a mode and a note, and the review log holds
exactly those records (the retracted tag's own record untouched); the
explorer lists the live tags as events with a Go button."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from proctor.annotator.autopropose import propose_episode
from proctor.annotator.config import Thresholds
from proctor.core.db.models import Episode, ReviewAction
from proctor.core.domain import ReviewActionKind, Role
from tests.annotator.helpers import Op, store_episode
from tests.browser import LiveServer, sign_in

pytestmark = pytest.mark.browser

OPS = [Op(1.0, 3.0), Op(4.0, 5.0, held=False), Op(6.0, 9.0, slip_at=7.5)]


def test_tag_and_retract_on_the_review_page(live_server: LiveServer, page: Any) -> None:
    state = live_server.app.state.web
    with live_server.db() as s:
        ep = store_episode(s, state.store, ops=OPS, duration=18, items=3, placed=1)
        proposed = propose_episode(s, store=state.store, uid=ep.uid, thresholds=Thresholds())
        uid = ep.uid
    slip = next(t for t in proposed if t.mode == "slip_in_transit")
    reviewer_id = live_server.add_user("rev", Role.reviewer)
    sign_in(page, "rev")
    page.goto(f"/review/{uid}")
    page.wait_for_selector('#review[data-ready="true"]', state="attached")
    rows = page.locator('[data-testid="tags"] tbody tr[data-tag-row]')
    assert rows.count() == 3
    assert all("(automatic)" in r.inner_text() for r in rows.all())

    # the proposer called the slip; the reviewer disagrees and retracts it
    page.locator(f'tr[data-tag-row="{slip.id}"] [data-act="retract-tag"]').click()
    page.wait_for_selector(f'tr[data-tag-row="{slip.id}"].retracted')
    assert "(retracted)" in page.locator(f'tr[data-tag-row="{slip.id}"]').inner_text()

    # jump to the slip's moment, one sample on, and tag what was really there
    page.locator(f'tr[data-tag-row="{slip.id}"] [data-act="jump"]').click()
    page.keyboard.press("ArrowRight")
    t_tag = float(page.get_attribute("#review", "data-t") or "nan")
    page.select_option('[data-testid="tag-mode"]', "collision")
    page.fill('[data-testid="tag-note"]', "clipped the tote wall")
    page.click('[data-testid="tag-add"]')
    page.wait_for_selector('[data-testid="tags"] tr[data-mode="collision"]')
    mine = page.locator('[data-testid="tags"] tr[data-mode="collision"]')
    assert float(mine.get_attribute("data-t") or "nan") == pytest.approx(t_tag, abs=1e-4)
    assert "rev" in mine.inner_text() and "(automatic)" not in mine.inner_text()
    assert not page.page_errors  # type: ignore[attr-defined]

    with live_server.db() as s:
        ep_id = s.scalar(sa.select(Episode.id).where(Episode.uid == uid))
        rows_db = list(
            s.scalars(
                sa.select(ReviewAction)
                .where(ReviewAction.episode_id == ep_id)
                .order_by(ReviewAction.id)
            )
        )
    kinds = [r.action for r in rows_db]
    assert kinds == [ReviewActionKind.tag_failure] * 3 + [
        ReviewActionKind.retract_tag,
        ReviewActionKind.tag_failure,
    ]
    retraction, tag = rows_db[3], rows_db[4]
    assert retraction.before["tag_id"] == slip.id and retraction.reviewer_id == reviewer_id
    assert next(r for r in rows_db if r.id == slip.id).after["mode"] == "slip_in_transit"
    assert tag.after["mode"] == "collision" and tag.reviewer_id == reviewer_id
    assert tag.after["t_s"] == pytest.approx(t_tag, abs=1e-4)
    assert tag.note == "clipped the tote wall"

    # the explorer lists the live tags (not the retracted one) with a Go button each
    page.goto(f"/episodes/{uid}")
    failures = page.locator("#event-table tr.ev-failure")
    assert failures.count() == 3
    text = " ".join(r.inner_text() for r in failures.all())
    assert "Collision" in text and "Missed grasp" in text and "Slip in transit" not in text
    assert failures.first.locator("button.seek").count() == 1
