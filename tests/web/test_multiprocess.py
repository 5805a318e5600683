"""More than one server process (``proctor serve --workers N``): what one
process or the CLI writes reaches every process's caches within the bound
``proctor/web/README.md`` states (``web.cache_check_s``, 0.5 s, plus one read).

The server is the real ``proctor serve`` with two uvicorn workers sharing
one 127.0.0.1 port, over a migrated database of each backend; the page
under test is the public leaderboard, answered from each worker's shared
cache (``proctor.web.shared_cache``), kept there for 30 s so that only invalidation
(not expiry) can make a worker answer the new page in time."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from proctor.core.db.engine import make_engine, make_session_factory, session_scope
from proctor.core.db.types import utcnow
from proctor.core.domain import Role
from tests.web.leaderboard_data import seed_campaign
from tests.web.serve_support import REPO, proctor_serve

# long enough for two spawned workers on a loaded machine to notice; far shorter
# than the 30 s a stale entry would otherwise live
NOTICE_WITHIN_S = 15.0
# fresh connections in a row that must all show the new page: the two workers
# take connections in no fixed order, so a run this long has been answered by both
IN_A_ROW = 16


def _seed(url: str) -> tuple[int, int, int, str]:
    """A released campaign (its public page is under test), two closed ones
    (releasing either changes that page: it lists the released campaigns),
    and an admin's API token."""
    from proctor.web.accounts import service
    from proctor.web.auth.passwords import Passwords

    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            shown = seed_campaign(s, released=True, episodes_per_cell=3, seed=5).campaign_id
            second = seed_campaign(s, released=False, episodes_per_cell=3, seed=6, compute=False)
            third = seed_campaign(s, released=False, episodes_per_cell=3, seed=7, compute=False)
            admin = service.create_user(
                session=s,
                passwords=Passwords(cheap=True),
                username="ada",
                password=None,
                roles=[Role.admin],
                actor=service.Actor(label="test"),
                now=utcnow(),
            )
            _, token = service.create_token(
                session=s,
                user=admin,
                name="test",
                scopes=[Role.admin.value],
                expires_in_days=1,
                allowed_roles=[Role.admin],
                actor=service.Actor(label="test"),
                now=utcnow(),
            )
        return shown, second.campaign_id, third.campaign_id, token
    finally:
        engine.dispose()


def _etag(url: str) -> str:
    # a new connection for each request: the workers share the listening socket
    r = httpx.get(url, timeout=30)
    assert r.status_code == 200 and "public" in r.headers["cache-control"], r.text[:300]
    return r.headers["etag"]


def _every_worker_answers_anew(url: str, old: str) -> str:
    """Poll with fresh connections until ``IN_A_ROW`` answers in a row carry an
    ETag other than ``old``; fail past ``NOTICE_WITHIN_S``."""
    deadline = time.monotonic() + NOTICE_WITHIN_S
    seen: list[str] = []
    streak = 0
    while streak < IN_A_ROW:
        assert time.monotonic() < deadline, (
            f"after {NOTICE_WITHIN_S:g} s a worker still answers the page from before the "
            f"write (last answers, newest last: {seen[-IN_A_ROW:]})"
        )
        etag = _etag(url)
        seen.append("old" if etag == old else "new")
        streak = streak + 1 if etag != old else 0
    return _etag(url)


def _cli(url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env |= {
        "PROCTOR_ENV": "test",
        "PROCTOR_DATA_DIR": str(tmp_path / "served"),
        "PROCTOR_DATABASE_URL": url,
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_write_in_one_worker_or_the_cli_reaches_every_worker(
    web_db_url: str, tmp_path: Path
) -> None:
    shown, second, third, token = _seed(web_db_url)
    env = {"PROCTOR_WEB__WORKERS": "2", "PROCTOR_WEB__SHARED_CACHE_S": "30"}
    with proctor_serve(web_db_url, tmp_path, env) as served:
        assert "2 worker processes" in served.log_text()
        page = f"{served.base_url}/leaderboard/{shown}"
        before = {_etag(page) for _ in range(2 * IN_A_ROW)}  # both workers keep it now
        assert len(before) == 1
        (old,) = before

        # a write through the API, answered by one of the workers
        r = httpx.post(
            f"{served.base_url}/api/campaigns/{second}/release",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        after_api = _every_worker_answers_anew(page, old)

        # a write by another process: the CLI, through the service layer
        done = _cli(web_db_url, tmp_path, "campaign", "release", str(third))
        assert done.returncode == 0, done.stderr
        after_cli = _every_worker_answers_anew(page, after_api)
        assert len({old, after_api, after_cli}) == 3
        assert "Traceback" not in served.log_text()


def test_serve_refuses_a_worker_count_out_of_range(web_db_url: str, tmp_path: Path) -> None:
    done = _cli(web_db_url, tmp_path, "serve", "--workers", "0", "--no-migrate")
    assert done.returncode == 2 and "--workers" in done.stderr


def test_worker_processes_get_the_same_uvicorn_settings(tmp_path: Path) -> None:
    """Worker processes receive the uvicorn config pickled: the header deadline
    (a config attribute read by a module-level protocol class) and the trusted
    proxies must survive the trip."""
    import pickle

    from proctor.core.settings import load_settings
    from proctor.web.uvicorn_processes import APP_FACTORY, HeaderDeadlineProtocol, uvicorn_config

    settings = load_settings(
        env="test",
        data_dir=tmp_path,
        database_url=f"sqlite:///{tmp_path / 'p.db'}",
        web={"header_timeout_s": 1.5, "trusted_proxies": ["127.0.0.1"]},
    )
    config = uvicorn_config(APP_FACTORY, settings, host="127.0.0.1", port=8000, workers=2)
    copy = pickle.loads(pickle.dumps(config))
    assert copy.workers == 2 and copy.factory and copy.app == APP_FACTORY
    assert copy.http is HeaderDeadlineProtocol and copy.header_timeout_s == 1.5
    assert copy.proxy_headers and copy.forwarded_allow_ips == ["127.0.0.1"]
