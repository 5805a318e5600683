"""The station against a Positronic protocol 3 server as the field serves it
now, written here from the published protocol (positronic-model-server 0.3's
README and ``protocol.py``; Positronic's ``drivers/roboarm/command.py`` for
the command's ``mode``), not from the station's own server or codec:

* ``POST /api/v1/keepalive`` answers ``{"alive_seconds": …}`` only once the
  model is loaded and warm (503 before, here), 401 without the bearer token;
* no ``GET /api/v1/models``;
* ``WS /api/v1/session``: ``waiting`` frames while loading, then ``ready``
  with ``protocol_version: 3`` and a ``session_id``; each request is
  ``{"session_id", "observation"}``, each reply ``{"result": […], "timing":
  {decode_ms, queued_ms, model_ms, infer_ms, served_ms}}``; ``end_session``
  is acknowledged in kind;
* each command a bare ``to_wire`` mapping (``cartesian_pos`` with xyz and a
  row-major rotation matrix) that may pin a ``mode``.

Its frames are packed with Positronic's own serialiser (the real peer's).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvicorn
from positronic_model_server.serialization import deserialise, serialise

from proctor.core import geometry
from proctor.core.domain import EndpointDialect, Outcome, Side
from proctor.policywire.client import PolicyClient, PolicyProtocolError
from proctor.policywire.conformance.check import CheckOptions, Status, check_endpoint
from proctor.policywire.dialects import positronic_frames as positronic
from proctor.policywire.handshake import auth_headers
from proctor.policywire.serving.demo import CONTROL_HZ, DemoPolicy
from proctor.policywire.wire import keys
from tests.backends import once
from tests.station.conftest import posed_observation

TOKEN = "field-token"
POSITION_CONTROL = {"type": "position_control"}
IMPEDANCE = {
    "type": "impedance",
    "kq": [40.0] * 7,
    "kqd": [4.0] * 7,
    "kx": [750.0] * 6,
    "kxd": [37.0] * 6,
}


def _droid_observation(obs: dict[str, Any]) -> dict[str, Any]:
    """Positronic's keys → the DROID keys the scripted demo policy reads."""
    pose = np.asarray(obs["robot_state.ee_pose"], dtype=np.float64)
    w, x, y, z = pose[3:7]  # Positronic's quaternion is w first
    euler = geometry.matrix_to_euler(geometry.quat_to_matrix(np.array([x, y, z, w])))
    out = {k: v for k, v in obs.items() if k.startswith("sim/")}
    out["observation/cartesian_position"] = np.concatenate([pose[:3], euler])
    out["observation/joint_position"] = np.asarray(obs["robot_state.q"])
    out["observation/gripper_position"] = np.asarray(obs["grip"])
    out["prompt"] = obs.get("task", "")
    return out


def _waypoints(rows: np.ndarray, mode: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A cartesian chunk → Positronic actions, one per control step, commands bare."""
    out = []
    for i, row in enumerate(rows):
        command: dict[str, Any] = {
            "type": "cartesian_pos",
            "pose": np.concatenate([row[:3], geometry.euler_to_matrix(row[3:6]).ravel()]),
        }
        if mode is not None:
            command["mode"] = mode
        out.append(
            {"robot_command": command, "target_grip": float(row[6]), "timestamp": i / CONTROL_HZ}
        )
    return out


@dataclass
class FieldServer:
    """The protocol 3 server, on uvicorn (as positronic-model-server serves)."""

    mode: dict[str, Any] | None = None
    load_s: float = 0.6  # how long "loading" lasts after the start
    alive: dict[str, Any] = field(default_factory=lambda: {"alive_seconds": 600})
    requests: list[dict[str, Any]] = field(default_factory=list)
    keepalive_answers: list[int] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.loaded = threading.Event()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, interface="asgi3", lifespan="off", log_level="warning", ws="websockets-sansio"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()
        self._loading = threading.Timer(self.load_s, self.loaded.set)
        self._loading.daemon = True
        self._loading.start()

    def stop(self) -> None:
        self._loading.cancel()
        self._server.should_exit = True
        self._thread.join(10)

    def _serve(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._sock]))

    @staticmethod
    def _authorized(scope: dict[str, Any]) -> bool:
        headers = dict(scope["headers"])
        return headers.get(b"authorization") == f"Bearer {TOKEN}".encode()

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._session(scope, receive, send)

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()  # the (empty) body
        if scope["path"] != "/api/v1/keepalive":
            status, body = 404, {"detail": "Not Found"}  # no model list on this server
        elif not self._authorized(scope):
            status, body = 401, {"detail": "Invalid or missing bearer token"}
        elif not self.loaded.is_set():
            status, body = 503, {"detail": "loading"}
        else:
            status, body = 200, self.alive
        if scope["path"] == "/api/v1/keepalive":
            self.keepalive_answers.append(status)
        payload = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    async def _session(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()  # websocket.connect
        if scope["path"] != "/api/v1/session" or not self._authorized(scope):
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "websocket.accept"})
        while not self.loaded.is_set():
            await send(
                {
                    "type": "websocket.send",
                    "bytes": serialise({"status": "waiting", "message": "warming"}),
                }
            )
            await asyncio.sleep(0.05)
        session_id = uuid.uuid4().hex
        ready = {
            "status": "ready",
            "protocol_version": 3,
            "session_id": session_id,
            "meta": {"action_fps": CONTROL_HZ},
        }
        await send({"type": "websocket.send", "bytes": serialise(ready)})
        policy = DemoPolicy("reference").new_session()
        while True:
            event = await receive()
            if event["type"] == "websocket.disconnect":
                return
            started = time.perf_counter()
            request = deserialise(event["bytes"])
            assert request["session_id"] == session_id
            if request.get("end_session") is True:
                self.ended.append(session_id)
                ack = serialise({"session_id": session_id, "end_session": True})
                await send({"type": "websocket.send", "bytes": ack})
                await send({"type": "websocket.close", "code": 1000})
                return
            observation = request["observation"]
            self.requests.append(observation)
            decoded = time.perf_counter()
            try:
                rows = policy.infer(_droid_observation(observation))["actions"]
            except Exception as exc:  # Positronic's convention: an error reply, the session stays
                await send({"type": "websocket.send", "bytes": serialise({"error": str(exc)})})
                continue
            done = time.perf_counter()
            timing = {
                "decode_ms": (decoded - started) * 1e3,
                "queued_ms": 0.0,
                "model_ms": (done - decoded) * 1e3,
                "infer_ms": (done - decoded) * 1e3,
                "served_ms": (done - started) * 1e3,
            }
            reply = {"result": _waypoints(np.asarray(rows), self.mode), "timing": timing}
            await send({"type": "websocket.send", "bytes": serialise(reply)})


@pytest.fixture
def field_server() -> Iterator[Callable[..., FieldServer]]:
    started: list[FieldServer] = []

    def start(**kwargs: Any) -> FieldServer:
        server = FieldServer(**kwargs)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _options(**overrides: Any) -> CheckOptions:
    values: dict[str, Any] = {
        "dialect": EndpointDialect.positronic_v1,
        "observations": 3,
        "connect_timeout_s": 5,
        "load_timeout_s": 20,
        "headers": auth_headers(EndpointDialect.positronic_v1, TOKEN),
    }
    values.update(overrides)
    return CheckOptions(**values)


def test_the_conformance_check_waits_for_keepalive_and_passes_a_position_control_mode(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(mode=POSITION_CONTROL, load_s=0.8)
    stages: list[str] = []
    report = check_endpoint(server.url, options=_options(), progress=stages.append)
    by_check = {f.check: f for f in report.findings}
    assert report.verdict == Status.passed, report.summary
    # it asked while the model loaded (503) and went on once it answered ready
    assert server.keepalive_answers[0] == 503 and server.keepalive_answers[-1] == 200
    readiness = by_check["readiness"]
    assert readiness.status == Status.passed and readiness.details["not_ready_answers"] >= 1
    assert any(s.startswith("waiting for your server to be ready") for s in stages)
    assert stages.index(next(s for s in stages if s.startswith("waiting"))) < stages.index(
        "sending recorded observations"
    )
    # no model list on the current model server: not a warning
    assert by_check["models"].status == Status.passed
    # the mode is run (it is the station's own law), and the report says so by name
    assert by_check["control_mode"].status == Status.passed
    assert "position_control" in by_check["control_mode"].message


def test_the_conformance_check_refuses_an_impedance_mode_by_name(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(mode=IMPEDANCE, load_s=0.0)
    report = check_endpoint(server.url, options=_options())
    replies = next(f for f in report.findings if f.check == "replies")
    assert report.verdict == Status.failed
    assert replies.status == Status.failed
    assert "'impedance'" in replies.message and "mode" in replies.message
    assert "position_control" in replies.message  # what to send instead


def test_a_server_that_never_gets_ready_fails_at_the_load_limit(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(load_s=60.0)
    started = time.monotonic()
    report = check_endpoint(server.url, options=_options(load_timeout_s=1.0))
    readiness = next(f for f in report.findings if f.check == "readiness")
    assert readiness.status == Status.failed and "not ready within 1 s" in readiness.message
    assert "HTTP 503" in readiness.message
    assert time.monotonic() - started < 10
    assert not server.requests and [f.check for f in report.findings] == ["readiness"]


def test_where_a_failed_connection_may_not_say_why_neither_does_the_keepalive(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(load_s=0.0)
    report = check_endpoint(server.url, options=_options(headers={}, connect_detail=False))
    assert report.verdict == Status.failed
    assert [f.check for f in report.findings] == ["connect"]  # the neutral finding alone
    assert "401" not in report.findings[0].message and 401 in server.keepalive_answers
    slow = field_server(load_s=60.0)
    report = check_endpoint(slow.url, options=_options(load_timeout_s=0.6, connect_detail=False))
    readiness = report.findings[-1]
    assert readiness.check == "readiness" and "503" not in readiness.message
    assert "not ready within" in readiness.message


def test_a_keepalive_answer_that_is_not_the_model_servers_is_a_warning(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(load_s=0.0, alive={"ok": True}, mode=POSITION_CONTROL)
    report = check_endpoint(server.url, options=_options())
    readiness = next(f for f in report.findings if f.check == "readiness")
    assert readiness.status == Status.warning and "alive_seconds" in readiness.message
    assert report.verdict == Status.passed, report.summary  # the session handshake went on


def test_the_check_says_the_token_is_missing_when_the_keepalive_answers_401(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(load_s=0.0)
    report = check_endpoint(server.url, options=_options(headers={}))
    readiness = next(f for f in report.findings if f.check == "readiness")
    assert report.verdict == Status.failed
    assert readiness.details["http_status"] == 401
    assert "no key is registered" in readiness.message
    assert "Bearer <key>" in readiness.message
    # it stopped there: no session was opened without the token
    assert not server.requests
    wrong = check_endpoint(
        server.url,
        options=_options(headers=auth_headers(EndpointDialect.positronic_v1, "not-it")),
    )
    assert "it refused the key registered" in wrong.findings[-1].message


def test_the_station_client_reads_the_timing_and_refuses_a_stiffness(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(mode=POSITION_CONTROL, load_s=0.0)
    client = PolicyClient(
        positronic.session_url(server.url),
        dialect=EndpointDialect.positronic_v1,
        headers=auth_headers(EndpointDialect.positronic_v1, TOKEN),
    )
    info = client.connect()
    reply = client.infer(posed_observation(info, privileged=_privileged()), timeout_s=10)
    timing = reply.server_timing
    assert timing is not None
    assert set(timing) == {"decode_ms", "queued_ms", "model_ms", "infer_ms", "served_ms"}
    assert 0 <= timing["model_ms"] <= timing["served_ms"] <= reply.latency_s * 1000
    assert client.last_server_timing == timing
    # the same mode with a stiffness: refused by name, not run as if it were absent
    server.mode = {"type": "position_control", "stiffness": [100.0] * 7}
    with pytest.raises(PolicyProtocolError, match="'position_control' with a stiffness"):
        client.infer(posed_observation(info, privileged=_privileged()), timeout_s=10)
    assert client.last_server_timing is None
    client.close()
    assert server.ended  # the session was ended in words


def _privileged() -> dict[str, Any]:
    return {
        keys.SIM_ITEMS: np.array([[0.5, -0.2, 0.05, 0.0]]),
        keys.SIM_SOURCE_BIN: np.array([0.5, -0.2, 0.1, 0.1]),
        keys.SIM_TARGET_BIN: np.array([0.5, 0.2, 0.1, 0.1]),
        keys.SIM_BIN_HEIGHT: np.array([0.08]),
        keys.SIM_SEED: np.array([1]),
        keys.SIM_TIME: np.array([0.0]),
    }


@once()  # dialect coverage does not depend on the database
def test_an_episode_through_a_field_protocol_3_server(
    field_server: Callable[..., FieldServer], station_db: Any, tmp_path: Path, backend: str
) -> None:
    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db import session_scope
    from proctor.core.recording.reader import load_recording
    from proctor.core.work import Work
    from tests.station.conftest import sim_config, sim_runner

    server = field_server(mode=POSITION_CONTROL, load_s=0.5)
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    work = Work(
        run_code="R-POS3F",
        object_name="towels",
        items=2,
        per_item_cap_s=30.0,
        tote_side=Side.left,
        camera_side=Side.right,
        policy_url=positronic.session_url(server.url),
        policy_headers=auth_headers(EndpointDialect.positronic_v1, TOKEN),
        sim_seed=8,
        dialect=EndpointDialect.positronic_v1,
    )
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        uid = runner.arm(work)
        runner.start(background=False)
        summary = runner.last
    assert summary is not None and summary.proposed == Outcome.success, summary
    assert len(server.requests) > 3 and server.ended
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        assert rec.ground_truth is not None and rec.ground_truth["final"]["placed"] == 2
        assert rec.manifest["policy"]["dialect"] == "positronic_v1"
        rec.close()
