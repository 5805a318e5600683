"""The embedded database's file name, and the release that changed it.

The embedded default is ``<data dir>/proctor.db`` (the README's settings
table). The package move (``3ba3413``) renamed it to ``proctor.core.db`` by
accident, up to ``3bab1a2``: an installation upgraded across that change
opened a new, empty database beside its own. This module takes such a file
back, once:

* ``proctor.core.db`` alone: it is moved to ``proctor.db`` with its ``-wal``
  and ``-shm`` companions (hard link then unlink, so nothing is ever
  overwritten) and the move is written to the audit log;
* both files: refused, naming both, since only a person can tell which one
  holds the site's data (an upgrade that ran the renamed release wrote the
  second file beside the first, and either may have taken writes since);
* ``proctor.db`` alone, or neither: nothing to do.

Stop every process of the older release before the first start of this one:
a process with the old name open would keep writing to the moved file's old
directory entry until it restarts.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from proctor.core.errors import UsageError

log = logging.getLogger(__name__)

CURRENT_NAME = "proctor.db"
RENAMED_NAME = "proctor.core.db"
# SQLite's companions of a database file in WAL mode (its name + suffix);
# the write-ahead log may hold committed transactions not yet in the file
COMPANIONS = ("-wal", "-shm")


@dataclass(frozen=True)
class Adoption:
    """A renamed database file that was moved back to its name."""

    moved_from: Path
    moved_to: Path

    def audit_details(self) -> dict[str, str]:
        return {"from": str(self.moved_from), "to": str(self.moved_to)}


def adopt_renamed_file(database: Path) -> Adoption | None:
    """Move ``<folder>/proctor.core.db`` to ``database`` when ``database`` is
    ``<folder>/proctor.db`` and does not exist yet (see the module's rules);
    None when there was nothing to move. Raises ``UsageError`` when both exist."""
    if database.name != CURRENT_NAME:
        return None
    renamed = database.with_name(RENAMED_NAME)
    if not renamed.exists():
        return None
    if database.exists():
        if database.samefile(renamed):
            # another process is moving it back at this moment: its link is done
            renamed.unlink(missing_ok=True)
            return None
        raise UsageError(
            f"database_url: both {database} and {renamed} exist in the data folder. "
            f"{renamed.name} was written by a Proctor release that misnamed the embedded "
            f"database; {database.name} is its proper name. Keep the one that holds this "
            "site's data under the name proctor.db and move the other out of the folder "
            "(Proctor will not guess which)"
        )
    # the companions first: a moved file must never meet another file's log
    for suffix in COMPANIONS:
        _move(renamed.with_name(renamed.name + suffix), database.with_name(database.name + suffix))
    _move(renamed, database)
    log.warning("moved the misnamed database %s back to %s", renamed, database)
    return Adoption(moved_from=renamed, moved_to=database)


def _move(source: Path, target: Path) -> None:
    """Move ``source`` to ``target`` if it exists, never replacing a file:
    ``os.link`` fails when ``target`` exists, where ``rename`` would overwrite it."""
    try:
        os.link(source, target)
    except FileNotFoundError:
        return  # no such companion (or another process moved it first)
    except FileExistsError:
        # another process is adopting the same file at the same moment
        if not (target.exists() and source.exists() and source.samefile(target)):
            raise
    source.unlink(missing_ok=True)
