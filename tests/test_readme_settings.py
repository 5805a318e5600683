"""The README's settings table says what the code does: each setting it names
exists, and the default it shows is the ``Settings`` default (as
``tests/test_deploy.py`` holds the example deployment to the code). The
embedded database's file name once drifted from the table unnoticed
(``proctor.core.db`` against the documented ``proctor.db``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from proctor.core.settings import Settings

README = Path(__file__).resolve().parent.parent / "README.md"
# a data folder no default could contain by chance, written back as the
# README writes it
DATA = Path("/nonexistent-data-folder")
# settings the table describes in words rather than as a value: secrets have
# no default, and saying so is the row
IN_WORDS = {"PROCTOR_SECRET_KEY", "PROCTOR_ENCRYPTION_KEY"}


@pytest.fixture(autouse=True)
def _no_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The code's defaults, not this machine's settings."""
    import os

    for key in list(os.environ):
        if key.startswith("PROCTOR_"):
            monkeypatch.delenv(key)


def settings_rows(text: str) -> list[tuple[list[str], str]]:
    """The rows of the table headed ``| setting | default |``: the setting
    names of the first cell and the whole second cell."""
    lines = text.splitlines()
    start = next(
        i for i, line in enumerate(lines) if re.match(r"\|\s*setting\s*\|\s*default", line)
    )
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|", 1)]
        rows.append((re.findall(r"`(PROCTOR_[A-Z_]+)`", cells[0]), cells[1]))
    return rows


def default_of(name: str) -> Any:
    """The default of ``PROCTOR_A__B`` (settings ``a.b``) with the data folder
    at ``DATA``, as the validator fills it (the data folder's own: the field's)."""
    if name == "PROCTOR_DATA_DIR":
        return Settings.model_fields["data_dir"].default
    value: Any = Settings(data_dir=DATA)
    for part in name.removeprefix("PROCTOR_").lower().split("__"):
        assert hasattr(value, part), f"{name}: no such setting"
        value = getattr(value, part)
    return value


def as_written(value: Any) -> str:
    """A default as the README writes it: the data folder as ``<data dir>``,
    a relative folder with its ``./``."""
    text = str(value).replace(str(DATA), "<data dir>")
    if isinstance(value, Path) and not value.is_absolute():
        text = f"./{text}"
    return text


def test_the_table_is_found_and_names_the_database() -> None:
    rows = settings_rows(README.read_text())
    names = [n for ns, _ in rows for n in ns]
    assert "PROCTOR_DATABASE_URL" in names and "PROCTOR_DATA_DIR" in names


@pytest.mark.parametrize(
    ("names", "cell"),
    settings_rows(README.read_text()),
    ids=lambda v: ",".join(v) if isinstance(v, list) else "",
)
def test_each_row_shows_the_code_s_default(names: list[str], cell: str) -> None:
    """The n-th setting of a row has its default as the n-th value in
    backticks of the default cell; a setting with no default says ``unset``."""
    shown = re.findall(r"`([^`]*)`", cell)
    for i, name in enumerate(names):
        value = default_of(name)
        if name in IN_WORDS:
            assert value is None, f"{name}: the table describes a default it does not have"
            continue
        if value is None:
            assert cell.startswith("unset"), f"{name} has no default: the row must say 'unset'"
            continue
        assert i < len(shown), f"{name}: no default shown in {cell!r}"
        assert shown[i] == as_written(value), f"{name}: README shows {shown[i]!r}"


def test_a_drifted_default_is_caught() -> None:
    """The check itself: the file name this rule exists for would fail it."""
    text = README.read_text().replace("<data dir>/proctor.db", "<data dir>/proctor.core.db")
    rows = dict((tuple(n), c) for n, c in settings_rows(text))
    cell = rows[("PROCTOR_DATABASE_URL",)]
    with pytest.raises(AssertionError, match="README shows"):
        test_each_row_shows_the_code_s_default(["PROCTOR_DATABASE_URL"], cell)
