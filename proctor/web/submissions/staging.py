"""The files that hold uploads in progress: one ``<id>.part`` per upload
session in the upload folder, written only under an exclusive lock.

The database row's ``received_bytes`` is the durable offset: a write
truncates the file to it first (dropping whatever a crash left after the
last recorded offset), appends, fsyncs, and only then is the new offset
recorded.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from proctor.core.errors import ProctorError
from proctor.core.settings import Settings

SUFFIX = ".part"
_CHUNK = 1 << 20


class UploadBusy(ProctorError):
    """Another request is writing to (or completing) this upload."""


def upload_dir(settings: Settings) -> Path:
    folder = settings.submissions.upload_dir or (Path(settings.data_dir) / "uploads")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def free_bytes(folder: Path) -> int:
    """Free bytes on the file system holding ``folder`` (for unprivileged users)."""
    return shutil.disk_usage(folder).free


def staged_path(folder: Path, upload_id: str) -> Path:
    return folder / f"{upload_id}{SUFFIX}"


def create(folder: Path, upload_id: str) -> Path:
    path = staged_path(folder, upload_id)
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    return path


def remove(folder: Path, upload_id: str) -> None:
    staged_path(folder, upload_id).unlink(missing_ok=True)


def size(folder: Path, upload_id: str) -> int | None:
    try:
        return staged_path(folder, upload_id).stat().st_size
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def locked(folder: Path, upload_id: str, mode: str = "r+b") -> Iterator[BinaryIO]:
    """The staged file, open and exclusively locked (UploadBusy if another
    request holds it; FileNotFoundError if it is gone)."""
    f = staged_path(folder, upload_id).open(mode)
    try:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UploadBusy(
                "another request is writing to this upload; wait for it, then resume"
            ) from None
        yield f
    finally:
        f.close()  # closing releases the lock


def sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())


def sha256_of(f: BinaryIO) -> str:
    f.seek(0)
    digest = hashlib.sha256()
    while block := f.read(_CHUNK):
        digest.update(block)
    return digest.hexdigest()


def orphans(folder: Path, known: set[str], older_than_s: float) -> list[Path]:
    """Staged files without an upload row, older than ``older_than_s``
    (a crash between creating the file and committing its row)."""
    now = time.time()
    out = []
    for path in folder.glob(f"*{SUFFIX}"):
        if path.stem in known:
            continue
        with contextlib.suppress(FileNotFoundError):
            if now - path.stat().st_mtime > older_than_s:
                out.append(path)
    return out
