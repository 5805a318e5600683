"""``proctor user …`` and ``proctor serve`` as an admin runs them."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from proctor.cli import main
from proctor.core.db import migrate
from proctor.core.db.engine import make_engine
from tests.web.conftest import PASSWORD

ROOT = Path(__file__).resolve().parents[2]


class Cli:
    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str
    ) -> None:
        self.monkeypatch, self.capsys = monkeypatch, capsys
        for key in list(os.environ):
            if key.startswith("PROCTOR_"):
                monkeypatch.delenv(key)
        monkeypatch.setenv("PROCTOR_DATABASE_URL", url)
        monkeypatch.setenv("PROCTOR_ENV", "test")
        self.url = url

    def __call__(
        self, *args: str, stdin: str = "", env: dict[str, str] | None = None
    ) -> tuple[int, str, str]:
        with self.monkeypatch.context() as m:
            for k, v in (env or {}).items():
                m.setenv(k, v)
            m.setattr(sys, "stdin", io.StringIO(stdin))  # not a terminal
            try:
                main(list(args))
                code = 0
            except SystemExit as exc:
                code = int(exc.code or 0)
        out, err = self.capsys.readouterr()
        return code, out, err

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        engine = make_engine(self.url)
        try:
            with engine.connect() as conn:
                return [tuple(r) for r in conn.execute(sa.text(sql))]
        finally:
            engine.dispose()


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], web_db_url: str
) -> Cli:
    return Cli(monkeypatch, capsys, web_db_url)


def test_create_admin_reads_the_password_from_the_environment_or_stdin(cli: Cli) -> None:
    code, out, err = cli("user", "create-admin", "Root", env={"PROCTOR_ADMIN_PASSWORD": PASSWORD})
    assert (code, err) == (0, "") and "created user 'root'" in out
    code, _, _ = cli("user", "create-admin", "second", stdin="piped in password\n")
    assert code == 0
    users = cli.rows(
        "SELECT u.username, r.role, u.password_hash LIKE '$argon2id$%' FROM users u "
        "JOIN user_roles r ON r.user_id = u.id ORDER BY u.username"
    )
    assert [(u, r, bool(h)) for u, r, h in users] == [
        ("root", "admin", True),
        ("second", "admin", True),
    ]
    assert cli.rows("SELECT actor_label, action FROM audit_log ORDER BY id") == [
        ("cli", "user.create"),
        ("cli", "user.create"),
    ]


def test_the_admin_it_creates_can_sign_in(cli: Cli, web_settings: object) -> None:
    from fastapi.testclient import TestClient

    from proctor.web.app import create_app
    from tests.web.conftest import login

    assert cli("user", "create-admin", "root", stdin=PASSWORD + "\n")[0] == 0
    client = TestClient(create_app(web_settings), follow_redirects=False)  # type: ignore[arg-type]
    assert login(client, "root").status_code == 303
    assert client.get("/api/users").status_code == 200


def test_create_admin_refuses_weak_passwords_duplicates_and_argv(cli: Cli) -> None:
    code, _, err = cli("user", "create-admin", "root", stdin="short\n")
    assert code == 2
    assert err.strip() == "error: the password from standard input must be at least 10 characters"
    assert cli.rows("SELECT count(*) FROM users") == [(0,)]
    assert cli("user", "create-admin", "root", stdin=PASSWORD)[0] == 0
    code, _, err = cli("user", "create-admin", "root", stdin=PASSWORD)
    assert code == 2 and "user 'root' already exists" in err
    code, _, err = cli("user", "create-admin", "eve", "--password", PASSWORD)
    assert code == 2 and "No such option" in err
    code, _, err = cli("user", "create-admin", "Bad Name!", stdin=PASSWORD)
    assert code == 2 and "username" in err


def test_user_password_resets_it_ends_sessions_and_refuses_what_it_must(
    cli: Cli, web_settings: object
) -> None:
    """An admin's reset from the command line (a station host's console has
    no account page): the new password signs in, the old one and the old
    session do not, the account's API tokens are revoked, and a weak password
    or an unknown user changes nothing."""
    from fastapi.testclient import TestClient

    from proctor.web.app import create_app
    from tests.web.conftest import login

    new_password = "a brand new passphrase"
    assert cli("user", "add", "alice", "--role", "operator", stdin=PASSWORD + "\n")[0] == 0
    assert cli("user", "token", "create", "alice", "--name", "script")[0] == 0
    client = TestClient(create_app(web_settings), follow_redirects=False)  # type: ignore[arg-type]
    assert login(client, "alice").status_code == 303
    assert client.get("/api/me").status_code == 200
    before = cli.rows("SELECT password_hash FROM users WHERE username = 'alice'")

    code, _, err = cli("user", "password", "alice", stdin="short\n")
    assert code == 2 and "at least 10 characters" in err
    code, _, err = cli("user", "password", "nobody", stdin=new_password + "\n")
    assert code == 2 and "no user 'nobody'" in err
    assert cli.rows("SELECT password_hash FROM users WHERE username = 'alice'") == before

    code, out, err = cli("user", "password", "alice", stdin=new_password + "\n")
    assert (code, err) == (0, ""), err
    assert "set the password of 'alice'" in out
    assert client.get("/api/me").status_code == 401  # the old session ended
    assert login(client, "alice").status_code != 303  # the old password is refused
    assert login(client, "alice", new_password).status_code == 303
    assert cli.rows("SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL") == [(0,)]
    assert ("cli", "user.password") in cli.rows("SELECT actor_label, action FROM audit_log")


def test_user_commands_refuse_a_database_that_is_behind(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cli = Cli(monkeypatch, capsys, f"sqlite:///{tmp_path / 'empty.db'}")
    code, _, err = cli("user", "list")
    assert code == 2
    assert "run `proctor db upgrade`" in err and len(err.strip().splitlines()) == 1


def test_add_list_and_tokens(cli: Cli) -> None:
    code, out, _ = cli(
        "user", "add", "ada", "--role", "submitter", "-r", "operator",
        env={"PROCTOR_USER_PASSWORD": PASSWORD},
    )  # fmt: skip
    assert code == 0 and "(id 1; operator, submitter)" in out
    assert cli("user", "add", "bot", "--no-password")[0] == 0
    code, _, err = cli("user", "add", "eve", "--role", "wizard", "--no-password")
    assert code == 2 and "unknown role 'wizard'" in err

    code, out, _ = cli("user", "list")
    assert code == 0
    lines = [line for line in out.splitlines() if "ada" in line or "bot" in line]
    assert len(lines) == 2 and "operator, submitter" in lines[0]

    code, out, err = cli(
        "user", "token", "create", "ada", "--name", "ci", "-s", "submitter", "--expires-days", "7"
    )
    assert code == 0
    token = out.strip()
    assert token.startswith("prt_") and "\n" not in token  # stdout is the token alone
    assert "Shown once" in err and "scopes [submitter]" in err
    (stored,) = cli.rows("SELECT token_hash, scopes FROM api_tokens")
    assert token not in str(stored)

    code, _, err = cli("user", "token", "create", "ada", "--name", "x", "-s", "admin")
    assert code == 2 and "cannot grant the 'admin' role" in err

    code, out, _ = cli("user", "token", "list", "ada")
    assert token[:12] in out and token not in out and "active" in out

    code, out, _ = cli("user", "token", "revoke", token[:12])
    assert code == 0 and "revoked token 1" in out
    assert cli.rows("SELECT revoked_at IS NOT NULL FROM api_tokens") == [(True,)]
    code, _, err = cli("user", "token", "revoke", "999")
    assert code == 2 and "no token '999'" in err
    actions = [a for (a,) in cli.rows("SELECT action FROM audit_log ORDER BY id")]
    assert actions == ["user.create", "user.create", "token.create", "token.revoke"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(ROOT / ".venv/bin/proctor"), "serve", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_cli_tokens_expire_by_default_unless_asked_not_to(cli: Cli) -> None:
    assert cli("user", "add", "bot", "--no-password")[0] == 0
    code, _, err = cli("user", "token", "create", "bot", "--name", "default")
    assert code == 0 and "expires never" not in err
    code, _, err = cli("user", "token", "create", "bot", "--name", "service", "--no-expiry")
    assert code == 0 and "expires never" in err
    code, _, err = cli(
        "user", "token", "create", "bot", "--name", "x", "--no-expiry", "--expires-days", "3"
    )  # fmt: skip
    assert code == 2 and "exclude each other" in err
    rows = cli.rows("SELECT name, created_at, expires_at FROM api_tokens ORDER BY id")
    (_, created, expires), (_, _, never) = rows
    assert never is None and expires is not None
    as_time = [datetime.fromisoformat(str(v)) for v in (created, expires)]
    assert as_time[1] - as_time[0] == timedelta(days=90)


def test_serve_migrates_then_serves(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'proctor.db'}"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env |= {"PROCTOR_DATABASE_URL": url, "PROCTOR_DATA_DIR": str(tmp_path)}

    refused = subprocess.run(
        [str(ROOT / ".venv/bin/proctor"), "serve", "--no-migrate"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "run `proctor db upgrade`" in refused.stderr and "Traceback" not in refused.stderr

    proc = _serve(env | {"PROCTOR_WEB__PORT": str(port)})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/api/health", timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "proctor serve did not come up"
                time.sleep(0.2)
        assert r.status_code == 200 and r.json()["status"] == "ok"
        assert httpx.get(f"http://127.0.0.1:{port}/login").status_code == 200
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0]
    assert migrate.current(url) == migrate.head()
    assert "migrating the database" in output and f"http://127.0.0.1:{port}/" in output
    assert "PROCTOR_SECRET_KEY is not set" in output  # dev default, said loudly


def test_create_admin_prompts_at_a_terminal_without_echo(tmp_path: Path) -> None:
    """At a terminal the password is asked twice, hidden; it never shows."""
    import pty
    import select
    import termios

    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env |= {"PROCTOR_DATA_DIR": str(tmp_path), "PROCTOR_ENV": "test"}
    migrate.upgrade(f"sqlite:///{tmp_path / 'proctor.db'}")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/proctor"), "user", "create-admin", "root"],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    seen = b""

    def wait_for_hidden_prompt(marker: bytes) -> None:
        """Until the prompt is shown and the terminal stops echoing: typing
        earlier would be discarded when the prompt turns echo off."""
        nonlocal seen
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.1)[0]:
                seen += os.read(master, 1024)
            echo = termios.tcgetattr(master)[3] & termios.ECHO
            if marker in seen and not echo:
                return
        raise AssertionError(f"no hidden prompt {marker!r}; the terminal shows {seen!r}")

    try:
        wait_for_hidden_prompt(b"Password for root:")
        os.write(master, b"typed at a terminal\n")
        wait_for_hidden_prompt(b"Repeat for confirmation:")
        os.write(master, b"typed at a terminal\n")
        assert proc.wait(timeout=60) == 0
        while select.select([master], [], [], 0.5)[0]:
            try:
                seen += os.read(master, 1024)
            except OSError:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert b"created user 'root'" in seen
    assert b"typed at a terminal" not in seen  # hidden input
