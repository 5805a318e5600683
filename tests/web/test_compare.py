"""The compare view: two policies on matched episodes (same object and
configuration), their CDFs from the snapshot, linked from every pair."""

from __future__ import annotations

from collections import Counter

import pytest
import sqlalchemy as sa

from proctor.core.db.models import Assignment, Episode, ObjectType, Policy
from proctor.core.domain import LabelStream
from proctor.web.snapshots import service
from tests.web.conftest import Web
from tests.web.html_tree import parse
from tests.web.leaderboard_data import SeededCampaign, seed_campaign


@pytest.fixture
def released(web: Web) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(
            s, released=True, episodes_per_cell=5, seed=41, skip={("slow-dp-x", "towels")},
            tag="x",
        )  # fmt: skip


def _strata(web: Web, cid: int, name: str) -> Counter[tuple[str, str]]:
    with web.db() as s:
        rows = s.execute(
            sa.select(ObjectType.name, Episode.tote_side, Episode.camera_side)
            .join(Assignment, Episode.assignment_id == Assignment.id)
            .join(Policy, Policy.id == Assignment.policy_id)
            .join(ObjectType, ObjectType.id == Episode.object_type_id)
            .where(Episode.campaign_id == cid, Policy.name == name)
        ).all()
    return Counter((o, f"tote {t.value} / camera {c.value}") for o, t, c in rows)


def test_matched_episodes_and_curves(web: Web, released: SeededCampaign) -> None:
    cid = released.campaign_id
    with web.db() as s:
        result = service.latest_row(s, campaign_id=cid, stream=LabelStream.auto_and_reviewed).result
    a, b = "swift-vla-x", "slow-dp-x"
    r = web.client().get(f"/api/leaderboard/{cid}/compare", params={"a": a, "b": b})
    assert r.status_code == 200, r.text
    body = r.json()
    # by hand: per (object, configuration), min(#a, #b) matches
    ca, cb = _strata(web, cid, a), _strata(web, cid, b)
    want = {k: min(ca[k], cb[k]) for k in set(ca) | set(cb)}
    got = {(x["object"], x["configuration"]): x["matched"] for x in body["strata"]}
    assert got == want and want[next(iter(k for k in want if k[0] == "towels"))] == 0
    assert len(body["matches"]) == sum(want.values()) > 0
    for m in body["matches"]:
        assert m["a"]["uid"] != m["b"]["uid"]
        assert (m["object"], m["configuration"]) in want
        assert released.episode_policy[m["a"]["uid"]] == a
        assert released.episode_policy[m["b"]["uid"]] == b
    # the curves are the snapshot's, for the objects both ran
    pa = next(p for p in result["policies"] if p["policy"] == a)
    assert [c["object"] for c in body["curves"]] == ["spoons"]
    assert body["curves"][0]["a"] == pa["per_object"][0]["km"]
    pair = next(q for q in result["pairs"] if {q["a"], q["b"]} == {a, b})
    assert body["verdict"]["verdict"] == pair["verdict"]
    # the page says why, with the snapshot's numbers, not the verdict's word alone
    page = web.client().get(f"/leaderboard/{cid}/compare", params={"a": a, "b": b})
    reason = parse(page.text).find("span", data_testid="verdict-reason").text()
    assert f"macro-KS p = {pair['macro_ks']['p_bonferroni']:.3f}" in reason, reason
    # in the snapshot's order of the pair (its ΔRMST is a − b)
    rmst = pair["rmst_diff"]["estimate"]
    assert f"RMST {pair['a']} − {pair['b']} = {rmst:.1f} s" in reason, reason
    assert f"AUC = P({pair['a']} faster) = {pair['auc']['estimate']:.2f}" in reason, reason


def test_every_pair_links_to_its_compare_page(web: Web, released: SeededCampaign) -> None:
    cid = released.campaign_id
    c = web.client()
    board = c.get(f"/api/leaderboard/{cid}").json()
    assert board["pairs"]
    html = c.get(f"/leaderboard/{cid}").text
    links = [a.get("href") for a in parse(html).find_all("a", data_link="compare")]
    assert len(links) == len(board["pairs"])
    for pair in board["pairs"]:
        assert pair["links"]["compare"] in links
        page = c.get(pair["links"]["compare"])
        assert page.status_code == 200
        doc = parse(page.text)
        assert doc.find("h1").get("data-a") == pair["a"]
        assert doc.find("table", data_testid="matches") is not None
    assert c.get(f"/api/leaderboard/{cid}/compare", params={"a": "x", "b": "y"}).status_code == 404
    same = c.get(f"/api/leaderboard/{cid}/compare", params={"a": "swift-vla-x", "b": "swift-vla-x"})
    assert same.status_code == 422
