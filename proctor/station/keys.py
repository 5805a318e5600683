"""Every name the station writes or sends, defined once.

The recorder writes these columns; the annotator (release detector), the web
run explorer and the ``.rrd`` exporter read exactly these. Change a name here
and every reader follows; never spell one of them out elsewhere.

Conventions: times are seconds on the station clock (the one clock every
sample carries); joint vectors are 7 entries (rad, rad/s); the end-effector
pose is ``[x, y, z, qx, qy, qz, qw]`` in metres in the robot base frame;
gripper positions are normalised, 0 = open, 1 = closed. The layout of a
recording (files, artifacts, manifest) is described in ``proctor/station/README.md``.
"""

from __future__ import annotations

from enum import StrEnum

N_JOINTS = 7
ACTION_WIDTH = (
    7  # widest arm command (joint vectors, pose with quaternion); narrower ones NaN-padded
)

# ---------------------------------------------------------------------------
# Telemetry: one row per sample at ``telemetry_hz`` (≥ 100 Hz)
# ---------------------------------------------------------------------------

T = "t"  # station clock time of the sample, s
PHASE = "phase"  # TelemetryPhase value (dictionary-encoded string)
JOINT_POSITION = tuple(f"q{i}" for i in range(N_JOINTS))  # measured, rad
JOINT_VELOCITY = tuple(f"dq{i}" for i in range(N_JOINTS))  # measured, rad/s
EE_POSE = ("ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw")  # measured
EE_X, EE_Y, EE_Z = EE_POSE[:3]
# linear speed of the tool centre point, m/s: the finite difference of EE_X..EE_Z
# between consecutive samples (their own times), 0 on the first sample
EE_SPEED = "ee_speed"
# the arm command in force at the sample (the latest action step's)
ACTION_KIND = "action_kind"  # ArmCommandKind value, "" before the first action
ACTION_STEP = "action_step"  # index of that action step in the episode, -1 before the first
ACTION_REQUESTED = tuple(f"action_req{i}" for i in range(ACTION_WIDTH))  # as the policy asked
ACTION_SENT = tuple(f"action_sent{i}" for i in range(ACTION_WIDTH))  # as the arm accepted it
GRIPPER_TARGET_REQUESTED = "gripper_target_req"  # the policy's gripper value, clipped to [0, 1]
GRIPPER_TARGET = "gripper_target"  # the target the gripper reports it is moving to
GRIPPER_POSITION = "gripper_position"  # measured finger position
GRIPPER_OBJECT = "gripper_object"  # bool: fingers stopped on an object
POLICY_CALLS = "policy_calls"  # completed policy calls so far (cumulative)
POLICY_LATENCY = "policy_latency_s"  # wall-clock latency of the latest completed call, NaN before
# what the station's envelope changed in the action step in force: a bit mask of
# ``EnvelopeReason`` bits (0 = sent as asked; NaN before the first action step)
ENVELOPE = "envelope"
# the episode event of a run of consecutive action steps the envelope changed:
# ``details`` = {"reason": the reasons joined by "+", "reasons": [...], "steps": n,
# "until_s": the run's last step, s from the start}; its ``t_s`` is the run's first step
ENVELOPE_EVENT = "envelope"
# the episode event holding the per-call table (one per episode, written when it
# ends): ``details`` = {"control_hz", "budget_ms", "tolerance", "over_budget",
# "calls_not_listed", "columns": {column: [value per call]}} with the columns
# below (proctor/station/control/call_log.py says what each means)
POLICY_CALLS_EVENT = "policy_calls"
POLICY_CALL_COLUMNS = (
    "t_ask_s",
    "round_trip_ms",
    "server_ms",
    "t_intended_s",
    "t_start_s",
    "actions",
    "skipped",
    "over_budget",
)
# the reason (and event) of an episode its policy ended by exceeding the
# campaign's latency budget past its tolerance: charged to the policy
LATENCY_BUDGET_EXCEEDED = "latency_budget_exceeded"

TELEMETRY_FLOAT_COLUMNS: tuple[str, ...] = (
    *JOINT_POSITION,
    *JOINT_VELOCITY,
    *EE_POSE,
    EE_SPEED,
    *ACTION_REQUESTED,
    *ACTION_SENT,
    GRIPPER_TARGET_REQUESTED,
    GRIPPER_TARGET,
    GRIPPER_POSITION,
    POLICY_LATENCY,
    ENVELOPE,
)


def _float_slice(names: tuple[str, ...]) -> slice:
    start = TELEMETRY_FLOAT_COLUMNS.index(names[0])
    span = slice(start, start + len(names))
    if TELEMETRY_FLOAT_COLUMNS[span] != names:
        raise ValueError(f"telemetry columns {names} are not contiguous in the float row")
    return span


# Where each column sits in a row of TELEMETRY_FLOAT_COLUMNS (the recorder's float
# buffer): writers address a row through these, never through literal offsets
SLICE_JOINT_POSITION = _float_slice(JOINT_POSITION)
SLICE_JOINT_VELOCITY = _float_slice(JOINT_VELOCITY)
SLICE_EE_POSE = _float_slice(EE_POSE)
SLICE_ACTION_REQUESTED = _float_slice(ACTION_REQUESTED)
SLICE_ACTION_SENT = _float_slice(ACTION_SENT)
FLOAT_INDEX: dict[str, int] = {name: i for i, name in enumerate(TELEMETRY_FLOAT_COLUMNS)}

TELEMETRY_COLUMNS: tuple[str, ...] = (
    T,
    PHASE,
    ACTION_KIND,
    ACTION_STEP,
    *TELEMETRY_FLOAT_COLUMNS,
    GRIPPER_OBJECT,
    POLICY_CALLS,
)


class EnvelopeReason(StrEnum):
    """Why the envelope (``proctor.station.envelope``) changed or refused an arm command.
    Each reason is one bit of the ``envelope`` telemetry column."""

    workspace = "workspace"  # the tool would have left the workspace box or gone below the table
    step = "step"  # the target lay farther from the measured state than one step may go
    speed = "speed"  # the tool would have moved faster than the cell's speed cap
    orientation = "orientation"  # the tool's z axis would have left the cone around "down"
    jump = "jump"  # the episode's first target lay far from the arm: stopped, not clamped
    # a joint velocity would not have braked before the joint's limit (appended
    # last: the bits of the reasons above stay as recorded before it)
    joint_limit = "joint_limit"

    @property
    def bit(self) -> int:
        return 1 << _ENVELOPE_BITS[self]


_ENVELOPE_BITS = {r: i for i, r in enumerate(EnvelopeReason)}


def envelope_reasons(mask: float) -> tuple[EnvelopeReason, ...]:
    """The reasons an ``envelope`` column value stands for (none for 0 or NaN)."""
    if mask != mask or mask <= 0:  # NaN: no action step yet
        return ()
    bits = int(mask)
    return tuple(r for r in EnvelopeReason if bits & r.bit)


class TelemetryPhase(StrEnum):
    """What the control loop was doing when the sample was taken."""

    running = "running"  # executing the policy's action chunk
    awaiting_policy = "awaiting_policy"  # chunk exhausted, holding while the policy answers
    stopped = "stopped"  # arm stopped (stop, safety, fault, time up); still recording


# ---------------------------------------------------------------------------
# Per-camera frame table: one row per frame written to the camera's MP4
# ---------------------------------------------------------------------------

FRAME = "frame"  # index of the frame in the MP4, 0-based, no gaps
FRAME_T = "t"  # station clock time of capture, s
FRAME_PTS = "pts_s"  # presentation time in the MP4 = t - episode clock start
FRAME_DEVICE_INDEX = "device_index"  # the camera's own counter: gaps are frames it dropped
FRAME_DEVICE_T = "device_t"  # the device's own timestamp, s (NaN when it has none)
FRAME_COLUMNS = (FRAME, FRAME_T, FRAME_PTS, FRAME_DEVICE_INDEX, FRAME_DEVICE_T)

# ---------------------------------------------------------------------------
# Camera names
# ---------------------------------------------------------------------------

CAMERA_EXTERIOR = "exterior"
CAMERA_WRIST = "wrist"
CAMERAS = (CAMERA_EXTERIOR, CAMERA_WRIST)

# ---------------------------------------------------------------------------
# Policy wire protocol: observation keys (openpi DROID names, RoboArena dialect)
# ---------------------------------------------------------------------------

OBS_EXTERIOR_IMAGE = "observation/exterior_image_1_left"  # openpi DROID
OBS_WRIST_IMAGE = "observation/wrist_image_left"
OBS_JOINT_POSITION = "observation/joint_position"  # (7,)
OBS_CARTESIAN_POSITION = "observation/cartesian_position"  # (6,) xyz + extrinsic xyz Euler
OBS_GRIPPER_POSITION = "observation/gripper_position"  # (1,)
OBS_PROMPT = "prompt"
ROBOARENA_ENDPOINT = "endpoint"  # "infer" | "reset"
ROBOARENA_SESSION_ID = "session_id"


# Where the numbering of exterior cameras starts. The policies served on these
# wires read from 1: openpi's DROID policies (``openpi/policies/droid_policy.py``
# reads ``observation/exterior_image_1_left``), the DROID dataset's
# ``exterior_image_1_left``/``_2_left``, third-party RoboArena clients. RoboArena's
# own test script and vLLM-Omni's DreamZero (``exterior_image_0_left`` and
# ``_1_left``) read from 0, so an endpoint may choose either.
EXTERIOR_FIRST_INDEX = 1
EXTERIOR_NUMBERINGS = (0, 1)


def exterior_image(index: int, eye: str = "left") -> str:
    """The observation key of exterior camera ``index`` (numbered as the endpoint chose)."""
    return f"observation/exterior_image_{index}_{eye}"


REPLY_ACTIONS = "actions"  # (H, D) action chunk in the reply

# The Positronic v1 wire (Positronic-Robotics/positronic, ``positronic/offboard``):
# its own observation names, and the channels of each action in a reply's ``result``
POSITRONIC_JOINTS = "robot_state.q"  # (7,) rad
POSITRONIC_JOINT_VELOCITY = "robot_state.dq"  # (7,) rad/s
POSITRONIC_EE_POSE = "robot_state.ee_pose"  # (7,) [x, y, z, qw, qx, qy, qz]: scalar FIRST
POSITRONIC_GRIP = "grip"  # (1,) gripper closure, 0 open … 1 closed
POSITRONIC_TASK = "task"  # the language instruction
POSITRONIC_EXTERIOR_IMAGE = "image.exterior"
POSITRONIC_WRIST_IMAGE = "image.wrist"
POSITRONIC_ROBOT_COMMAND = "robot_command"  # a command: cartesian_pos | joint_pos | …
POSITRONIC_TARGET_GRIP = "target_grip"  # float in [0, 1]
POSITRONIC_TIMESTAMP = "timestamp"  # s after the call the action is due

# Privileged observation keys, sent ONLY by the simulated cell (profile ``sim``)
# so that scripted demo policies know where things are. A real station never
# sends them; a policy that needs them cannot run on hardware.
SIM_PREFIX = "sim/"
SIM_ITEMS = "sim/items"  # (N, 4) float: x, y, z, ItemState code per item
SIM_SOURCE_BIN = "sim/source_bin"  # (4,) inner rectangle: centre x, centre y, half x, half y
SIM_TARGET_BIN = "sim/target_bin"  # (4,) same for the target bin
SIM_BIN_HEIGHT = "sim/bin_height"  # (1,) wall height, m
SIM_SEED = "sim/seed"  # (1,) the episode's sim seed (lets a scripted policy be reproducible)
SIM_TIME = "sim/t"  # (1,) seconds since the episode started, station clock


class ItemState(StrEnum):
    """Where a simulated item is; its code (index) is what ``sim/items`` carries."""

    source = "source"  # in the source bin, pickable
    held = "held"  # between the fingers
    placed = "placed"  # in the target bin
    dropped = "dropped"  # on the table inside the workspace, pickable again
    lost = "lost"  # outside the workspace, unrecoverable

    @property
    def code(self) -> int:
        return _ITEM_CODES[self]


_ITEM_CODES = {s: i for i, s in enumerate(ItemState)}
ITEM_STATE_BY_CODE = {i: s for s, i in _ITEM_CODES.items()}
