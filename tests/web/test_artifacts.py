"""Artifact bytes by sha256 (Range, ETag, access rules) and the recording
JSON endpoints (frame tables, downsampled telemetry), over real recordings
made by the station's recorder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from proctor.core.db.models import Artifact, Episode
from proctor.core.domain import ArtifactKind, Role
from proctor.core.recording import keys
from tests.web.conftest import Web
from tests.web.leaderboard_data import seed_campaign
from tests.web.recordings import RecordingSpec, record_episode

SPEC = RecordingSpec(duration_s=8.0, fps=10, picks_s=(2.0, 5.0))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _recorded(web: Web, tmp_path: Path, *, released: bool, seed: int) -> tuple[str, dict[str, str]]:
    """A campaign with one recorded episode; returns its uid and artifact shas."""
    with web.db() as s:
        seeded = seed_campaign(s, released=released, episodes_per_cell=2, compute=False)
        uid = seeded.episode_uids[0]
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        ep.clock_start_s = SPEC.clock_start_s
        episode_id = ep.id
    archived = record_episode(
        sessions=web.app.state.web.session_factory,
        store=web.app.state.web.store,
        episode_id=episode_id,
        spool=tmp_path / f"spool-{uid}",
        spec=SPEC,
        seed=seed,
    )
    return uid, archived.shas


@pytest.fixture
def recorded(web: Web, tmp_path: Path) -> dict[str, tuple[str, dict[str, str]]]:
    web.add_user("rita", Role.reviewer)
    web.add_user("sam", Role.submitter)
    web.add_user("root", Role.admin)
    return {
        "public": _recorded(web, tmp_path, released=True, seed=1),
        "blinded": _recorded(web, tmp_path, released=False, seed=2),
    }


def test_video_bytes_with_ranges_and_etags(web: Web, recorded) -> None:
    _, shas = recorded["public"]
    sha = shas["video:exterior"]
    data = Path(web.app.state.web.store.local_path(sha)).read_bytes()
    c = web.client()

    r = c.get(f"/api/artifacts/{sha}")
    assert r.status_code == 200 and r.content == data
    assert r.headers["content-type"] == "video/mp4"
    assert r.headers["accept-ranges"] == "bytes"
    assert r.headers["etag"] == f'"{sha}"'
    assert r.headers["cache-control"].startswith("public")
    assert "exterior" in r.headers["content-disposition"]

    r = c.get(f"/api/artifacts/{sha}", headers={"Range": "bytes=100-299"})
    assert r.status_code == 206
    assert r.content == data[100:300]
    assert r.headers["content-range"] == f"bytes 100-299/{len(data)}"

    r = c.get(f"/api/artifacts/{sha}", headers={"Range": "bytes=-64"})
    assert r.status_code == 206 and r.content == data[-64:]

    r = c.get(f"/api/artifacts/{sha}", headers={"Range": f"bytes={len(data) + 10}-"})
    assert r.status_code == 416

    r = c.get(f"/api/artifacts/{sha}", headers={"If-None-Match": f'"{sha}"'})
    assert r.status_code == 304 and r.content == b""

    r = c.head(f"/api/artifacts/{sha}")
    assert r.status_code == 200 and int(r.headers["content-length"]) == len(data)

    r = c.get(f"/api/artifacts/{sha}?download=true")
    assert r.headers["content-disposition"].startswith("attachment;")


def test_blinded_recordings_are_staff_only(web: Web, recorded) -> None:
    uid, shas = recorded["blinded"]
    sha = shas["video:wrist"]
    c = web.client()
    unknown = c.get("/api/artifacts/" + "0" * 64)
    assert unknown.status_code == 404
    for headers in ({}, bearer(web.token("sam", ("submitter",)))):
        r = c.get(f"/api/artifacts/{sha}", headers=headers)
        assert r.status_code == 404
        assert r.json() == unknown.json()  # hidden looks exactly like unknown
        assert c.get(f"/api/episodes/{uid}/telemetry", headers=headers).status_code == 404
        assert c.get(f"/api/episodes/{uid}/frames/exterior", headers=headers).status_code == 404
    reviewer = bearer(web.token("rita", ("reviewer",)))
    r = c.get(f"/api/artifacts/{sha}", headers=reviewer)
    assert r.status_code == 200 and r.headers["cache-control"] == "private, no-cache"
    assert c.get(f"/api/episodes/{uid}/telemetry", headers=reviewer).status_code == 200


def test_checkpoints_are_for_admins_only(web: Web, recorded) -> None:
    uid, _ = recorded["public"]
    stored = web.app.state.web.store.put_bytes(b"weights of a released policy")
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        s.add(
            Artifact(
                episode_id=ep.id,
                kind=ArtifactKind.checkpoint,
                uri=stored.uri,
                sha256=stored.sha256,
                size_bytes=stored.size_bytes,
            )
        )
    c = web.client()
    path = f"/api/artifacts/{stored.sha256}"
    assert c.get(path).status_code == 404
    assert c.get(path, headers=bearer(web.token("rita", ("reviewer",)))).status_code == 404
    r = c.get(path, headers=bearer(web.token("root", ("admin",))))
    assert r.status_code == 200 and r.content == b"weights of a released policy"


def test_bad_ids_name_the_field(web: Web) -> None:
    c = web.client()
    r = c.get("/api/artifacts/NOT-A-HASH")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "sha256"]
    r = c.get("/api/episodes/no such episode/telemetry")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "uid"]
    assert c.get("/api/episodes/abcdef0123456789/telemetry").status_code == 404


def test_frame_table_matches_the_recording(web: Web, recorded) -> None:
    uid, shas = recorded["public"]
    r = web.client().get(f"/api/episodes/{uid}/frames/exterior")
    assert r.status_code == 200
    body = r.json()
    n = int(SPEC.duration_s * SPEC.fps)
    assert body["frames"] == n and body["frame"] == list(range(n))
    np.testing.assert_allclose(body["pts_s"], np.arange(n) / SPEC.fps, atol=1e-4)
    assert body["video_sha256"] == shas["video:exterior"]
    assert web.client().get(f"/api/episodes/{uid}/frames/overhead").status_code == 404


def test_telemetry_columns_and_downsampling_keep_the_extremes(web: Web, recorded) -> None:
    uid, shas = recorded["public"]
    table = pq.read_table(web.app.state.web.store.local_path(shas["telemetry"]))
    c = web.client()

    full = c.get(f"/api/episodes/{uid}/telemetry", params={"max_points": 20000}).json()
    assert full["downsampled"] is False and full["rows"] == table.num_rows
    assert full["t"][0] == pytest.approx(0.0)
    assert full["t"][-1] == pytest.approx(table.column(keys.T)[-1].as_py() - SPEC.clock_start_s)
    assert set(full["columns"]) >= {keys.GRIPPER_TARGET, keys.EE_Z, keys.POLICY_LATENCY}
    assert full["columns"][keys.POLICY_LATENCY][0] is None  # NaN before the first call
    assert full["units"][keys.EE_SPEED] == "m/s"

    small = c.get(
        f"/api/episodes/{uid}/telemetry",
        params={"max_points": 60, "columns": f"{keys.GRIPPER_TARGET},{keys.EE_Z}"},
    ).json()
    assert small["downsampled"] is True and len(small["t"]) == 60
    assert set(small["columns"]) == {keys.GRIPPER_TARGET, keys.EE_Z}
    z = table.column(keys.EE_Z).to_numpy()
    assert min(small["columns"][keys.EE_Z]) == pytest.approx(z.min(), abs=1e-5)
    assert max(small["columns"][keys.EE_Z]) == pytest.approx(z.max(), abs=1e-5)
    assert max(small["columns"][keys.GRIPPER_TARGET]) == 1.0
    assert small["t"] == sorted(small["t"])

    window = c.get(
        f"/api/episodes/{uid}/telemetry", params={"start": 2.0, "end": 3.0, "max_points": 1000}
    ).json()
    assert window["t"][0] >= 2.0 - 1e-9 and window["t"][-1] <= 3.0 + 1e-9
    assert window["rows"] == pytest.approx(SPEC.telemetry_hz, abs=2)

    bad = c.get(f"/api/episodes/{uid}/telemetry", params={"columns": "q0,secret_col"})
    assert bad.status_code == 422 and "columns" in bad.json()["detail"]
    bad = c.get(f"/api/episodes/{uid}/telemetry", params={"start": 3, "end": 2})
    assert bad.status_code == 422 and "end" in bad.json()["detail"]
