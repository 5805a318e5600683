"""The Positronic v1 wire, as the station speaks it.

Positronic's offboard inference protocol (Positronic-Robotics/positronic,
``positronic/offboard/README.md``, "Protocol v1"):

* ``GET /api/v1/models`` → ``{"models": [id, …]}``;
* ``WS /api/v1/session`` (the server's pinned model) or
  ``WS /api/v1/session/<model_id>`` (ids may hold slashes; ``? # % :``
  percent-encoded), with optional ``?key=<JSON literal>`` session parameters
  passed through verbatim; the credential is ``Authorization: Bearer <key>``;
* binary frames, msgpack with numpy arrays tagged ``__ndarray__`` /
  ``__npgeneric__`` (the openpi tagging) and robot commands in a
  ``__cmd__`` envelope;
* on connect: any number of ``{"status": "loading" | "waiting", "message"}``
  frames, then ``{"status": "ready", "meta": {…}}`` (older servers send just
  ``{"meta": …}``), or ``{"status": "error", "error": …}`` and close 1008;
* then per observation: ``{"result": [action, …], "timing": {…}}`` or
  ``{"error": "…"}`` (the session stays open).

Protocol versions: a ``ready`` frame without ``protocol_version`` (or with
1) is the v1 exchange above, the observation sent bare. One with
``protocol_version: 3`` (``positronic-model-server`` ≥ 0.3) also carries a
``session_id``: each request is ``{"session_id", "observation"}`` and the
session ends with ``{"session_id", "end_session": true}``, acknowledged in
kind. Other versions are refused at connect. Protocol 3's
``positronic-model-server`` also answers ``POST /api/v1/keepalive`` with
``{"alive_seconds": …}`` once its model is loaded and warm (401 without the
token; the conformance check waits on it: ``positronic_ready.py``) and has
no ``/api/v1/models``. A reply's ``timing`` map (``decode_ms``,
``queued_ms``, ``model_ms``, ``infer_ms``, ``served_ms``) is kept for
reporting (``TIMING_KEYS``).

What the station sends (``proctor/core/recording/keys.py``): ``robot_state.q``,
``robot_state.dq``, ``robot_state.ee_pose`` (xyz + quaternion **w first**,
Positronic's order; the station's own is w last), ``grip``, ``task``,
``image.exterior`` and ``image.wrist`` (RGB uint8, fitted inside the
advertised ``image_sizes`` keeping the aspect ratio, never enlarged, not
padded: the server's codec pads), plus the simulated cell's ``sim/…`` keys.

What it runs: each action of a ``result`` is a waypoint — ``timestamp``
(seconds after the call; absent: ``i / action_fps``, or one per control
step), ``robot_command`` (``cartesian_pos`` with a 12-vector xyz + row-major
rotation matrix, a 7-vector xyz + wxyz quaternion or a 4×4 matrix, or
``joint_pos`` with 7 positions) and ``target_grip``. Like Positronic's chunk
player, a channel keeps its last value until a later waypoint changes it, and
a waypoint with no channels marks where the chunk ends. The station samples
that schedule on its own control grid (``control_hz``): step ``k`` runs
what is in force at ``k / control_hz``.

A command's optional ``mode`` (Positronic's ``drivers/roboarm/command.py``):
``position_control`` naming no stiffness is the station's own law and runs;
anything else is refused by name (``_mode``).

Refused with a message that names the reason (nothing half-runs):
``joint_delta``, ``reset`` and ``recover`` commands, bimanual channels
(``robot_command.left`` …), ``compress_images: true``, and any rig-side layer
in ``local_stack`` beyond the ones the station does itself (chunk playback,
image fitting, stopping on an arm fault). Nothing the server says about
itself (checkpoint, paths, messages, error texts) is stored or shown.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from proctor.core import geometry
from proctor.core.domain import EndpointDialect
from proctor.core.recording import keys
from proctor.policywire.wire import codec
from proctor.policywire.wire import keys as wire_keys
from proctor.policywire.wire.spec import ActionSpace, ProtocolError, ServerInfo, peer_value

SESSION_PATH = "/api/v1/session"
MODELS_PATH = "/api/v1/models"
# positronic-model-server's readiness call: POST answers {"alive_seconds": n | null}
# once the model is loaded and warm (its listeners bind only then), 401 without the token
KEEPALIVE_PATH = "/api/v1/keepalive"
ALIVE_SECONDS = "alive_seconds"
# the phases a protocol 3 reply's "timing" map reports, in ms on the server's clock
TIMING = "timing"
TIMING_KEYS = frozenset({"decode_ms", "queued_ms", "model_ms", "infer_ms", "served_ms"})
# a command's optional "mode": the control law it asks to run under
# (positronic.drivers.roboarm.command: PositionControl, Impedance)
MODE = "mode"
POSITION_CONTROL, IMPEDANCE = "position_control", "impedance"

READY, LOADING, WAITING, ERROR = "ready", "loading", "waiting", "error"
# the layers Positronic asks a rig to run that the station does by itself:
# it plays chunks on its control grid, fits images, and stops on an arm fault
NATIVE_LAYERS = frozenset(
    {"chunked_schedule", "chunk_player", "restrict_image_size", "stop_on_fault"}
)
MAX_ACTION_SKEW_S = 60.0  # a waypoint further from the call than this is a clock bug


class SessionRefused(RuntimeError):
    """The server answered the session with an error status. Its text is kept
    apart (``server_text``) for the submitter's own conformance report; the
    station never shows or stores it."""

    def __init__(self, message: str, server_text: str = "") -> None:
        super().__init__(message)
        self.server_text = server_text


def session_url(url: str) -> str:
    """The session URL for an endpoint given as ``ws(s)://host[:port]`` with or
    without ``/api/v1/session[/<model_id>]``; the query travels verbatim."""
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss"):
        raise ValueError("a Positronic endpoint is a ws:// or wss:// URL")
    path = parts.path
    if path in ("", "/") or path.rstrip("/") == SESSION_PATH:
        path = SESSION_PATH
    elif not path.startswith(SESSION_PATH + "/"):
        raise ValueError(
            f"the path must be {SESSION_PATH} or {SESSION_PATH}/<model_id> "
            "(or nothing: the server's default model)"
        )
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def model_id(url: str) -> str | None:
    """The model a session URL names, as written (None: the server's default)."""
    path = urlsplit(session_url(url)).path
    return path[len(SESSION_PATH) + 1 :] or None


def _api_url(url: str, path: str) -> str:
    parts = urlsplit(session_url(url))
    return urlunsplit(("https" if parts.scheme == "wss" else "http", parts.netloc, path, "", ""))


def models_url(url: str) -> str:
    """Where a v1 server lists its models: ``http(s)://host/api/v1/models``."""
    return _api_url(url, MODELS_PATH)


def keepalive_url(url: str) -> str:
    """Where a model server answers whether it is ready: ``http(s)://host/api/v1/keepalive``."""
    return _api_url(url, KEEPALIVE_PATH)


def alive_answer(body: bytes) -> bool:
    """Whether a keepalive's 200 body is the model server's answer
    (``{"alive_seconds": <int> | null}``), not something else answering 200."""
    try:
        answer = json.loads(body)
    except (ValueError, RecursionError):
        return False
    if not isinstance(answer, dict) or ALIVE_SECONDS not in answer:
        return False
    alive = answer[ALIVE_SECONDS]
    return alive is None or (isinstance(alive, int) and not isinstance(alive, bool) and alive >= 0)


# -- the handshake ------------------------------------------------------------


SUPPORTED_VERSIONS = (1, 3)


@dataclass(frozen=True)
class Handshake:
    meta: dict[str, Any]
    status_messages: int  # loading / waiting frames before ready
    waited_s: float
    protocol_version: int = 1
    session_id: str | None = None  # v3: what every request carries

    def request(self, observation: dict[str, Any]) -> dict[str, Any]:
        """The frame an observation travels in."""
        if self.session_id is None:
            return observation
        return {"session_id": self.session_id, "observation": observation}

    def end(self) -> dict[str, Any] | None:
        """v3: the frame that ends the session (None: v1 just closes)."""
        if self.session_id is None:
            return None
        return {"session_id": self.session_id, "end_session": True}


def read_handshake(
    recv: Callable[[float], Any],
    *,
    per_message_s: float,
    total_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> Handshake:
    """Read status frames until ``ready``. ``recv(timeout)`` returns one frame
    (raises ``TimeoutError``). Raises ``TimeoutError`` (silent too long, or not
    ready in ``total_s``), ``SessionRefused`` or ``ProtocolError``."""
    start = clock()
    statuses = 0
    while True:
        left = total_s - (clock() - start)
        if left <= 0:
            raise TimeoutError(f"the server was not ready within {total_s:g} s")
        raw = recv(min(per_message_s, left))
        if isinstance(raw, str):
            raise ProtocolError("a text frame during the session handshake (frames are msgpack)")
        try:
            message = codec.unpackb(raw)
        except codec.CodecError as exc:
            raise ProtocolError(f"a handshake frame is not msgpack: {exc}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"a handshake frame is a {type(message).__name__}, not a map")
        status = message.get("status")
        if status == ERROR or "error" in message:
            raise SessionRefused(
                "the policy server refused the session", str(message.get("error") or "")
            )
        if status == READY or (status is None and "meta" in message):
            meta = message.get("meta", {})
            if meta is None:
                meta = {}
            if not isinstance(meta, dict):
                raise ProtocolError(f"'meta' is a {type(meta).__name__}, not a map")
            version = message.get("protocol_version", 1)
            if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
                raise ProtocolError(
                    f"protocol_version ({peer_value(version)}) is not spoken by the station "
                    f"(it speaks {' and '.join(map(str, SUPPORTED_VERSIONS))})"
                )
            session = message.get("session_id")
            if version >= 3 and (not isinstance(session, str) or not session):
                raise ProtocolError("a protocol_version 3 ready frame without a session_id")
            return Handshake(
                meta, statuses, clock() - start, int(version), session if version >= 3 else None
            )
        if status in (LOADING, WAITING):
            statuses += 1
            continue
        raise ProtocolError(
            f"unexpected handshake frame (status: {peer_value(status)}; expected loading, "
            "waiting or ready)"
        )


# -- the metadata ---------------------------------------------------------------


def _layer_names(spec: Any, path: str = "local_stack") -> list[str]:
    if isinstance(spec, Mapping):
        if "seq" in spec:
            items = spec["seq"]
            if not isinstance(items, list):
                raise ProtocolError(f"meta.{path}.seq must be a list")
            return [n for i, s in enumerate(items) for n in _layer_names(s, f"{path}.seq[{i}]")]
        if "par" in spec:
            raise ProtocolError(
                f"meta.{path}: parallel rig-side layers ('par') are not supported by the station"
            )
        name = spec.get("name")
        if not isinstance(name, str):
            raise ProtocolError(f"meta.{path}: a layer without a name")
        return [name]
    raise ProtocolError(f"meta.{path}: expected a map, got {type(spec).__name__}")


def _image_size(value: Any) -> tuple[int, int] | None:
    """``image_sizes`` is ``[width, height]`` (Positronic's order, as PIL's), or
    a map of camera key → ``[width, height]`` with one size for all."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        sizes = {_image_size(v) for v in value.values()}
        if len(sizes) > 1:
            raise ProtocolError("meta.image_sizes: different sizes per camera are not supported")
        return sizes.pop() if sizes else None
    try:
        w, h = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ProtocolError(
            f"meta.image_sizes: expected [width, height], got {peer_value(value)}"
        ) from None
    if not (8 <= h <= 4096 and 8 <= w <= 4096):
        raise ProtocolError("meta.image_sizes: out of range (each side 8 to 4096 pixels)")
    return (h, w)


def parse_meta(meta: dict[Any, Any]) -> ServerInfo:
    """The ``ready`` metadata → what the station needs (nothing that names the policy)."""
    if meta.get("compress_images"):
        raise ProtocolError(
            "meta.compress_images: the server expects JPEG-compressed frames; the station "
            "sends raw RGB arrays (serve with compress_images off)"
        )
    stack = meta.get("local_stack")
    if stack is not None:
        foreign = [n for n in _layer_names(stack) if n not in NATIVE_LAYERS]
        if foreign:
            # the layers are counted, not named: the server chose their names
            raise ProtocolError(
                f"meta.local_stack: the server asks the rig to run {len(set(foreign))} "
                "layer(s) the station does not have; the station runs only "
                + ", ".join(sorted(NATIVE_LAYERS))
            )
    image_size = _image_size(meta.get("image_sizes"))
    fps = meta.get("action_fps")
    if fps is not None:
        if isinstance(fps, bool) or not isinstance(fps, int | float) or not 0 < fps <= 1000:
            raise ProtocolError(
                f"meta.action_fps: expected a rate in (0, 1000] Hz, got {peer_value(fps)}"
            )
        fps = float(fps)
    return ServerInfo(
        dialect=EndpointDialect.positronic_v1,
        action_space=None,  # each reply's commands say it
        image_size=image_size,
        n_external_cameras=1,
        needs_wrist_camera=True,
        needs_session_id=False,
        action_fps=fps,
        pad_images=False,
    )


# -- observations -----------------------------------------------------------------


def observation(
    *,
    q: np.ndarray,
    dq: np.ndarray,
    ee_pose: np.ndarray,
    grip: float,
    prompt: str,
    images: dict[str, np.ndarray],
) -> dict[str, Any]:
    """The station's state in Positronic's keys. ``ee_pose`` is the station's
    ``[x, y, z, qx, qy, qz, qw]``; ``images`` maps camera name → fitted frame."""
    pose = np.concatenate([ee_pose[:3], ee_pose[6:7], ee_pose[3:6]]).astype(np.float32)
    obs: dict[str, Any] = {
        wire_keys.POSITRONIC_JOINTS: np.asarray(q, dtype=np.float32),
        wire_keys.POSITRONIC_JOINT_VELOCITY: np.asarray(dq, dtype=np.float32),
        wire_keys.POSITRONIC_EE_POSE: pose,
        wire_keys.POSITRONIC_GRIP: np.array([grip], dtype=np.float32),
        wire_keys.POSITRONIC_TASK: prompt,
    }
    if keys.CAMERA_EXTERIOR in images:
        obs[wire_keys.POSITRONIC_EXTERIOR_IMAGE] = images[keys.CAMERA_EXTERIOR]
    if keys.CAMERA_WRIST in images:
        obs[wire_keys.POSITRONIC_WRIST_IMAGE] = images[keys.CAMERA_WRIST]
    return obs


# -- replies --------------------------------------------------------------------------


def _vector(value: Any, what: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ProtocolError(f"{what} is not a numeric array") from None
    if not np.all(np.isfinite(arr)):
        raise ProtocolError(f"{what} contains NaN or infinite values")
    return arr


def _pose_row(pose: Any, what: str) -> np.ndarray:
    """A Cartesian target → the station's ``[x, y, z, roll, pitch, yaw]``."""
    arr = _vector(pose, what)
    if arr.shape == (4, 4):
        xyz, rot = arr[:3, 3], arr[:3, :3]
    elif arr.size == 12:
        flat = arr.ravel()
        xyz, rot = flat[:3], flat[3:].reshape(3, 3)
    elif arr.size == 7:
        flat = arr.ravel()
        w, x, y, z = flat[3:]
        if math.hypot(w, x, y, z) < 1e-6:
            raise ProtocolError(f"{what}: a zero quaternion")
        xyz, rot = flat[:3], geometry.quat_to_matrix(np.array([x, y, z, w]))
    else:
        raise ProtocolError(
            f"{what} has shape {arr.shape}; expected 12 (xyz + rotation matrix), "
            "7 (xyz + quaternion w, x, y, z) or 4×4"
        )
    if not np.allclose(rot @ rot.T, np.eye(3), atol=1e-3) or np.linalg.det(rot) < 0:
        raise ProtocolError(f"{what}: the rotation is not a rotation matrix")
    return np.concatenate([xyz, geometry.matrix_to_euler(rot)])


def _command(value: Any, where: str) -> tuple[ActionSpace, np.ndarray]:
    """One ``robot_command`` → its action space and the arm part of a row."""
    if isinstance(value, Mapping):
        envelope = value.get(b"__cmd__", value.get("__cmd__"))
        if envelope is not None:
            value = envelope
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise ProtocolError(f"{where}.robot_command is not a command (a map with a 'type')")
    if MODE in value:
        _mode(value[MODE], f"{where}.robot_command.mode")
    kind = value["type"]
    if kind == "cartesian_pos":
        if "pose" not in value:
            raise ProtocolError(f"{where}.robot_command: cartesian_pos without 'pose'")
        return ActionSpace.cartesian_position, _pose_row(value["pose"], f"{where}.pose")
    if kind == "joint_pos":
        q = _vector(value.get("positions"), f"{where}.positions").ravel()
        if q.shape != (keys.N_JOINTS,):
            raise ProtocolError(
                f"{where}.positions has {q.size} values; the FR3 has {keys.N_JOINTS} joints"
            )
        return ActionSpace.joint_position, q
    if kind in ("joint_delta", "reset", "recover"):
        raise ProtocolError(
            f"{where}.robot_command: '{kind}' commands are not run by the station "
            "(it runs cartesian_pos and joint_pos)"
        )
    raise ProtocolError(f"{where}.robot_command: unknown command type ({peer_value(kind)})")


def _mode(value: Any, where: str) -> None:
    """A command's control mode: run, or refused by name (never ignored).

    The station runs every command as its arm's position servo tracking the
    references it plays, with the arm's own commissioned stiffness: that is
    Positronic's ``position_control`` naming no stiffness, so that mode runs.
    A stiffness, or impedance gains, would change how hard the arm pushes back
    when it meets the world, which the station's envelope does not bound: refused."""
    if value is None:  # Positronic writes no mode as its absence; null means the same
        return
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise ProtocolError(f"{where} is not a control mode (a map with a 'type')")
    kind = value["type"]
    advice = (
        "the station runs every command under its arm's own position control; omit "
        f"'mode', or send {{'type': '{POSITION_CONTROL}'}} without a stiffness"
    )
    if kind == POSITION_CONTROL:
        if value.get("stiffness") is None:
            return
        raise ProtocolError(
            f"{where}: '{POSITION_CONTROL}' with a stiffness is not run by the station "
            f"(it does not change its arm's stiffness): {advice}"
        )
    if kind == IMPEDANCE:
        raise ProtocolError(
            f"{where}: '{IMPEDANCE}' (kq, kqd, kx, kxd gains) is not run by the station: {advice}"
        )
    raise ProtocolError(f"{where}: unknown control mode ({peer_value(kind)}): {advice}")


def command_modes(reply: Any) -> list[str]:
    """The control modes a reply's commands name (by their type), for the report."""
    result = reply.get("result") if isinstance(reply, Mapping) else None
    actions = [result] if isinstance(result, Mapping) else result
    modes: list[str] = []
    for action in actions if isinstance(actions, list) else []:
        command = (
            action.get(wire_keys.POSITRONIC_ROBOT_COMMAND) if isinstance(action, Mapping) else None
        )
        if isinstance(command, Mapping):
            command = command.get(b"__cmd__", command.get("__cmd__", command))
        mode = command.get(MODE) if isinstance(command, Mapping) else None
        if isinstance(mode, Mapping):
            kind = mode.get("type")
            # the server's own words are not repeated: a name the station does not know is "other"
            modes.append(kind if kind in (POSITION_CONTROL, IMPEDANCE) else "other")
    return modes


def _grip(value: Any, where: str) -> float:
    arr = _vector(value, f"{where}.target_grip").ravel()
    if arr.size != 1:
        raise ProtocolError(f"{where}.target_grip has {arr.size} values; expected one")
    return float(arr[0])


@dataclass(frozen=True)
class Chunk:
    space: ActionSpace
    rows: np.ndarray  # (H, space.width) on the station's control grid
    waypoints: int  # actions in the reply


def decode_result(
    reply: Any,
    *,
    control_hz: float,
    action_fps: float | None,
    hold_pose: np.ndarray,
    hold_q: np.ndarray,
    hold_grip: float,
    space: ActionSpace | None = None,
) -> Chunk:
    """A decoded reply → the chunk the station runs, one row per control step.

    ``hold_*`` are the state at the call (station conventions: pose
    ``[x, y, z, roll, pitch, yaw]``, joints, grip) — what a channel holds
    before its first waypoint. ``space`` is the session's space so far (a
    session does not switch between Cartesian and joint commands)."""
    if not isinstance(reply, dict):
        raise ProtocolError(f"reply is a {type(reply).__name__}, not a map")
    if "error" in reply:
        raise ProtocolError("the policy server reported an error instead of actions")
    if "result" not in reply:
        raise ProtocolError(f"reply has no 'result' ({peer_value(reply)})")
    result = reply["result"]
    if result is None:
        raise ProtocolError("'result' is null: the policy produced no actions")
    actions = [result] if isinstance(result, dict) else result
    if not isinstance(actions, list) or not actions:
        raise ProtocolError("'result' must be a non-empty list of actions")

    stamped = any(isinstance(a, dict) and wire_keys.POSITRONIC_TIMESTAMP in a for a in actions)
    step = 1.0 / (action_fps or control_hz)
    waypoints: list[tuple[float, np.ndarray | None, float | None]] = []
    for i, action in enumerate(actions):
        where = f"result[{i}]"
        if not isinstance(action, dict):
            raise ProtocolError(f"{where} is a {type(action).__name__}, not a map")
        bimanual = [
            k
            for k in action
            if isinstance(k, str) and k.startswith(wire_keys.POSITRONIC_ROBOT_COMMAND + ".")
        ]
        if bimanual:
            raise ProtocolError(
                f"{where}: a {wire_keys.POSITRONIC_ROBOT_COMMAND}.<arm> key: "
                "this station has one arm"
            )
        ts = action.get(wire_keys.POSITRONIC_TIMESTAMP, 0.0) if stamped else i * step
        if isinstance(ts, bool) or not isinstance(ts, int | float | np.number):
            raise ProtocolError(f"{where}.timestamp is not a number")
        ts = float(ts)
        if not math.isfinite(ts) or not 0 <= ts <= MAX_ACTION_SKEW_S:
            raise ProtocolError(
                f"{where}.timestamp is outside 0…{MAX_ACTION_SKEW_S:g} s after the call"
            )
        if waypoints and ts < waypoints[-1][0]:
            raise ProtocolError(f"{where}.timestamp goes back in time")
        arm = None
        if wire_keys.POSITRONIC_ROBOT_COMMAND in action:
            kind, arm = _command(action[wire_keys.POSITRONIC_ROBOT_COMMAND], where)
            if space is not None and kind != space:
                raise ProtocolError(
                    f"{where}: a {kind.value} command in a session of {space.value} commands"
                )
            space = kind
        grip = (
            _grip(action[wire_keys.POSITRONIC_TARGET_GRIP], where)
            if wire_keys.POSITRONIC_TARGET_GRIP in action
            else None
        )
        waypoints.append((ts, arm, grip))
    if space is None:  # only grip targets so far: hold the pose
        space = ActionSpace.cartesian_position

    end_marker = waypoints[-1][1] is None and waypoints[-1][2] is None
    t_end = waypoints[-1][0]
    eps = 1e-9
    n = (
        math.ceil(t_end * control_hz - eps)
        if end_marker
        else math.floor(t_end * control_hz + eps) + 1
    )
    n = max(1, n)
    arm_now = hold_pose if space == ActionSpace.cartesian_position else hold_q
    arm_now = np.asarray(arm_now, dtype=np.float64)
    grip_now = float(hold_grip)
    rows = np.empty((n, space.width))
    w = 0
    for k in range(n):
        t = k / control_hz
        while w < len(waypoints) and waypoints[w][0] <= t + eps:
            _, arm, grip = waypoints[w]
            if arm is not None:
                arm_now = arm
            if grip is not None:
                grip_now = grip
            w += 1
        rows[k, :-1] = arm_now
        rows[k, -1] = grip_now
    return Chunk(space, rows, len(actions))


def hold_state(obs: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, float]:
    """The state an observation reports, in the station's row conventions:
    pose ``[x, y, z, roll, pitch, yaw]``, joints, grip (what a chunk holds
    before its first waypoint)."""
    pose = np.asarray(
        obs.get(wire_keys.POSITRONIC_EE_POSE, [0, 0, 0, 1, 0, 0, 0]), dtype=np.float64
    )
    w, x, y, z = pose[3:7]
    rot = geometry.quat_to_matrix(np.array([x, y, z, w]))
    q = np.asarray(obs.get(wire_keys.POSITRONIC_JOINTS, np.zeros(keys.N_JOINTS)), dtype=np.float64)
    grip = float(np.asarray(obs.get(wire_keys.POSITRONIC_GRIP, [0.0]), dtype=np.float64).ravel()[0])
    return np.concatenate([pose[:3], geometry.matrix_to_euler(rot)]), q, grip
