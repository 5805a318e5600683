"""Settings: defaults, the config file, the environment over it, secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.core.errors import ConfigError
from proctor.core.settings import load_settings


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("PROCTOR_"):
            monkeypatch.delenv(key)


def test_defaults_live_under_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert s.db_url == f"sqlite:///{tmp_path / 'proctor-data' / 'proctor.db'}"
    assert s.artifacts_location == str(tmp_path / "proctor-data" / "artifacts")
    assert s.web.port == 8000


def test_data_dir_from_environment_moves_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PROCTOR_DATA_DIR", str(tmp_path / "d"))
    s = load_settings()
    assert s.db_url.endswith(f"{tmp_path}/d/proctor.db")
    assert s.artifacts_location == str(tmp_path / "d" / "artifacts")


def test_environment_overrides_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "proctor.toml"
    cfg.write_text('database_url = "sqlite:///from-file.db"\n[web]\nport = 9000\n')
    s = load_settings(cfg)
    assert s.db_url == "sqlite:///from-file.db"
    assert s.web.port == 9000
    monkeypatch.setenv("PROCTOR_DATABASE_URL", "sqlite:///from-env.db")
    monkeypatch.setenv("PROCTOR_WEB__PORT", "9100")
    s = load_settings(cfg)
    assert s.db_url == "sqlite:///from-env.db"
    assert s.web.port == 9100


def test_the_web_surface_is_the_server_unless_set_and_names_itself_when_wrong(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load_settings().web.surface == "server"
    monkeypatch.setenv("PROCTOR_WEB__SURFACE", "station_console")
    assert load_settings().web.surface == "station_console"
    monkeypatch.setenv("PROCTOR_WEB__SURFACE", "console")
    with pytest.raises(ConfigError, match=r"web\.surface: Input should be 'server' or"):
        load_settings()


def test_config_file_named_by_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "proctor.toml"
    cfg.write_text('artifacts = "s3://bucket/prefix"\n')
    monkeypatch.setenv("PROCTOR_CONFIG", str(cfg))
    assert load_settings().artifacts_location == "s3://bucket/prefix"


@pytest.mark.parametrize("secret", ["secret_key", "encryption_key"])
def test_secrets_in_the_config_file_are_refused(tmp_path: Path, secret: str) -> None:
    cfg = tmp_path / "proctor.toml"
    cfg.write_text(f'{secret} = "hunter2"\n')
    with pytest.raises(ConfigError, match=f"'{secret}' is a secret.*PROCTOR_{secret.upper()}"):
        load_settings(cfg)


def test_unknown_keys_and_bad_values_name_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "proctor.toml"
    cfg.write_text("databse_url = 'typo'\n")
    with pytest.raises(ConfigError, match="databse_url"):
        load_settings(cfg)
    cfg.write_text("[web]\nport = 70000\n")
    with pytest.raises(ConfigError, match=r"web\.port"):
        load_settings(cfg)


def test_invalid_toml_is_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "proctor.toml"
    cfg.write_text("port = = 1\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_settings(cfg)


def test_production_requires_a_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROCTOR_ENV", "prod")
    with pytest.raises(ConfigError, match="PROCTOR_SECRET_KEY"):
        load_settings()
    monkeypatch.setenv("PROCTOR_SECRET_KEY", "x" * 32)
    assert load_settings().secret_key is not None


def test_the_stores_public_endpoint_is_an_http_origin_for_an_s3_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PROCTOR_ARTIFACTS_PUBLIC_ENDPOINT``: unset is the server's own
    endpoint; set, an http(s) origin (presigned URLs are signed for its host),
    and only with an s3:// store."""
    monkeypatch.setenv("PROCTOR_ARTIFACTS", "s3://bucket/prefix")
    assert load_settings(data_dir=tmp_path).artifacts_public_endpoint is None
    monkeypatch.setenv("PROCTOR_ARTIFACTS_PUBLIC_ENDPOINT", "https://s3.lab.example.org/")
    assert load_settings(data_dir=tmp_path).artifacts_public_endpoint == (
        "https://s3.lab.example.org"
    )
    for bad in (
        "s3.lab.example.org",
        "ftp://s3.lab.example.org",
        "https://s3.lab.example.org/bucket",
        "https://key:secret@s3.lab.example.org",
        "https://s3.lab.example.org:99999",
        "https://s3.lab.example.org?x=1",
        "",
    ):
        monkeypatch.setenv("PROCTOR_ARTIFACTS_PUBLIC_ENDPOINT", bad)
        with pytest.raises(ConfigError, match=r"artifacts_public_endpoint: .*http\(s\) origin"):
            load_settings(data_dir=tmp_path)
    monkeypatch.setenv("PROCTOR_ARTIFACTS_PUBLIC_ENDPOINT", "https://s3.lab.example.org")
    monkeypatch.delenv("PROCTOR_ARTIFACTS")
    with pytest.raises(ConfigError, match="artifacts_public_endpoint: only for an s3://"):
        load_settings(data_dir=tmp_path)
