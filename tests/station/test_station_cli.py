"""``proctor station`` / ``proctor policy`` as a user types them: clear one-line errors."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from proctor.core.errors import ConfigError
from proctor.station.config import load_station_config
from proctor.station.profiles import build_cell
from tests.station.conftest import PROCTOR, clean_env


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env(PROCTOR_DATA_DIR=str(tmp_path / "data"))
    return subprocess.run([*PROCTOR, *args], env=env, capture_output=True, text=True, timeout=60)


def test_demo_profiles_are_listed_with_the_reference(tmp_path: Path) -> None:
    out = _run(["policy", "demo-profiles"], tmp_path)
    assert out.returncode == 0
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert {"reference", "swift", "steady"} <= set(names)
    reference = next(line for line in out.stdout.splitlines() if line.startswith("reference"))
    assert "(reference)" in reference


def test_bad_arguments_get_one_line_errors(tmp_path: Path) -> None:
    # each case is a fresh interpreter: kept to the ones that cross the CLI's own code
    cases = [
        (["policy", "serve-demo", "--profile", "nope"], "demo profile 'nope' is unknown"),
        (
            ["station", "episode", "--policy", "http://x", "--object", "spoons"],
            "policy: the policy URL must start with ws://",
        ),
        (
            ["station", "episode", "--policy", "ws://x", "--object", "spoons", "--open-gripper"],
            "--open-gripper: only with --home-first",
        ),
        (
            [
                "station",
                "log",
                "abc",
                "--placed",
                "1",
                "--lost",
                "0",
                "--dropped",
                "0",
                "--outcome",
                "won",
            ],
            "outcome: must be one of",
        ),
    ]
    for args, message in cases:
        out = _run(args, tmp_path)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr


def test_a_bad_station_config_names_the_field(tmp_path: Path) -> None:
    cfg = tmp_path / "station.toml"
    cfg.write_text("telemetry_hz = 50\n[cameras.wrist]\nwidth = 161\n")
    out = _run(["station", "run", "--config", str(cfg)], tmp_path)
    assert out.returncode == 2
    assert "telemetry_hz" in out.stderr and "cameras.wrist.width" in out.stderr
    with pytest.raises(ConfigError, match=re.escape("sim.clock: must be 'virtual' or 'monotonic'")):
        build_cell("sim", load_station_config(None, sim={"clock": "sundial"}))
    with pytest.raises(ConfigError, match="profile 'moon' is not one of sim, twin, real"):
        build_cell("moon", load_station_config(None))
