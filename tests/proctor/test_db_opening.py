"""One schema policy for every command that opens the database
(``proctor.core.db.opening``): a newer schema is refused naming both revisions;
the embedded SQLite default is migrated on first use; any other database
that is behind is refused, untouched, with the command that migrates it.

Commands from several services run in-process through ``proctor.cli.main``;
each used to open the database its own way, with its own policy.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa

from proctor.cli import main
from proctor.core.db import migrate
from proctor.core.db.engine import make_engine

# one command per way a service opened the database before: the accounts
# session (web), the campaign session (scheduler), the station's session
# factory (borrowed by the conformance worker), an unchecked engine (console)
COMMANDS = [
    ("user", "list"),
    ("campaign", "list"),
    ("submission", "work", "--no-drain"),
    ("console", "photo", "list"),
]
IDS = [" ".join(c[:2]) for c in COMMANDS]
UNKNOWN = "99999999zzzz"  # a revision no Proctor release has


def _run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    env: dict[str, str],
) -> tuple[int, str]:
    with monkeypatch.context() as m:
        for key in list(os.environ):
            if key.startswith("PROCTOR_"):
                m.delenv(key)
        m.setenv("PROCTOR_ENV", "test")
        for k, v in env.items():
            m.setenv(k, v)
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, capsys.readouterr().err


def embedded_database_url(data_dir: Path) -> str:
    """The data folder's own SQLite file (what ``proctor.core.settings`` fills in)."""
    return f"sqlite:///{(data_dir / 'proctor.db').resolve()}"


def _stamp(url: str, revision: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE alembic_version SET version_num = :v"), {"v": revision})
    finally:
        engine.dispose()


@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
def test_the_embedded_default_is_migrated_on_first_use(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    args: tuple[str, ...],
) -> None:
    # a data folder whose database has no schema yet (an empty SQLite file); a folder
    # with no database at all is refused by a reading command (tests/proctor/test_cli.py)
    (tmp_path / "proctor.db").touch()
    code, err = _run(monkeypatch, capsys, args, {"PROCTOR_DATA_DIR": str(tmp_path)})
    assert code == 0, err
    assert migrate.current(embedded_database_url(tmp_path)) == migrate.head()


@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
def test_any_other_database_behind_is_refused_and_left_alone(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fresh_db_url: str,
    args: tuple[str, ...],
) -> None:
    env = {"PROCTOR_DATA_DIR": str(tmp_path), "PROCTOR_DATABASE_URL": fresh_db_url}
    code, err = _run(monkeypatch, capsys, args, env)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert f"but this code needs {migrate.head()}: run `proctor db upgrade`" in line
    assert "only the embedded default" in line and "migrated automatically" in line
    assert migrate.current(fresh_db_url) is None  # not migrated, nothing written


@pytest.mark.parametrize("args", COMMANDS, ids=IDS)
@pytest.mark.parametrize("where", ["embedded", "configured"])
def test_a_newer_schema_is_refused_naming_both_revisions(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fresh_db_url: str,
    args: tuple[str, ...],
    where: str,
) -> None:
    url = embedded_database_url(tmp_path) if where == "embedded" else fresh_db_url
    migrate.upgrade(url)
    _stamp(url, UNKNOWN)
    env = {"PROCTOR_DATA_DIR": str(tmp_path)}
    if where == "configured":
        env["PROCTOR_DATABASE_URL"] = url
    code, err = _run(monkeypatch, capsys, args, env)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert f"at revision {UNKNOWN}, which this code does not know" in line
    assert f"this code's newest is {migrate.head()}" in line and "upgrade Proctor" in line
    assert migrate.current(url) == UNKNOWN  # never "migrated" down or over


def test_an_up_to_date_database_is_opened_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fresh_db_url: str,
) -> None:
    migrate.upgrade(fresh_db_url)
    env = {"PROCTOR_DATA_DIR": str(tmp_path), "PROCTOR_DATABASE_URL": fresh_db_url}
    code, err = _run(monkeypatch, capsys, ("user", "list"), env)
    assert code == 0, err
    assert not Path(embedded_database_url(tmp_path).removeprefix("sqlite:///")).exists()
