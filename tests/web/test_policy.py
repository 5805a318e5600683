"""The policy page's JSON and HTML: curves and scores straight from the
snapshot, comparisons, identity only after release, clear 404s."""

from __future__ import annotations

from urllib.parse import quote

import numpy as np
import pytest

from proctor.analysis.synthetic import PolicyModel
from proctor.core.domain import LabelStream, Role
from proctor.web.policies import compare
from proctor.web.snapshots import service
from tests.web.conftest import Web
from tests.web.html_tree import parse
from tests.web.leaderboard_data import SeededCampaign, default_models, seed_campaign


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
    # ... and P-P / Q-Q follow the comparator, not the reference
    pair = next(q for q in result["pairs"] if {q["a"], q["b"]} == {p["policy"], other})
    ks = {o["object"]: o["statistic"] for o in pair["macro_ks"]["per_object"]}
    other_objects = {o["object"]: o for o in result["policies"][1]["per_object"]}
    for got, mine in zip(vs["per_object"], p["per_object"], strict=True):
        theirs = other_objects[got["object"]]
        assert got["pp"] != mine["pp"]  # the stored plot is against the reference
        # the Q-Q quantiles are each curve's own: the analysis stored both, against the
        # reference, at full precision
        assert got["qq"]["p"] == mine["qq"]["p"]
        assert got["qq"]["model"] == pytest.approx(mine["qq"]["model"], abs=1e-6)
        assert got["qq"]["ref"] == pytest.approx(theirs["qq"]["model"], abs=1e-6)
        # the P-P's largest vertical gap is the pair's KS distance on this object
        gap = max(abs(a - b) for a, b in zip(got["pp"]["ref"], got["pp"]["model"], strict=True))
        assert gap == pytest.approx(ks[got["object"]], abs=1e-5)
        assert got["ks_vs_comparator"] == ks[got["object"]]


def test_pp_and_qq_from_curves_reproduce_the_analysis_against_the_reference(
    web: Web, released: SeededCampaign
) -> None:
    """proctor.web.policies.compare, given the reference's curve, gives the plots the
    analysis computed and stored (to the stored curves' 6 digits)."""
    result = _result(web, released.campaign_id)
    ref = next(q for q in result["policies"] if q["reference"])
    ref_km = {o["object"]: o["km"] for o in ref["per_object"]}
    checked = 0
    for p in result["policies"]:
        if p["reference"]:
            continue
        for o in p["per_object"]:
            pp = compare.pp(ref_km[o["object"]], o["km"])
            assert pp["ref"] == pytest.approx(o["pp"]["ref"], abs=1e-6)
            assert pp["model"] == pytest.approx(o["pp"]["model"], abs=1e-6)
            qq = compare.qq(ref_km[o["object"]], o["km"], o["qq"]["p"], None)
            assert qq["ref"] == pytest.approx(o["qq"]["ref"], abs=1e-6)
            assert qq["model"] == pytest.approx(o["qq"]["model"], abs=1e-6)
            checked += 1
    assert checked == 6


def test_pp_and_qq_of_two_hand_made_curves() -> None:
    # A: F = 0.25 from t = 1, 0.5 from t = 3 (plateau); B: F = 0.5 from t = 2, 1 from t = 4
    a = {"t": [0.0, 1.0, 3.0], "cdf": [0.0, 0.25, 0.5]}
    b = {"t": [0.0, 2.0, 4.0], "cdf": [0.0, 0.5, 1.0]}
    # grid: 1, 2, 3, 4 → B at those times: 0, .5, .5, 1; A: .25, .25, .5, .5
    assert compare.pp(b, a) == {
        "ref": [0.0, 0.0, 0.5, 0.5, 1.0],
        "model": [0.0, 0.25, 0.25, 0.5, 0.5],
    }
    qq = compare.qq(b, a, [0.25, 0.5, 0.75], 0.5)
    assert qq == {
        "p": [0.25, 0.5, 0.75],
        "ref": [2.0, 2.0, 4.0],
        "model": [1.0, 3.0, None],  # A never reaches 0.75
        "last_reachable": 0.5,
    }
    assert compare.cdf_at(a, np.array([0.0, 0.5, 1.0, 2.999, 3.0, 99.0])).tolist() == [
        0.0,
        0.0,
        0.25,
        0.25,
        0.5,
        0.5,
    ]


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


def test_a_policy_that_never_succeeds_on_an_object_is_shown_with_dashes(web: Web) -> None:
    """Issue 22: a policy with no success on one object (every attempt runs
    out of time) used to crash the snapshot; its cell reports RMST = τ and
    no median, which the leaderboard and the policy page print as "—"."""
    tag = "nosucc"
    models = default_models(tag)
    stuck = PolicyModel(
        f"stuck-{tag}", 6.0, p_drop=0.0, p_lost=0.0, p_safety=0.0,
        object_speed={"spoons": 1.0, "towels": 1e6},
    )  # fmt: skip
    with web.db() as s:
        seeded = seed_campaign(
            s, released=True, episodes_per_cell=4, seed=5, models=[*models, stuck], tag=tag
        )
    assert [o.status for o in seeded.outcomes] == ["created"], seeded.outcomes
    result = _result(web, seeded.campaign_id)
    row = next(p for p in result["policies"] if p["policy"] == stuck.name)
    towels = next(o for o in row["per_object"] if o["object"] == "towels")
    tau = result["protocol"]["tau"]
    assert towels["rmst"] == {"estimate": tau, "ci": [tau, tau]}
    assert towels["median"] == {"estimate": None, "ci": [None, None]}
    c = web.client()
    board = c.get(f"/leaderboard/{seeded.campaign_id}")
    assert board.status_code == 200
    rows = parse(board.text).find("table", id="board-table").find_all("tr", data_policy=True)
    assert stuck.name in [r.get("data-policy") for r in rows]
    page = c.get(f"/leaderboard/{seeded.campaign_id}/policies/{quote(stuck.name, safe='')}")
    assert page.status_code == 200
    tr = parse(page.text).find("table", id="object-table").find("tr", data_object="towels")
    assert float(tr.find("span", data_key="rmst").get("data-value")) == tau
    median_cell = tr.find_all("td")[5]
    assert median_cell.text().strip() == "—"
    api = c.get(f"/api/leaderboard/{seeded.campaign_id}/policies/{quote(stuck.name, safe='')}")
    assert api.status_code == 200
    api_towels = next(o for o in api.json()["per_object"] if o["object"] == "towels")
    assert api_towels["median"] == {"estimate": None, "lo": None, "hi": None}


def test_the_policy_page_and_json_show_its_latency(web: Web, released: SeededCampaign) -> None:
    result = _result(web, released.campaign_id)
    p = next(q for q in result["policies"] if not q["reference"])
    lat = p["latency"]
    # the seeded tables: 4 calls an episode, the server's time 12 ms where reported
    assert lat["calls_per_episode"] == 4.0 and lat["server_p50_ms"] == 12.0
    assert 0 < lat["stale_action_rate"] < 1 and 20.0 <= lat["p50_ms"] <= lat["p99_ms"] <= 71.0
    path = f"/leaderboard/{released.campaign_id}/policies/{quote(p['policy'], safe='')}"
    c = web.client()
    body = c.get("/api" + path).json()
    assert body["latency"]["p95_ms"] == lat["p95_ms"]
    assert body["latency"]["stale_action_rate"] == lat["stale_action_rate"]
    doc = parse(c.get(path).text)
    section = doc.find("section", id="latency")
    rtt = section.find("tr", data_latency="round_trip").text()
    assert f"{lat['p50_ms']:.1f} / {lat['p95_ms']:.1f} / {lat['p99_ms']:.1f} ms" in rtt
    assert "12.0 ms" in section.find("tr", data_latency="server").text()
    stale = section.find("tr", data_latency="stale").text()
    assert f"{100 * lat['stale_action_rate']:.1f} %" in stale
    assert "4.0 (" in section.find("tr", data_latency="calls").text()
    # the reference's episodes recorded no call: said so, not shown as zero
    ref = next(q for q in result["policies"] if q["reference"])
    ref_doc = parse(
        c.get(f"/leaderboard/{released.campaign_id}/policies/{quote(ref['policy'], safe='')}").text
    )
    ref_section = ref_doc.find("section", id="latency")
    assert "No policy calls were recorded" in ref_section.find("p", data_latency="none").text()
    assert ref_section.find_all("tr") == []


def test_the_leaderboard_rows_carry_each_policys_latency(
    web: Web, released: SeededCampaign
) -> None:
    result = _result(web, released.campaign_id)
    rows = web.client().get(f"/api/leaderboard/{released.campaign_id}").json()["rows"]
    by_label = {r["label"]: r for r in rows}
    for p in result["policies"]:
        got = by_label[p["policy"]]["latency"]
        for key in ("p50_ms", "p95_ms", "p99_ms", "server_p50_ms", "stale_action_rate"):
            assert got[key] == p["latency"][key]
