"""The leaderboard filtered by a scene factor equals the analysis run on the
filtered interchange file: the campaign's episodes are written out in the
interchange format, the file's lines are filtered by hand, the file is read
back and scored with the campaign's protocol, and every policy's intervals
and every pair's verdict match the filtered board's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.analysis.interchange import read_interchange, write_interchange
from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import to_json
from proctor.analysis.store import campaign_protocol, load_episodes
from proctor.core.db.models import Campaign
from proctor.core.domain import LabelStream
from tests.web.conftest import Web
from tests.web.html_tree import parse
from tests.web.leaderboard_data import SeededCampaign, seed_campaign


@pytest.fixture
def released(web: Web) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(s, released=True, episodes_per_cell=6, seed=31)


def _by_hand(web: Web, cid: int, tmp_path: Path, keep: str) -> dict:
    """The campaign as an interchange file, filtered line by line, scored."""
    full = tmp_path / "campaign.jsonl"
    with web.db() as s:
        table = load_episodes(s, campaign_id=cid, stream=LabelStream.auto_and_reviewed)
        campaign = s.get(Campaign, cid)
        assert campaign is not None
        protocol = campaign_protocol(campaign)
    write_interchange(table.episodes, full)
    lines = full.read_text(encoding="utf-8").splitlines()
    kept = [ln for ln in lines if json.loads(ln)["external_camera"] == keep]
    assert 0 < len(kept) < len(lines)
    part = tmp_path / "filtered.jsonl"
    part.write_text("\n".join(kept) + "\n", encoding="utf-8")
    return to_json(analyze(read_interchange(part), protocol))


def test_a_filtered_board_equals_the_filtered_interchange_file(
    web: Web, released: SeededCampaign, tmp_path: Path
) -> None:
    cid = released.campaign_id
    c = web.client()
    full = c.get(f"/api/leaderboard/{cid}").json()
    r = c.get(f"/api/leaderboard/{cid}", params={"camera_side": "right"})
    assert r.status_code == 200, r.text
    board = r.json()
    want = _by_hand(web, cid, tmp_path, "right")
    rows = {row["label"]: row for row in board["rows"]}
    assert set(rows) == {p["policy"] for p in want["policies"]}
    for p in want["policies"]:
        row = rows[p["policy"]]
        assert row["episodes"] == p["episodes"] and row["rank"] == p["rank"]
        for key in ("hrt", "rmst", "completion"):
            if p[key] is None:
                assert row[key] is None
                continue
            assert row[key]["estimate"] == pytest.approx(p[key]["estimate"], abs=1e-9), key
            assert row[key]["lo"] == pytest.approx(p[key]["ci"][0], abs=1e-9), key
            assert row[key]["hi"] == pytest.approx(p[key]["ci"][1], abs=1e-9), key
    got = {(q["a"], q["b"]): q for q in board["pairs"]}
    for q in want["pairs"]:
        mine = got[(q["a"], q["b"])]
        assert mine["verdict"] == q["verdict"]
        assert mine["ks_p_bonferroni"] == pytest.approx(q["macro_ks"]["p_bonferroni"])
    # a subset, not the full board: fewer episodes, different intervals
    assert sum(r["episodes"] for r in board["rows"]) < sum(r["episodes"] for r in full["rows"])
    assert any("filtered to camera_side = right" in n for n in board["notes"])


def test_the_filter_on_the_page_and_its_errors(web: Web, released: SeededCampaign) -> None:
    cid = released.campaign_id
    c = web.client()
    html = c.get(f"/leaderboard/{cid}", params={"object_tag": "deformable"}).text
    doc = parse(html)
    assert "object_tag = deformable" in doc.find("span", data_testid="subset").text()
    form = doc.find("form", data_testid="subset-filter")
    assert form.find("select", name="camera_side") is not None
    # an empty choice ("all") is no filter at all
    plain = c.get(f"/api/leaderboard/{cid}", params={"camera_side": ""})
    assert plain.status_code == 200 and not any("filtered" in n for n in plain.json()["notes"])
    r = c.get(f"/api/leaderboard/{cid}", params={"station": "nowhere"})
    assert r.status_code == 404 and "station = nowhere" in r.json()["detail"]
    r = c.get(f"/api/leaderboard/{cid}", params={"camera_side": "x" * 300})
    assert r.status_code == 422


def test_pre_registered_interactions_are_shown_with_the_pair_and_the_policy(web: Web) -> None:
    from proctor.analysis.store import recompute
    from tests.web.leaderboard_data import TEST_ANALYSIS

    with web.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=6, seed=37, compute=False)
        campaign = s.get(Campaign, seeded.campaign_id)
        assert campaign is not None
        campaign.protocol_extra = {
            "analysis": {**TEST_ANALYSIS, "interaction_factors": ["camera_side"]}
        }
        s.flush()
        recompute(s, campaign_id=campaign.id, streams=(LabelStream.auto_and_reviewed,))
    c = web.client()
    board = c.get(f"/api/leaderboard/{seeded.campaign_id}").json()
    for pair in board["pairs"]:
        [x] = pair["interactions"]
        assert x["factor"] == "camera_side" and x["levels"] == ["left", "right"]
        assert 0 < x["p"] <= 1
    doc = parse(c.get(f"/leaderboard/{seeded.campaign_id}").text)
    cells = doc.find_all("span", class_="interaction")
    assert len(cells) == len(board["pairs"])
    label = next(r["label"] for r in board["rows"] if not r["reference"])
    policy = c.get(f"/api/leaderboard/{seeded.campaign_id}/policies/{label}").json()
    [h] = policy["hrt_interactions"]
    assert h["effect"] == "hrt" and h["factor"] == "camera_side"
    page = parse(c.get(f"/leaderboard/{seeded.campaign_id}/policies/{label}").text)
    assert "camera side" in page.find("p", data_testid="hrt-interactions").text()
