"""After a crash [L5]: each test writes the state a killed server leaves
behind, then starts the app (its lifespan runs ``proctor.web.startup``) and checks
what was put right — or, for an upload, that a PUT records its progress
while it is still running, so a crash mid-request keeps most of it."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from proctor.analysis.store import stale_campaigns
from proctor.annotator import review as svc
from proctor.core.db.models import UploadSession
from proctor.core.domain import LabelStream, Role
from proctor.web.startup import TEMP_SAFE_AGE_S
from tests.browser import LiveServer
from tests.web.conftest import Web
from tests.web.leaderboard_data import seed_campaign
from tests.web.review_support import WAIT_S, back_to_review, latest_snapshot, snapshot_worker
from tests.web.submissions_support import (
    begin,
    good_checkpoint,
    live_token,
    noise,
    portal_app,
    portal_settings,
    submitter,
)

HOUR_AGO = time.time() - 2 * TEMP_SAFE_AGE_S


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


def _start(web: Web) -> None:
    """Run the app's start-up (and shut-down) as a server would."""
    with TestClient(web.app):
        pass


def test_a_board_left_stale_by_a_crash_is_recomputed_at_start_up(web: Web) -> None:
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=41)
    cid = seeded.campaign_id
    uid = back_to_review(web, seeded, min_placed=2)
    before = latest_snapshot(web, cid, LabelStream.auto_and_reviewed)
    reviewer = svc.Reviewer(user_id=web.add_user("rev", Role.reviewer))
    # the review that finishes the episode commits; the process dies before the
    # recomputation it queued in memory runs (no after-commit hook here at all)
    with web.db() as s:
        state = svc.review_state(s, uid=uid)
        first, *rest = [x for x in state.candidates if x.verdict == "success"]
        svc.move(
            s, uid=uid, t_s=round(first.t_s + 0.25, 3), candidate_id=first.id, reviewer=reviewer
        )
        for x in rest:
            state = svc.confirm(s, uid=uid, candidate_id=x.id, reviewer=reviewer)
        assert state.label_status.value == "reviewed"
    with web.db() as s:
        assert stale_campaigns(s) == [cid]  # the board no longer matches its data
    worker = snapshot_worker(web)
    assert worker.wait_idle(WAIT_S) and worker.status().recent == []
    _start(web)
    assert worker.wait_idle(WAIT_S)
    [run] = worker.status().recent
    assert run.campaign_id == cid and run.error is None
    after = latest_snapshot(web, cid, LabelStream.auto_and_reviewed)
    assert after[0] > before[0] and after[1] != before[1]
    with web.db() as s:
        assert stale_campaigns(s) == []
    # a second start finds nothing to do
    _start(web)
    assert worker.wait_idle(WAIT_S) and len(worker.status().recent) == 1


def test_unfinished_artifact_writes_are_removed_at_start_up_once_old(web: Web) -> None:
    tmp = Path(web.settings.artifacts_location) / "tmp"
    old, fresh = tmp / "dead-writer.part", tmp / "live-writer.part"
    old.write_bytes(b"half a recording")
    os.utime(old, (HOUR_AGO, HOUR_AGO))
    fresh.write_bytes(b"another process is writing this one right now")
    _start(web)
    assert sorted(p.name for p in tmp.iterdir()) == ["live-writer.part"]


def test_abandoned_uploads_are_removed_at_start_up(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    data = good_checkpoint()
    kept = begin(c, h, data).json()["id"]
    expired = begin(c, h, data).json()["id"]
    folder = Path(portal.settings.data_dir) / "uploads"
    # a staged file whose row never committed (the crash came in between), and
    # one written just now by a create in another process: only the old one goes
    orphan, young = folder / ("a" * 32 + ".part"), folder / ("b" * 32 + ".part")
    orphan.write_bytes(b"x")
    os.utime(orphan, (HOUR_AGO, HOUR_AGO))
    young.write_bytes(b"x")
    with portal.db() as s:
        row = s.get(UploadSession, expired)
        assert row is not None
        row.expires_at = portal.clock() - (row.expires_at - row.created_at)
    _start(portal)
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{kept}.part", young.name])
    with portal.db() as s:
        assert list(s.scalars(sa.select(UploadSession.id))) == [kept]


def test_a_put_records_its_progress_while_it_runs(
    start_live_server: Callable[..., LiveServer], web_db_url: str, tmp_path: Path
) -> None:
    """A server killed mid-PUT keeps what was recorded on the way: the row's
    offset moves (bytes fsynced first) while the request is still open."""
    import httpx

    settings = portal_settings(web_db_url, tmp_path / "live", upload_progress_bytes=2**20)
    server = start_live_server(
        database_url=web_db_url,
        data_dir=settings.data_dir,
        encryption_key=settings.encryption_key,
        submissions=settings.submissions.model_dump(),
    )
    server.add_user("ada", Role.submitter)
    token = live_token(server, "ada")
    data = good_checkpoint(weights=noise(1_800_000))
    with httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as c:
        uid = c.post("/api/uploads", json={"filename": "c.tgz", "size_bytes": len(data)}).json()[
            "id"
        ]
        host = urlsplit(server.base_url)
        sent = 1_500_000
        with socket.create_connection((host.hostname, host.port), timeout=10) as sock:
            sock.sendall(
                (
                    f"PUT /api/uploads/{uid}?offset=0 HTTP/1.1\r\nHost: {host.netloc}\r\n"
                    f"Authorization: Bearer {token}\r\n"
                    "Content-Type: application/octet-stream\r\n"
                    f"Content-Length: {len(data)}\r\n\r\n"
                ).encode()
                + data[:sent]
            )
            # the request is still open (more bytes announced): the first MiB is
            # recorded all the same
            deadline = time.monotonic() + 20
            recorded = 0
            while time.monotonic() < deadline:
                with server.db() as s:
                    recorded = (
                        s.scalar(
                            sa.select(UploadSession.received_bytes).where(UploadSession.id == uid)
                        )
                        or 0
                    )
                if recorded:
                    break
                time.sleep(0.05)
            # (the first write to disk that took it past 1 MiB)
            assert 2**20 <= recorded <= sent, recorded
            staged = Path(settings.data_dir) / "uploads" / f"{uid}.part"
            assert staged.read_bytes()[:recorded] == data[:recorded]
            # what a client sees after a crash here: resume from the recorded offset
            assert c.get(f"/api/uploads/{uid}").json()["offset"] == recorded
