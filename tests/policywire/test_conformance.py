"""The conformance check against policy servers that are right and against
servers with each kind of mistake — all real WebSocket servers on loopback:
the demo policies (and their ``--fault`` drills), small purpose-built
policies behind the station's own ``PolicyServer``, raw servers that break
the wire conventions, and a server written with openpi-client's own
msgpack_numpy in its own environment."""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from websockets.sync.server import Server, ServerConnection, serve

from proctor.core import netguard
from proctor.core.domain import EndpointDialect
from proctor.policywire.client import PolicyClient, PolicyUnavailable
from proctor.policywire.conformance.check import (
    CheckOptions,
    Expectations,
    Report,
    Status,
    check_endpoint,
    format_report,
)
from proctor.policywire.conformance.observations import recorded_observations
from proctor.policywire.conformance.wire import WireChecks
from proctor.policywire.handshake import auth_headers
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import Fault, PolicyServer
from proctor.policywire.serving.positronic import PositronicServer
from proctor.policywire.wire import codec
from proctor.policywire.wire.spec import ActionSpace
from tests.loopback import ScriptedResolver, TcpWitness, redirecting_server
from tests.policy_servers import PROCTOR, ROOT, clean_env

QUICK = CheckOptions(observations=3, request_timeout_s=2.0, connect_timeout_s=2.0)


def statuses(report: Report) -> dict[str, str]:
    """check id → status (the last finding of that id wins)."""
    return {f.check: f.status.value for f in report.findings}


def finding(report: Report, check: str) -> Any:
    found = [f for f in report.findings if f.check == check]
    assert found, f"no {check} finding in:\n" + "\n".join(format_report(report))
    return found[-1]


# -- policies served by the station's own PolicyServer ---------------------------------
class Scripted:
    """A ``ServedPolicy`` whose replies a test writes as a function of
    (observation, request number within the connection, connection number)."""

    def __init__(
        self,
        metadata: dict[str, Any],
        reply: Callable[[dict[str, Any], int, int], Any],
        on_reset: Callable[[Any], None] | None = None,
    ) -> None:
        self._metadata = metadata
        self._reply = reply
        self._on_reset = on_reset
        self.connections = 0
        self.seen: list[dict[str, Any]] = []

    def metadata(self) -> dict[str, Any]:
        return self._metadata

    def new_session(self) -> Any:
        self.connections += 1
        outer, conn = self, self.connections

        class Session:
            calls = 0

            def infer(self, obs: dict[str, Any]) -> Any:
                self.calls += 1
                outer.seen.append(obs)
                return outer._reply(obs, self.calls, conn)

            def reset(self, message: dict[str, Any]) -> None:
                if outer._on_reset is not None:
                    outer._on_reset(self)
                else:
                    self.calls = 0

        return Session()


@pytest.fixture
def served() -> Iterator[Callable[..., str]]:
    servers: list[PolicyServer] = []

    def start(policy: Any, fault: str | None = None) -> str:
        server = PolicyServer(policy, fault=Fault.parse(fault) if fault else None).start()
        servers.append(server)
        return server.url

    yield start
    for s in servers:
        s.stop()


def chunk(width: int, h: int = 10, value: float = 0.0, dtype: Any = np.float32) -> np.ndarray:
    out = np.full((h, width), value, dtype=dtype)
    out[:, -1] = 0.5  # the gripper, in [0, 1]
    return out


OPENPI = {"action_horizon": 10}  # an openpi server's free-form metadata
ROBOARENA = {
    "image_resolution": [224, 224],
    "needs_wrist_camera": True,
    "n_external_cameras": 1,
    "needs_stereo_camera": False,
    "needs_session_id": True,
    "action_space": "joint_position",
}


# -- servers that are right -----------------------------------------------------------------
def test_a_demo_policy_passes_with_what_it_declares(served: Callable[..., str]) -> None:
    url = served(DemoPolicy("reference"))
    report = check_endpoint(
        url,
        expect=Expectations(
            action_space=ActionSpace.cartesian_position,
            chunk_length=4,
            deterministic=True,
            identity_terms=("reference-bot", "ada"),
        ),
    )
    assert report.passed, "\n".join(format_report(report))
    assert report.summary == "Passed: the station can run your policy."
    assert statuses(report) == {
        "connect": "passed",
        "metadata_first": "passed",
        "metadata_encoding": "passed",
        "station_sends": "passed",
        # a scripted policy: its actions follow the sim's keys, not the camera
        "exterior_numbering": "skipped",
        "metadata": "passed",
        "identity": "passed",
        "action_space": "passed",
        "replies": "passed",
        "dtype": "passed",
        "chunk_length": "passed",
        "action_values": "passed",
        "determinism": "passed",
        "reset": "passed",
        "latency": "passed",
        "error_convention": "passed",  # the demo server sends its traceback as text
    }
    data = report.to_json()
    assert data["format"] == "proctor.conformance/1" and data["verdict"] == "passed"
    assert data["dialect"] == "roboarena"
    assert data["server"]["image_size"] == [96, 128]
    assert data["observations"]["count"] == len(recorded_observations()[0]) == 10
    lat = data["latency_ms"]
    # 10 observations on each of three sessions (the reset session sends 5 first)
    assert lat["count"] == 35 and 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    json.dumps(data)  # storable as JSON


def test_a_plain_openpi_server_passes_and_gets_droid_defaults(served: Callable[..., str]) -> None:
    policy = Scripted(OPENPI, lambda obs, n, conn: {"actions": chunk(8)})
    report = check_endpoint(served(policy), expect=Expectations(chunk_length=10))
    assert report.passed, "\n".join(format_report(report))
    assert report.dialect == "openpi"
    assert "joint_velocity (DROID's default" in finding(report, "action_space").message
    assert finding(report, "reset").status == Status.passed  # a second connection served
    # what the station sends an openpi server: DROID's keys, 224×224 images, the prompt
    obs = policy.seen[0]
    assert obs["observation/exterior_image_1_left"].shape == (224, 224, 3)
    assert obs["observation/wrist_image_left"].dtype == np.uint8
    assert obs["observation/joint_position"].shape == (7,)
    assert obs["observation/cartesian_position"].shape == (6,)
    assert obs["prompt"] == "put the wooden spoons from the source bin into the target bin"
    assert "sim/items" in obs  # the sim profile's privileged keys, by default
    report = check_endpoint(served(policy), options=CheckOptions(observations=2, sim_keys=False))
    assert not any(k.startswith("sim/") for k in policy.seen[-1])


# -- the demo server's fault drills ------------------------------------------------------------
@pytest.mark.parametrize(
    ("fault", "check", "message"),
    [
        (
            "bad-shape:1",
            "replies",
            "Your server returned actions of shape (4, 4); the cartesian_position action space "
            "needs 7 columns (x, y, z (m), roll, pitch, yaw, gripper), so a chunk of shape (H, 7).",
        ),
        (
            "error:1",
            "replies",
            "Your server answered observation 2 with an error instead of actions: "
            "RuntimeError: drill Its text is below",
        ),
        (
            "hang:1",
            "latency",
            "Your server did not answer observation 2 within 2 s, the station's limit.",
        ),
        (
            "disconnect:0",
            "replies",
            "Your server dropped the connection at observation 1, without a close frame "
            "(as if the process crashed).",
        ),
    ],
)
def test_each_demo_fault_fails_the_check_with_advice(
    served: Callable[..., str], fault: str, check: str, message: str
) -> None:
    report = check_endpoint(served(DemoPolicy("reference"), fault=fault), options=QUICK)
    assert report.verdict == Status.failed
    f = finding(report, check)
    assert f.status == Status.failed
    assert f.message.startswith(message), f.message
    assert report.summary.startswith("Failed: " + message.split(". ")[0].rstrip("."))
    if fault.startswith("error"):
        assert (
            f.details["server_error"] == "Traceback (most recent call last):\nRuntimeError: drill"
        )


# -- purpose-built mistakes ---------------------------------------------------------------------
def test_the_wrong_action_width_is_explained(served: Callable[..., str]) -> None:
    # a joint_velocity server (DROID's default) that sends 7 columns
    policy = Scripted(OPENPI, lambda obs, n, conn: {"actions": chunk(7)})
    report = check_endpoint(served(policy), options=QUICK)
    f = finding(report, "replies")
    assert f.status == Status.failed
    assert f.message == (
        "Your server returned actions of shape (10, 7); the joint_velocity action space needs "
        "8 columns (dq1…dq7 (rad/s), gripper), so a chunk of shape (H, 8)."
    )


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (
            lambda: {"action": chunk(8)},
            "Your reply to observation 1 has no 'actions' key (it has: action). Reply with "
            "{'actions': array of shape (H, D)}.",
        ),
        (
            lambda: {"actions": np.full((10, 8), np.nan)},
            "Your reply to observation 1 contains NaN or infinite actions.",
        ),
        (
            lambda: {"actions": np.array(["a"] * 8)},
            "Your server returned actions of dtype <U1; send numbers (float32 or float64).",
        ),
        (
            lambda: {"actions": [[0.0] * 8] * 10},
            "The station's client refused your reply to observation 1: malformed policy reply: "
            "reply 'actions' must be an array, got list.",
        ),
    ],
    ids=["no actions key", "NaN", "strings", "a list, not an array"],
)
def test_malformed_replies_fail(
    served: Callable[..., str], reply: Callable[[], Any], message: str
) -> None:
    report = check_endpoint(served(Scripted(OPENPI, lambda o, n, c: reply())), options=QUICK)
    f = finding(report, "replies")
    assert (f.status, f.message) == (Status.failed, message)


def test_the_declared_action_space_and_chunk_length_are_held_to(served: Callable[..., str]) -> None:
    policy = Scripted(ROBOARENA, lambda obs, n, conn: {"actions": chunk(8, h=5)})
    report = check_endpoint(
        served(policy),
        expect=Expectations(action_space=ActionSpace.cartesian_position, chunk_length=8),
        options=QUICK,
    )
    assert finding(report, "action_space").message == (
        "You declared cartesian_position, but your metadata says action_space 'joint_position'. "
        "Make them agree: the station executes actions in the space the metadata names."
    )
    assert finding(report, "chunk_length").message == (
        "You declared chunks of 8 actions, but your server returned 5."
    )
    assert report.summary == (
        "Failed: You declared cartesian_position, but your metadata says action_space "
        "'joint_position'. (1 more problem below.)"
    )
    # the RoboArena dialect: a session id (the server takes "endpoint" off) and the
    # image size the metadata asks for
    obs = policy.seen[0]
    assert isinstance(obs["session_id"], str) and "endpoint" not in obs
    assert obs["observation/exterior_image_1_left"].shape == (224, 224, 3)


def test_a_policy_declared_deterministic_must_be(served: Callable[..., str]) -> None:
    # its actions drift with the connection count: a global RNG, never reseeded
    policy = Scripted(OPENPI, lambda obs, n, conn: {"actions": chunk(8, value=0.01 * conn)})
    report = check_endpoint(served(policy), expect=Expectations(deterministic=True), options=QUICK)
    f = finding(report, "determinism")
    assert f.status == Status.failed
    assert f.message.startswith(
        "You declared your policy deterministic, but the same observations gave different "
        "actions on a fresh connection: differences up to 0.01 (first at reply 1, column 1)."
    )
    # not declared: recorded, not required
    report = check_endpoint(served(policy), options=QUICK)
    assert finding(report, "determinism").status == Status.skipped
    assert report.passed


def test_a_reset_must_start_the_episode_afresh(served: Callable[..., str]) -> None:
    # replies depend on the request count, and reset forgets to clear it
    def reply(obs: dict[str, Any], n: int, conn: int) -> Any:
        return {"actions": chunk(8, value=0.1 * n)}

    policy = Scripted(ROBOARENA, reply, on_reset=lambda session: None)
    report = check_endpoint(
        served(policy),
        expect=Expectations(deterministic=True),
        options=CheckOptions(observations=4),
    )
    assert finding(report, "determinism").status == Status.passed  # fresh connections agree
    f = finding(report, "reset")
    assert f.status == Status.failed
    assert "after 2 requests and a reset as after a fresh connection" in f.message


def test_warnings_do_not_fail_the_check(served: Callable[..., str]) -> None:
    # float16 actions with the gripper beyond [0, 1], chunk length varying
    def reply(obs: dict[str, Any], n: int, conn: int) -> Any:
        a = chunk(8, h=8 + n % 2, dtype=np.float16)
        a[:, -1] = 1.5
        return {"actions": a}

    report = check_endpoint(served(Scripted(OPENPI, reply)), options=QUICK)
    assert report.passed, "\n".join(format_report(report))
    s = statuses(report)
    assert s["dtype"] == s["action_values"] == s["chunk_length"] == "warning"
    assert "float16" in finding(report, "dtype").message
    assert "the gripper column (last) ranges 1.5…1.5" in finding(report, "action_values").message
    assert report.summary == "Passed: the station can run your policy (3 warnings below)."


def test_metadata_that_names_the_policy_fails(served: Callable[..., str]) -> None:
    meta = {**OPENPI, "note": "trained by the Acme-Robotics team", "checkpoint_path": "x"}
    policy = Scripted(meta, lambda obs, n, conn: {"actions": chunk(8)})
    report = check_endpoint(
        served(policy), expect=Expectations(identity_terms=("acme robotics",)), options=QUICK
    )
    f = finding(report, "identity")
    assert f.status == Status.failed
    assert f.message.startswith("Your server's metadata identifies your policy: note mentions")
    # without the name, the suspicious key still draws a warning
    report = check_endpoint(served(policy), options=QUICK)
    f = finding(report, "identity")
    assert f.status == Status.warning and "checkpoint_path" in f.message


def test_a_slow_server_is_warned_about(served: Callable[..., str]) -> None:
    def reply(obs: dict[str, Any], n: int, conn: int) -> Any:
        time.sleep(0.25)
        return {"actions": chunk(8)}

    options = CheckOptions(observations=2, slow_reply_s=0.2)
    report = check_endpoint(served(Scripted(OPENPI, reply)), options=options)
    f = finding(report, "latency")
    assert f.status == Status.warning and f.details["p50"] >= 250


# -- raw servers: the wire conventions ---------------------------------------------------------
@contextmanager
def raw_server(
    handler: Callable[[ServerConnection], None],
    process_request: Callable[..., Any] | None = None,
) -> Iterator[str]:
    server: Server = serve(
        handler, "127.0.0.1", 0, process_request=process_request, compression=None
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
    finally:
        server.shutdown()
        thread.join(5)


def _loop(ws: ServerConnection, reply: Callable[[Any], Any]) -> None:
    for raw in ws:
        message = codec.unpackb(raw) if isinstance(raw, bytes) else raw
        ws.send(reply(message))


def test_metadata_sent_as_text_fails() -> None:
    with raw_server(lambda ws: ws.send('{"action_space": "joint_velocity"}')) as url:
        report = check_endpoint(url, options=QUICK)
    f = finding(report, "metadata_first")
    assert f.status == Status.failed and "first message was a text frame" in f.message


def test_a_server_that_waits_for_a_request_before_its_metadata_fails() -> None:
    def handler(ws: ServerConnection) -> None:
        ws.recv()  # waits for the client to speak first

    with raw_server(handler) as url:
        report = check_endpoint(url, options=CheckOptions(connect_timeout_s=0.5))
    f = finding(report, "metadata_first")
    assert f.status == Status.failed
    assert f.message.startswith("Your server sent nothing within 0.5 s of the connection.")


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        (
            json.dumps({"a": 1}).encode(),
            "Your server's metadata is not msgpack-numpy: not a msgpack message",
        ),
        (msgpack.packb([1, 2]), "Your server's metadata is a msgpack list; it must be a map"),
        (
            codec.packb({"action_space": "ee_delta"}),
            # described, never quoted: the station's messages reach staff (test_peer_text.py)
            "The station cannot use your server's metadata: metadata.action_space: a str of "
            "length 8 is not one of",
        ),
    ],
    ids=["json", "a list", "unknown action space"],
)
def test_unusable_metadata_fails(metadata: bytes, message: str) -> None:
    with raw_server(lambda ws: (ws.send(metadata), ws.recv())) as url:
        report = check_endpoint(url, options=QUICK)
    assert report.verdict == Status.failed
    assert any(f.message.startswith(message) for f in report.findings), "\n".join(
        format_report(report)
    )


def test_text_tagged_arrays_and_bare_replies_draw_warnings() -> None:
    """openpi's msgpack_numpy tags arrays with *binary* keys; a server that
    writes text keys (or replies with a bare array to openpi clients) works
    with the station but not with openpi's own client."""

    def reply(_: Any) -> bytes:
        a = chunk(8, dtype=np.float64)
        return msgpack.packb(
            {"__ndarray__": True, "data": a.tobytes(), "dtype": "<f8", "shape": list(a.shape)}
        )

    def handler(ws: ServerConnection) -> None:
        ws.send(codec.packb({}))
        _loop(ws, reply)

    with raw_server(handler) as url:
        report = check_endpoint(url, options=QUICK)
    assert report.passed, "\n".join(format_report(report))
    f = finding(report, "replies")
    assert f.status == Status.warning
    assert "your replies are bare arrays" in f.message and "text keys" in f.message


def test_closing_without_the_error_text_draws_a_warning() -> None:
    def handler(ws: ServerConnection) -> None:
        ws.send(codec.packb({}))
        for raw in ws:
            obs = codec.unpackb(raw)
            if "observation/exterior_image_1_left" not in obs:
                ws.close(1011)  # no text first
                return
            ws.send(codec.packb({"actions": chunk(8)}))

    with raw_server(handler) as url:
        report = check_endpoint(url, options=QUICK)
    assert report.passed
    f = finding(report, "error_convention")
    assert f.status == Status.warning and "without saying why" in f.message


def test_an_api_key_is_sent_as_openpi_does() -> None:
    def check_key(connection: ServerConnection, request: Any) -> Any:
        if request.headers.get("Authorization") != "Api-Key s3cret":
            return connection.respond(401, "no key\n")
        return None

    def handler(ws: ServerConnection) -> None:
        ws.send(codec.packb({}))
        _loop(ws, lambda obs: codec.packb({"actions": chunk(8)}))

    with raw_server(handler, process_request=check_key) as url:
        refused = check_endpoint(url, options=QUICK)
        accepted = check_endpoint(
            url,
            options=CheckOptions(observations=3, headers={"Authorization": "Api-Key s3cret"}),
        )
    f = finding(refused, "connect")
    assert f.status == Status.failed
    assert f.message.startswith("Your server refused the WebSocket handshake with HTTP 401.")
    assert "Api-Key" in f.message
    assert accepted.passed, "\n".join(format_report(accepted))


def test_nothing_listening_fails_at_the_handshake() -> None:
    with raw_server(lambda ws: None) as url:
        pass  # the port is free again
    report = check_endpoint(url, options=QUICK)
    assert [f.check for f in report.findings] == ["connect"]
    assert "nothing accepted the connection" in report.findings[0].message


def test_the_report_never_carries_the_url_or_the_key(served: Callable[..., str]) -> None:
    url = served(DemoPolicy("swift"))
    report = check_endpoint(
        url, options=CheckOptions(observations=2, headers={"Authorization": "Api-Key topsecret"})
    )
    text = json.dumps(report.to_json())
    assert url not in text and url.split("//")[1] not in text and "topsecret" not in text


# -- a server written with openpi-client's own codec -------------------------------------------
OPENPI_PYTHON = ROOT / ".venv-openpi" / "bin" / "python"
OPENPI_SERVER = r"""
import sys, traceback
import numpy as np
from openpi_client import msgpack_numpy
from websockets.sync.server import serve

def handler(ws):
    ws.send(msgpack_numpy.packb({"action_space": "joint_velocity"}))
    for raw in ws:
        try:
            obs = msgpack_numpy.unpackb(raw)
            image = obs["observation/exterior_image_1_left"]
            assert image.shape == (224, 224, 3), image.shape
            actions = np.zeros((10, 8), dtype=np.float32)
            actions[:, :7] = obs["observation/joint_position"] * 0.0 + 0.01
            ws.send(msgpack_numpy.packb({"actions": actions, "server_timing": {"infer_ms": 1.0}}))
        except Exception:
            ws.send(traceback.format_exc())
            ws.close(1011, "Internal server error. Traceback included in previous frame.")
            return

with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
    print(f"ws://127.0.0.1:{server.socket.getsockname()[1]}", flush=True)
    server.serve_forever()
"""


def test_a_server_written_with_openpi_clients_codec_passes(tmp_path: Path) -> None:
    if not OPENPI_PYTHON.exists():
        pytest.fail(
            f"{OPENPI_PYTHON} is missing: `./run test` creates it "
            "(python3 -m venv .venv-openpi && .venv-openpi/bin/pip install openpi-client==0.1.2)",
            pytrace=False,
        )
    script = tmp_path / "server.py"
    script.write_text(OPENPI_SERVER)
    proc = subprocess.Popen(
        [str(OPENPI_PYTHON), str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("ws://"), proc.stderr.read() if proc.stderr else ""
        report = check_endpoint(
            url,
            expect=Expectations(
                action_space=ActionSpace.joint_velocity, chunk_length=10, deterministic=True
            ),
            options=CheckOptions(observations=4),
        )
    finally:
        proc.kill()
        proc.wait(10)
    assert report.passed, "\n".join(format_report(report))
    assert all(f.status in (Status.passed, Status.skipped) for f in report.findings), "\n".join(
        format_report(report)
    )
    # its traceback arrives as text, as openpi's server sends it
    assert "Traceback" in finding(report, "error_convention").details["server_error"]


# -- the command ---------------------------------------------------------------------------------
def test_proctor_policy_check_prints_the_report_and_exits_by_verdict(
    serve_demo: Callable[..., str], tmp_path: Path
) -> None:
    good = serve_demo("reference")
    out = tmp_path / "report.json"
    r = subprocess.run(
        [*PROCTOR, "policy", "check", good, "--action-space", "cartesian_position",
         "--chunk-length", "4", "--deterministic", "--json", str(out)],
        capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "Passed: the station can run your policy."
    assert json.loads(out.read_text())["verdict"] == "passed"
    bad = serve_demo("reference", fault="bad-shape")
    r = subprocess.run(
        [*PROCTOR, "policy", "check", bad, "--json", "-"],
        capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert r.returncode == 1
    assert "Failed: Your server returned actions of shape (4, 4)" in r.stdout
    assert '"verdict": "failed"' in r.stdout
    with PositronicServer(DemoPolicy("reference"), auth_token="tok") as positronic_server:
        r = subprocess.run(
            [*PROCTOR, "policy", "check", positronic_server.url, "--dialect", "positronic_v1",
             "--api-key-env", "POLICY_KEY", "--action-space", "cartesian_position"],
            capture_output=True, text=True, env=clean_env(POLICY_KEY="tok"), cwd=ROOT,
            timeout=120,
        )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Positronic v1 wire" in r.stdout


# -- the Positronic v1 wire ----------------------------------------------------------------
POSITRONIC = CheckOptions(
    dialect=EndpointDialect.positronic_v1,
    observations=3,
    request_timeout_s=2.0,
    connect_timeout_s=2.0,
    load_timeout_s=4.0,
)


def test_a_positronic_server_that_is_right_passes() -> None:
    with PositronicServer(DemoPolicy("reference"), loading_frames=3) as server:
        report = check_endpoint(
            server.url,  # the bare host: the check adds /api/v1/session
            expect=Expectations(action_space=ActionSpace.cartesian_position, deterministic=True),
            options=POSITRONIC,
        )
    assert report.verdict == Status.passed, "\n".join(format_report(report))
    assert report.dialect == "positronic_v1"
    s = statuses(report)
    assert s["metadata_first"] == s["action_space"] == s["determinism"] == "passed"
    assert s["error_convention"] == s["reset"] == s["replies"] == s["models"] == "passed"
    assert "3 status frame(s)" in finding(report, "metadata_first").message
    # Positronic's declared rig-side layers are protocol, not a name
    assert s["identity"] == "passed"
    assert report.server is not None and report.server["action_fps"] == 15.0


def test_a_positronic_server_is_held_to_the_declared_action_space() -> None:
    with PositronicServer(DemoPolicy("reference")) as server:
        report = check_endpoint(
            server.url,
            expect=Expectations(action_space=ActionSpace.joint_position),
            options=POSITRONIC,
        )
    f = finding(report, "action_space")
    assert f.status == Status.failed
    assert "You declared joint_position, but your commands are cartesian_pos" in f.message


@pytest.mark.parametrize(
    ("mistake", "check", "status", "words"),
    [
        ("no_ready", "metadata_first", "failed", "not ready"),
        ("refuse", "metadata_first", "failed", "refused the session"),
        ("text_ready", "metadata_encoding", "failed", "text frame"),
        ("foreign_layer", "metadata", "failed", "run 1 layer(s) the station does not have"),
        ("identity", "identity", "warning", "checkpoint_path"),
        ("joint_delta", "replies", "failed", "'joint_delta' commands are not run"),
        ("bad_rotation", "replies", "failed", "not a rotation matrix"),
        ("backwards", "replies", "failed", "goes back in time"),
        ("no_result", "replies", "failed", "no 'result'"),
        ("error_reply", "replies", "failed", "with {'error': …} instead of a result"),
        ("hang", "latency", "failed", "did not answer observation 1"),
    ],
)
def test_a_positronic_server_with_each_kind_of_mistake(
    mistake: str, check: str, status: str, words: str
) -> None:
    with PositronicServer(DemoPolicy("reference"), mistake=mistake) as server:
        report = check_endpoint(server.url, options=POSITRONIC)
    f = finding(report, check)
    assert f.status.value == status and words in f.message, f.message
    if status == "failed":
        assert report.verdict == Status.failed
    if mistake == "error_reply":
        assert "model exploded" in f.details["server_error"]  # the submitter's own text


def test_a_positronic_server_with_a_token_and_a_model_path() -> None:
    authed = replace(POSITRONIC, headers=auth_headers(EndpointDialect.positronic_v1, "tok"))
    with PositronicServer(DemoPolicy("reference"), models=("a", "b/c"), auth_token="tok") as server:
        wrong = check_endpoint(
            server.url, options=replace(POSITRONIC, headers={"Authorization": "Api-Key tok"})
        )
        # refused at the readiness call, before any session
        f = finding(wrong, "readiness")
        assert f.status == Status.failed and "Authorization: Bearer <key>" in f.message
        assert "not sent as a bearer token" in f.message
        report = check_endpoint(server.session_url("b/c"), options=authed)
        assert report.verdict == Status.passed, "\n".join(format_report(report))
        assert server.last_model == "b/c"
        # the catalogue is read with the same credential and lists the model asked for
        assert "including 'b/c'" in finding(report, "models").message
        unknown = check_endpoint(server.session_url("zzz"), options=authed)
    f = finding(unknown, "metadata_first")
    assert f.status == Status.failed and "unknown model 'zzz'" in f.details["server_error"]
    bad = check_endpoint("ws://127.0.0.1:9/other", options=POSITRONIC)
    assert "not a Positronic session URL" in finding(bad, "connect").message


def test_the_dialect_can_be_forced(served: Callable[..., str]) -> None:
    url = served(Scripted(OPENPI, lambda obs, n, conn: {"actions": chunk(8)}))
    report = check_endpoint(
        url, options=CheckOptions(observations=2, dialect=EndpointDialect.roboarena)
    )
    f = finding(report, "metadata")
    assert f.status == Status.warning and "your metadata looks like openpi's" in f.message


@pytest.mark.parametrize(
    ("text", "term", "named"),
    [
        ("trained by the Acme-Robotics team", "acme robotics", True),
        ("AcmeRobotics_v2", "Acme Robotics", True),
        ("acmediffusion", "acme-diffusion", True),
        ("by ada", "ada", True),
        ("adaptive chunking", "ada", False),  # a short username inside a word is no name
        ("robotics", "acme robotics", False),
    ],
)
def test_names_are_matched_as_whole_words(text: str, term: str, named: bool) -> None:
    from proctor.policywire.conformance.wire import mentions

    assert mentions(text, term) is named


# -- where the check connects (proctor/core/netguard.py) -------------------------------------------
def test_a_redirect_is_not_followed_by_the_check_nor_the_client() -> None:
    """A submitter's server answering the handshake with 302 to another port
    must not lead the check (or the station's client) there."""
    with TcpWitness() as target, redirecting_server(f"ws://127.0.0.1:{target.port}/") as url:
        report = check_endpoint(url, options=QUICK)
        client = PolicyClient(url, connect_timeout_s=2.0)
        with pytest.raises(PolicyUnavailable):
            client.connect()
        client.close()
    assert target.connections == 0
    f = finding(report, "connect")
    assert f.status == Status.failed and f.details["http_status"] == 302
    assert "Redirects are not followed" in f.message


def test_the_positronic_model_list_does_not_follow_a_redirect() -> None:
    with TcpWitness() as target:
        location = f"http://127.0.0.1:{target.port}/api/v1/models"

        class Redirect(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            url = f"ws://127.0.0.1:{server.server_address[1]}/api/v1/session"
            wire = WireChecks(
                url, Expectations(), CheckOptions(dialect=EndpointDialect.positronic_v1), None
            )
            wire.extra_checks()
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)
    assert target.connections == 0
    (f,) = wire.findings
    assert f.status == Status.warning and f.details["http_status"] == 302


def test_every_connection_of_the_check_goes_to_the_pinned_address(
    served: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker resolves and judges the host once; the check's several
    connections all go to that address, never to a fresh lookup (which here
    would fail: the name stops resolving after the first answer)."""
    port = int(served(DemoPolicy("swift")).rsplit(":", 1)[1])
    url = f"ws://policy.pinned.test:{port}"
    resolver = ScriptedResolver("policy.pinned.test", ["127.0.0.1", ""]).install(monkeypatch)
    pinned = netguard.pin(url, allow_private=True)
    report = check_endpoint(url, options=replace(QUICK, pinned=pinned))
    assert report.passed, "\n".join(format_report(report))
    assert resolver.calls == 1


def test_without_detail_every_failed_handshake_reads_the_same() -> None:
    """Where the report must not map a network (the worker of a multi-user
    site), a closed port, an HTTP error, a redirect and a server that is not
    a WebSocket server are one and the same finding."""

    def forbid(connection: ServerConnection, request: Any) -> Any:
        return connection.respond(403, "no\n")

    neutral = replace(QUICK, connect_detail=False)
    reports = []
    with raw_server(lambda ws: None) as closed:
        pass  # the port is free again
    reports.append(check_endpoint(closed, options=neutral))
    with raw_server(lambda ws: None, process_request=forbid) as url:
        reports.append(check_endpoint(url, options=neutral))
    with TcpWitness() as silent, redirecting_server(f"ws://127.0.0.1:{silent.port}/") as url:
        reports.append(check_endpoint(url, options=neutral))
        # accepts and hangs up at once: not a WebSocket server
        reports.append(check_endpoint(f"ws://127.0.0.1:{silent.port}", options=neutral))
    findings = [[(f.check, f.status, f.message, f.details) for f in r.findings] for r in reports]
    assert all(f == findings[0] for f in findings), findings
    ((check, status, message, details),) = findings[0]
    assert check == "connect" and status == Status.failed and details == {}
    assert "Could not open a WebSocket connection to your server" in message
