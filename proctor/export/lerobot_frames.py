"""One recording as LeRobot frames: every column sampled at the frame times
of the primary camera (layout and rules in ``proctor.export.lerobot``).

The video sets the clock. Frame ``k`` of a LeRobot episode is frame ``k`` of
the primary camera's MP4 (``exterior`` when recorded); its telemetry row is
the last one sampled at or before the frame's capture time (what the station
knew when the picture was taken — never a sample from the future), the first
row for a frame captured before any; another camera contributes its frame
captured nearest in time. Events (placements, operator and station events,
envelope runs) are counted on the frame whose interval ``[t_k, t_k+1)``
holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proctor.core.arm_commands import ArmCommandKind
from proctor.core.domain import Outcome
from proctor.core.errors import UsageError
from proctor.core.recording import keys
from proctor.core.recording.reader import Recording

PRIMARY_CAMERAS = keys.CAMERAS  # the first one recorded sets the frame times

# float features read from telemetry: feature name → its columns (the names LeRobot shows)
TELEMETRY_FEATURES: dict[str, tuple[str, ...]] = {
    "observation.state": (*keys.JOINT_POSITION, keys.GRIPPER_POSITION),
    "observation.joint_velocity": keys.JOINT_VELOCITY,
    "observation.ee_pose": keys.EE_POSE,
    "observation.gripper_position": (keys.GRIPPER_POSITION,),
    "action": (*keys.ACTION_SENT, keys.GRIPPER_TARGET),
    "action.requested": (*keys.ACTION_REQUESTED, keys.GRIPPER_TARGET_REQUESTED),
}
ACTION_KINDS: tuple[str, ...] = tuple(ArmCommandKind)  # code = index; -1 before the first
OUTCOMES: tuple[str, ...] = tuple(Outcome)  # code = index; -1 when none was recorded
# integer features: name → the names of their codes (None: a count)
INT_FEATURES: dict[str, tuple[str, ...] | None] = {
    "action.kind": ACTION_KINDS,
    "annotation.placement": None,  # placements (of the export's label stream) in the frame
    "annotation.placed": None,  # placements so far, this frame's included
    "annotation.operator_event": None,  # operator events in the frame
    "annotation.station_event": None,  # the station's other events in the frame
    "annotation.envelope_event": None,  # runs of envelope interventions starting in the frame
    "annotation.envelope": tuple(r.value for r in keys.EnvelopeReason),  # bit mask in force
    "annotation.outcome": OUTCOMES,  # the episode's outcome, on every frame
}
OPERATOR_EVENT_PREFIX = "operator"


@dataclass(frozen=True)
class TimedEvent:
    t_s: float  # seconds since the episode's start
    kind: str


@dataclass
class EpisodeFrames:
    """One episode's LeRobot columns; every array has one row per frame."""

    fps: int
    capture_s: np.ndarray  # capture time of each frame, s since the episode's start
    floats: dict[str, np.ndarray] = field(default_factory=dict)
    ints: dict[str, np.ndarray] = field(default_factory=dict)
    video_frames: dict[str, np.ndarray] = field(default_factory=dict)  # camera → source frame

    @property
    def length(self) -> int:
        return len(self.capture_s)


def primary_camera(rec: Recording) -> str:
    for name in (*PRIMARY_CAMERAS, *sorted(rec.frames)):
        if name in rec.frames:
            return name
    raise UsageError(f"episode {rec.episode_uid}: no camera frames recorded")


def camera_fps(rec: Recording, camera: str, capture_s: np.ndarray) -> int:
    """The camera's configured rate (the manifest's), else the measured one."""
    configured = rec.manifest.get("cameras", {}).get(camera, {}).get("fps")
    if isinstance(configured, int | float) and configured > 0:
        return round(configured)
    if len(capture_s) < 2:
        raise UsageError(f"episode {rec.episode_uid}: camera {camera} has no frame rate")
    return round(1.0 / float(np.median(np.diff(capture_s))))


def _held(sample_t: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Index of the last sample at or before each time (the first for earlier times)."""
    return np.clip(np.searchsorted(sample_t, at, side="right") - 1, 0, len(sample_t) - 1)


def _nearest(sample_t: np.ndarray, at: np.ndarray) -> np.ndarray:
    right = np.clip(np.searchsorted(sample_t, at), 0, len(sample_t) - 1)
    left = np.clip(right - 1, 0, len(sample_t) - 1)
    closer_left = np.abs(at - sample_t[left]) <= np.abs(sample_t[right] - at)
    return np.where(closer_left, left, right)


def _counts(capture_s: np.ndarray, times: list[float]) -> np.ndarray:
    counts = np.zeros(len(capture_s), dtype=np.int64)
    if times:
        np.add.at(counts, _held(capture_s, np.asarray(times, dtype=float)), 1)
    return counts


def _frame_times(rec: Recording, camera: str, start_s: float) -> tuple[np.ndarray, np.ndarray]:
    table = rec.frames[camera]
    index = np.asarray(table.column(keys.FRAME).to_numpy(), dtype=np.int64)
    t = np.asarray(table.column(keys.FRAME_T).to_numpy(), dtype=float) - start_s
    order = np.argsort(index)
    return index[order], t[order]


def _telemetry(rec: Recording, frames: EpisodeFrames, start_s: float) -> None:
    rows = _held(rec.column(keys.T).astype(float) - start_s, frames.capture_s)
    for feature, columns in TELEMETRY_FEATURES.items():
        stacked = np.stack([rec.column(c).astype(float)[rows] for c in columns], axis=1)
        frames.floats[feature] = stacked.astype(np.float32)
    kinds = rec.column(keys.ACTION_KIND)[rows]
    code = {k: i for i, k in enumerate(ACTION_KINDS)}
    frames.ints["action.kind"] = np.array([code.get(str(k), -1) for k in kinds], dtype=np.int64)
    envelope = np.nan_to_num(rec.column(keys.ENVELOPE).astype(float)[rows], nan=0.0)
    frames.ints["annotation.envelope"] = envelope.astype(np.int64)


def episode_frames(
    rec: Recording,
    *,
    placements_s: list[float],
    events: list[TimedEvent],
    outcome: str | None,
) -> EpisodeFrames:
    """The recording ``rec`` resampled onto its primary camera's frames."""
    if rec.clock_start_s is None:
        raise UsageError(f"episode {rec.episode_uid}: no clock start recorded")
    start = float(rec.clock_start_s)
    primary = primary_camera(rec)
    index, capture = _frame_times(rec, primary, start)
    frames = EpisodeFrames(fps=camera_fps(rec, primary, capture), capture_s=capture)
    frames.video_frames[primary] = index
    for camera in rec.frames:
        if camera != primary:
            other_index, other_t = _frame_times(rec, camera, start)
            frames.video_frames[camera] = other_index[_nearest(other_t, capture)]
    _telemetry(rec, frames, start)
    placed = _counts(capture, placements_s)
    frames.ints["annotation.placement"] = placed
    frames.ints["annotation.placed"] = np.cumsum(placed)
    operator = [e.t_s for e in events if e.kind.startswith(OPERATOR_EVENT_PREFIX)]
    envelope = [e.t_s for e in events if e.kind == keys.ENVELOPE_EVENT]
    station = [
        e.t_s
        for e in events
        if not e.kind.startswith(OPERATOR_EVENT_PREFIX) and e.kind != keys.ENVELOPE_EVENT
    ]
    frames.ints["annotation.operator_event"] = _counts(capture, operator)
    frames.ints["annotation.station_event"] = _counts(capture, station)
    frames.ints["annotation.envelope_event"] = _counts(capture, envelope)
    code = OUTCOMES.index(outcome) if outcome in OUTCOMES else -1
    frames.ints["annotation.outcome"] = np.full(frames.length, code, dtype=np.int64)
    return frames


def feature_names() -> dict[str, Any]:
    """Each non-video feature's LeRobot ``names`` entry."""
    names: dict[str, Any] = {k: list(v) for k, v in TELEMETRY_FEATURES.items()}
    names.update({k: list(v) if v else None for k, v in INT_FEATURES.items()})
    return names
