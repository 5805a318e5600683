"""Opening the database from a command, with one schema policy.

Every ``proctor`` command that reads or writes the database opens it here:

* a database migrated by a newer Proctor (a revision this code does not
  know) is refused, naming both revisions: upgrade Proctor;
* the embedded default (the SQLite file in the data folder, used when no
  ``database_url`` is configured) is migrated on first use, so that a fresh
  install just works;
* any other database that is behind is refused: it is shared (PostgreSQL, a
  configured file), and migrating it is a deliberate act,
  ``proctor db upgrade``;
* a one-shot command that only reads (``campaign status``, ``export``, …)
  never creates the embedded default: run in the wrong folder it would
  otherwise make an empty ``./proctor-data`` and then report "no campaign";
  it refuses, naming the folder it looked in and how to point it elsewhere.
  A command that makes something (``user create-admin``/``add``, ``campaign
  create``, ``station enrol``) creates it, and says where on standard error.

``proctor serve`` alone may migrate a configured database, when told to
(``--migrate``); it reads the same ``schema_state``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic.script import ScriptDirectory
from sqlalchemy.engine import make_url
from sqlalchemy.orm import sessionmaker

from proctor.core.db import migrate
from proctor.core.db.engine import ProctorSession, make_engine, make_session_factory, session_scope
from proctor.core.db.renamed import RENAMED_NAME
from proctor.core.errors import UsageError
from proctor.core.settings import Settings, embedded_database_url

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SchemaState:
    """Where a database's schema stands against this code's migrations."""

    current: str | None  # None: no schema yet
    head: str | None  # the newest revision this code knows
    known: bool  # False: migrated by a newer Proctor

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head

    @property
    def newer(self) -> bool:
        return not self.known

    def behind(self) -> str:
        """What is behind what, in words (a ``problem`` without its advice)."""
        return (
            f"the database is at revision {self.current or 'base (empty)'} "
            f"but this code needs {self.head}"
        )

    def problem(self) -> str | None:
        """Why the database cannot be used as it is, and what to do; None
        when it can."""
        if self.up_to_date:
            return None
        if self.newer:
            return (
                f"the database is at revision {self.current}, which this code does not know "
                f"(it was migrated by a newer Proctor; this code's newest is {self.head}): "
                "upgrade Proctor"
            )
        return f"{self.behind()}: run `proctor db upgrade`"


def schema_state(url: str) -> SchemaState:
    current, head = migrate.current(url), migrate.head()
    if current is None or current == head:
        return SchemaState(current, head, known=True)
    scripts = ScriptDirectory.from_config(migrate.alembic_config(url))
    known = {rev.revision for rev in scripts.walk_revisions()}
    return SchemaState(current, head, known=current in known)


def is_embedded_default(settings: Settings) -> bool:
    """Whether the configured database is the data folder's own SQLite file."""
    return settings.db_url == embedded_database_url(settings.data_dir)


def embedded_file(settings: Settings) -> Path | None:
    """The embedded default's SQLite file; None when another database is configured."""
    if not is_embedded_default(settings):
        return None
    return Path(make_url(settings.db_url).database or "")


def _embedded_exists(path: Path) -> bool:
    # a file under the name one release gave it by mistake is moved back on opening
    return path.exists() or path.with_name(RENAMED_NAME).exists()


def no_database(path: Path) -> str:
    """Why a reading command refuses a data folder without a database."""
    return (
        f"data folder: there is no database in {path.parent} (no {path.name}), so nothing "
        "to read. Run the command where the data folder is, or name it with "
        "PROCTOR_DATA_DIR (or data_dir in the config file); `proctor serve`, `proctor demo`, "
        "`proctor user create-admin`, `proctor campaign create` and `proctor station enrol` "
        "make a new one"
    )


def ensure_schema(settings: Settings, *, create: bool = True) -> None:
    """Make the database usable by this code, or refuse saying why (the
    policy above); nothing is written when it refuses. ``create``: whether a
    missing embedded default may be made (else refused, the folder untouched)."""
    path = embedded_file(settings)
    if path is not None and not _embedded_exists(path):
        if not create:
            raise UsageError(no_database(path))
        # a warning: with no logging configured (a plain command) it reaches stderr
        log.warning("new database: %s (empty)", path)
    state = schema_state(settings.db_url)
    problem = state.problem()
    if problem is None:
        return
    if state.newer:
        raise UsageError(problem)
    if is_embedded_default(settings):
        migrate.upgrade(settings.db_url)
        return
    raise UsageError(
        f"{problem} (only the embedded default, the data folder's proctor.db, "
        "is migrated automatically)"
    )


def open_sessions(settings: Settings) -> sessionmaker[ProctorSession]:
    """A session factory for a long-running command (the station, a worker);
    its engine lives as long as the process."""
    ensure_schema(settings)
    return make_session_factory(make_engine(settings.db_url))


@contextmanager
def command_sessions(
    settings: Settings, *, create: bool = False
) -> Iterator[sessionmaker[ProctorSession]]:
    """A session factory for a one-shot command that commits in several
    transactions (one per episode, say); the engine is closed at the end.
    ``create``: the command makes something, so a fresh embedded database
    may be created for it (a reading command refuses instead)."""
    ensure_schema(settings, create=create)
    engine = make_engine(settings.db_url)
    try:
        yield make_session_factory(engine)
    finally:
        engine.dispose()


@contextmanager
def command_session(settings: Settings, *, create: bool = False) -> Iterator[ProctorSession]:
    """One session for a one-shot command: one transaction, committed when the
    block ends without an error, rolled back otherwise; the engine is closed.
    ``create`` as for ``command_sessions``."""
    with (
        command_sessions(settings, create=create) as sessions,
        session_scope(sessions) as session,
    ):
        yield session
