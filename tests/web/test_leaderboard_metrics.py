"""The board reads its columns from the metric table: a statistic added as
one row of ``proctor.analysis.metrics.METRICS`` is stored with the snapshot,
served in the API's rows and shown as a column of the board, with no other
change (proctor/analysis/README.md, "Adding a statistic")."""

from __future__ import annotations

import pytest

from proctor.analysis import metrics
from tests.analysis.metrics_support import DUMMY
from tests.web.conftest import Web
from tests.web.html_tree import parse
from tests.web.leaderboard_data import SeededCampaign, seed_campaign
from tests.web.leaderboard_support import latest


@pytest.fixture
def with_dummy(monkeypatch: pytest.MonkeyPatch, web: Web) -> SeededCampaign:
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, DUMMY))
    with web.db() as s:
        return seed_campaign(s, released=True, episodes_per_cell=4, seed=5)


def test_a_statistic_added_as_one_row_reaches_the_api_and_the_board(
    web: Web, with_dummy: SeededCampaign
) -> None:
    stored = latest(web, with_dummy.campaign_id).result
    expected = {p["policy"]: p["double_uph"] for p in stored["policies"]}
    assert all(
        v["estimate"] == pytest.approx(2 * p["uph"]["estimate"])
        for p, v in zip(stored["policies"], expected.values(), strict=True)
    )
    body = web.client().get(f"/api/leaderboard/{with_dummy.campaign_id}").json()
    for row in body["rows"]:
        got = row["double_uph"]
        want = expected[row["label"]]
        assert got == {"estimate": want["estimate"], "lo": want["ci"][0], "hi": want["ci"][1]}
    doc = parse(web.client().get(f"/leaderboard/{with_dummy.campaign_id}").text)
    table = doc.find("table", id="board-table")
    assert "2×UPH" in [th.text().strip() for th in table.find_all("th", scope="col")]
    cells = table.find_all("td", data_cell="double-uph")
    assert len(cells) == len(body["rows"])
    shown = sorted(float(c.find("span", class_="num").get("data-value")) for c in cells)
    assert shown == pytest.approx(sorted(v["estimate"] for v in expected.values()))
