"""The ``proctor`` command as a user runs it: a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer
from typer.core import TyperGroup

from proctor.cli import app

PROCTOR = [sys.executable, "-m", "proctor"]


def run(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    full_env.update(env or {})
    return subprocess.run(
        [*PROCTOR, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=120
    )


def _all_command_paths() -> list[list[str]]:
    # through list_commands/get_command, as click resolves them: the root
    # builds a service's commands only when asked (proctor/cli.py)
    root = typer.main.get_command(app)
    paths: list[list[str]] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        paths.append(path)
        if isinstance(cmd, click.Group | TyperGroup):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, [*path, name]
                walk(sub, [*path, name])

    walk(root, [])
    return paths


def test_every_command_has_help() -> None:
    """In-process walk of the command tree: each command answers --help."""
    from typer.testing import CliRunner

    runner = CliRunner()
    paths = _all_command_paths()
    assert len(paths) > 10
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output


def test_help_keeps_bracketed_words() -> None:
    """Help is plain text: "overrides [api] port" is not read as a style tag and
    swallowed (rich markup is off for every command group)."""
    import re

    from typer.testing import CliRunner

    runner = CliRunner()
    root = typer.main.get_command(app)
    checked = 0
    for path in _all_command_paths():
        cmd = root
        for name in path:
            assert isinstance(cmd, click.Group | TyperGroup)
            found = cmd.get_command(click.Context(cmd), name)
            assert found is not None
            cmd = found
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        words = [w for text in texts for w in re.findall(r"\[[a-z][^\]\s]*\]", text)]
        if not words:
            continue
        shown = runner.invoke(app, [*path, "--help"], terminal_width=200).output
        for word in words:
            assert word in shown, (path, word)
            checked += 1
    assert checked >= 2  # station run's [api] and [uplink] at least


def test_a_reading_command_in_a_folder_without_data_creates_nothing(tmp_path: Path) -> None:
    """Run where there is no data folder, a command that only reads refuses,
    naming the folder it looked in and how to name another; nothing is made."""
    for args in (["campaign", "status", "1"], ["campaign", "list"]):
        r = run(args, cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        assert f"there is no database in {tmp_path / 'proctor-data'}" in r.stderr
        assert "PROCTOR_DATA_DIR" in r.stderr
        assert list(tmp_path.iterdir()) == []
    # a command that makes something makes the database, and says where
    made = run(["user", "add", "ada", "--no-password", "--role", "submitter"], cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert f"new database: {tmp_path / 'proctor-data' / 'proctor.db'} (empty)" in made.stderr
    listed = run(["user", "list"], cwd=tmp_path)
    assert listed.returncode == 0 and "ada" in listed.stdout, listed.stderr
    # enrolling a station on a new server makes the database too
    fresh = tmp_path / "server"
    fresh.mkdir()
    enrolled = run(["station", "enrol", "cell-1", "--profile", "sim"], cwd=fresh)
    assert enrolled.returncode == 0, enrolled.stderr
    assert f"new database: {fresh / 'proctor-data' / 'proctor.db'} (empty)" in enrolled.stderr


def test_campaign_create_names_the_options_it_still_needs(tmp_path: Path) -> None:
    r = run(["campaign", "create", "--items", "3", "--tau", "60"], cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert (
        "--name, --reference, --policy, --object, --cap, --episodes-per-cell: "
        "required without a protocol file"
    ) in r.stderr
    assert list(tmp_path.iterdir()) == []
    shown = " ".join(run(["campaign", "create", "--help"]).stdout.split())  # unwrapped
    assert shown.count("Required without a protocol file.") == 8


def test_help_and_version_in_a_subprocess() -> None:
    result = run(["--help"])
    assert result.returncode == 0
    for name in ["demo", "serve", "station", "analyze", "power", "annotate", "export", "db"]:
        assert name in result.stdout
    version = run(["version"])
    assert version.returncode == 0 and version.stdout.startswith("proctor ")


def test_version_and_help_import_no_service() -> None:
    """Start-up is lazy: printing a version or the command list imports no
    service's CLI, SQLAlchemy or FastAPI (it used to import them all)."""
    for args in (["version"], ["--help"]):
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
        result = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "proctor", *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        imported = {
            line.rsplit("|", 1)[-1].strip()
            for line in result.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert "proctor.cli" in imported
        heavy = {
            m
            for m in imported
            if m.split(".")[0] in {"sqlalchemy", "fastapi", "numpy"}
            or m.startswith(("proctor.web", "proctor.station", "proctor.analysis"))
            or (m.endswith(("_cli", ".cli")) and m != "proctor.cli")
        }
        assert heavy == set(), (args, sorted(heavy)[:10])


def test_the_listed_help_is_each_commands_own() -> None:
    """proctor --help prints SERVICE_COMMANDS' one-liners without importing the
    services: they must say what each command's own help says."""
    from proctor.cli import SERVICE_COMMANDS, load_service_command

    for name, spec in SERVICE_COMMANDS.items():
        cmd = load_service_command(name)
        own = " ".join((cmd.help or "").split("\n\n")[0].split())
        assert spec.help == own, name


def test_db_upgrade_and_current_on_both_databases(fresh_db_url: str, tmp_path: Path) -> None:
    env = {"PROCTOR_DATABASE_URL": fresh_db_url, "PROCTOR_DATA_DIR": str(tmp_path)}
    before = run(["db", "current"], env)
    assert before.returncode == 0, before.stderr
    assert "at revision base" in before.stdout and "behind" in before.stdout

    up = run(["db", "upgrade"], env)
    assert up.returncode == 0, up.stderr
    now = run(["db", "current"], env)
    assert "up to date" in now.stdout

    down = run(["db", "downgrade", "base"], env)
    assert down.returncode == 0, down.stderr
    assert "at revision base" in down.stdout


def test_default_database_is_sqlite_under_data_dir(tmp_path: Path) -> None:
    result = run(["db", "upgrade"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "proctor-data" / "proctor.db").is_file()


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    result = run(["--config", str(tmp_path / "missing.toml"), "db", "current"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: config file {tmp_path / 'missing.toml'}: not found"
    ]
    assert "Traceback" not in result.stderr


def test_unexpected_failures_are_one_line_unless_debug(tmp_path: Path) -> None:
    env = {"PROCTOR_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"}
    plain = run(["db", "current"], env)
    assert plain.returncode == 1
    lines = plain.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unexpected failure: OperationalError")
    assert "--debug" in lines[0]

    debug = run(["--debug", "db", "current"], env)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr


def test_unknown_command_is_a_usage_error() -> None:
    result = run(["no-such-command"])
    assert result.returncode == 2
    assert "No such command" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("backend", ["sqlite"])
def test_config_file_selects_database(tmp_path: Path, backend: str) -> None:
    cfg = tmp_path / "proctor.toml"
    cfg.write_text(f'database_url = "sqlite:///{tmp_path / "cfg.db"}"\n')
    result = run(["--config", str(cfg), "db", "upgrade"])
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "cfg.db").is_file()
