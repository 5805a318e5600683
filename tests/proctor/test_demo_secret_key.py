"""`proctor demo` signs its sessions with a random key of its own data
folder, never with the published development key."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest

from proctor.core.errors import ConfigError
from proctor.core.settings import load_settings
from proctor.demo.run import with_own_secret_key


def test_the_demo_folder_gets_its_own_key_and_reuses_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from proctor.web.app import create_app
    from proctor.web.auth.sessions import DEV_SECRET_KEY

    data_dir = tmp_path / "demo-data"
    first = with_own_secret_key(load_settings(env="dev", data_dir=data_dir))
    assert first.secret_key is not None
    key = first.secret_key.get_secret_value()
    assert key != DEV_SECRET_KEY and len(key) >= 48
    path = data_dir / "secret_key"
    assert path.read_text().strip() == key
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    # the next run of the same folder signs with the same key: sessions survive
    again = with_own_secret_key(load_settings(env="dev", data_dir=data_dir))
    assert again.secret_key is not None and again.secret_key.get_secret_value() == key
    # another folder, another key
    other = with_own_secret_key(load_settings(env="dev", data_dir=tmp_path / "other"))
    assert other.secret_key is not None and other.secret_key.get_secret_value() != key

    # and the server it starts does not warn that anyone can forge a session
    with caplog.at_level(logging.WARNING, logger="proctor.web.auth.sessions"):
        app = create_app(again)
    assert app.state.web.secret_key == key
    assert not [r for r in caplog.records if "forge" in r.getMessage()]


def test_a_key_from_the_environment_wins_and_no_file_is_made(tmp_path: Path) -> None:
    given = "Zq8vR2mW5kT0yH3nB7cX1fJ4sL9pD6gA-e_uQiOwEr"
    settings = with_own_secret_key(load_settings(env="dev", data_dir=tmp_path, secret_key=given))
    assert settings.secret_key is not None and settings.secret_key.get_secret_value() == given
    assert not (tmp_path / "secret_key").exists()


def test_a_damaged_key_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "secret_key").write_text("short\n")
    with pytest.raises(ConfigError, match="secret_key"):
        with_own_secret_key(load_settings(env="dev", data_dir=tmp_path))
