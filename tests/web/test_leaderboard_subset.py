"""The leaderboard filtered by a scene factor equals the analysis run on the
filtered interchange file: the campaign's episodes are written out in the
interchange format, the file's lines are filtered by hand, the file is read
back and scored with the campaign's protocol, and every policy's intervals
and every pair's verdict match the filtered board's."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from proctor.analysis.interchange import read_interchange, write_interchange
from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import to_json
from proctor.analysis.store import campaign_protocol, load_episodes
from proctor.core.db.models import Campaign, Station
from proctor.core.domain import LabelStream, Role
from tests.web.conftest import Web, login
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
    # anonymous: one documented level at a time, as links (no form to combine them)
    assert not form.find_all("select")
    links = {a.attrs["href"] for a in form.find_all("a")}
    assert f"/leaderboard/{cid}?camera_side=right" in links
    assert not any("station" in h for h in links)
    # signed in: the selects, stations among them
    web.add_user("sam", Role.submitter)
    signed = web.client(ip="10.0.0.2")
    login(signed, "sam")
    form = parse(signed.get(f"/leaderboard/{cid}").text).find("form", data_testid="subset-filter")
    assert form.find("select", name="camera_side") is not None
    assert form.find("select", name="station") is not None
    # an empty choice ("all") is no filter at all
    plain = c.get(f"/api/leaderboard/{cid}", params={"camera_side": ""})
    assert plain.status_code == 200 and not any("filtered" in n for n in plain.json()["notes"])
    r = signed.get(f"/api/leaderboard/{cid}", params={"station": "nowhere"})
    assert r.status_code == 404 and "station = nowhere" in r.json()["detail"]
    r = c.get(f"/api/leaderboard/{cid}", params={"station": "nowhere"})
    assert r.status_code == 401 and "filtering by station" in r.json()["detail"]
    r = c.get(f"/api/leaderboard/{cid}", params={"tote_side": "up"})
    assert r.status_code == 422 and "tote_side = up" in r.json()["detail"]
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


# ------------------------------------------------- what a filter costs whom ([N2])


@dataclass
class Spy:
    """Counts the loads of a campaign's episodes made by filtered boards."""

    loads: int = 0


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    import proctor.web.leaderboard.subset as subset_module

    seen = Spy()
    real = subset_module.load_episodes

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen.loads += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(subset_module, "load_episodes", counting)
    return seen


def _signed_in(web: Web, name: str = "sam") -> TestClient:
    web.add_user(name, Role.submitter)
    c = web.client(ip="10.0.0.9")
    login(c, name)
    return c


def test_invalid_filter_values_are_refused_before_any_episode_is_loaded(
    web: Web, released: SeededCampaign, spy: Spy
) -> None:
    """Each refusal names the field; none loads an episode. Anonymous callers
    may not filter by station at all (401, naming it), whatever the value."""
    cid = released.campaign_id
    bad = [
        ({"station": "nonexistent7"}, 404, 401, "station"),
        ({"tote_side": "up"}, 422, 422, "tote_side"),
        ({"camera_side": "behind"}, 422, 422, "camera_side"),
        ({"object_tag": "squishy"}, 404, 404, "object_tag"),
        ({"object_tag": "deformable", "station": "nowhere"}, 404, 401, "station"),
    ]
    signed, anonymous = _signed_in(web), web.client()
    for params, code, anonymous_code, field_name in bad:
        for client, want in ((signed, code), (anonymous, anonymous_code)):
            r = client.get(f"/api/leaderboard/{cid}", params=params)
            assert r.status_code == want, (params, r.status_code, r.text)
            assert field_name in r.json()["detail"].split(":")[0], r.text
            assert spy.loads == 0, params


def test_anonymous_callers_get_the_stored_levels_and_nothing_else(
    web: Web, released: SeededCampaign, spy: Spy
) -> None:
    cid = released.campaign_id
    work = web.app.state.web.subsets
    c = web.client()
    for params in ({"tote_side": "left"}, {"camera_side": "right"}, {"object_tag": "rigid"}):
        r = c.get(f"/api/leaderboard/{cid}", params=params)
        assert r.status_code == 200, r.text
        assert any("filtered to" in n for n in r.json()["notes"])
    # read from the rows stored with the snapshot: no episode loaded, nothing scored
    assert spy.loads == 0 and work.analyses == 0
    with web.db() as s:
        station = s.scalar(sa.select(Station.name).where(Station.name.like("cell-%")))
    refused = [
        ({"station": station}, "filtering by station"),
        ({"tote_side": "left", "camera_side": "right"}, "combining filters"),
    ]
    for params, says in refused:
        r = c.get(f"/api/leaderboard/{cid}", params=params)
        assert r.status_code == 401 and says in r.json()["detail"], r.text
        page = c.get(f"/leaderboard/{cid}", params=params)
        assert page.status_code in (303, 401), page.status_code  # the page sends them to sign in
    assert spy.loads == 0 and work.analyses == 0
    # signed in, the same filters are computed on request (under the permits)
    signed = _signed_in(web)
    for params, _ in refused:
        r = signed.get(f"/api/leaderboard/{cid}", params=params)
        assert r.status_code == 200, r.text
    assert work.analyses == 2 and spy.loads == 2


def test_a_busy_subset_analysis_answers_503_at_once(
    web: Web, released: SeededCampaign, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its one permit taken, a signed-in filter is refused with
    Retry-After at once instead of queueing behind it."""
    import proctor.web.leaderboard.subset as subset_module

    cid = released.campaign_id
    signed, other = _signed_in(web), _signed_in(web, "tess")
    with web.db() as s:
        station = s.scalar(sa.select(Station.name).where(Station.name.like("cell-%")))
    entered, release = threading.Event(), threading.Event()
    real = subset_module.load_episodes

    def slow(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(subset_module, "load_episodes", slow)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(signed.get, f"/api/leaderboard/{cid}", params={"station": station})
        assert entered.wait(30)
        started = time.monotonic()
        r = other.get(
            f"/api/leaderboard/{cid}", params={"tote_side": "right", "camera_side": "left"}
        )
        assert r.status_code == 503 and r.headers["retry-after"], r.text
        assert time.monotonic() - started < 5
        release.set()
        assert first.result(30).status_code == 200


def test_filters_never_evict_the_public_pages(web: Web, released: SeededCampaign) -> None:
    """The public board stays in the app's result cache however many filters
    are asked for: they have their own."""
    cid = released.campaign_id
    state = web.app.state.web
    public = web.client()
    assert public.get(f"/api/leaderboard/{cid}").status_code == 200
    kept = dict(state.results._items)
    # a cache just big enough for what the public board put there
    state.results.capacity = len(kept)
    assert any(k[0] == "leaderboard-json-public" for k in kept)
    signed = _signed_in(web)
    asked = [
        {"tote_side": t, "camera_side": c, "object_tag": g}
        for t in ("left", "right")
        for c in ("left", "right")
        for g in ("rigid", "deformable")
    ]
    codes = [signed.get(f"/api/leaderboard/{cid}", params=p).status_code for p in asked]
    # some combinations have no episode (404) or too few to score (422)
    assert set(codes) <= {200, 404, 422} and codes.count(200) >= 2, codes
    for level in ({"tote_side": "left"}, {"camera_side": "right"}, {"object_tag": "rigid"}):
        assert public.get(f"/api/leaderboard/{cid}", params=level).status_code == 200
        assert public.get(f"/leaderboard/{cid}", params=level).status_code == 200
    assert dict(state.results._items).keys() == kept.keys()
    assert len(state.subsets.cache._items) > codes.count(200) + 3


def test_a_snapshot_scored_before_levels_were_stored_gets_them_at_the_next_recompute(
    web: Web, released: SeededCampaign, spy: Spy
) -> None:
    from proctor.analysis.store import has_subsets, recompute
    from proctor.core.db.models import AnalysisSubsetResult

    cid = released.campaign_id
    with web.db() as s:
        s.execute(sa.delete(AnalysisSubsetResult))
    work = web.app.state.web.subsets
    c = web.client()
    # until then a documented level is computed, under the permits, once
    for _ in range(2):
        assert c.get(f"/api/leaderboard/{cid}", params={"tote_side": "left"}).status_code == 200
    assert work.analyses == 1 and spy.loads == 1
    with web.db() as s:
        [out] = recompute(s, campaign_id=cid, streams=(LabelStream.auto_and_reviewed,))
        assert out.status == "unchanged" and out.snapshot_id is not None
        assert has_subsets(s, out.snapshot_id)
    assert c.get(f"/api/leaderboard/{cid}", params={"camera_side": "left"}).status_code == 200
    assert work.analyses == 1 and spy.loads == 1
