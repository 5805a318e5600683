"""What an upload may reserve [L4]: the open-upload cap holds under
concurrent creates (a real server on loopback, both databases), and the
staging disk's free space bounds what all open uploads may still need."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from proctor.core.db.models import UploadSession
from proctor.core.domain import Role
from proctor.web.submissions import staging
from tests.browser import LiveServer
from tests.web.conftest import FakeClock, Web
from tests.web.submissions_support import (
    NOTHING,
    bearer,
    begin,
    leftovers,
    live_token,
    portal_settings,
    submitter,
)

CREATES = 20


def test_concurrent_creates_stop_at_the_open_upload_cap(
    start_live_server: Callable[..., LiveServer], web_db_url: str, tmp_path: Path
) -> None:
    settings = portal_settings(web_db_url, tmp_path / "live")
    server = start_live_server(
        database_url=web_db_url,
        data_dir=settings.data_dir,
        encryption_key=settings.encryption_key,
        submissions=settings.submissions.model_dump(),
    )
    server.add_user("ada", Role.submitter)
    token = live_token(server, "ada")
    cap = settings.submissions.max_open_uploads
    # one request first: a token's first use writes its last_used_at on a second
    # connection, and 20 first uses at once would wait on the pool, not on the cap
    with httpx.Client(base_url=server.base_url, timeout=60) as c:
        r = c.get("/api/uploads", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json() == []
    barrier = threading.Barrier(CREATES)
    codes: list[int] = []
    lock = threading.Lock()

    def create(i: int) -> None:
        with httpx.Client(
            base_url=server.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as c:
            barrier.wait()
            r = c.post("/api/uploads", json={"filename": f"c{i}.tgz", "size_bytes": 1000})
        with lock:
            codes.append(r.status_code)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(CREATES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [201] * cap + [409] * (CREATES - cap), codes
    with server.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(UploadSession)) == cap
    staged = sorted((Path(settings.data_dir) / "uploads").glob("*.part"))
    assert len(staged) == cap


@pytest.fixture
def make_portal(web_db_url: str, tmp_path: Path) -> Iterator[Callable[..., Web]]:
    from proctor.web.app import create_app

    made: list[Web] = []

    def make(**submissions: Any) -> Web:
        settings = portal_settings(web_db_url, tmp_path, **submissions)
        clock = FakeClock()
        web = Web(app=create_app(settings, clock=clock), clock=clock, settings=settings)
        made.append(web)
        return web

    yield make
    for web in made:
        for c in web.clients:
            c.close()
        web.app.state.web.engine.dispose()


def test_an_upload_the_disk_cannot_hold_is_refused(make_portal: Callable[..., Web]) -> None:
    # a margin as large as the whole disk: whatever is free, nothing fits
    total = shutil.disk_usage("/").total
    portal = make_portal(upload_disk_margin_bytes=total)
    h = submitter(portal)
    r = begin(portal.client(), h, b"x" * 1000)
    assert r.status_code == 507, r.text
    detail = r.json()["detail"]
    # a submitter learns that it does not fit, not how much room the host has
    assert detail == (
        "size_bytes: the server has no room for 1000 bytes more of uploads now; try again later"
    )
    assert leftovers(portal) == NOTHING


def test_only_an_admin_is_told_the_room_left(
    make_portal: Callable[..., Web], monkeypatch: pytest.MonkeyPatch
) -> None:
    margin = 1 << 20
    monkeypatch.setattr(staging, "free_bytes", lambda folder: margin + 1 * 2**20)
    portal = make_portal(upload_disk_margin_bytes=margin)
    c = portal.client()
    two = b"x" * (2 * 2**20)
    r = begin(c, submitter(portal), two)
    assert r.status_code == 507 and "1.0 MiB" not in r.json()["detail"], r.text
    portal.add_user("root", Role.admin, Role.submitter)
    admin = bearer(portal.token("root", ("submitter", "admin")))
    r = begin(c, admin, two)
    assert r.status_code == 507 and r.json()["detail"].startswith(
        "size_bytes: the server has room for 1.0 MiB more of uploads now, not 2.0 MiB"
    ), r.text


def test_open_uploads_reserve_what_they_have_yet_to_receive(
    make_portal: Callable[..., Web], monkeypatch: pytest.MonkeyPatch
) -> None:
    margin = 1 << 20
    # the disk, as the server sees it: 3 MiB free above the margin (a real disk's
    # free space moves with everything else this machine writes)
    monkeypatch.setattr(staging, "free_bytes", lambda folder: margin + 3 * 2**20)
    portal = make_portal(upload_disk_margin_bytes=margin)
    c = portal.client()
    h = submitter(portal)
    two = b"x" * (2 * 2**20)
    first = begin(c, h, two)
    assert first.status_code == 201, first.text
    r = begin(c, h, two)  # 2 MiB reserved by the first + 2 MiB > 3 MiB
    assert r.status_code == 507 and r.json()["detail"].startswith(
        "size_bytes: the server has no room for 2.0 MiB more of uploads now"
    )
    assert begin(c, h, b"x" * 2**20).status_code == 201  # 1 MiB still fits
    # cancelling an upload gives its reservation back
    assert c.delete(f"/api/uploads/{first.json()['id']}", headers=h).status_code == 204
    assert begin(c, h, two).status_code == 201
