"""The board's success test, per-object letters and rankings by rule
(proctor.analysis.claims), checked against the stored snapshot; and a
snapshot from before them still renders."""

from __future__ import annotations

import copy

import pytest

from proctor.core.domain import LabelStream
from proctor.web.snapshots import service
from tests.web.conftest import Web
from tests.web.html_tree import parse
from tests.web.leaderboard_data import ALL_STREAMS, SeededCampaign, seed_campaign
from tests.web.leaderboard_support import latest


@pytest.fixture
def released(web: Web) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(s, released=True, episodes_per_cell=6, seed=11, streams=ALL_STREAMS)


def test_the_board_shows_success_tests_letters_per_object_and_rankings(
    web: Web,
    released: SeededCampaign,
) -> None:
    result = latest(web, released.campaign_id).result
    body = web.client().get(f"/api/leaderboard/{released.campaign_id}").json()
    for q, pr in zip(body["pairs"], result["pairs"], strict=True):
        assert q["success"] == pr["success_barnard"]
        assert q["per_object_tests"] == pr["per_object_tests"]
    assert body["letters_per_object"] == result["letters_per_object"]
    assert body["rankings"] == result["rankings"]
    doc = parse(web.client().get(f"/leaderboard/{released.campaign_id}").text)
    rows = doc.find("table", id="pair-table").find_all("tr", data_pair=True)
    for tr, pr in zip(rows, result["pairs"], strict=True):
        cell = tr.find("td", data_cell="success")
        sb = pr["success_barnard"]
        assert (
            float(cell.find("span", data_key="success_p").get("data-value")) == sb["p_bonferroni"]
        )
        assert f"{sb['successes'][0]}/{sb['episodes'][0]}" in cell.text()
    table = doc.find("table", id="object-letters")
    for x in result["letters_per_object"]:
        for policy, letters in x["letters"].items():
            tr = table.find("tr", data_policy=policy)
            assert tr.find("td", data_object=x["object"]).text().strip() == letters
    ranks = doc.find("table", id="rankings")
    heads = [th.get("data-metric") for th in ranks.find_all("th", data_metric=True)]
    assert heads == [r["metric"] for r in result["rankings"]]
    firsts = ranks.find_all("tr")[1].find_all("span", data_policy=True)
    assert [s.get("data-policy") for s in firsts] == [
        r["policies"][0]["policy"] for r in result["rankings"]
    ]


def test_a_snapshot_from_before_these_tests_renders_without_them(
    web: Web,
    released: SeededCampaign,
) -> None:
    with web.db() as s:
        row = service.latest_row(
            s, campaign_id=released.campaign_id, stream=LabelStream.auto_and_reviewed
        )
        old = copy.deepcopy(row.result)
        old["schema"] = "proctor.analysis/1"  # what such a snapshot says it is
        old.pop("letters_per_object")
        old.pop("rankings")
        for q in old["pairs"]:
            q.pop("success_barnard")
            q.pop("per_object_tests")
        row.result = old
    r = web.client().get(f"/leaderboard/{released.campaign_id}")
    assert r.status_code == 200
    doc = parse(r.text)
    assert not doc.find_all("table", id="object-letters")
    assert not doc.find_all("table", id="rankings")
    cells = doc.find("table", id="pair-table").find_all("td", data_cell="success")
    assert cells and {c.text().strip() for c in cells} == {"—"}
