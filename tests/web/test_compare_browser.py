"""The compare view plays two matched episodes side by side in headless
Chromium: two recorded episodes (the reference and a demo policy, same
object and configuration, both cameras) in one campaign, the page opened
from the pair's verdict, both videos started by one button, and they keep
time with each other; the slider moves both."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from proctor.analysis.store import recompute
from proctor.annotator.config import load_thresholds
from proctor.annotator.reconcile import annotate_episode, find_episode
from proctor.core.db.models import Assignment, CampaignPolicy
from proctor.core.domain import LabelStream, Role, Side
from proctor.demo.simulated_episodes import EpisodeSpec, simulate
from tests.browser import LiveServer, sign_in

pytestmark = pytest.mark.browser


def _campaign(live_server: LiveServer, tmp_path: Any) -> int:
    state = live_server.app.state.web
    specs = [
        EpisodeSpec(profile=p, object_name="towels", items=2, tote_side=Side.left,
                    camera_side=Side.right, sim_seed=seed)
        for p, seed in (("reference", 3), ("swift", 4))
    ]  # fmt: skip
    done = simulate(
        specs,
        sessions=state.session_factory,
        store=state.store,
        spool_root=tmp_path / "spool",
        cameras=True,
        link_campaign=True,
    )
    with live_server.db() as s:
        for ep in done:
            annotate_episode(
                s, store=state.store, episode=find_episode(s, ep.uid), thresholds=load_thresholds()
            )
        campaign_id = find_episode(s, done[0].uid).campaign_id
        assert campaign_id is not None
        # the simulated campaign lists its policies like a scheduled one (their arms)
        for pid in sorted(
            set(
                s.scalars(
                    sa.select(Assignment.policy_id).where(Assignment.campaign_id == campaign_id)
                )
            )
        ):
            s.add(CampaignPolicy(campaign_id=campaign_id, policy_id=pid))
        s.flush()
        recompute(s, campaign_id=campaign_id, streams=(LabelStream.auto_and_reviewed,))
    return int(campaign_id)


def _times(page: Any) -> list[float]:
    return page.eval_on_selector_all("#player video", "vs => vs.map(v => v.currentTime)")


def test_two_matched_episodes_play_in_sync(
    live_server: LiveServer, page: Any, tmp_path: Any
) -> None:
    cid = _campaign(live_server, tmp_path)
    live_server.add_user("root", Role.admin)
    sign_in(page, "root")  # an unreleased campaign: the admin's preview
    page.goto(f"/leaderboard/{cid}")
    assert page.locator('#pair-table a[data-link="compare"]').count() == 1
    page.click('#pair-table a[data-link="compare"]')
    page.wait_for_url("**/compare?**")
    assert page.locator("[data-testid=matches] button[data-play]").count() == 1, page.evaluate(
        "() => document.getElementById('compare-data').textContent"
    )[:1500]
    assert page.locator('[data-testid="matches"] tr[data-match]').count() == 1
    page.wait_for_selector('[data-chart="overlay"] svg')
    page.click('button[data-play="0"]')
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#player video')).every(v => v.readyState >= 2)"
    )
    page.click('#player [data-act="play"]')
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#player video'))"
        ".every(v => v.currentTime > 1.0)",
        timeout=15_000,
    )
    page.click('#player [data-act="play"]')  # pause both
    a, b = _times(page)
    assert abs(a - b) < 0.2, (a, b)
    # the slider puts both at the same moment
    page.eval_on_selector(
        '#player [data-act="scrub"]',
        "el => { el.value = '0.5'; el.dispatchEvent(new Event('input')); }",
    )
    a, b = _times(page)
    assert a == pytest.approx(b, abs=1e-3) and a > 0
    assert not page.page_errors  # type: ignore[attr-defined]
