"""The station against Positronic's own model server (``positronic-model-server``
from PyPI, the test extra), over a real WebSocket on loopback: its waiting
frames and protocol-version-3 ready frame, session-tagged requests and the
end-of-session handshake, its bearer check and its error replies — and a
whole simulated episode and a conformance check through it.

The model behind it is the station's demo policy, its answers written as
Positronic waypoints (``positronic_server.cartesian_waypoints``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from positronic_model_server import spec
from positronic_model_server.server import Model, ModelServer, Session
from positronic_model_server.server_wire import ServedHostPort
from positronic_model_server.websocket_wire import WebsocketWire

from proctor.core.domain import EndpointDialect, Outcome, Side
from proctor.policywire.client import PolicyClient, PolicyProtocolError, PolicyUnavailable
from proctor.policywire.dialects import positronic_frames as positronic
from proctor.policywire.handshake import auth_headers
from proctor.policywire.serving.demo import CONTROL_HZ, DemoPolicy
from proctor.policywire.serving.positronic import (
    cartesian_waypoints,
    to_openpi_observation,
)
from proctor.policywire.wire import keys
from tests.backends import once
from tests.station.conftest import posed_observation


class _DemoSession(Session):
    def __init__(self, model: _DemoModel) -> None:
        # the rig-side stack Positronic's servers declare: chunk playback only
        super().__init__(spec.sequence(spec.component("chunked_schedule")))
        self._model = model
        self._inner = DemoPolicy(model.profile).new_session()

    def infer(self, observation: Any) -> Any:
        self._model.observations.append(observation)
        if "fail" in observation.get(keys.POSITRONIC_TASK, ""):
            raise ValueError("the model rejected this observation (checkpoint ckpt-7)")
        rows = self._inner.infer(to_openpi_observation(observation))[keys.REPLY_ACTIONS]
        return cartesian_waypoints(rows, CONTROL_HZ)

    def close(self) -> None:
        self._model.closed.set()


class _DemoModel(Model):
    def __init__(self, profile: str) -> None:
        super().__init__(metadata={"type": "proctor-demo", "checkpoint": "ckpt-7"})
        self.profile = profile
        self.observations: list[Any] = []
        self.closed = threading.Event()

    def prepare_session(self, params: dict[str, Any]) -> Session:
        return _DemoSession(self)


class _Running:
    def __init__(self, model: _DemoModel, auth_token: str | None) -> None:
        self.model = model
        self.wire = WebsocketWire(ServedHostPort("127.0.0.1", 0))
        self.server = ModelServer(lambda: model, auth_token=auth_token)
        self.server.WAITING_INTERVAL_SEC = 0.02
        self.ready = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.server.serve([self.wire], self.ready.set)
        except BaseException as exc:  # reported by the fixture
            self.errors.append(exc)

    @property
    def url(self) -> str:
        address = self.wire.served_address
        assert isinstance(address, ServedHostPort)
        return f"ws://{address.host}:{address.port}"


@pytest.fixture
def model_server() -> Iterator[Callable[..., _Running]]:
    started: list[_Running] = []

    def start(profile: str = "reference", auth_token: str | None = None) -> _Running:
        running = _Running(_DemoModel(profile), auth_token)
        started.append(running)
        running.thread.start()
        assert running.ready.wait(10), running.errors
        return running

    yield start
    for running in started:
        running.server.shutdown()
        running.thread.join(10)
        assert not running.thread.is_alive(), "Positronic's server did not stop"
        assert not running.errors


def _observation(info: Any, prompt: str = "put the towels in the bin") -> dict[str, Any]:
    """With the simulated cell's privileged keys: the demo policy reads them."""
    privileged = {
        keys.SIM_ITEMS: np.array([[0.5, -0.2, 0.05, 0.0]]),
        keys.SIM_SOURCE_BIN: np.array([0.5, -0.2, 0.1, 0.1]),
        keys.SIM_TARGET_BIN: np.array([0.5, 0.2, 0.1, 0.1]),
        keys.SIM_BIN_HEIGHT: np.array([0.08]),
        keys.SIM_SEED: np.array([1]),
        keys.SIM_TIME: np.array([0.0]),
    }
    return posed_observation(info, grip=0.0, prompt=prompt, privileged=privileged)


def test_the_station_client_speaks_protocol_3_with_positronics_server(
    model_server: Callable[..., _Running],
) -> None:
    running = model_server(auth_token="tok")
    with pytest.raises(PolicyUnavailable, match=r"HTTP 403\): the key it needs is missing"):
        PolicyClient(
            positronic.session_url(running.url), dialect=EndpointDialect.positronic_v1
        ).connect()  # no bearer token: refused before the session
    client = PolicyClient(
        positronic.session_url(running.url),
        dialect=EndpointDialect.positronic_v1,
        headers=auth_headers(EndpointDialect.positronic_v1, "tok"),
    )
    info = client.connect()
    assert info.dialect == EndpointDialect.positronic_v1 and info.action_space is None
    reply = client.infer(_observation(info), timeout_s=10)
    assert reply.space.value == "cartesian_position" and reply.actions.shape[1] == 7
    # the server's own account of the call, by its key names, beside the round trip
    assert reply.server_timing is not None and set(reply.server_timing) == set(
        positronic.TIMING_KEYS
    )
    assert reply.server_timing["served_ms"] <= reply.latency_s * 1000
    assert client.last_server_timing == reply.server_timing
    # what reached Positronic's model: the observation, unwrapped from its session frame
    seen = running.model.observations[-1]
    assert set(seen) >= {keys.POSITRONIC_EE_POSE, keys.POSITRONIC_JOINTS, keys.POSITRONIC_GRIP}
    np.testing.assert_allclose(seen[keys.POSITRONIC_EE_POSE][3:], [0, 1, 0, 0], atol=1e-6)
    assert seen[keys.POSITRONIC_WRIST_IMAGE].shape == (120, 160, 3)
    # an error reply: the station refuses it without the server's words, the session goes on
    with pytest.raises(PolicyProtocolError) as err:
        client.infer(_observation(info, prompt="fail please"), timeout_s=10)
    assert "ckpt-7" not in str(err.value)
    assert client.infer(_observation(info), timeout_s=10).actions.shape[1] == 7
    client.close()
    # the session was ended in words: Positronic's server closed the model's session
    assert running.model.closed.wait(5)


def test_a_conformance_check_against_positronics_server(
    model_server: Callable[..., _Running],
) -> None:
    from proctor.policywire.conformance.check import (
        CheckOptions,
        Expectations,
        Status,
        check_endpoint,
    )

    running = model_server()
    report = check_endpoint(
        running.url,
        expect=Expectations(deterministic=True),
        options=CheckOptions(
            dialect=EndpointDialect.positronic_v1, observations=3, connect_timeout_s=5
        ),
    )
    by_check = {f.check: f for f in report.findings}
    assert report.verdict == Status.passed, report.summary
    assert by_check["replies"].status == Status.passed
    assert by_check["error_convention"].status == Status.passed
    # this server has no model list (one model per server): nothing to warn about
    assert by_check["models"].status == Status.passed
    assert "404" in by_check["models"].message
    # its readiness call was asked before the session, and answered ready
    assert by_check["readiness"].status == Status.passed
    # its meta names a checkpoint: the submitter is told
    assert by_check["identity"].status == Status.warning
    assert "checkpoint" in by_check["identity"].message


def test_the_conformance_check_names_the_missing_token_at_positronics_keepalive(
    model_server: Callable[..., _Running],
) -> None:
    from proctor.policywire.conformance.check import CheckOptions, Status, check_endpoint

    running = model_server(auth_token="tok")
    options = CheckOptions(
        dialect=EndpointDialect.positronic_v1, observations=2, connect_timeout_s=5
    )
    report = check_endpoint(running.url, options=options)
    readiness = next(f for f in report.findings if f.check == "readiness")
    assert report.verdict == Status.failed
    assert readiness.status == Status.failed and readiness.details["http_status"] == 401
    assert "no key is registered" in readiness.message and "Bearer" in readiness.message
    # with the token, the same server is ready and the check passes
    report = check_endpoint(
        running.url,
        options=CheckOptions(
            dialect=EndpointDialect.positronic_v1,
            observations=2,
            connect_timeout_s=5,
            headers=auth_headers(EndpointDialect.positronic_v1, "tok"),
        ),
    )
    assert report.verdict == Status.passed, report.summary


@once()  # dialect coverage does not depend on the database
def test_an_episode_through_positronics_server(
    model_server: Callable[..., _Running], station_db: Any, tmp_path: Path, backend: str
) -> None:
    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db import session_scope
    from proctor.core.recording.reader import load_recording
    from proctor.core.work import Work
    from tests.station.conftest import sim_config, sim_runner

    running = model_server()
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    work = Work(
        run_code="R-POS03",
        object_name="towels",
        items=2,
        per_item_cap_s=30.0,
        tote_side=Side.left,
        camera_side=Side.right,
        policy_url=positronic.session_url(running.url),
        sim_seed=8,
        dialect=EndpointDialect.positronic_v1,
    )
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        uid = runner.arm(work)
        runner.start(background=False)
        summary = runner.last
    assert summary is not None and summary.proposed == Outcome.success, summary
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        assert rec.ground_truth is not None and rec.ground_truth["final"]["placed"] == 2
        assert rec.manifest["policy"]["dialect"] == "positronic_v1"
        rec.close()
