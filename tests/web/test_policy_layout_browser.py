"""The policy page's per-configuration and per-tag tables fit their cards at
1400 px (the last column used to run past the card's edge): every cell's
right edge lies inside its card, and the table needs no horizontal scroll.
A screenshot of the two cards is kept with the test's files for a look."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from proctor.core.domain import LabelStream
from proctor.web.snapshots import service
from tests.browser import LiveServer
from tests.web.leaderboard_data import seed_campaign

pytestmark = pytest.mark.browser

MEASURE = """id => {
  const card = document.getElementById(id);
  const box = card.getBoundingClientRect();
  const style = getComputedStyle(card);
  const inner = box.right - parseFloat(style.paddingRight) - parseFloat(style.borderRightWidth);
  const cells = Array.from(card.querySelectorAll('th, td'));
  const worst = Math.max(...cells.map(c => c.getBoundingClientRect().right));
  const wrap = card.querySelector('.table-wrap') || card.querySelector('table');
  return {inner, worst, scroll: wrap.scrollWidth, client: wrap.clientWidth};
}"""


@pytest.mark.parametrize("width", [1400, 1280])
def test_the_configuration_tables_fit_their_cards(
    page: Any, live_server: LiveServer, tmp_path: Path, width: int
) -> None:
    with live_server.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=6, seed=17)
    with live_server.db() as s:
        result = service.latest_row(
            s, campaign_id=seeded.campaign_id, stream=LabelStream.auto_and_reviewed
        ).result
    label = result["policies"][1]["policy"]
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"/leaderboard/{seeded.campaign_id}/policies/{quote(label, safe='')}")
    resp = page.goto(f"/leaderboard/{seeded.campaign_id}/policies/{quote(label, safe='')}")
    assert resp.status == 200, page.content()[:3000]
    page.wait_for_selector("#configurations table")
    page.locator("#configurations").scroll_into_view_if_needed()
    shot = tmp_path / f"configurations-{width}.png"
    page.locator("#configurations").screenshot(path=str(shot))
    assert shot.stat().st_size > 1000
    for card in ("configurations", "tags"):
        m = page.evaluate(MEASURE, card)
        assert m["worst"] <= m["inner"] + 0.5, (card, width, m, str(shot))
        assert m["scroll"] <= m["client"] + 1, (card, width, m)
