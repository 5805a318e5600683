"""The daemon's local API, as the operator console uses it: a whole rollout,
the post-rollout form's validation, a safety stop, the explicit recovery and
the explicit homing, and nothing that names the policy in any response.

No console page is open here, so the console-link deadman is off in these
configs (it has its own tests in tests/station/test_stop.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from proctor.core.artifacts import LocalArtifactStore
from proctor.station.daemon import StationDaemon
from tests.station.api_support import TEST_WS, station_client
from tests.station.conftest import sim_config


@pytest.fixture
def console(
    station_db, policy_server, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Any]:
    _, sessions = station_db
    realtime = getattr(request, "param", False)
    server = policy_server("reference")
    cfg = sim_config(
        name="cell-api",
        sim={"clock": "monotonic"} if realtime else {},
        console_deadman_s=0,
        work={
            "source": "adhoc",
            "options": {
                "policy": server.url,
                "object": "towels",
                "items": 2,
                "seed": 1,
                "repeat": 3,
            },
        },
    )
    daemon = StationDaemon(
        cfg,
        "sim",
        sessions=sessions,
        store=LocalArtifactStore(tmp_path / "artifacts"),
        spool_root=tmp_path / "spool",
    )
    daemon.open()
    seen: list[str] = []
    try:
        with station_client(daemon) as client:
            original = client.request

            def recording(method: str, url: str, **kw: Any):  # every response body is checked
                response = original(method, url, **kw)
                seen.append(
                    response.text if "json" in response.headers.get("content-type", "") else ""
                )
                seen.append(str(response.headers))
                return response

            client.request = recording  # type: ignore[method-assign]
            yield client, server, seen
    finally:
        daemon.close()


def _until(client: TestClient, state: str, timeout: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get("/api/status").json()
        if status["state"] == state:
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def test_a_whole_rollout_through_the_api(console) -> None:
    client, server, seen = console
    idle = client.get("/api/status").json()
    assert idle["state"] == "idle"
    # each camera's health is in the status (the simulated cell's are read on a virtual clock)
    assert {n: c["health"]["state"] for n, c in idle["cameras"].items()} == {
        "exterior": "ok",
        "wrist": "ok",
    }
    assert client.post("/api/start").status_code == 409
    assert client.post("/api/log", json={}).status_code == 409

    armed = client.post("/api/next")
    assert armed.status_code == 200
    body = armed.json()
    assert body["state"] == "armed"
    assert body["work"]["run_code"].startswith("X-")
    assert body["work"] | {} == {**body["work"], "object": "towels", "items": 2, "budget_s": 60.0}
    assert set(body["work"]) == {
        "run_code",
        "object",
        "items",
        "per_item_cap_s",
        "budget_s",
        "tote_side",
        "camera_side",
    }
    assert client.post("/api/next").status_code == 409  # one run at a time

    assert client.post("/api/start").json()["state"] in ("running", "finishing", "awaiting_log")
    with client.websocket_connect(f"{TEST_WS}/api/events") as ws:
        assert ws.receive_json()["state"] in ("running", "finishing", "awaiting_log")
    status = _until(client, "awaiting_log")
    assert status["proposed_outcome"] == "success"
    assert status["last_episode"]["telemetry_rate_hz"] >= 100.0

    jpeg = client.get("/api/preview/wrist")
    assert jpeg.status_code == 200 and jpeg.content[:2] == b"\xff\xd8"
    bad_cam = client.get("/api/preview/top")
    assert bad_cam.status_code == 422 and bad_cam.json()["field"] == "camera"

    too_many = client.post(
        "/api/log", json={"placed": 2, "lost": 1, "dropped": 0, "outcome": "success"}
    )
    assert too_many.status_code == 422
    assert too_many.json()["field"] == "placed + lost + dropped"
    not_all = client.post(
        "/api/log", json={"placed": 1, "lost": 0, "dropped": 0, "outcome": "success"}
    )
    assert not_all.status_code == 422 and not_all.json()["field"] == "outcome"
    good = {"placed": 2, "lost": 0, "dropped": 0, "outcome": "success"}
    for name in (5, "", "a\x00b", "x" * 65):
        bad_name = client.post("/api/log", json={**good, "operator_name": name})
        assert bad_name.status_code == 422, name
        assert bad_name.json()["field"] == "operator_name", name
    assert _until(client, "awaiting_log")  # nothing was half-written
    saved = client.post(
        "/api/log", json={"placed": 2, "lost": 0, "dropped": 0, "outcome": "success"}
    )
    assert saved.status_code == 200 and saved.json()["state"] == "idle"

    port = server.url.rsplit(":", 1)[1]
    for text in seen:
        assert "ws://" not in text and f":{port}" not in text and "reference" not in text


@pytest.mark.parametrize("console", [True], indirect=True)
def test_safety_stop_halts_the_arm_and_needs_a_recovery(console) -> None:
    client, _, _ = console
    assert client.post("/api/next").status_code == 200
    client.post("/api/start")
    time.sleep(0.8)
    stopped = client.post("/api/safety-stop")
    assert stopped.status_code == 200
    status = _until(client, "awaiting_log", timeout=20)
    assert status["proposed_outcome"] == "safety" and status["reason"] == "safety stop pressed"
    assert status["arm_error"] == "safety stop pressed"
    client.post("/api/log", json={"placed": 0, "lost": 0, "dropped": 0, "outcome": "safety"})
    refused = client.post("/api/next")
    assert refused.status_code == 409 and "recover it first" in refused.json()["detail"]
    recovered = client.post("/api/recover").json()
    assert recovered["arm_error"] is None and recovered["at_home"] is False
    # nothing homes on its own: not after the episode, not on recover
    not_home = client.post("/api/next")
    assert not_home.status_code == 409 and "home it first" in not_home.json()["detail"]
    unconfirmed = client.post("/api/home", json={"cell_clear": False, "open_gripper": True})
    assert unconfirmed.status_code == 422 and unconfirmed.json()["field"] == "cell_clear"
    homed = client.post("/api/home", json={"cell_clear": True})
    assert homed.status_code == 200, homed.text
    assert homed.json()["state"] == "idle" and homed.json()["at_home"] is True
    # the arm reports its mode on its own clock: the reply may catch the last
    # instant of the motion ("move"; seen once on a loaded machine), so the
    # mode is awaited, briefly, from the status the console polls
    deadline = time.monotonic() + 5.0
    while client.get("/api/status").json()["robot_mode"] != "idle":
        assert time.monotonic() < deadline, client.get("/api/status").json()
        time.sleep(0.05)
    # the gripper is activated on its own, explicit request (recover leaves it alone)
    activated = client.post("/api/gripper/activate")
    assert activated.status_code == 200
    assert activated.json()["notice"]["message"] == "gripper activated"
    armed = client.post("/api/next")
    assert armed.status_code == 200, armed.text
    assert armed.json()["state"] == "armed"
    refused = client.post("/api/gripper/activate")
    assert refused.status_code == 409 and "station is armed" in refused.json()["detail"]
    assert client.post("/api/disarm").json()["state"] == "awaiting_log"


def test_a_safety_stop_while_idle_halts_and_latches(console) -> None:
    """The safety stop acts in every state: while idle it is not refused, the
    arm is latched (homing refuses) until the operator recovers."""
    client, _, _ = console
    assert client.get("/api/status").json()["robot_mode"] == "idle"
    stopped = client.post("/api/safety-stop")
    assert stopped.status_code == 200, stopped.text
    assert stopped.json()["arm_error"] == "safety stop pressed while idle"
    refused = client.post("/api/home", json={"cell_clear": True})
    assert refused.status_code == 409 and "recover it first" in refused.json()["detail"]
    assert client.post("/api/recover").json()["arm_error"] is None
    assert client.post("/api/home", json={"cell_clear": True}).status_code == 200
    assert client.post("/api/next").json()["state"] == "armed"


def test_a_station_without_a_work_source_says_how_to_get_runs(station_db, tmp_path: Path) -> None:
    """Started as `proctor station run --profile sim` is (no --server, no [work]):
    Next run answers 404 with why there is no work and the commands that give some."""
    _, sessions = station_db
    daemon = StationDaemon(
        sim_config(name="cell-bare", console_deadman_s=0),
        "sim",
        sessions=sessions,
        store=LocalArtifactStore(tmp_path / "artifacts"),
        spool_root=tmp_path / "spool",
    )
    daemon.open()
    try:
        with station_client(daemon) as client:
            refused = client.post("/api/next")
            assert refused.status_code == 404, refused.text
            detail = str(refused.json()["detail"])
            assert detail.startswith("no work: this station has no work source")
            steps = ("proctor station enrol", "PROCTOR_STATION_TOKEN", "--server", "--campaign")
            for step in steps:
                assert step in detail, step
            assert client.get("/api/status").json()["state"] == "idle"  # nothing was claimed
    finally:
        daemon.close()
