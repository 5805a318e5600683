"""The leaderboard's JSON API and pages, over campaigns whose rows are real
and whose snapshots the real analysis computed (tests/web/leaderboard_data).
Every number checked here is compared with the stored snapshot."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa

from proctor.analysis import store as analysis_store
from proctor.analysis.report import data_version
from proctor.analysis.store import load_episodes
from proctor.core.db.models import Episode
from proctor.core.domain import LabelStream, Outcome, Role
from proctor.web.leaderboard.format import num, pct
from proctor.web.snapshots import service
from proctor.web.snapshots.worker import recompute_after_commit
from tests.web.conftest import Web, login, page_csrf
from tests.web.html_tree import parse
from tests.web.leaderboard_data import ALL_STREAMS, TEST_ANALYSIS, SeededCampaign, seed_campaign
from tests.web.leaderboard_support import latest


@pytest.fixture
def released(web: Web) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(s, released=True, episodes_per_cell=6, seed=11, streams=ALL_STREAMS)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def iv(x: dict[str, Any] | None) -> tuple[Any, Any, Any] | None:
    if x is None:
        return None
    return (x["estimate"], *x["ci"])


def test_the_api_serves_the_snapshots_numbers(web: Web, released: SeededCampaign) -> None:
    snap = latest(web, released.campaign_id)
    r = web.client().get(f"/api/leaderboard/{released.campaign_id}")
    assert r.status_code == 200
    body = r.json()
    assert body["blinded"] is False
    assert body["snapshot"]["id"] == snap.id
    assert body["snapshot"]["data_version"] == snap.data_version
    assert body["snapshot"]["code_version"] == snap.code_version == analysis_store.code_version()
    assert body["protocol"]["tau_s"] == snap.result["protocol"]["tau"] == 120.0
    assert (
        body["protocol"]["bootstrap"] == TEST_ANALYSIS["bootstrap"]
        and body["protocol"]["seed"] == 0
    )
    result = snap.result
    assert [row["label"] for row in body["rows"]] == [p["policy"] for p in result["policies"]]
    for row, p in zip(body["rows"], result["policies"], strict=True):
        fm = p["failure_modes"]
        pairs = {
            "hrt": p["hrt"],
            "rmst": p["rmst"],
            "completion": p["completion"],
            "drops_per_operation": fm["drops_per_operation"],
            "safety_stops_per_episode": fm["safety_stops_per_episode"],
            "envelope_interventions_per_episode": fm["envelope_interventions_per_episode"],
            "interventions_per_episode": fm["operator_stops_per_episode"],
        }
        for key, expected in pairs.items():
            got = row[key]
            assert (got["estimate"], got["lo"], got["hi"]) == iv(expected), (row["label"], key)
        assert row["episodes"] == p["episodes"] and row["letters"] == p["letters"]
        assert row["rank"] == p["rank"] and row["reference"] == p["reference"]
    for got, pr in zip(body["pairs"], result["pairs"], strict=True):
        assert (got["a"], got["b"], got["verdict"]) == (pr["a"], pr["b"], pr["verdict"])
        assert got["ks_p_bonferroni"] == pr["macro_ks"]["p_bonferroni"]
        want_more = (pr["power"] or {}).get("more_episodes_per_cell")
        assert got["more_episodes_per_cell"] == want_more
    # the snapshot's data version is the hash of exactly these episodes
    with web.db() as s:
        table = load_episodes(
            s, campaign_id=released.campaign_id, stream=LabelStream.auto_and_reviewed
        )
    assert snap.data_version == data_version(table)
    # the stored result itself, for whoever wants every curve
    full = web.client().get(f"/api/leaderboard/{released.campaign_id}/snapshot").json()
    assert full["schema"] == "proctor.analysis/3"
    assert [p["policy"] for p in full["policies"]] == [p["policy"] for p in result["policies"]]


def test_the_page_prints_the_snapshots_numbers(web: Web, released: SeededCampaign) -> None:
    result = latest(web, released.campaign_id).result
    html = web.client().get(f"/leaderboard/{released.campaign_id}").text
    doc = parse(html)
    protocol = {dd.get("data-protocol"): dd.text() for dd in doc.find_all("dd", data_protocol=True)}
    assert (
        protocol["tau"] == "120.0 s"
        and protocol["bootstrap"] == str(TEST_ANALYSIS["bootstrap"])
        and protocol["seed"] == "0"
    )
    assert protocol["code"] == analysis_store.code_version()
    assert result["data_version"].startswith(protocol["data"])
    formats = {
        "hrt": num,
        "rmst": num,
        "completion": pct,
        "drops": pct,
        "safety": num,
        "envelope": num,
    }
    sources = {
        "hrt": lambda p: p["hrt"],
        "rmst": lambda p: p["rmst"],
        "completion": lambda p: p["completion"],
        "drops": lambda p: p["failure_modes"]["drops_per_operation"],
        "safety": lambda p: p["failure_modes"]["safety_stops_per_episode"],
        "envelope": lambda p: p["failure_modes"]["envelope_interventions_per_episode"],
    }
    rows = doc.find("table", id="board-table").find_all("tr", data_policy=True)
    assert [r.get("data-policy") for r in rows] == [p["policy"] for p in result["policies"]]
    for tr, p in zip(rows, result["policies"], strict=True):
        for key, fmt in formats.items():
            value = sources[key](p)["estimate"]
            if value is None:  # not defined (no episode counted): a dash, never 0
                assert tr.find("td", data_cell=key).text().strip() == "—", (p["policy"], key)
                continue
            span = tr.find("span", data_key=key)
            assert float(span.get("data-value")) == value, (p["policy"], key)
            assert span.text() == fmt(value)
        episodes = tr.find("span", data_key="episodes")
        assert episodes.text() == str(p["episodes"])
        assert tr.find("td", data_cell="letters").text() == p["letters"]
    # the seeded counts give both: a rate over the counted episodes, and the
    # reference's unknown one (none counted)
    envelope = [sources["envelope"](p)["estimate"] for p in result["policies"]]
    assert None in envelope and any(v is not None and v > 0 for v in envelope)
    pair_rows = doc.find("table", id="pair-table").find_all("tr", data_pair=True)
    assert len(pair_rows) == len(result["pairs"])
    floors: list[bool] = []
    for tr, pr in zip(pair_rows, result["pairs"], strict=True):
        assert tr.get("data-pair") == f"{pr['a']}|{pr['b']}"
        assert tr.get("data-verdict") == pr["verdict"]
        more = (pr["power"] or {}).get("more_episodes_per_cell")
        if more is not None:
            assert f"≈ {more} more episodes per cell needed" in tr.text()
        # a p at its resampling floor (no relabelling as extreme) reads "≤", the rest as is
        ks = pr["macro_ks"]
        floor = ks["p"] <= 1 / (ks["resamples"] + 1) + 1e-12
        shown = tr.find("span", data_key="ks_p").text()
        want = f"{ks['p_bonferroni']:.3f}"
        assert shown == (f"≤ {want}" if floor else want), (pr["a"], pr["b"], shown, ks)
        floors.append(floor)
    assert any(floors) and not all(floors), floors  # the seeded campaign has both kinds


def test_every_number_links_to_what_it_was_computed_from(
    web: Web, released: SeededCampaign
) -> None:
    c = web.client()
    result = latest(web, released.campaign_id).result
    doc = parse(c.get(f"/leaderboard/{released.campaign_id}").text)
    links = set()
    for table in ("board-table", "pair-table", "pair-matrix"):
        for a in doc.find("table", id=table).find_all("a"):
            links.add(a.get("href"))
    assert len(links) >= 3 * len(result["policies"])
    for href in sorted(links):
        path = href.split("#")[0]
        assert c.get(path).status_code == 200, href
    # the episode count links to a list whose counted episodes are those episodes
    for p in result["policies"]:
        body = c.get(
            f"/api/leaderboard/{released.campaign_id}/episodes", params={"policy": p["policy"]}
        ).json()
        assert sum(e["counted"] for e in body["episodes"]) == p["episodes"]
        assert {e["policy"] for e in body["episodes"]} == {p["policy"]}
        # envelope interventions per episode: the mean over the scored episodes
        # whose station counted them (the uncounted ones are left out, not zeros)
        counts = [
            e["envelope_interventions"]
            for e in body["episodes"]
            if e["counted"] and e["envelope_interventions"] is not None
        ]
        envelope = p["failure_modes"]["envelope_interventions_per_episode"]["estimate"]
        if counts:
            assert envelope == pytest.approx(sum(counts) / len(counts)), p["policy"]
        else:
            assert envelope is None, p["policy"]
        # each episode links to its explorer page
        first = body["episodes"][0]
        assert first["explorer"] == f"/episodes/{first['uid']}"
    # a cell's page shows that cell's numbers
    p = result["policies"][1]
    cell = p["per_object"][0]
    doc = parse(
        c.get(
            f"/leaderboard/{released.campaign_id}/episodes",
            params={"policy": p["policy"], "object": cell["object"]},
        ).text
    )
    assert (
        float(doc.find("span", data_key="cell_rmst").get("data-value")) == cell["rmst"]["estimate"]
    )
    assert (
        len(doc.find("table", id="episode-table").find_all("tr", data_episode=True))
        == cell["episodes"]
    )


def test_snapshots_are_cacheable(web: Web, released: SeededCampaign) -> None:
    c = web.client()
    path = f"/api/leaderboard/{released.campaign_id}"
    r = c.get(path)
    etag = r.headers["etag"]
    assert r.headers["cache-control"].startswith("public, max-age=")
    again = c.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    page = c.get(f"/leaderboard/{released.campaign_id}")
    assert page.headers["cache-control"].startswith("public")
    assert (
        c.get(
            f"/leaderboard/{released.campaign_id}", headers={"If-None-Match": page.headers["etag"]}
        ).status_code
        == 304
    )
    # a new snapshot is a new version
    with web.db() as s:
        analysis_store.recompute(
            s,
            campaign_id=released.campaign_id,
            streams=(LabelStream.auto_and_reviewed,),
            force=True,
        )
    assert c.get(path, headers={"If-None-Match": etag}).status_code == 200
    # signed in: private
    web.add_user("ada", Role.submitter)
    r = c.get(path, headers=bearer(web.token("ada", ("submitter",))))
    assert r.status_code == 200 and r.headers["cache-control"] == "private, no-cache"


def test_label_streams(web: Web, released: SeededCampaign) -> None:
    c = web.client()
    cid = released.campaign_id
    reviewed = c.get(f"/api/leaderboard/{cid}", params={"stream": "reviewed_only"}).json()
    assert reviewed["snapshot"]["label_stream"] == "reviewed_only"
    assert reviewed["snapshot"]["id"] == latest(web, cid, "reviewed_only").id
    assert sorted(reviewed["streams"]) == sorted(s.value for s in LabelStream)
    # reviewed-only reads fewer episodes than auto + reviewed
    everything = c.get(f"/api/leaderboard/{cid}").json()
    assert sum(r["episodes"] for r in reviewed["rows"]) < sum(
        r["episodes"] for r in everything["rows"]
    )
    page = c.get(f"/leaderboard/{cid}?stream=reviewed_only").text
    assert 'data-protocol="stream">reviewed_only' in page
    bad = c.get(f"/api/leaderboard/{cid}", params={"stream": "gossip"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "stream"


def test_not_found_and_empty(web: Web) -> None:
    c = web.client()
    home = c.get("/leaderboard")
    assert home.status_code == 200 and "No campaign has been released yet" in home.text
    assert c.get("/api/leaderboard").json() == []
    for path in ("/leaderboard/999", "/api/leaderboard/999", "/api/leaderboard/999/episodes"):
        r = c.get(path)
        assert r.status_code == 404, path
    with web.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=2, compute=False)
    r = c.get(f"/api/leaderboard/{seeded.campaign_id}")
    assert r.status_code == 404 and "no leaderboard has been computed" in r.json()["detail"]
    r = c.get(f"/api/leaderboard/{seeded.campaign_id}/policies/nobody")
    assert r.status_code == 404


def test_unreleased_results_are_an_admin_only_blinded_preview(web: Web) -> None:
    with web.db() as s:
        closed = seed_campaign(s, released=False, episodes_per_cell=4, seed=3)
    c = web.client()
    for path in (
        f"/leaderboard/{closed.campaign_id}",
        f"/api/leaderboard/{closed.campaign_id}",
        f"/api/leaderboard/{closed.campaign_id}/snapshot",
    ):
        assert c.get(path).status_code == 404
    assert c.get("/api/leaderboard").json() == []
    web.add_user("root", Role.admin)
    admin = bearer(web.token("root", ("admin",)))
    body = c.get(f"/api/leaderboard/{closed.campaign_id}", headers=admin).json()
    assert body["blinded"] is True
    labels = [r["label"] for r in body["rows"]]
    assert all(label.startswith("arm ") for label in labels), labels
    assert not any(
        i.name in r.text
        for i in closed.identities
        for r in [c.get(f"/api/leaderboard/{closed.campaign_id}", headers=admin)]
    )
    assert r_private(c.get(f"/api/leaderboard/{closed.campaign_id}", headers=admin))


def r_private(r: Any) -> bool:
    return r.headers["cache-control"] == "private, no-cache"


def test_recompute_after_a_reviewed_episode_runs_in_the_background(
    web: Web, released: SeededCampaign
) -> None:
    cid = released.campaign_id
    before = latest(web, cid)
    worker = web.app.state.web.snapshot_worker
    # a rolled-back change queues nothing
    with pytest.raises(RuntimeError), web.db() as s:
        recompute_after_commit(s, campaign_id=cid)
        raise RuntimeError("the review failed")
    assert worker.wait_idle(60)
    assert latest(web, cid).id == before.id
    # a committed one does: one episode turns out to have been a system fault
    uid = released.episode_uids[2]
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        ep.outcome = Outcome.system
        recompute_after_commit(s, campaign_id=cid)
        recompute_after_commit(s, campaign_id=cid)  # twice in one transaction: queued once
    assert worker.wait_idle(120)
    after = latest(web, cid)
    assert after.id > before.id and after.data_version != before.data_version
    assert uid in {e["episode_id"] for e in after.result["excluded"]}
    run = worker.status().recent[-1]
    assert run.campaign_id == cid and run.error is None
    assert {o.status for o in run.outcomes} == {"created"}
    # the pages read the new snapshot
    assert web.client().get(f"/api/leaderboard/{cid}").json()["snapshot"]["id"] == after.id
    # nothing changed since: recomputing stores nothing new
    with web.db() as s:
        again = analysis_store.recompute(s, campaign_id=cid)
    assert {o.status for o in again} == {"unchanged"}


def test_admins_recompute_on_demand(web: Web, released: SeededCampaign) -> None:
    cid = released.campaign_id
    web.add_user("root", Role.admin)
    web.add_user("rita", Role.reviewer)
    c = web.client()
    assert c.post("/api/snapshots", json={"campaign_id": cid}).status_code == 401
    r = c.post(
        "/api/snapshots",
        json={"campaign_id": cid},
        headers=bearer(web.token("rita", ("reviewer",))),
    )
    assert r.status_code == 403
    admin = bearer(web.token("root", ("admin",)))
    r = c.post(
        "/api/snapshots",
        json={"campaign_id": cid, "wait": True, "force": True, "streams": ["reviewed_only"]},
        headers=admin,
    )
    assert r.status_code == 200
    (outcome,) = r.json()["outcomes"]
    assert outcome["stream"] == "reviewed_only" and outcome["status"] == "created"
    assert latest(web, cid, "reviewed_only").id == outcome["snapshot_id"]
    r = c.post("/api/snapshots", json={"campaign_id": 4242}, headers=admin)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "campaign_id"
    r = c.post("/api/snapshots", json={"campaign_id": cid, "stream": "x"}, headers=admin)
    assert r.status_code == 422  # unknown field named
    r = c.post("/api/snapshots", json={"campaign_id": cid}, headers=admin)
    assert r.status_code == 202 and r.json()["queued"] is True
    assert web.app.state.web.snapshot_worker.wait_idle(120)
    listed = c.get(f"/api/snapshots?campaign_id={cid}", headers=admin).json()
    assert listed[0]["id"] == latest(web, cid, listed[0]["label_stream"]).id
    assert c.get("/api/snapshots/worker", headers=admin).json()["pending"] == []
    # the page's button
    login(c, "root")
    csrf = page_csrf(c, f"/leaderboard/{cid}")
    r = c.post(f"/leaderboard/{cid}/recompute", data={"csrf_token": csrf})
    assert r.status_code == 303 and r.headers["location"] == f"/leaderboard/{cid}"
    assert "Recomputing the leaderboard in the background" in c.get(f"/leaderboard/{cid}").text
    assert web.app.state.web.snapshot_worker.wait_idle(120)
    assert urlsplit(r.headers["location"]).path == f"/leaderboard/{cid}"


def test_a_snapshot_from_before_the_envelope_rate_shows_a_dash(
    web: Web, released: SeededCampaign
) -> None:
    """Snapshots stored before the analysis reported envelope interventions
    have no such key: the board shows it as not defined (not 0) until they
    are recomputed."""
    import copy

    with web.db() as s:
        row = service.latest_row(
            s, campaign_id=released.campaign_id, stream=LabelStream.auto_and_reviewed
        )
        old = copy.deepcopy(row.result)
        old["schema"] = "proctor.analysis/1"  # what such a snapshot says it is
        for p in old["policies"]:
            del p["failure_modes"]["envelope_interventions_per_episode"]
        row.result = old
    body = web.client().get(f"/api/leaderboard/{released.campaign_id}").json()
    assert all(
        r["envelope_interventions_per_episode"] == {"estimate": None, "lo": None, "hi": None}
        for r in body["rows"]
    )
    doc = parse(web.client().get(f"/leaderboard/{released.campaign_id}").text)
    cells = doc.find("table", id="board-table").find_all("td", data_cell="envelope")
    assert cells and {c.text().strip() for c in cells} == {"—"}


def test_the_unclear_verdict_and_old_snapshots_verdicts_render(
    web: Web, released: SeededCampaign
) -> None:
    """Issue 31: a pair whose KS rejects but whose Bonferroni-level ΔRMST
    interval holds 0 is "different, direction unclear" (verdict "unclear"),
    on the pair table and in the grid; a snapshot from before the change
    (no studentized fields, the old verdict values) still renders."""
    import copy

    with web.db() as s:
        row = service.latest_row(
            s, campaign_id=released.campaign_id, stream=LabelStream.auto_and_reviewed
        )
        new = copy.deepcopy(row.result)
        new["schema"] = "proctor.analysis/1"  # what such a snapshot says it is
        assert len(new["pairs"]) >= 3
        first, second, third = new["pairs"][:3]
        first.update(verdict="unclear", winner=None, significant=True, power=None)
        # the old snapshot shape: no method keys, no Bonferroni interval
        for q in (second, third):
            q["macro_ks"].pop("method")
            q["macro_ks"].pop("unstudentized")
            q["logrank"] = {k: q["logrank"][k] for k in ("chi2", "p", "p_bonferroni",
                                                         "observed_a", "expected_a")}  # fmt: skip
            q.pop("rmst_diff_bonferroni")
        second.update(verdict="better", winner=second["a"], significant=True)
        third.update(verdict="crossing", winner=None, significant=True)
        row.result = new
    body = web.client().get(f"/api/leaderboard/{released.campaign_id}").json()
    assert [p["verdict"] for p in body["pairs"][:3]] == ["unclear", "better", "crossing"]
    doc = parse(web.client().get(f"/leaderboard/{released.campaign_id}").text)
    rows = doc.find("table", id="pair-table").find_all("tr", data_pair=True)
    assert rows[0].get("data-verdict") == "unclear"
    assert "different, direction unclear" in rows[0].text()
    assert "the direction is not resolved" in rows[0].text()
    assert f"{second['a']} better" in rows[1].text()
    assert "crossing" in rows[2].text()
    grid = doc.find_all("td", class_="verdict-unclear")
    assert grid and all("≠" in td.text() for td in grid)


def test_p_values_print_their_floor_as_at_most() -> None:
    from proctor.web.leaderboard.format import at_resampling_floor, pvalue

    # 1999 resamples: the smallest p is 1/2000 = 0.0005; Bonferroni over 10 pairs: 0.005
    assert at_resampling_floor(1 / 2000, 1999) and not at_resampling_floor(2 / 2000, 1999)
    assert pvalue(10 / 2000, at_floor=True) == "≤ 0.005"
    assert pvalue(10 / 2000) == "0.005"
    assert pvalue(0.0004) == "< 0.001"
    assert pvalue(1 / 2000, at_floor=True) == "≤ 5.0e-04"
    assert not at_resampling_floor(0.0005, None)  # no resamples recorded: never claimed


def test_a_view_with_too_few_episodes_a_cell_ranks_no_one(web: Web) -> None:
    """Three episodes a cell, a third of them never reviewed: the reviewed-only
    view has two a cell, below the three a rank needs. Its rows stay, greyed,
    with no rank and the reason; the default view ranks them."""
    from proctor.web.leaderboard.schemas import MIN_EPISODES_TO_RANK

    with web.db() as s:
        seeded = seed_campaign(
            s, released=True, episodes_per_cell=MIN_EPISODES_TO_RANK, seed=5, streams=ALL_STREAMS
        )
    c = web.client()
    cid = seeded.campaign_id
    full = parse(c.get(f"/leaderboard/{cid}").text)
    rows = full.find("table", id="board-table").find_all("tr", data_policy=True)
    ranks = [r.find("td", data_key="rank").text() for r in rows]
    assert ranks[1:] == [str(k) for k in range(1, len(rows))], ranks  # the reference first
    assert full.find_all("p", data_rank_withheld=True) == []

    thin = parse(c.get(f"/leaderboard/{cid}?stream=reviewed_only").text)
    rows = thin.find("table", id="board-table").find_all("tr", data_policy=True)
    policies = [r for r in rows if "reference" not in (r.get("class") or "")]
    assert policies
    for r in policies:
        assert r.find("td", data_key="rank").text() == "—"
        assert "unranked" in r.get("class", "")
        assert f"a rank needs {MIN_EPISODES_TO_RANK}" in r.get("title", "")
    notes = thin.find_all("p", data_rank_withheld=True)
    assert {n.get("data-rank-withheld") for n in notes} == {r.get("data-policy") for r in policies}
    body = c.get(f"/api/leaderboard/{cid}?stream=reviewed_only").json()
    withheld = [row["rank_withheld"] for row in body["rows"] if not row["reference"]]
    assert all(w and "episode(s) on" in w for w in withheld), withheld


def test_the_scores_table_explains_itself_on_the_page(web: Web, released: SeededCampaign) -> None:
    """Every column and mark is defined in text on the page (touch screens and
    skimmers never see hover titles)."""
    from proctor.analysis.metrics import METRICS

    doc = parse(web.client().get(f"/leaderboard/{released.campaign_id}").text)
    legend = doc.find("details", id="scores-legend")
    assert legend.get("open") is not None
    text = legend.text()
    shown = [m for m in METRICS if legend.find_all("dt", data_legend=m.name)]
    assert shown, "no metric defined"
    for m in shown:
        assert m.description in text, m.name
    header = [th.text() for th in doc.find("table", id="board-table").find_all("th", scope="col")]
    for m in shown:
        assert m.label in header, m.label  # the legend defines the columns the table has
    for word in ("Rank", "Group", "compact letter display", "Bonferroni", "⚠"):
        assert word in text, word
