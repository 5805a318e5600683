"""The Positronic v1 wire: URLs, the status handshake, the metadata, the
reply's waypoints sampled on the station's control grid (hand-derived
expectations), and whole exchanges and an episode over real WebSockets
against a server written from Positronic's published protocol."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from proctor.core import geometry
from proctor.core.domain import EndpointDialect, Outcome, Side
from proctor.core.recording import keys
from proctor.policywire.client import PolicyClient, PolicyProtocolError, PolicyUnavailable
from proctor.policywire.dialects import positronic_frames as positronic
from proctor.policywire.dialects.positronic_frames import (
    SessionRefused,
    decode_result,
    parse_meta,
    read_handshake,
    session_url,
)
from proctor.policywire.handshake import auth_headers, public_info
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.positronic import CMD, PositronicServer
from proctor.policywire.wire import codec
from proctor.policywire.wire import keys as wire_keys
from proctor.policywire.wire.spec import ActionSpace, ProtocolError
from tests.backends import once

CART = ActionSpace.cartesian_position
JOINT = ActionSpace.joint_position
HOLD = dict(hold_pose=np.zeros(6), hold_q=np.arange(7.0), hold_grip=0.25)


# -- URLs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("ws://gpu:8000", "ws://gpu:8000/api/v1/session"),
        ("ws://gpu:8000/", "ws://gpu:8000/api/v1/session"),
        ("wss://gpu/api/v1/session/", "wss://gpu/api/v1/session"),
        ("ws://gpu:8000/api/v1/session/10000", "ws://gpu:8000/api/v1/session/10000"),
        # an id may be a path; its escapes and the query travel as written
        (
            "ws://h/api/v1/session/GEAR/DreamZero?codec.fps=10",
            "ws://h/api/v1/session/GEAR/DreamZero?codec.fps=10",
        ),
        ("ws://h/api/v1/session/s3%3A//b/c-1", "ws://h/api/v1/session/s3%3A//b/c-1"),
    ],
)
def test_session_urls(given: str, expected: str) -> None:
    assert session_url(given) == expected


def test_session_url_refusals_and_the_models_url() -> None:
    with pytest.raises(ValueError, match="ws:// or wss://"):
        session_url("http://gpu:8000")
    with pytest.raises(ValueError, match="/api/v1/session"):
        session_url("ws://gpu:8000/policy")
    assert positronic.models_url("wss://gpu/api/v1/session/7") == "https://gpu/api/v1/models"
    assert positronic.model_id("ws://h:1/api/v1/session/a/b") == "a/b"
    assert positronic.model_id("ws://h:1") is None
    assert auth_headers(EndpointDialect.positronic_v1, "k") == {"Authorization": "Bearer k"}
    assert auth_headers(EndpointDialect.positronic_v1, None) == {}


# -- the handshake ----------------------------------------------------------------------


def _frames(*messages: Any):
    queue = [m if isinstance(m, str) else codec.packb(m) for m in messages]

    def recv(timeout: float) -> Any:
        if not queue:
            raise TimeoutError
        return queue.pop(0)

    return recv


def test_status_frames_then_ready() -> None:
    hello = read_handshake(
        _frames(
            {"status": "loading", "message": "Loading checkpoint 10000"},
            {"status": "waiting", "message": "queued"},
            {"status": "ready", "meta": {"action_fps": 15.0}},
        ),
        per_message_s=1,
        total_s=5,
    )
    assert hello.meta == {"action_fps": 15.0} and hello.status_messages == 2
    # an older server sends its meta bare
    assert read_handshake(_frames({"meta": {}}), per_message_s=1, total_s=5).meta == {}


@pytest.mark.parametrize(
    ("frames", "error"),
    [
        ([{"status": "error", "error": "unknown key codec.fsp"}], SessionRefused),
        ([{"error": "boom"}], SessionRefused),
        (['{"status": "ready"}'], ProtocolError),
        ([[1, 2]], ProtocolError),
        ([{"status": "booting"}], ProtocolError),
        ([{"status": "ready", "meta": [1]}], ProtocolError),
        ([{"status": "loading"}], TimeoutError),  # then silence
    ],
)
def test_handshake_failures(frames: list[Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        read_handshake(_frames(*frames), per_message_s=0.01, total_s=5)


def test_a_server_loading_forever_hits_the_total_limit() -> None:
    now = [0.0]

    def recv(timeout: float) -> bytes:
        now[0] += 10.0  # a status every 10 s, never ready
        return codec.packb({"status": "loading"})

    with pytest.raises(TimeoutError, match="not ready within 60 s"):
        read_handshake(recv, per_message_s=30, total_s=60, clock=lambda: now[0])


# -- the metadata -------------------------------------------------------------------------


def test_meta_is_read_for_what_the_station_needs() -> None:
    info = parse_meta(
        {
            "type": "lerobot",
            "checkpoint_path": "~/checkpoints/x",
            "image_sizes": [320, 240],  # [width, height]
            "action_fps": 30,
            "local_stack": {"seq": [{"name": "chunked_schedule"}, {"name": "restrict_image_size"}]},
            "compress_images": False,
        }
    )
    assert info.dialect == EndpointDialect.positronic_v1
    assert info.image_size == (240, 320) and info.action_fps == 30.0
    assert info.action_space is None and not info.pad_images
    assert "checkpoint" not in str(public_info(info))
    assert parse_meta(
        {"image_sizes": {"image.wrist": [224, 224], "image.exterior": [224, 224]}}
    ).image_size == (224, 224)
    assert parse_meta({}).image_size is None


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"compress_images": True}, "compress_images"),
        # counted, never named: the server chose the name (tests/policywire/test_peer_text.py)
        ({"local_stack": {"seq": [{"name": "temporal_stack"}]}}, r"run 1 layer\(s\) the station"),
        ({"local_stack": {"par": []}}, "parallel"),
        ({"image_sizes": [224]}, "image_sizes"),
        ({"image_sizes": {"a": [224, 224], "b": [96, 96]}}, "per camera"),
        ({"action_fps": 0}, "action_fps"),
        ({"action_fps": True}, "action_fps"),
    ],
)
def test_meta_the_station_cannot_honour_is_refused(meta: dict[str, Any], message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_meta(meta)


# -- replies: waypoints on the control grid (hand-derived) ---------------------------------------


def _cart(xyz: list[float], rot: np.ndarray | None = None, **extra: Any) -> dict[str, Any]:
    r = np.eye(3) if rot is None else rot
    return {
        wire_keys.POSITRONIC_ROBOT_COMMAND: {
            CMD: {"type": "cartesian_pos", "pose": np.concatenate([xyz, r.ravel()])}
        },
        **extra,
    }


def test_a_cartesian_chunk_at_the_control_rate() -> None:
    rot = geometry.euler_to_matrix(np.array([math.pi, 0.1, -0.4]))
    result = [
        _cart([0.5, 0.0, 0.3], rot, target_grip=0.0, timestamp=0.0),
        _cart([0.5, 0.1, 0.3], rot, target_grip=1.0, timestamp=1 / 15),
    ]
    chunk = decode_result({"result": result}, control_hz=15, action_fps=None, **HOLD)
    assert chunk.space == CART and chunk.waypoints == 2
    np.testing.assert_allclose(chunk.rows[:, :3], [[0.5, 0, 0.3], [0.5, 0.1, 0.3]])
    np.testing.assert_allclose(geometry.euler_to_matrix(chunk.rows[0, 3:6]), rot, atol=1e-12)
    np.testing.assert_allclose(chunk.rows[:, 6], [0.0, 1.0])


def test_waypoints_at_30_hz_sampled_at_15_hz() -> None:
    """Six waypoints 1/30 s apart, x = 0…5 cm: the 15 Hz grid (0, 1/15, 2/15 s)
    runs those in force at each tick — x = 0, 2, 4 cm — and ends at the last."""
    result = [_cart([i / 100, 0, 0], timestamp=i / 30) for i in range(6)]
    chunk = decode_result({"result": result}, control_hz=15, action_fps=30, **HOLD)
    np.testing.assert_allclose(chunk.rows[:, 0], [0.0, 0.02, 0.04])
    np.testing.assert_allclose(chunk.rows[:, 6], 0.25)  # no grip target: held


def test_unstamped_waypoints_use_the_declared_rate_and_an_end_marker() -> None:
    # no timestamps: i / action_fps (7.5 Hz → every other 15 Hz tick)
    result = [_cart([i / 10, 0, 0]) for i in range(3)]
    chunk = decode_result({"result": result}, control_hz=15, action_fps=7.5, **HOLD)
    np.testing.assert_allclose(chunk.rows[:, 0], [0.0, 0.0, 0.1, 0.1, 0.2])
    # a waypoint naming no channel marks where the chunk ends: ticks before it only
    marked = [
        {wire_keys.POSITRONIC_TARGET_GRIP: 1.0, "timestamp": 0.0},
        {"timestamp": 0.2},
    ]
    chunk = decode_result({"result": marked}, control_hz=15, action_fps=None, **HOLD)
    assert chunk.rows.shape == (3, 7)  # 0, 1/15, 2/15 < 0.2
    # no arm command yet: the pose at the call is held, the grip target taken
    np.testing.assert_allclose(chunk.rows, [[0, 0, 0, 0, 0, 0, 1.0]] * 3)


def test_joint_targets_and_the_other_pose_spellings() -> None:
    q = np.linspace(-1, 1, 7)
    joint = {
        wire_keys.POSITRONIC_ROBOT_COMMAND: {
            "type": "joint_pos",
            "positions": q,
        },  # bare to_wire map
        wire_keys.POSITRONIC_TARGET_GRIP: np.array([0.5]),
    }
    chunk = decode_result({"result": joint}, control_hz=15, action_fps=None, **HOLD)
    assert chunk.space == JOINT
    np.testing.assert_allclose(chunk.rows, [[*q, 0.5]])
    half = math.sqrt(0.5)  # 90° about z, quaternion w first
    for pose in (np.array([0.1, 0.2, 0.3, half, 0, 0, half]), _homogeneous()):
        action = {
            wire_keys.POSITRONIC_ROBOT_COMMAND: {CMD: {"type": "cartesian_pos", "pose": pose}}
        }
        row = decode_result({"result": [action]}, control_hz=15, action_fps=None, **HOLD).rows[0]
        np.testing.assert_allclose(row[:6], [0.1, 0.2, 0.3, 0, 0, math.pi / 2], atol=1e-12)


def _homogeneous() -> np.ndarray:
    m = np.eye(4)
    m[:3, :3] = geometry.euler_to_matrix(np.array([0, 0, math.pi / 2]))
    m[:3, 3] = [0.1, 0.2, 0.3]
    return m


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"error": "CUDA out of memory in model_v7"}, "reported an error"),
        ({"actions": np.zeros((2, 7))}, "no 'result'"),
        ({"result": None}, "no actions"),
        ({"result": []}, "non-empty"),
        (
            {
                "result": [
                    {
                        wire_keys.POSITRONIC_ROBOT_COMMAND: {
                            "type": "joint_delta",
                            "velocities": np.zeros(7),
                        }
                    }
                ]
            },
            "joint_delta",
        ),
        ({"result": [{wire_keys.POSITRONIC_ROBOT_COMMAND: {"type": "reset"}}]}, "'reset' commands"),
        (
            {"result": [{wire_keys.POSITRONIC_ROBOT_COMMAND: {"type": "teleport"}}]},
            "unknown command",
        ),
        ({"result": [{"robot_command.left": {"type": "reset"}}]}, "one arm"),
        ({"result": [_cart([0, 0, 0], np.arange(9.0).reshape(3, 3))]}, "not a rotation"),
        (
            {
                "result": [
                    {
                        wire_keys.POSITRONIC_ROBOT_COMMAND: {
                            "type": "joint_pos",
                            "positions": np.zeros(6),
                        }
                    }
                ]
            },
            "7 joints",
        ),
        (
            {"result": [_cart([0, 0, 0], timestamp=0.5), _cart([0, 0, 0], timestamp=0.1)]},
            "back in time",
        ),
        ({"result": [_cart([0, 0, 0], timestamp=3600.0)]}, "outside"),
        ({"result": [_cart([0, 0, math.nan])]}, "NaN"),
        ({"result": [_cart([0, 0, 0], target_grip=[0.1, 0.2])]}, "expected one"),
    ],
)
def test_replies_the_station_will_not_run(reply: dict[str, Any], message: str) -> None:
    with pytest.raises(ProtocolError, match=message) as err:
        decode_result(reply, control_hz=15, action_fps=None, **HOLD)
    assert "model_v7" not in str(err.value)  # the server's own words are never repeated


def _moded(mode: Any) -> dict[str, Any]:
    """A joint target pinning ``mode``, its command in the envelope or bare."""
    command = {"type": "joint_pos", "positions": np.full(7, 0.1), "mode": mode}
    return {"result": [{wire_keys.POSITRONIC_ROBOT_COMMAND: {CMD: command}}]}


@pytest.mark.parametrize(
    ("mode", "refused"),
    [
        (None, None),  # no mode pinned
        ({"type": "position_control"}, None),  # the station's own law: run
        ({"type": "position_control", "stiffness": None}, None),
        ({"type": "position_control", "stiffness": [100.0] * 7}, "'position_control' with a"),
        (
            {"type": "impedance", "kq": [40.0] * 7, "kqd": [4.0] * 7, "kx": [1.0] * 6},
            "'impedance' \\(kq, kqd, kx, kxd gains\\) is not run",
        ),
        ({"type": "torque_model_v7"}, "unknown control mode"),
        ("impedance", "not a control mode"),
        ({"stiffness": [1.0]}, "not a control mode"),
    ],
)
def test_a_commands_control_mode_is_run_or_refused_by_name(mode: Any, refused: str | None) -> None:
    if refused is None:
        chunk = decode_result(_moded(mode), control_hz=15, action_fps=None, **HOLD)
        np.testing.assert_allclose(chunk.rows[0, :7], 0.1)
        return
    with pytest.raises(ProtocolError, match=refused) as err:
        decode_result(_moded(mode), control_hz=15, action_fps=None, **HOLD)
    message = str(err.value)
    assert "result[0].robot_command.mode" in message  # which field, by its path
    assert "model_v7" not in message  # an unknown mode's name is the server's own words


def test_the_modes_a_reply_names_are_listed_for_the_report() -> None:
    assert positronic.command_modes(_moded({"type": "position_control"})) == ["position_control"]
    assert positronic.command_modes(_moded({"type": "impedance"})) == ["impedance"]
    assert positronic.command_modes(_moded({"type": "torque_model_v7"})) == ["other"]
    assert positronic.command_modes(_moded(None)) == []
    assert positronic.command_modes({"result": None}) == []


def test_a_session_keeps_one_action_space() -> None:
    joint = {wire_keys.POSITRONIC_ROBOT_COMMAND: {"type": "joint_pos", "positions": np.zeros(7)}}
    with pytest.raises(ProtocolError, match="joint_position command in a session of cartesian"):
        decode_result({"result": [joint]}, control_hz=15, action_fps=None, space=CART, **HOLD)


# -- over real WebSockets ---------------------------------------------------------------


def _client(url: str, **kw: Any) -> PolicyClient:
    return PolicyClient(
        session_url(url), dialect=EndpointDialect.positronic_v1, status_timeout_s=2.0, **kw
    )


def _observation(info: Any) -> dict[str, Any]:
    from tests.station.conftest import posed_observation

    return posed_observation(info, yaw=0.3, image_hw=(240, 320))


class _Echo:
    """Records what it was sent; answers a fixed 2-step Cartesian chunk."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def new_session(self) -> _Echo:
        return self

    def metadata(self) -> dict[str, Any]:
        return {}

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(obs)
        start = np.asarray(obs[wire_keys.OBS_CARTESIAN_POSITION], dtype=np.float64)
        rows = np.stack([np.r_[start, 0.0], np.r_[start + np.array([0, 0, -0.01, 0, 0, 0]), 1.0]])
        return {wire_keys.REPLY_ACTIONS: rows}


def test_an_exchange_with_loading_auth_and_a_named_model() -> None:
    policy = _Echo()
    with PositronicServer(
        policy, models=("a/b", "c"), auth_token="tok", loading_frames=3, image_size_wh=(96, 64)
    ) as server:
        with pytest.raises(PolicyUnavailable, match="key it needs is missing or was refused"):
            _client(server.url).connect()  # no bearer token: the upgrade is refused
        client = _client(
            server.session_url("a/b"), headers=auth_headers(EndpointDialect.positronic_v1, "tok")
        )
        info = client.connect()
        assert server.last_model == "a/b" and info.image_size == (64, 96)
        obs = _observation(info)
        reply = client.infer(obs, timeout_s=5)
        client.close()
    sent = policy.seen[0]
    # Positronic's keys, the quaternion w first; the server's own conversion back
    # gives the station's Cartesian position
    np.testing.assert_allclose(
        sent[wire_keys.OBS_CARTESIAN_POSITION], [0.45, 0.05, 0.35, math.pi, 0, 0.3], atol=1e-6
    )
    assert obs[wire_keys.POSITRONIC_EE_POSE][3] == pytest.approx(0.0, abs=1e-6)  # w of a 180° roll
    assert obs[wire_keys.POSITRONIC_TASK] == "put the towels in the bin"
    # fitted inside 96×64 keeping 4:3, never padded
    assert obs[wire_keys.POSITRONIC_WRIST_IMAGE].shape == (64, 85, 3)
    assert reply.space == CART and reply.actions.shape == (2, 7)
    np.testing.assert_allclose(reply.actions[1, :3], [0.45, 0.05, 0.34], atol=1e-6)
    np.testing.assert_allclose(reply.actions[:, 6], [0, 1])


def test_the_servers_own_words_never_reach_the_station() -> None:
    with PositronicServer(DemoPolicy("reference"), mistake="error_reply") as server:
        client = _client(server.url)
        info = client.connect()
        with pytest.raises(PolicyProtocolError) as err:
            client.infer(_observation(info), timeout_s=5)
        assert "exploded" not in str(err.value)
        client.close()
    with PositronicServer(DemoPolicy("reference"), models=("m1",)) as server:
        with pytest.raises(PolicyUnavailable, match="refused the session") as err:
            _client(server.session_url("nope")).connect()
        assert "nope" not in str(err.value)
    with PositronicServer(DemoPolicy("reference"), mistake="no_ready") as server:
        with pytest.raises(PolicyUnavailable, match="not ready"):
            _client(server.url, load_timeout_s=1.0).connect()


@once()  # dialect coverage does not depend on the database
def test_an_episode_over_the_positronic_wire(station_db, tmp_path: Path, backend: str) -> None:
    """A whole simulated episode: the demo policy behind a Positronic server,
    its waypoints run on the station's 15 Hz grid; items get placed."""
    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db import session_scope
    from proctor.core.recording.reader import load_recording
    from proctor.core.work import Work
    from tests.station.conftest import sim_config, sim_runner

    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    with PositronicServer(DemoPolicy("reference"), auth_token="tok") as server:
        work = Work(
            run_code="R-POS01",
            object_name="towels",
            items=2,
            per_item_cap_s=30.0,
            tote_side=Side.right,
            camera_side=Side.left,
            policy_url=session_url(server.url),
            sim_seed=5,
            dialect=EndpointDialect.positronic_v1,
            policy_headers=auth_headers(EndpointDialect.positronic_v1, "tok"),
        )
        with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
            uid = runner.arm(work)
            runner.start(background=False)
            summary = runner.last
    assert summary is not None and summary.proposed == Outcome.success, summary and summary.reason
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        assert rec.manifest["policy"]["dialect"] == "positronic_v1"
        running = rec.column(keys.PHASE) == keys.TelemetryPhase.running.value
        assert set(rec.column(keys.ACTION_KIND)[running]) == {"cartesian_pose"}
        assert rec.ground_truth is not None and rec.ground_truth["final"]["placed"] == 2
        rec.close()


def test_a_daemons_adhoc_work_can_name_the_positronic_wire(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from proctor.core.errors import UsageError
    from proctor.station.daemon import adhoc_source

    monkeypatch.setenv("POLICY_KEY", "tok")
    base = {"object": "towels", "policy": "ws://gpu:8000", "dialect": "positronic_v1"}
    work = adhoc_source({**base, "api_key_env": "POLICY_KEY"}).claim()
    assert work is not None
    assert work.policy_url == "ws://gpu:8000/api/v1/session"
    assert work.dialect == EndpointDialect.positronic_v1
    assert work.policy_headers == {"Authorization": "Bearer tok"}
    # openpi keeps its URL as given and its own key scheme
    plain = adhoc_source({**base, "dialect": "openpi", "api_key_env": "POLICY_KEY"}).claim()
    assert plain is not None and plain.policy_url == "ws://gpu:8000"
    assert plain.policy_headers == {"Authorization": "Api-Key tok"}
    for options, field in [
        ({**base, "dialect": "grpc"}, "work.options.dialect"),
        ({**base, "api_key_env": "NOT_SET_ANYWHERE"}, "work.options.api_key_env"),
        ({**base, "policy": "ws://gpu:8000/elsewhere"}, "work.options.policy"),
    ]:
        with pytest.raises(UsageError, match=field):
            adhoc_source(options)


def test_serve_demo_serves_a_positronic_profile_on_its_wire(serve_demo: Any) -> None:
    """`proctor policy serve-demo --profile steady` (the demo's Positronic arm),
    in its own process, passes the conformance check on the Positronic wire."""
    import subprocess

    from proctor.policywire.conformance.check import CheckOptions, check_endpoint
    from tests.policy_servers import PROCTOR, ROOT, clean_env

    url = serve_demo("steady")
    report = check_endpoint(
        url, options=CheckOptions(dialect=EndpointDialect.positronic_v1, observations=3)
    )
    assert report.passed, report.summary
    assert report.server is not None and report.server["image_size"] == [96, 128]
    drill = subprocess.run(
        [*PROCTOR, "policy", "serve-demo", "--profile", "steady", "--fault", "hang"],
        capture_output=True, text=True, env=clean_env(), cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert (
        drill.returncode == 2 and "--fault: fault drills are served on the openpi" in drill.stderr
    )


class _SlowIndexed:
    """Answers after ``latency_s`` with ten Cartesian rows that hold the arm
    still and carry their index in the gripper target (row k → k / 10)."""

    def __init__(self, latency_s: float) -> None:
        self.latency_s = latency_s

    def new_session(self) -> _SlowIndexed:
        return self

    def metadata(self) -> dict[str, Any]:
        return {}

    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        import time

        time.sleep(self.latency_s)
        here = np.asarray(obs[wire_keys.OBS_CARTESIAN_POSITION], dtype=np.float64)
        rows = np.array([[*here, k / 10] for k in range(10)])
        return {wire_keys.REPLY_ACTIONS: rows}


@once()  # the control loop does not depend on the database
def test_in_real_time_the_rows_past_due_are_skipped(
    station_db, tmp_path: Path, backend: str
) -> None:
    """On the monotonic clock with a 0.2 s policy, every chunk starts at its
    row ≥ 3 (0.2 s × 15 Hz): the gripper targets 0, 0.1 and 0.2 are never sent."""
    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db import session_scope
    from proctor.core.recording.reader import load_recording
    from proctor.core.work import Work
    from tests.station.conftest import sim_config, sim_runner

    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    cfg = sim_config(control_hz=15.0, sim={"clock": "monotonic"})
    with PositronicServer(_SlowIndexed(0.2)) as server:
        work = Work(
            run_code="R-POS02",
            object_name="towels",
            items=1,
            per_item_cap_s=2.5,
            tote_side=Side.left,
            camera_side=Side.right,
            policy_url=session_url(server.url),
            sim_seed=3,
            dialect=EndpointDialect.positronic_v1,
        )
        with sim_runner(sessions, store, tmp_path, cfg) as runner:
            uid = runner.arm(work)
            runner.start(background=False)
            summary = runner.last
    assert summary is not None and summary.policy_calls >= 2
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        asked = rec.column(keys.GRIPPER_TARGET_REQUESTED)
        rec.close()
    sent = np.unique(np.round(asked[np.isfinite(asked)], 3))
    assert len(sent) and sent.min() >= 0.3 - 1e-9, sent


def test_protocol_versions_in_the_ready_frame() -> None:
    v3 = read_handshake(
        _frames({"status": "ready", "protocol_version": 3, "session_id": "abc", "meta": {}}),
        per_message_s=1,
        total_s=5,
    )
    assert v3.protocol_version == 3
    assert v3.request({"task": "x"}) == {"session_id": "abc", "observation": {"task": "x"}}
    assert v3.end() == {"session_id": "abc", "end_session": True}
    v1 = read_handshake(_frames({"status": "ready", "meta": {}}), per_message_s=1, total_s=5)
    assert v1.protocol_version == 1 and v1.request({"task": "x"}) == {"task": "x"}
    assert v1.end() is None
    for frame, words in [
        # described by type, never quoted (tests/policywire/test_peer_text.py)
        ({"status": "ready", "protocol_version": 2, "meta": {}}, r"\(a value of type int\) is not"),
        ({"status": "ready", "protocol_version": 3, "meta": {}}, "without a session_id"),
        ({"status": "ready", "protocol_version": True, "meta": {}}, r"\(a value of type bool\)"),
    ]:
        with pytest.raises(ProtocolError, match=words):
            read_handshake(_frames(frame), per_message_s=1, total_s=5)
