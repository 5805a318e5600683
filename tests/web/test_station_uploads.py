"""The station API's artifact uploads through the real app: a station's own
token, its own episode; parts through the server on a local store, and
straight to an S3-compatible store (moto's server in a process of its own)
at presigned URLs, sent by a process that holds no store credentials."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import sqlalchemy as sa

from proctor.core import station_credentials
from proctor.core.artifacts.multipart import multipart_for
from proctor.core.audit import Actor
from proctor.core.db.models import Artifact, AuditLog, StationUpload
from proctor.core.domain import Role
from proctor.core.settings import SchedulerSettings, load_settings
from proctor.core.station_api_wire import API_PREFIX, UploadPlan
from proctor.scheduler.station_sweeps import SweepPass
from proctor.scheduler.station_uploads import multipart_of
from proctor.station.uplink.upload import send_parts
from tests import factories
from tests.browser import LiveServer
from tests.moto_s3 import CREDENTIALS, moto_s3, presigned_for_host
from tests.web.conftest import Web, web_app

PART = SchedulerSettings().upload_part_bytes
DATA = os.urandom(2 * PART + 4321)
SHA = hashlib.sha256(DATA).hexdigest()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def enrol(web: Web, name: str) -> str:
    with web.db() as s:
        issued = station_credentials.enrol(
            s, name=name, profile="sim", actor=Actor(label="test"), now=web.clock()
        )
    return issued.token


def episode_of(web: Web, station: str) -> str:
    with web.db() as s:
        from proctor.core.db.models import Station

        row = s.scalar(sa.select(Station).where(Station.name == station))
        assert row is not None
        return factories.episode(s, factories.object_type(s), station_id=row.id).uid


def declaration(uid: str, sha: str = SHA, size: int = len(DATA), **kw: Any) -> dict[str, Any]:
    return {"episode_uid": uid, "sha256": sha, "size_bytes": size, "kind": "video"} | kw


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "exterior.mp4"
    path.write_bytes(DATA)
    return path


def artifacts(web: Web) -> list[tuple[int | None, str, int, str]]:
    with web.db() as s:
        rows = s.scalars(sa.select(Artifact).order_by(Artifact.id))
        return [(a.episode_id, a.sha256, a.size_bytes, a.uri) for a in rows]


def test_a_station_uploads_through_the_server_to_a_local_store(web: Web, payload: Path) -> None:
    token = enrol(web, "cell-a")
    uid = episode_of(web, "cell-a")
    c = web.client()
    begun = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(token))
    assert begun.status_code == 200, begun.text
    plan = UploadPlan.model_validate(begun.json())
    assert [(p.number, p.auth) for p in plan.parts] == [(1, "server"), (2, "server"), (3, "server")]
    assert plan.parts[0].url.startswith("http://testserver/api/station/v1/uploads/")

    # the link drops after part 1; a begin again resumes with parts 2 and 3
    first = UploadPlan.model_validate(plan.model_dump() | {"parts": [plan.parts[0].model_dump()]})
    send_parts(c, first, payload, server_headers=bearer(token))
    again = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(token))
    resumed = UploadPlan.model_validate(again.json())
    assert resumed.upload_id == plan.upload_id
    assert resumed.received == [1] and [p.number for p in resumed.parts] == [2, 3]
    assert list(resumed.received_etags) == [1]
    sent: list[int] = []
    parts = send_parts(c, resumed, payload, server_headers=bearer(token), progress=sent.append)
    assert sent == [PART, len(DATA) - 2 * PART]
    assert [p.number for p in parts] == [1, 2, 3]

    done_url = f"{API_PREFIX}/uploads/{plan.upload_id}/complete"
    body = {"parts": [p.model_dump() for p in parts]}
    done = c.post(done_url, json=body, headers=bearer(token))
    assert done.status_code == 200, done.text
    assert done.json() == {"sha256": SHA, "size_bytes": len(DATA), "registered": True}
    store = web.app.state.web.store
    assert store.read_bytes(SHA) == DATA
    # replays: the same answers, one artifact row
    assert c.post(done_url, json=body, headers=bearer(token)).json() == done.json()
    replay = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(token))
    assert replay.json()["complete"] is True and replay.json()["parts"] == []
    again_plan = c.get(f"{API_PREFIX}/uploads/{plan.upload_id}", headers=bearer(token))
    assert again_plan.json()["complete"] is True
    [(episode_id, sha, size, uri)] = artifacts(web)
    assert (sha, size, uri) == (SHA, len(DATA), store.uri_for(SHA))
    with web.db() as s:
        [row] = s.scalars(sa.select(StationUpload))
        assert row.state.value == "complete" and row.episode_id == episode_id


def test_two_artifacts_with_the_same_bytes_are_two_rows_sent_once(web: Web, payload: Path) -> None:
    """The frame tables of two cameras at one rate are often byte-identical: the
    second is registered as its own row, without its bytes being sent again
    (the store holds them, verified when they came), and a size that differs
    from the registered bytes' is refused."""
    token = enrol(web, "cell-a")
    uid = episode_of(web, "cell-a")
    c = web.client()
    exterior = declaration(uid, kind="frame_index", camera="exterior")
    plan = UploadPlan.model_validate(
        c.post(f"{API_PREFIX}/uploads", json=exterior, headers=bearer(token)).json()
    )
    parts = send_parts(c, plan, payload, server_headers=bearer(token))
    body = {"parts": [p.model_dump() for p in parts]}
    done = c.post(
        f"{API_PREFIX}/uploads/{plan.upload_id}/complete", json=body, headers=bearer(token)
    )
    assert done.status_code == 200, done.text
    wrist = declaration(uid, kind="frame_index", camera="wrist")
    second = c.post(f"{API_PREFIX}/uploads", json=wrist, headers=bearer(token))
    assert second.status_code == 200, second.text
    assert second.json()["complete"] is True and second.json()["parts"] == []
    # asked again (a station that lost the answer): still two rows
    c.post(f"{API_PREFIX}/uploads", json=wrist, headers=bearer(token))
    with web.db() as s:
        rows = s.execute(
            sa.select(Artifact.kind, Artifact.camera, Artifact.sha256).order_by(Artifact.id)
        ).all()
    assert [(k.value, cam, sha) for k, cam, sha in rows] == [
        ("frame_index", "exterior", SHA),
        ("frame_index", "wrist", SHA),
    ]
    lying = declaration(uid, size=len(DATA) + 1, kind="video", camera="wrist")
    refused = c.post(f"{API_PREFIX}/uploads", json=lying, headers=bearer(token))
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "size_bytes"]


def test_a_part_is_bounded_and_belongs_to_its_station(web: Web, payload: Path) -> None:
    token = enrol(web, "cell-a")
    other = enrol(web, "cell-b")
    uid = episode_of(web, "cell-a")
    c = web.client()
    plan = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(token)).json()
    part = f"{API_PREFIX}/uploads/{plan['upload_id']}/parts/3"
    too_long = c.put(part, content=DATA[-5000:], headers=bearer(token))
    assert too_long.status_code == 413 and too_long.json()["detail"].startswith("part:")
    for method, path, kw in [
        ("PUT", part, {"content": DATA[-4321:]}),
        ("GET", f"{API_PREFIX}/uploads/{plan['upload_id']}", {}),
        ("POST", f"{API_PREFIX}/uploads/{plan['upload_id']}/complete", {"json": {"parts": []}}),
    ]:
        r = c.request(method, path, headers=bearer(other), **kw)
        assert r.status_code == 403, (method, path, r.text)
        assert r.json()["detail"][0]["loc"] == ["body", "upload_id"]
    # cell-b may not upload for cell-a's episode, nor for an episode nobody has
    theirs = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(other))
    assert theirs.status_code == 403 and theirs.json()["detail"][0]["loc"][-1] == "episode_uid"
    unknown = c.post(
        f"{API_PREFIX}/uploads", json=declaration("nosuchepisode1"), headers=bearer(other)
    )
    assert unknown.status_code == 404 and unknown.json()["detail"][0]["loc"][-1] == "episode_uid"
    bad_kind = c.post(
        f"{API_PREFIX}/uploads", json=declaration(uid, kind="movie"), headers=bearer(token)
    )
    assert bad_kind.status_code == 422 and bad_kind.json()["detail"][0]["loc"][-1] == "kind"
    huge = declaration(uid, sha="0" * 64, size=web.settings.scheduler.upload_max_bytes + 1)
    too_big = c.post(f"{API_PREFIX}/uploads", json=huge, headers=bearer(token))
    assert too_big.status_code == 422 and too_big.json()["detail"][0]["loc"][-1] == "size_bytes"
    # a web user's API token is no station's
    web.add_user("root", Role.admin)
    user = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(web.token("root")))
    assert user.status_code == 401
    assert artifacts(web) == []


def test_parts_that_do_not_hash_to_the_declaration_register_nothing(
    web: Web, payload: Path
) -> None:
    token = enrol(web, "cell-a")
    uid = episode_of(web, "cell-a")
    c = web.client()
    wrong = hashlib.sha256(b"not these bytes").hexdigest()
    plan = UploadPlan.model_validate(
        c.post(f"{API_PREFIX}/uploads", json=declaration(uid, sha=wrong), headers=bearer(token))
        .raise_for_status()
        .json()
    )
    parts = send_parts(c, plan, payload, server_headers=bearer(token))
    done = c.post(
        f"{API_PREFIX}/uploads/{plan.upload_id}/complete",
        json={"parts": [p.model_dump() for p in parts]},
        headers=bearer(token),
    )
    assert done.status_code == 422 and done.json()["detail"][0]["loc"][-1] == "sha256"
    store = web.app.state.web.store
    assert not store.exists(wrong) and not store.exists(SHA)
    assert artifacts(web) == []
    with web.db() as s:
        [row] = s.scalars(sa.select(StationUpload))
        assert row.state.value == "aborted"
    # a new begin starts afresh
    fresh = c.post(f"{API_PREFIX}/uploads", json=declaration(uid, sha=wrong), headers=bearer(token))
    assert fresh.json()["upload_id"] != plan.upload_id and fresh.json()["received"] == []


# -- abandoned uploads: the app's sweep aborts them ---------------------------------


def _abandon_and_come_back(web: Web, parts_client: httpx.Client, payload: Path) -> tuple[str, str]:
    """An upload with one part in, left: still open a little before
    ``upload_abandon_s``, aborted by the sweep after it (in the store too,
    audit-logged); the station that comes back is told so by field, and its
    begin starts afresh. The fresh upload's id."""
    token = enrol(web, "cell-a")
    uid = episode_of(web, "cell-a")
    c = web.client()
    begun = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(token))
    plan = UploadPlan.model_validate(begun.raise_for_status().json())
    first = UploadPlan.model_validate(plan.model_dump() | {"parts": [plan.parts[0].model_dump()]})
    send_parts(parts_client, first, payload, server_headers=bearer(token))
    with web.db() as s:
        upload = multipart_of(s.get_one(StationUpload, plan.upload_id))
    backend = multipart_for(web.app.state.web.store)
    assert backend.in_progress(upload) and list(backend.received_parts(upload)) == [1]
    sweep = web.app.state.web.station_sweep
    web.clock.advance(seconds=web.settings.scheduler.upload_abandon_s - 60)
    assert sweep.run_once() == SweepPass(released=[], aborted=[])
    assert backend.in_progress(upload)
    web.clock.advance(seconds=120)
    assert sweep.run_once() == SweepPass(released=[], aborted=[plan.upload_id])
    assert not backend.in_progress(upload)
    assert sweep.run_once() == SweepPass(released=[], aborted=[])
    with web.db() as s:
        row = s.get_one(StationUpload, plan.upload_id)
        assert (row.state.value, row.completed_at) == ("aborted", web.clock())
        [audit] = s.scalars(sa.select(AuditLog).where(AuditLog.actor_label == "scheduler:uploads"))
        assert (audit.action, audit.target_id) == ("station_upload.abandoned", plan.upload_id)
    again = c.get(f"{API_PREFIX}/uploads/{plan.upload_id}", headers=bearer(token))
    assert again.status_code == 409 and "upload_id" in again.text
    fresh = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(token))
    assert fresh.json()["upload_id"] != plan.upload_id and fresh.json()["received"] == []
    assert len(fresh.json()["parts"]) == 3
    return str(fresh.json()["upload_id"])


def test_the_sweep_aborts_an_abandoned_upload_in_a_local_store(web: Web, payload: Path) -> None:
    fresh = _abandon_and_come_back(web, web.client(), payload)
    # the staged parts are gone: only the fresh upload's folder is left
    uploads = Path(web.settings.artifacts_location) / "uploads"
    assert sorted(p.name for p in uploads.iterdir()) == [fresh]


# -- the S3 path: the app's store is a bucket, the parts never reach the app ------


_UPLOADER = """
import json, sys
from pathlib import Path
import httpx
from proctor.station.uplink.upload import send_parts
from proctor.core.station_api_wire import UploadPlan
plan = UploadPlan.model_validate_json(sys.argv[1])
with httpx.Client(trust_env=False) as client:
    parts = send_parts(client, plan, Path(sys.argv[2]), server_headers={})
print(json.dumps([p.model_dump() for p in parts]))
"""


@pytest.fixture
def s3_web(
    request: pytest.FixtureRequest,
    web_db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Web]:
    """The app on an S3 store at 127.0.0.1; with the parameter "public", the
    stations' name for the store is ``localhost`` (artifacts_public_endpoint)."""

    with moto_s3() as endpoint:
        public = endpoint.replace("127.0.0.1", "localhost")
        extra = {"artifacts_public_endpoint": public} if getattr(request, "param", "") else {}
        # the server's credentials and endpoint, from its environment only
        for key, value in CREDENTIALS.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        from s3fs import S3FileSystem

        # fsspec reuses a filesystem made with the same options: one made for
        # another test's server (another port) must not answer for this one
        S3FileSystem.clear_instance_cache()
        settings = load_settings(
            env="test",
            data_dir=tmp_path,
            database_url=web_db_url,
            secret_key="test-secret-key-" + "x" * 32,
            artifacts="s3://proctor/site",
            **extra,
        )
        yield from web_app(settings)


def test_a_station_uploads_straight_to_an_s3_store(s3_web: Web, payload: Path) -> None:
    plan = upload_straight_to_s3(s3_web, payload)
    assert all(p.url.startswith(os.environ["AWS_ENDPOINT_URL"] + "/") for p in plan.parts)


@pytest.mark.parametrize("s3_web", ["public"], indirect=True)
def test_part_urls_name_and_are_signed_for_the_stores_public_endpoint(
    s3_web: Web, payload: Path
) -> None:
    """The server reaches the store at 127.0.0.1, stations at localhost: the
    plan's URLs are made for localhost (the signature too: moto checks none,
    so ``presigned_for_host`` recomputes it), and the upload through them
    completes and verifies."""
    public = s3_web.settings.artifacts_public_endpoint
    assert public is not None and public != os.environ["AWS_ENDPOINT_URL"]
    plan = upload_straight_to_s3(s3_web, payload)
    public_host = urlsplit(public).netloc
    server_host = urlsplit(os.environ["AWS_ENDPOINT_URL"]).netloc
    for part in plan.parts:
        assert part.url.startswith(public + "/")
        assert presigned_for_host(part.url, public_host)
        assert not presigned_for_host(part.url, server_host)


def upload_straight_to_s3(web: Web, payload: Path) -> UploadPlan:
    """A station's upload at the plan's presigned URLs, sent by a process with
    no store credentials; completed, verified and registered. The plan."""
    token = enrol(web, "cell-a")
    uid = episode_of(web, "cell-a")
    c = web.client()
    begun = c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(token))
    assert begun.status_code == 200, begun.text
    plan = UploadPlan.model_validate(begun.json())
    assert {p.auth for p in plan.parts} == {"store"}
    assert "/proctor/site/uploads/" in plan.parts[0].url

    # the station host: a process of its own with no store credentials at all
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    sent = subprocess.run(
        [sys.executable, "-c", _UPLOADER, plan.model_dump_json(), str(payload)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert sent.returncode == 0, sent.stderr
    parts = json.loads(sent.stdout)
    assert [p["number"] for p in parts] == [1, 2, 3]
    done = c.post(
        f"{API_PREFIX}/uploads/{plan.upload_id}/complete",
        json={"parts": parts},
        headers=bearer(token),
    )
    assert done.status_code == 200, done.text
    store = web.app.state.web.store
    assert store.uri_for(SHA) == f"s3://proctor/site/objects/{SHA[:2]}/{SHA}"
    assert store.read_bytes(SHA) == DATA
    assert [a[1:] for a in artifacts(web)] == [(SHA, len(DATA), store.uri_for(SHA))]
    assert not store.fs.exists("proctor/site/uploads/" + plan.upload_id)
    return plan


def test_the_sweep_aborts_an_abandoned_upload_in_an_s3_store(s3_web: Web, payload: Path) -> None:
    # the station host's own client: the presigned URLs need no credentials
    with httpx.Client(trust_env=False) as parts_client:
        fresh = _abandon_and_come_back(s3_web, parts_client, payload)
    backend = multipart_for(s3_web.app.state.web.store)
    listed = backend.client.list_multipart_uploads(Bucket="proctor")  # type: ignore[attr-defined]
    assert [u["Key"] for u in listed.get("Uploads", [])] == [f"site/uploads/{fresh}"]


def test_parts_stream_through_a_live_server(
    start_live_server: Callable[..., LiveServer], payload: Path
) -> None:
    """Over real HTTP (uvicorn on loopback): part URLs are this server's own,
    a chunked part streams into the store, and one longer than its part is
    refused naming ``part`` with nothing kept."""
    server = start_live_server()
    with server.db() as s:
        token = station_credentials.enrol(s, name="cell-a", profile="sim", actor=Actor(label="t"))
        episode = factories.episode(s, factories.object_type(s), station_id=token.station_id)
        uid = episode.uid
    auth = bearer(token.token)
    with httpx.Client(base_url=server.base_url, timeout=60, trust_env=False) as c:
        plan = UploadPlan.model_validate(
            c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=auth)
            .raise_for_status()
            .json()
        )
        assert (
            plan.parts[0].url == f"{server.base_url}{API_PREFIX}/uploads/{plan.upload_id}/parts/1"
        )

        def chunks(data: bytes) -> Iterator[bytes]:
            for i in range(0, len(data), 65536):
                yield data[i : i + 65536]

        long = c.put(plan.parts[0].url, content=chunks(DATA[: PART + 1]), headers=auth)
        assert long.status_code == 422 and long.json()["detail"][0]["loc"][-1] == "part"
        kept = c.get(f"{API_PREFIX}/uploads/{plan.upload_id}", headers=auth).json()
        assert kept["received"] == [] and len(kept["parts"]) == 3
        first = c.put(plan.parts[0].url, content=chunks(DATA[:PART]), headers=auth)
        assert first.status_code == 200, first.text
        assert first.headers["etag"] == f'"{hashlib.sha256(DATA[:PART]).hexdigest()}"'
        rest = UploadPlan.model_validate(
            c.get(f"{API_PREFIX}/uploads/{plan.upload_id}", headers=auth).json()
        )
        assert rest.received == [1] and [p.number for p in rest.parts] == [2, 3]
        parts = send_parts(c, rest, payload, server_headers=auth)
        done = c.post(
            f"{API_PREFIX}/uploads/{plan.upload_id}/complete",
            json={"parts": [p.model_dump() for p in parts]},
            headers=auth,
        )
        assert done.status_code == 200, done.text
    assert server.app.state.web.store.read_bytes(SHA) == DATA


def test_generated_requests_from_a_station_never_get_a_server_error(web: Web) -> None:
    """Schemathesis against the four upload operations, with a live station
    token and an episode of that station that a generated uid may name."""
    import warnings

    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis.checks import not_a_server_error

    token = enrol(web, "cell-a")
    episode_of(web, "cell-a")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # other domains' duplicate operation ids
        schema = schemathesis.openapi.from_asgi("/api/openapi.json", web.app)
    operations = [
        op
        for op in (result.ok() for result in schema.get_all_operations())
        if op.path.startswith("/api/station/v1/uploads")
    ]
    assert len(operations) == 4
    for operation in operations:

        @settings(
            max_examples=25,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            case.call_and_validate(headers=bearer(token), checks=[not_a_server_error])

        call()


def test_a_completion_whose_transaction_was_lost_is_registered_on_replay(
    web: Web, payload: Path
) -> None:
    """The server verified and addressed the object, then its transaction did
    not commit (a crash, a lost database): the station's replay registers it,
    with nothing to send again."""
    from proctor.scheduler import station_uploads

    token = enrol(web, "cell-a")
    uid = episode_of(web, "cell-a")
    c = web.client()
    plan = UploadPlan.model_validate(
        c.post(f"{API_PREFIX}/uploads", json=declaration(uid), headers=bearer(token)).json()
    )
    parts = send_parts(c, plan, payload, server_headers=bearer(token))
    store = web.app.state.web.store

    class Lost(Exception):
        pass

    with pytest.raises(Lost), web.db() as s:
        row = s.get(StationUpload, plan.upload_id)
        assert row is not None
        station_uploads.complete(
            s,
            store,
            station_id=row.station_id,
            upload_id=plan.upload_id,
            parts=parts,
            now=web.clock(),
        )
        raise Lost  # the transaction rolls back: no artifact row, the upload open
    assert store.exists(SHA) and artifacts(web) == []
    done = c.post(
        f"{API_PREFIX}/uploads/{plan.upload_id}/complete",
        json={"parts": [p.model_dump() for p in parts]},
        headers=bearer(token),
    )
    assert done.status_code == 200, done.text
    assert [a[1] for a in artifacts(web)] == [SHA]


def test_a_part_size_the_web_would_refuse_as_a_body_is_a_settings_error(tmp_path: Path) -> None:
    from proctor.core.errors import ConfigError

    with pytest.raises((ConfigError, ValueError), match="upload_part_bytes"):
        load_settings(
            env="test",
            data_dir=tmp_path,
            scheduler={"upload_part_bytes": 64 * 2**20},
            web={"max_upload_chunk_bytes": 32 * 2**20},
        )
    assert load_settings(env="test", data_dir=tmp_path).scheduler.upload_part_bytes == PART


def test_a_production_server_on_s3_is_refused_parts_s3_would_refuse(tmp_path: Path) -> None:
    """S3 (and MinIO) refuse every part but the last under 5 MiB; smaller parts
    are for a local store or a test server told to accept them."""
    from proctor.core.errors import ConfigError

    small = {"upload_part_bytes": 64 * 2**10}
    secret = "s" * 64
    with pytest.raises((ConfigError, ValueError), match="5 MiB"):
        load_settings(
            env="prod",
            secret_key=secret,
            data_dir=tmp_path,
            artifacts="s3://bucket/proctor",
            scheduler=small,
        )
    # the same size for a production server on a local folder, or a test on S3
    local = load_settings(env="prod", secret_key=secret, data_dir=tmp_path, scheduler=small)
    assert local.scheduler.upload_part_bytes == 64 * 2**10
    test = load_settings(
        env="test", data_dir=tmp_path, artifacts="s3://bucket/proctor", scheduler=small
    )
    assert test.scheduler.upload_part_bytes == 64 * 2**10
