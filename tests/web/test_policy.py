"""The policy page's JSON and HTML: curves and scores straight from the
snapshot, comparisons, identity only after release, clear 404s."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from proctor.domain import LabelStream, Role
from tests.web.conftest import Web
from tests.web.html_tree import parse
from tests.web.leaderboard_data import SeededCampaign, seed_campaign
from web.snapshots import service


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def released(web: Web) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(s, released=True, episodes_per_cell=5, seed=23)


def _result(web: Web, cid: int) -> dict:
    with web.db() as s:
        return service.latest_row(s, campaign_id=cid, stream=LabelStream.auto_and_reviewed).result


def test_the_policy_json_is_the_snapshots(web: Web, released: SeededCampaign) -> None:
    result = _result(web, released.campaign_id)
    p = result["policies"][2]
    ref = next(q for q in result["policies"] if q["reference"])
    r = web.client().get(
        f"/api/leaderboard/{released.campaign_id}/policies/{quote(p['policy'], safe='')}"
    )
    assert r.status_code == 200 and r.headers["etag"]
    body = r.json()
    assert body["label"] == p["policy"] and body["comparator"] == ref["policy"]
    assert body["scores"]["hrt"]["estimate"] == p["hrt"]["estimate"]
    assert body["scores"]["rmst"]["lo"] == p["rmst"]["ci"][0]
    assert body["tau_sweep"] == p["tau_sweep"]
    for got, want in zip(body["per_object"], p["per_object"], strict=True):
        assert got["object"] == want["object"]
        assert got["km"] == want["km"] and got["pp"] == want["pp"] and got["qq"] == want["qq"]
        ref_obj = next(o for o in ref["per_object"] if o["object"] == want["object"])
        assert got["comparator_km"] == ref_obj["km"]
        assert got["links"]["cell"].endswith(f"object={want['object']}")
    assert [b["key"] for b in body["per_configuration"]] == [
        b["key"] for b in p["per_configuration"]
    ]
    assert [b["key"] for b in body["per_tag"]] == ["deformable", "rigid"]
    assert set(body["failure_modes"]) == set(p["failure_modes"])
    # released: who it is (never the endpoint URL)
    ident = next(i for i in released.identities if i.name == p["policy"])
    assert body["identity"]["owner"] == f"Lab of {ident.name}"
    assert body["identity"]["checkpoint_sha256"] == ident.checkpoint_sha256
    assert ident.endpoint_url not in r.text
    # against another policy
    other = result["policies"][1]["policy"]
    vs = (
        web.client()
        .get(
            f"/api/leaderboard/{released.campaign_id}/policies/{quote(p['policy'], safe='')}",
            params={"vs": other},
        )
        .json()
    )
    assert vs["comparator"] == other
    assert vs["per_object"][0]["comparator_km"] == result["policies"][1]["per_object"][0]["km"]


def test_the_policy_page(web: Web, released: SeededCampaign) -> None:
    result = _result(web, released.campaign_id)
    p = result["policies"][1]
    c = web.client()
    html = c.get(f"/leaderboard/{released.campaign_id}/policies/{quote(p['policy'], safe='')}").text
    doc = parse(html)
    assert doc.find("h1").get("data-policy") == p["policy"]
    assert (
        float(doc.find("dd", data_score="hrt").find("span", class_="num").get("data-value"))
        == p["hrt"]["estimate"]
    )
    objects = doc.find("table", id="object-table").find_all("tr", data_object=True)
    assert [tr.get("data-object") for tr in objects] == [o["object"] for o in p["per_object"]]
    for tr, o in zip(objects, p["per_object"], strict=True):
        assert float(tr.find("span", data_key="rmst").get("data-value")) == o["rmst"]["estimate"]
    assert len(doc.find_all("div", data_chart="cdf")) == len(p["per_object"])
    episodes = doc.find("table", id="episode-table").find_all("tr", data_episode=True)
    assert len(episodes) == sum(1 for v in released.episode_policy.values() if v == p["policy"])
    assert "Lab of" in doc.find("dl", class_="identity").text()


def test_policy_not_found(web: Web, released: SeededCampaign) -> None:
    c = web.client()
    cid = released.campaign_id
    r = c.get(f"/api/leaderboard/{cid}/policies/nobody")
    assert r.status_code == 404 and r.json()["detail"] == "policy not found in this leaderboard"
    assert c.get(f"/leaderboard/{cid}/policies/nobody").status_code == 404
    name = released.identities[1].name
    r = c.get(f"/api/leaderboard/{cid}/policies/{name}", params={"vs": "nobody"})
    assert r.status_code == 404 and "comparator" in r.json()["detail"]
    assert c.get(f"/api/leaderboard/999/policies/{name}").status_code == 404


def test_the_blinded_preview_names_arms_not_policies(web: Web) -> None:
    with web.db() as s:
        closed = seed_campaign(s, released=False, episodes_per_cell=4, seed=29)
    c = web.client()
    name = closed.identities[1].name
    assert c.get(f"/api/leaderboard/{closed.campaign_id}/policies/{name}").status_code == 404
    web.add_user("root", Role.admin)
    admin = bearer(web.token("root", ("admin",)))
    # not by name, even for an admin: a preview knows only arms
    assert (
        c.get(f"/api/leaderboard/{closed.campaign_id}/policies/{name}", headers=admin).status_code
        == 404
    )
    board = c.get(f"/api/leaderboard/{closed.campaign_id}", headers=admin).json()
    arm = board["rows"][1]["label"]
    r = c.get(
        f"/api/leaderboard/{closed.campaign_id}/policies/{quote(arm, safe='')}", headers=admin
    )
    assert r.status_code == 200
    body = r.json()
    assert body["blinded"] is True and body["identity"] is None
    assert body["comparator"].startswith("arm ")
    for secret in closed.secrets():
        assert secret not in r.text
