"""Secrets on the server's own disk and in its logs [L11]: the database
file, stored checkpoints and the conformance log are its user's alone;
database errors never print statement values; a conformance worker does not
receive the session key."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from proctor.core.db.engine import make_engine
from proctor.core.db.models import User
from proctor.core.settings import load_settings
from proctor.web.submissions import queue
from tests.web.conftest import Web
from tests.web.submissions_support import (
    ENCRYPTION_KEY,
    good_checkpoint,
    portal_app,
    sha,
    submitter,
    upload,
)


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_database_and_stored_checkpoints_are_private(portal: Web) -> None:
    data = good_checkpoint()
    r = upload(portal.client(), submitter(portal), data)
    assert r.status_code == 201, r.text
    store = Path(portal.settings.artifacts_location)
    obj = store / "objects" / sha(data)[:2] / sha(data)
    assert _mode(obj) == 0o600
    for folder in (store, store / "objects", obj.parent, store / "tmp"):
        assert _mode(folder) == 0o700, folder
    url = make_url(portal.settings.db_url)
    if url.get_backend_name() == "sqlite":
        db = Path(str(url.database))
        wal = db.with_name(db.name + "-wal")
        assert wal.exists()  # written by the upload: SQLite gives it the database's mode
        for path in (db, wal):
            assert _mode(path) == 0o600, path


def test_a_world_readable_database_from_before_is_tightened(tmp_path: Path) -> None:
    db = tmp_path / "proctor.db"
    db.touch(mode=0o644)
    db.chmod(0o644)  # whatever the umask
    make_engine(f"sqlite:///{db}").dispose()
    assert _mode(db) == 0o600


def test_database_errors_hide_statement_parameters(web_db_url: str) -> None:
    engine = make_engine(web_db_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(User).values(username="ada", created_at=sa.func.now()))
        with pytest.raises(sa.exc.IntegrityError) as caught, engine.begin() as conn:
            conn.execute(
                sa.insert(User).values(username="ada", created_at=sa.func.now()),
            )
        text = str(caught.value)
        assert "INSERT INTO users" in text  # the statement stays, for whoever debugs it
        assert "'ada'" not in text and "parameters" in text.lower()
    finally:
        engine.dispose()


def test_a_worker_gets_no_session_key_and_writes_a_private_log(
    web_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_key = "the-server-s-own-session-key-" + "k" * 32
    monkeypatch.setenv("PROCTOR_SECRET_KEY", server_key)  # how prod hands it to the server
    settings = load_settings(
        env="prod",
        data_dir=tmp_path,
        database_url=web_db_url,
        encryption_key=ENCRYPTION_KEY,
        submissions={"conformance_dispatch": "subprocess"},
    )
    assert settings.secret_key is not None
    assert settings.secret_key.get_secret_value() == server_key
    env = queue.worker_env(settings)
    assert server_key not in env.values()
    assert env["PROCTOR_ENCRYPTION_KEY"] == ENCRYPTION_KEY  # what it does need
    # the worker starts, in prod, without the server's key (nothing is queued)
    child = queue.spawn_worker(settings, 987654, "a-token-no-run-was-claimed-under")
    assert child.wait(120) == 0
    log = tmp_path / "logs" / "conformance.log"
    assert "nothing queued" in log.read_text()
    assert _mode(log) == 0o600 and _mode(log.parent) == 0o700
