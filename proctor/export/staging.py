"""An export's folder appears whole or not at all.

Every exporter writes into a hidden sibling (``.<out>.partial``) and renames
it into place only when everything is written: an interrupted export leaves
no half a dataset where a reader would take it for a whole one (the next run
clears the leftovers).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from proctor.core.errors import UsageError


def check_free(out: Path) -> None:
    """``out`` must not exist, or be an empty folder."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"out: {out} exists and is not empty; choose a new folder")


@contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """The folder to write into; renamed to ``out`` when the block succeeds,
    removed when it raises (``check_free(out)`` first)."""
    partial = out.with_name(f".{out.name}.partial")
    if partial.exists():
        shutil.rmtree(partial)  # the leftovers of an interrupted export
    partial.mkdir(parents=True)
    try:
        yield partial
        if out.exists():
            out.rmdir()  # empty: check_free said so
        partial.rename(out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
