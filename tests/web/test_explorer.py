"""The run explorer's JSON and page, and the .rrd built from a real
recording (made by the station's recorder) — checked by ``rerun rrd
verify`` and against the video's own frame timestamps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa

from proctor.core.db.models import Artifact, Episode, ReviewAction
from proctor.core.domain import ArtifactKind, ReviewActionKind, Role
from proctor.web.explorer.rrd import RRD_FORMAT, verify_rrd
from tests.web.conftest import Web, login
from tests.web.html_tree import parse
from tests.web.leaderboard_data import SeededCampaign, seed_campaign
from tests.web.recordings import RecordingSpec, attach_recording

SPEC = RecordingSpec(duration_s=130.0, fps=5, width=160, height=120, telemetry_hz=50.0)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _recorded(web: Web, tmp_path: Path, *, released: bool, seed: int) -> tuple[SeededCampaign, str]:
    with web.db() as s:
        seeded = seed_campaign(s, released=released, episodes_per_cell=2, seed=seed)
    uid = seeded.episode_uids[1]
    attach_recording(
        sessions=web.app.state.web.session_factory,
        store=web.app.state.web.store,
        uid=uid,
        spool=tmp_path / f"spool-{uid}",
        spec=SPEC,
        seed=seed,
    )
    return seeded, uid


def test_the_episode_json_names_the_policy_only_after_release(web: Web, tmp_path: Path) -> None:
    web.add_user("rita", Role.reviewer)
    web.add_user("root", Role.admin)
    public, pub_uid = _recorded(web, tmp_path, released=True, seed=1)
    closed, closed_uid = _recorded(web, tmp_path, released=False, seed=2)
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == closed_uid))
        s.add(
            ReviewAction(
                episode_id=ep.id,
                reviewer_id=web.add_user("vic", Role.reviewer),
                action=ReviewActionKind.confirm,
                before={"t_s": 1.0},
                after={"t_s": 1.2},
            )
        )
    c = web.client()

    body = c.get(f"/api/episodes/{pub_uid}").json()
    assert body["policy"] == public.episode_policy[pub_uid] and body["released"] is True
    assert body["arm"] is None
    assert [cam["name"] for cam in body["cameras"]] == ["exterior", "wrist"]
    assert body["cameras"][0]["frames"] == int(SPEC.duration_s * SPEC.fps)
    assert body["telemetry_rows"] == int(SPEC.duration_s * SPEC.telemetry_hz)
    assert body["links"]["policy"].startswith(f"/leaderboard/{public.campaign_id}/policies/")
    assert {p["source"] for p in body["placements"]} == {"detector", "reviewer"} or body[
        "placements"
    ] == []
    assert body["events"][0]["kind"] == "started"

    assert c.get(f"/api/episodes/{closed_uid}").status_code == 404
    assert c.get(f"/episodes/{closed_uid}").status_code == 404
    rita = bearer(web.token("rita", ("reviewer",)))
    blind = c.get(f"/api/episodes/{closed_uid}", headers=rita).json()
    assert blind["policy"] is None and blind["arm"] is None and "policy" not in blind["links"]
    assert "vic" in {r["reviewer"] for r in blind["reviews"]}  # staff see who reviewed
    admin = c.get(
        f"/api/episodes/{closed_uid}", headers=bearer(web.token("root", ("admin",)))
    ).json()
    assert admin["policy"] is None and admin["arm"].startswith("arm ")
    page = c.get(f"/episodes/{closed_uid}", headers=rita)
    assert page.status_code == 200 and 'data-blinded="true"' in page.text
    assert closed.episode_policy[closed_uid] not in page.text

    # the page: both cameras, the events table, the .rrd link
    doc = parse(c.get(f"/episodes/{pub_uid}").text)
    videos = doc.find_all("video")
    assert [v.get("data-camera") for v in videos] == ["exterior", "wrist"]
    assert videos[0].get("src") == body["cameras"][0]["video_url"]
    # signed out, with no .rrd built yet: no link that would save a 401 as the file
    assert doc.find_all("a", id="rrd-download") == []
    assert doc.find("span", id="rrd-download").get("aria-disabled") == "true"
    assert "built when a signed-in user first asks for it" in doc.find(id="rrd-unbuilt").text()
    assert "rrd" not in body["links"]
    signed_in = parse(c.get(f"/episodes/{pub_uid}", headers=rita).text)
    assert signed_in.find("a", id="rrd-download").get("href") == f"/api/episodes/{pub_uid}/rrd"
    rows = doc.find("table", id="event-table").find_all("tr", data_marker_row=True)
    assert len(rows) == len(body["placements"]) + len(body["candidates"]) + sum(
        e["t_s"] is not None for e in body["events"]
    )


def test_the_rrd_is_built_from_the_recording_and_verifies(web: Web, tmp_path: Path) -> None:
    rr = pytest.importorskip("rerun", reason="the rerun extra is part of ./run test")
    _, uid = _recorded(web, tmp_path, released=True, seed=3)
    c = web.client()
    # anonymous requests never build one (each costs seconds of CPU and MBs of
    # disk); any signed-in user's does, and then everyone gets the built file
    r = c.get(f"/api/episodes/{uid}/rrd")
    assert r.status_code == 401 and "sign in to have it built" in r.json()["detail"]
    with web.db() as s:
        built = sa.select(sa.func.count()).select_from(Artifact)
        assert s.scalar(built.where(Artifact.kind == ArtifactKind.rrd)) == 0
    web.add_user("sam", Role.submitter)
    r = c.get(f"/api/episodes/{uid}/rrd", headers=bearer(web.token("sam", ("submitter",))))
    assert r.status_code == 200
    assert r.headers["content-disposition"] == f'attachment; filename="{uid}-rrd.rrd"'
    path = tmp_path / "episode.rrd"
    path.write_bytes(r.content)
    assert "verified" in verify_rrd(path)
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        rows = s.scalars(
            sa.select(Artifact).where(
                Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.rrd
            )
        ).all()
        assert len(rows) == 1 and rows[0].details["format"] == RRD_FORMAT
        assert rows[0].details["frames"] == {"exterior": 650, "wrist": 650}
        video = s.scalars(
            sa.select(Artifact).where(
                Artifact.episode_id == ep.id,
                Artifact.kind == ArtifactKind.video,
                Artifact.camera == "exterior",
            )
        ).one()
        video_path = web.app.state.web.store.local_path(video.sha256)
    # the frame references we log are the video's own timestamps
    table = c.get(f"/api/episodes/{uid}/frames/exterior").json()
    from_video = np.asarray(rr.AssetVideo(path=str(video_path)).read_frame_timestamps_nanos())
    np.testing.assert_array_equal(
        from_video, np.round(np.asarray(table["pts_s"]) * 1e9).astype(np.int64)
    )
    # built: the signed-out page now offers it
    doc = parse(c.get(f"/episodes/{uid}").text)
    assert doc.find("a", id="rrd-download").get("href") == f"/api/episodes/{uid}/rrd"
    # the second download (anonymous) is the stored file, not a rebuild
    again = c.get(f"/api/episodes/{uid}/rrd")
    assert again.content == r.content
    with web.db() as s:
        assert (
            s.scalar(
                sa.select(sa.func.count())
                .select_from(Artifact)
                .where(Artifact.kind == ArtifactKind.rrd)
            )
            == 1
        )
    # a range, as a download manager would ask
    part = c.get(f"/api/episodes/{uid}/rrd", headers={"Range": "bytes=0-15"})
    assert part.status_code == 206 and part.content == r.content[:16]


def test_unknown_and_unrecorded_episodes(web: Web) -> None:
    c = web.client()
    assert c.get("/api/episodes/0123456789abcdef").status_code == 404
    assert c.get("/episodes/0123456789abcdef").status_code == 404
    assert c.get("/api/episodes/bad%20uid").status_code == 422
    with web.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=1, compute=False)
    uid = seeded.episode_uids[0]
    body = c.get(f"/api/episodes/{uid}").json()
    assert body["cameras"] == [] and body["telemetry_sha256"] is None
    assert "No video was recorded" in c.get(f"/episodes/{uid}").text
    assert c.get(f"/api/episodes/{uid}/rrd").status_code == 401  # anonymous: nothing built
    web.add_user("sam", Role.submitter)
    r = c.get(f"/api/episodes/{uid}/rrd", headers=bearer(web.token("sam", ("submitter",))))
    assert r.status_code == 400 and "nothing was recorded" in r.json()["detail"]


def test_the_public_page_is_shared_with_anonymous_visitors_only(web: Web) -> None:
    from tests.web.cache_support import cache_of

    web.add_user("root", Role.admin)
    with web.db() as s:
        public = seed_campaign(s, released=True, episodes_per_cell=2, seed=11)
        closed = seed_campaign(s, released=False, episodes_per_cell=2, seed=12)
    uid, closed_uid = public.episode_uids[0], closed.episode_uids[0]
    page = f"/episodes/{uid}"
    cache = cache_of(web)
    cache.seconds = 30  # kept for the whole test, however slow the machine (max-age is 30)

    first = web.client().get(page)
    assert first.status_code == 200 and "set-cookie" not in first.headers
    assert first.headers["cache-control"] == "public, max-age=30"
    assert {v.strip() for v in first.headers["vary"].split(",")} == {"cookie", "authorization"}
    hits = cache.hits
    second = web.client().get(page)  # the next visitor: from memory, byte for byte
    assert cache.hits == hits + 1 and second.content == first.content

    # anyone signed in, or holding any session cookie, gets a page of their own
    admin = web.client()
    login(admin, "root")
    mine = admin.get(page)
    assert mine.status_code == 200 and mine.headers["cache-control"] == "private, no-cache"
    token = {"Authorization": f"Bearer {web.token('root', ('admin',))}"}
    by_token = web.client().get(page, headers=token)
    assert by_token.status_code == 200 and "public" not in by_token.headers["cache-control"]
    stale = web.client()
    stale.cookies.set("proctor_session", "not-a-session")
    assert "public" not in stale.get(page).headers["cache-control"]
    assert cache.hits == hits + 1
    # an unreleased episode (staff only) is never public
    blind = admin.get(f"/episodes/{closed_uid}")
    assert blind.status_code == 200 and blind.headers["cache-control"] == "private, no-cache"


def test_the_envelope_count_is_shown_and_an_uncounted_episode_says_so(
    web: Web, tmp_path: Path
) -> None:
    with web.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=2, seed=11)
        counted, uncounted = seeded.episode_uids[1], seeded.episode_uids[2]
        for uid, n in ((counted, 2), (uncounted, None)):
            s.scalar(sa.select(Episode).where(Episode.uid == uid)).envelope_interventions = n
    c = web.client()
    assert c.get(f"/api/episodes/{counted}").json()["envelope_interventions"] == 2
    assert c.get(f"/api/episodes/{uncounted}").json()["envelope_interventions"] is None
    doc = parse(c.get(f"/episodes/{uncounted}").text)
    assert doc.find("dd", data_fact="envelope").text().strip() == "not counted"
    assert doc.find_all("table", id="intervention-table") == []
    # counted by the station but not in the log (an older station's events): said plainly
    doc = parse(c.get(f"/episodes/{counted}").text)
    assert doc.find("dd", data_fact="envelope").text().strip() == "2 interventions"
    section = doc.find("table", id="intervention-table")
    assert "None in the episode's log." in section.text()
    assert "The station counted 2; 0 are in the episode's log." in doc.text()


def test_the_explorer_breaks_an_episode_down_by_policy_call(web: Web) -> None:
    with web.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=2, seed=5)
    c = web.client()
    bodies = {uid: c.get(f"/api/episodes/{uid}").json() for uid in seeded.episode_uids}
    tabled = {uid: b["calls"] for uid, b in bodies.items() if b["calls"] is not None}
    # the seeded tables (tests/web/leaderboard_data.py): every arm's episodes but the
    # reference's, four calls each, the third chunk two 15 Hz steps late in block 0
    assert 0 < len(tabled) < len(bodies)
    uid, calls = next((u, t) for u, t in tabled.items() if t["stale_actions"])
    assert [k["n"] for k in calls["calls"]] == [1, 2, 3, 4]
    third = calls["calls"][2]
    assert third["stale"] and third["late_ms"] == pytest.approx(2000 / 15, abs=1e-3)
    assert [k["stale"] for k in calls["calls"]] == [False, False, True, False]
    assert calls["stale_actions"] == 8 and calls["actions"] == 32
    assert [k["server_ms"] for k in calls["calls"]] == [12.0, None, 12.0, None]
    rtt = [k["round_trip_ms"] for k in calls["calls"]]
    assert calls["p50_ms"] == pytest.approx(float(np.quantile(rtt, 0.5)))
    doc = parse(c.get(f"/episodes/{uid}").text)
    rows = doc.find("table", id="call-table").find_all("tr", data_call=True)
    assert [r.get("data-call") for r in rows] == ["1", "2", "3", "4"]
    assert [r.get("class") == "stale" for r in rows] == [False, False, True, False]
    assert rows[2].find("td", data_key="late_ms").text() == "133.3"
    assert "8 of 32 actions stale" in doc.find("p", data_calls="summary").text()
    # an episode without a table has no breakdown
    bare = next(u for u, b in bodies.items() if b["calls"] is None)
    assert parse(c.get(f"/episodes/{bare}").text).find_all("section", id="policy-calls") == []


def test_staff_working_blind_do_not_see_the_policys_call_timings(web: Web) -> None:
    """Before release the per-call timings could single out an arm: reviewers
    get neither the breakdown nor the event's count; admins get both."""
    web.add_user("rita", Role.reviewer)
    web.add_user("root", Role.admin)
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=1, seed=6)
    c = web.client()
    admin = bearer(web.token("root", ("admin",)))
    uid = next(
        u
        for u in seeded.episode_uids
        if c.get(f"/api/episodes/{u}", headers=admin).json()["calls"] is not None
    )
    rita = c.get(f"/api/episodes/{uid}", headers=bearer(web.token("rita", ("reviewer",)))).json()
    assert rita["calls"] is None
    messages = {e["message"] for e in rita["events"] if e["kind"] == "policy_calls"}
    assert messages == {"the policy's calls were tabled"}
    full = c.get(f"/api/episodes/{uid}", headers=admin).json()
    assert {e["message"] for e in full["events"] if e["kind"] == "policy_calls"} == {
        "4 policy calls"
    }
