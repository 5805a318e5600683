"""`proctor station run` logs its lifecycle at INFO, with a timestamp and the
logger's name on every line (journald keeps what the daemon writes): the
daemon on the simulated cell, in its own process, driven over its local API."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

from tests.station.api_support import daemon_http
from tests.station.conftest import PROCTOR, clean_env

# e.g. "2026-11-24 09:30:01,123 INFO proctor.station.episode_runner [episode] episode … started"
LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<name>[\w.]+) "
    r"\[[^\]]+\] (?P<message>.*)$"
)


def test_the_daemon_logs_its_lifecycle_at_info(serve_demo, processes, tmp_path: Path) -> None:
    url = serve_demo("steady")
    cfg = tmp_path / "station.toml"
    cfg.write_text(
        'name = "cell-logs"\n'
        "[api]\nport = 0\n"
        '[sim]\nclock = "monotonic"\n'
        "[cameras.exterior]\nwidth = 160\nheight = 120\nfps = 10\n"
        "[cameras.wrist]\nwidth = 160\nheight = 120\nfps = 10\n"
        '[work]\nsource = "adhoc"\n'
        f'[work.options]\npolicy = "{url}"\nobject = "towels"\nitems = 8\nseed = 3\n'
        'dialect = "positronic_v1"\n'
    )
    # no PROCTOR_LOG_LEVEL: INFO is the default
    env = clean_env(PROCTOR_DATA_DIR=str(tmp_path / "data"))
    daemon = processes([*PROCTOR, "station", "run", "--profile", "sim", "--config", str(cfg)], env)
    api = daemon.wait_for(r"listening on (http://127\.0\.0\.1:\d+)").group(1)
    with daemon_http(api, tmp_path / "data", timeout=10) as http:
        # the operator homes the arm (nothing homes on its own), then arms and starts
        homed = http.post("/api/home", json={"cell_clear": True})
        assert homed.status_code == 200, homed.text
        uid = http.post("/api/next").json()["episode"]
        assert http.post("/api/start").json()["state"] == "running"
        time.sleep(1.0)
        http.post("/api/stop")
        daemon.wait_for(rf"episode {uid} ended after", timeout=60)
    daemon.kill(signal.SIGTERM)

    lines = [m for m in map(LINE.match, daemon.log.read_text().splitlines()) if m]
    info = [(m["name"], m["message"]) for m in lines if m["level"] == "INFO"]
    expected = [
        ("proctor.station.cli", r"interpreter switch interval 1\.0 ms"),
        ("proctor.station.episode_runner", r"station cell-logs \(sim\): connecting the cell"),
        ("proctor.station.cell", r"arm connected \(SimArm\)"),
        # a fresh simulated gripper needs activating, as a Robotiq after power-on does
        ("proctor.station.cell", r"gripper activated \(it was not"),
        ("proctor.station.cell", r"gripper connected \(SimGripper\)"),
        ("proctor.station.cell", r"camera exterior connected"),
        ("proctor.station.cell", r"camera wrist connected"),
        ("proctor.station.episode_runner", r"homing the arm \(operator confirmed the cell clear\)"),
        ("proctor.station.episode_runner", r"arm homed in \d+\.\d s"),
        ("proctor.station.episode_runner", rf"armed run X-\w+ as episode {uid} \(towels\)"),
        ("proctor.station.episode_runner", rf"episode {uid} started"),
        ("proctor.station.episode_runner", r"operator stop requested: operator stop"),
        (
            "proctor.station.episode_runner",
            rf"episode {uid} ended after \d+\.\d s: proposed operator_stop",
        ),
    ]
    found = 0
    for name, pattern in expected:  # each one, in this order
        at = next(
            (
                i
                for i in range(found, len(info))
                if info[i][0] == name and re.match(pattern, info[i][1])
            ),
            None,
        )
        assert at is not None, f"no INFO line {name}: {pattern} after line {found}:\n" + "\n".join(
            f"{n}: {m}" for n, m in info
        )
        found = at + 1
    # the operator's homing is the only one: nothing homes on connect or after the episode
    homings = [
        m for n, m in info if n == "proctor.station.episode_runner" and m.startswith("homing")
    ]
    assert len(homings) == 1, homings
