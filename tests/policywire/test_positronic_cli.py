"""The CLI's entry points for a Positronic v1 server: ``proctor policy check``
and ``proctor station episode`` take ``--dialect positronic_v1``, give a bare
``ws://host:port`` its session path, and send the key as a Bearer token."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from proctor.cli import main
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.positronic import PositronicServer
from tests.policy_servers import PROCTOR, clean_env

TOKEN = "positronic-bearer-token"
EPISODE = ["station", "episode", "--object", "towels"]


def _proctor(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_policy_check_speaks_positronic_with_a_bearer_key(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POSITRONIC_TOKEN", TOKEN)
    with PositronicServer(DemoPolicy("reference"), auth_token=TOKEN) as server:
        # as a submitter gives it: the host and port, no path
        args = ["policy", "check", server.url, "--dialect", "positronic_v1", "--json", "-"]
        code, out, err = _proctor([*args, "--api-key-env", "POSITRONIC_TOKEN"], capsys)
        assert code == 0, out + err
        assert out.splitlines()[0] == "Passed: the station can run your policy."
        report = json.loads(out[out.index("\n{") :])
        assert report["verdict"] == "passed" and report["dialect"] == "positronic_v1"
        assert TOKEN not in out + err
        served = server.sessions
        assert served >= 1
        # without the key the server refuses the upgrade: the check fails, nothing served
        code, out, err = _proctor(args, capsys)
        assert code == 1, out + err
        assert server.sessions == served


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["policy", "check", "ws://127.0.0.1:9/other", "--dialect", "positronic_v1"],
            "ENDPOINT: the path must be /api/v1/session or /api/v1/session/<model_id>",
        ),
        (
            ["policy", "check", "ws://127.0.0.1:9", "--dialect", "positronic"],
            "--dialect: 'positronic' is not one of openpi, roboarena, positronic_v1",
        ),
        (
            [*EPISODE, "--policy", "ws://127.0.0.1:9/other", "--dialect", "positronic_v1"],
            "--policy: the path must be /api/v1/session",
        ),
        (
            [*EPISODE, "--policy", "ws://127.0.0.1:9", "--dialect", "nope"],
            "--dialect: 'nope' is not one of openpi, roboarena, positronic_v1",
        ),
    ],
)
def test_positronic_usage_errors_name_the_argument(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _proctor(args, capsys)
    assert code == 2, out + err
    assert message in err, err


def test_station_episode_runs_against_a_positronic_server(tmp_path: Path) -> None:
    env = clean_env(PROCTOR_DATA_DIR=str(tmp_path / "data"), POSITRONIC_TOKEN=TOKEN)
    cfg = tmp_path / "station.toml"
    cfg.write_text(
        "[cameras.exterior]\nwidth = 160\nheight = 120\nfps = 10\n"
        "[cameras.wrist]\nwidth = 160\nheight = 120\nfps = 10\n"
    )
    with PositronicServer(DemoPolicy("reference"), auth_token=TOKEN) as server:
        result = subprocess.run(
            [*PROCTOR, "station", "episode", "--policy", server.url, "--object", "towels",
             "--items", "1", "--seed", "5", "--config", str(cfg), "--ground-truth-log",
             "--dialect", "positronic_v1", "--api-key-env", "POSITRONIC_TOKEN"],
            env=env, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert server.sessions >= 1
    assert result.returncode == 0, result.stderr + result.stdout
    assert "ended: proposed outcome success" in result.stdout
