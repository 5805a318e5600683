"""The uplink's own state: what the server has confirmed, and what waits.

One SQLite file beside the ledger (``<data>/station/<name>/uplink.db``),
written with the standard library only, in WAL mode, each change committed
on its own: a daemon killed at any point restarts knowing exactly what the
server acknowledged. What it keeps:

* per episode uid: the snapshot's content digest and the revision it was
  given (a counter that grows whenever the digest changes), the revision the
  server confirmed, and the last refusal of that revision (a 4xx, shown in
  the status and not retried until the episode changes again);
* per artifact (episode uid; its sha256, kind and camera): the server's
  upload id, so a resumed upload asks for the parts still missing, and
  whether it is registered;
* abandon reports not yet acknowledged (run code, reason, idempotency key);
* counters, e.g. the claim counter that names each claim's idempotency key.

The ledger (the Proctor schema) stays the source of truth for the episode
itself; this file only says how far the server has caught up with it.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS episodes (
    uid TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    rev INTEGER NOT NULL,
    confirmed_rev INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    error_rev INTEGER,
    -- the server has settled the episode's run (its closed or interrupted snapshot arrived)
    settled INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS artifacts (
    uid TEXT NOT NULL,
    -- which artifact of the episode: its sha256, kind and camera (two artifacts
    -- can share bytes, e.g. the frame tables of two cameras at one rate)
    artifact TEXT NOT NULL,
    upload_id TEXT,
    registered INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    PRIMARY KEY (uid, artifact)
);
CREATE TABLE IF NOT EXISTS abandons (
    key TEXT PRIMARY KEY,
    run_code TEXT NOT NULL,
    reason TEXT NOT NULL,
    queued INTEGER NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE TABLE IF NOT EXISTS counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


@dataclass(frozen=True)
class EpisodeMark:
    uid: str
    digest: str
    rev: int
    confirmed_rev: int
    error: str | None
    error_rev: int | None

    @property
    def refused(self) -> bool:
        """The server refused this very revision: wait for a change."""
        return self.error is not None and self.error_rev == self.rev


@dataclass(frozen=True)
class PendingAbandon:
    key: str
    run_code: str
    reason: str


class Outbox:
    """Thread-safe: the forwarder, the work source and the status read it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # autocommit (isolation_level=None): every statement is its own transaction
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _one(self, sql: str, args: tuple[object, ...] = ()) -> tuple[object, ...] | None:
        with self._lock:
            row: tuple[object, ...] | None = self._db.execute(sql, args).fetchone()
            return row

    def _run(self, sql: str, args: tuple[object, ...] = ()) -> None:
        with self._lock:
            self._db.execute(sql, args)

    # -- episodes --------------------------------------------------------------------
    def episode(self, uid: str) -> EpisodeMark | None:
        row = self._one(
            "SELECT uid, digest, rev, confirmed_rev, error, error_rev FROM episodes WHERE uid=?",
            (uid,),
        )
        return None if row is None else EpisodeMark(*row)  # type: ignore[arg-type]

    def stamp(self, uid: str, digest: str) -> EpisodeMark:
        """The revision for the episode's snapshot with ``digest``: the stored
        one when the content is unchanged, the next one when it changed."""
        with self._lock:
            row = self._db.execute("SELECT digest FROM episodes WHERE uid=?", (uid,)).fetchone()
            if row is None:
                self._db.execute(
                    "INSERT INTO episodes (uid, digest, rev) VALUES (?, ?, 1)", (uid, digest)
                )
            elif row[0] != digest:
                self._db.execute(
                    "UPDATE episodes SET digest=?, rev=rev+1 WHERE uid=?", (digest, uid)
                )
        mark = self.episode(uid)
        assert mark is not None
        return mark

    def confirm(self, uid: str, rev: int, *, settled: bool = False) -> None:
        """The server holds ``rev`` (never moves back), and has settled the run
        if ``settled`` (which never goes back either)."""
        self._run(
            "UPDATE episodes SET confirmed_rev=MAX(confirmed_rev, ?), error=NULL, error_rev=NULL, "
            "settled=MAX(settled, ?) WHERE uid=?",
            (rev, int(settled), uid),
        )

    def settled(self, uid: str) -> bool:
        """The server has settled the run of episode ``uid``."""
        row = self._one("SELECT settled FROM episodes WHERE uid=?", (uid,))
        return bool(row and row[0])

    def overtake(self, uid: str, server_rev: int) -> None:
        """The server holds a revision beyond ours (this file was lost and the
        counter began again): number the next snapshot past it."""
        self._run(
            "UPDATE episodes SET rev=MAX(rev, ?), confirmed_rev=? WHERE uid=?",
            (server_rev + 1, server_rev, uid),
        )

    def refuse(self, uid: str, rev: int, error: str) -> None:
        self._run("UPDATE episodes SET error=?, error_rev=? WHERE uid=?", (error, rev, uid))

    def unconfirmed(self) -> int:
        row = self._one("SELECT COUNT(*) FROM episodes WHERE confirmed_rev < rev")
        return int(row[0]) if row else 0  # type: ignore[call-overload]

    def refusals(self) -> list[str]:
        """Every item the server refused, in words (episodes, artifacts, abandons)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT 'episode ' || uid || ' rev ' || error_rev, error FROM episodes "
                "WHERE error IS NOT NULL "
                "UNION ALL SELECT 'artifact ' || substr(artifact, 1, 12) || ' of ' || uid, error "
                "FROM artifacts WHERE error IS NOT NULL "
                "UNION ALL SELECT 'abandon ' || run_code, error FROM abandons "
                "WHERE error IS NOT NULL"
            ).fetchall()
        return [f"{what}: {error}" for what, error in rows]

    # -- artifacts -------------------------------------------------------------------
    def upload_id(self, uid: str, artifact: str) -> str | None:
        row = self._one(
            "SELECT upload_id FROM artifacts WHERE uid=? AND artifact=?", (uid, artifact)
        )
        return None if row is None or row[0] is None else str(row[0])

    def begin_upload(self, uid: str, artifact: str, upload_id: str) -> None:
        self._run(
            "INSERT INTO artifacts (uid, artifact, upload_id) VALUES (?, ?, ?) "
            "ON CONFLICT (uid, artifact) DO UPDATE SET upload_id=excluded.upload_id, error=NULL",
            (uid, artifact, upload_id),
        )

    def forget_upload(self, uid: str, artifact: str) -> None:
        """The server no longer knows the upload: begin a new one next time."""
        self._run("UPDATE artifacts SET upload_id=NULL WHERE uid=? AND artifact=?", (uid, artifact))

    def registered(self, uid: str) -> set[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT artifact FROM artifacts WHERE uid=? AND registered=1", (uid,)
            ).fetchall()
        return {str(r[0]) for r in rows}

    def register(self, uid: str, artifact: str) -> None:
        self._run(
            "INSERT INTO artifacts (uid, artifact, registered) VALUES (?, ?, 1) "
            "ON CONFLICT (uid, artifact) DO UPDATE SET registered=1, error=NULL",
            (uid, artifact),
        )

    def refuse_upload(self, uid: str, artifact: str, error: str) -> None:
        self._run(
            "INSERT INTO artifacts (uid, artifact, error) VALUES (?, ?, ?) "
            "ON CONFLICT (uid, artifact) DO UPDATE SET error=excluded.error",
            (uid, artifact, error),
        )

    def upload_error(self, uid: str, artifact: str) -> str | None:
        row = self._one("SELECT error FROM artifacts WHERE uid=? AND artifact=?", (uid, artifact))
        return None if row is None or row[0] is None else str(row[0])

    # -- abandon reports -------------------------------------------------------------
    def queue_abandon(self, run_code: str, reason: str) -> str:
        """Queue a report; its idempotency key (``abandon:<run code>:<n>``,
        ``n`` counting this station's reports) is fixed here, so a report
        sent twice (a lost reply) is acted on once."""
        with self._lock:
            n = self._db.execute("SELECT COUNT(*) FROM abandons").fetchone()[0]
            key = f"abandon:{run_code}:{n}"
            self._db.execute(
                "INSERT INTO abandons (key, run_code, reason, queued) VALUES (?, ?, ?, ?)",
                (key, run_code, reason, n),
            )
        return key

    def pending_abandons(self) -> list[PendingAbandon]:
        with self._lock:
            rows = self._db.execute(
                "SELECT key, run_code, reason FROM abandons "
                "WHERE sent=0 AND error IS NULL ORDER BY queued"
            ).fetchall()
        return [PendingAbandon(str(k), str(r), str(why)) for k, r, why in rows]

    def abandon_sent(self, key: str) -> None:
        self._run("UPDATE abandons SET sent=1 WHERE key=?", (key,))

    def refuse_abandon(self, key: str, error: str) -> None:
        self._run("UPDATE abandons SET error=? WHERE key=?", (error, key))

    # -- counters --------------------------------------------------------------------
    def counter(self, name: str) -> int:
        row = self._one("SELECT value FROM counters WHERE name=?", (name,))
        return 0 if row is None else int(row[0])  # type: ignore[call-overload]

    def advance(self, name: str, past: int) -> None:
        """Move counter ``name`` past ``past`` (once: a second call for the same
        value does not move it again)."""
        self._run(
            "INSERT INTO counters (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value=MAX(value, excluded.value)",
            (name, past + 1),
        )
