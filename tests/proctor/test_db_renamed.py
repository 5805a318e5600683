"""The embedded database is ``<data dir>/proctor.db`` again; the file one
release wrote as ``proctor.core.db`` is moved back once, audited, and never
silently abandoned (``proctor.core.db.renamed``).

The upgrade path is run as a person would meet it: a data folder the
misnaming release left, then a ``proctor`` command of this release on it.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.cli import main
from proctor.core.db import migrate
from proctor.core.db.engine import make_engine
from proctor.core.db.models import User
from proctor.core.settings import Settings

OLD, NEW = "proctor.core.db", "proctor.db"


def old_release_folder(folder: Path) -> Path:
    """A data folder as the misnaming release left it: its database under the
    wrong name, with a user in it."""
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / OLD}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        session.add(User(username="ada"))
    engine.dispose()
    return folder


def user_list(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: Path
) -> tuple[int, str]:
    with monkeypatch.context() as m:
        for key in list(os.environ):
            if key.startswith("PROCTOR_"):
                m.delenv(key)
        m.setenv("PROCTOR_ENV", "test")
        m.setenv("PROCTOR_DATA_DIR", str(data))
        try:
            main(["user", "list"])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def renames(data: Path) -> list[tuple[str, dict[str, str]]]:
    with sqlite3.connect(data / NEW) as conn:
        rows = conn.execute(
            "SELECT target_id, details FROM audit_log WHERE action = 'db.file_renamed'"
        ).fetchall()
    return [(t, json.loads(d)) for t, d in rows]


def test_the_embedded_default_is_proctor_db(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path).db_url == f"sqlite:///{(tmp_path / NEW).resolve()}"


def test_a_misnamed_database_is_moved_back_once_and_audited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = old_release_folder(tmp_path / "data")
    code, out = user_list(monkeypatch, capsys, data)
    assert code == 0, out
    assert "ada" in out  # the site's data, not a new empty database
    assert not (data / OLD).exists() and (data / NEW).is_file()
    assert (data / NEW).stat().st_mode & 0o777 == 0o600
    assert renames(data) == [
        (NEW, {"from": str((data / OLD).resolve()), "to": str((data / NEW).resolve())})
    ]
    # once: the next command finds nothing to move
    code, out = user_list(monkeypatch, capsys, data)
    assert code == 0 and "ada" in out
    assert len(renames(data)) == 1


def test_the_write_ahead_log_moves_with_it(tmp_path: Path) -> None:
    """Transactions still in ``-wal`` (a process that died before SQLite's
    checkpoint) come along: the copy is taken while a connection holds them."""
    source = old_release_folder(tmp_path / "source")
    holder = sqlite3.connect(source / OLD)
    holder.execute("PRAGMA wal_autocheckpoint=0")
    holder.execute(
        "INSERT INTO users (username, display_name, is_active, created_at, session_nonce) "
        "VALUES ('grace', '', 1, CURRENT_TIMESTAMP, 'n')"
    )
    holder.commit()
    assert (source / (OLD + "-wal")).stat().st_size > 0
    data = tmp_path / "data"
    data.mkdir()
    for name in (OLD, OLD + "-wal", OLD + "-shm"):
        shutil.copy2(source / name, data / name)
    holder.close()

    engine = make_engine(f"sqlite:///{data / NEW}")
    with engine.connect() as conn:
        names = set(conn.execute(sa.text("SELECT username FROM users")).scalars())
    engine.dispose()
    assert names == {"ada", "grace"}
    assert not any(p.name.startswith(OLD) for p in data.iterdir())


def test_both_files_are_refused_naming_both_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    migrate.upgrade(f"sqlite:///{data / NEW}")  # the site's older, proper file
    old_release_folder(data)
    before = {p.name: (p.stat().st_ino, p.stat().st_size) for p in data.iterdir()}
    code, out = user_list(monkeypatch, capsys, data)
    assert code != 0
    assert str(data / NEW) in out and str(data / OLD) in out
    assert "will not guess" in out
    assert {p.name: (p.stat().st_ino, p.stat().st_size) for p in data.iterdir()} == before


def test_a_configured_file_of_another_name_is_not_touched(tmp_path: Path) -> None:
    data = old_release_folder(tmp_path / "data")
    engine = make_engine(f"sqlite:///{data / 'other.db'}")
    engine.dispose()
    assert (data / OLD).is_file()
