"""Telemetry sampling: one row per sample, and how well the schedule was kept."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from proctor.core.recording import keys
from proctor.station.control.commands import StepCommands
from proctor.station.drivers.arm.base import ArmCommand, ArmState
from proctor.station.drivers.gripper.base import GripperState
from proctor.station.recorder import Recorder


@dataclass
class TelemetryTicks:
    """How well the control loop kept the telemetry schedule. On a real-time
    clock a loop that wakes late passes the ticks it missed over (never
    back-fills them: every sample carries the time the arm's state was
    taken), and they are counted here and reported in the manifest."""

    hz: float
    due: int = 0  # ticks at which the loop read the arm
    late: int = 0  # ticks passed over because the loop woke after them
    stale: int = 0  # ticks at which the arm had no newer state (nothing recorded)
    max_gap_s: float = 0.0  # longest interval between consecutive samples (their own times)
    max_lag_s: float = 0.0  # latest a sample was read after its tick (real time)

    @property
    def missed(self) -> int:
        return self.late + self.stale

    @property
    def scheduled(self) -> int:
        return self.due + self.late

    def gap(self, dt: float) -> None:
        self.max_gap_s = max(self.max_gap_s, dt)

    def lag(self, dt: float) -> None:
        self.max_lag_s = max(self.max_lag_s, dt)

    def report(self) -> dict[str, Any]:
        return {
            "hz": self.hz,
            "scheduled": self.scheduled,
            "missed": self.missed,
            "missed_late": self.late,
            "missed_no_new_state": self.stale,
            "max_gap_s": round(self.max_gap_s, 4),
            "max_lag_s": round(self.max_lag_s, 4),
        }


def _put_padded(row: np.ndarray, span: slice, values: np.ndarray) -> None:
    """``values`` at the start of ``span``; the rest of it NaN (narrower commands)."""
    row[span] = np.nan
    row[span.start : span.start + len(values)] = values


class TelemetrySampler:
    """Writes one telemetry row per sample to the recorder, in the columns of
    ``keys.TELEMETRY_COLUMNS``. It keeps the previous sample's tool position
    and time: the tool's speed is their finite difference."""

    def __init__(self, recorder: Recorder, prev_t: float) -> None:
        self.recorder = recorder
        self.prev_ee: np.ndarray | None = None  # the tool pose of the previous sample
        self.prev_t = prev_t  # and its time
        self._row = np.empty(len(keys.TELEMETRY_FLOAT_COLUMNS))

    def is_stale(self, a: ArmState) -> bool:
        """No newer arm state than the last sample's: never record a duplicate."""
        return a.t <= self.prev_t and self.prev_ee is not None

    @property
    def sampled(self) -> bool:
        return self.prev_ee is not None

    def sample(
        self,
        a: ArmState,
        g: GripperState,
        phase: keys.TelemetryPhase,
        *,
        requested: StepCommands | None = None,
        sent: ArmCommand | None = None,
        step: int = -1,
        envelope: float = math.nan,
        latency: float,
        calls: int,
    ) -> None:
        """One row: the arm and gripper as read, the action step in force
        (``requested`` as the policy asked it, ``sent`` as the arm accepted
        it; none before the first step), what the envelope changed in it
        (``keys.EnvelopeReason`` bits), the latest policy call's latency."""
        row = self._row
        ee = a.ee_pose
        row[keys.SLICE_JOINT_POSITION] = a.q
        row[keys.SLICE_JOINT_VELOCITY] = a.dq
        row[keys.SLICE_EE_POSE] = ee
        row[keys.FLOAT_INDEX[keys.EE_SPEED]] = self._speed(a)
        if requested is not None and sent is not None:
            _put_padded(row, keys.SLICE_ACTION_REQUESTED, requested.requested)
            _put_padded(row, keys.SLICE_ACTION_SENT, sent.target)
            row[keys.FLOAT_INDEX[keys.GRIPPER_TARGET_REQUESTED]] = requested.gripper_requested
            kind = sent.kind.value
        else:
            row[keys.SLICE_ACTION_REQUESTED] = np.nan
            row[keys.SLICE_ACTION_SENT] = np.nan
            row[keys.FLOAT_INDEX[keys.GRIPPER_TARGET_REQUESTED]] = np.nan
            kind = ""
        row[keys.FLOAT_INDEX[keys.GRIPPER_TARGET]] = g.target
        row[keys.FLOAT_INDEX[keys.GRIPPER_POSITION]] = g.position
        row[keys.FLOAT_INDEX[keys.POLICY_LATENCY]] = latency
        row[keys.FLOAT_INDEX[keys.ENVELOPE]] = envelope if requested is not None else math.nan
        self.recorder.telemetry.append(a.t, phase, kind, step, row, g.object_detected, calls)
        self.prev_ee, self.prev_t = ee, a.t

    def _speed(self, a: ArmState) -> float:
        """The tool centre point's linear speed since the previous sample, m/s."""
        if self.prev_ee is None or a.t <= self.prev_t:
            return 0.0
        d = a.ee_pose[:3] - self.prev_ee[:3]
        return math.sqrt(float(d @ d)) / (a.t - self.prev_t)
