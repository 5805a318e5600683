"""Every name a recording holds, defined once: the recording format.

The station's recorder writes these columns; the annotator (release detector),
the web run explorer, the export and the ``.rrd`` exporter read exactly these,
which is why the names live in the kernel, below the station and the server
alike. The names the station *sends* to a policy are the policy wire's
(``proctor.policywire.wire.keys``). Change a name here
and every reader follows; never spell one of them out elsewhere.

Conventions: times are seconds on the station clock (the one clock every
sample carries); joint vectors are 7 entries (rad, rad/s); the end-effector
pose is ``[x, y, z, qx, qy, qz, qw]`` in metres in the robot base frame;
gripper positions are normalised, 0 = open, 1 = closed. The layout of a
recording (files, artifacts, manifest) is described in ``proctor/station/README.md``;
``proctor.core.recording.reader`` reads one back.
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
