"""The envelope: every arm command a policy asks for is held to the cell's
limits before it is sent, whatever its action space.

For each command the envelope predicts where the tool goes — forward
kinematics of the arm's own model for joint commands (``Arm.tool_transform``:
franky's ``Model.pose`` on the real arm and the twin, the simulated cell's
``proctor.station.sim.kinematics``), the straight line for Cartesian targets, and the
velocity held for ``velocity_horizon_s`` for velocity commands — and changes
it until:

* the tool point and the fingertips (``tcp_extra_m`` beyond it along the
  tool's z axis) stay inside the commissioned workspace box and above the
  table plane by ``table_margin_m``;
* a position target lies at most ``max_step_m`` of tool travel and
  ``max_step_rad`` of any joint or of tool rotation from the MEASURED state;
* the tool's z axis stays within ``cone_deg`` of straight down;
* velocities stay under ONE tool speed cap, ``max_tool_speed``, which is also
  handed to the arm with every command (``ArmCommand.max_tool_speed``) so that
  position targets are approached no faster.

Cartesian commands are clamped axis by axis (the tool slides along a wall);
joint commands, which cannot be, are shortened along their own direction.
A state already outside a limit (the arm started there) may move back in or
along it, never farther out. The episode's first target lying far from the
arm (``first_jump_m`` / ``first_jump_rad``) is not clamped but refused
(``EnvelopeStop``): a policy in the wrong frame or units. Non-finite values
never reach here: the policy client refuses such a reply, and ``ArmCommand``
any command.

Every intervention is counted by reason (``keys.EnvelopeReason``) for the
telemetry's ``envelope`` column, the manifest and the episode's events.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from proctor.station import geometry as geo
from proctor.station.config import EnvelopeSettings, StationConfig
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmState
from proctor.station.keys import EnvelopeReason

# forward kinematics: joint positions → the reported tool point's 4×4 pose, or None
ToolModel = Callable[[np.ndarray], np.ndarray | None]

# the tolerance within which a prediction counts as "no farther out"
_SLACK = 1e-6
# bisection steps for the largest safe fraction of a step: 2⁻¹² of it
_BISECT = 12
# the time step of the finite difference giving a joint velocity's tool twist (s)
_DIFF_S = 1e-3
# the events an episode records at most (the manifest counts every intervention)
MAX_RUNS = 200


class EnvelopeStop(Exception):
    """The command must not be sent at all: stop the arm and end the episode."""

    def __init__(self, reason: EnvelopeReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def envelope_settings(config: StationConfig, defaults: dict[str, Any]) -> EnvelopeSettings:
    """The cell's limits: the profile's defaults, overridden by what the
    station config's ``[envelope]`` sets."""
    return EnvelopeSettings(**{**defaults, **config.envelope.model_dump(exclude_unset=True)})


@dataclass(frozen=True)
class Guarded:
    command: ArmCommand  # what may be sent
    reasons: frozenset[EnvelopeReason]  # what was changed (empty: sent as asked)

    @property
    def mask(self) -> int:
        return sum(r.bit for r in self.reasons)


@dataclass
class Run:
    """Consecutive action steps the envelope changed: one episode event each."""

    t_start: float
    t_end: float
    steps: int
    reasons: set[EnvelopeReason]


@dataclass
class EnvelopeLog:
    steps: int = 0  # action steps guarded
    interventions: int = 0  # of which changed
    by_reason: dict[EnvelopeReason, int] = field(
        default_factory=lambda: dict.fromkeys(EnvelopeReason, 0)
    )
    runs: list[Run] = field(default_factory=list)
    runs_dropped: int = 0  # runs past MAX_RUNS (counted, not kept)
    _open: bool = False

    def record(self, t: float, reasons: frozenset[EnvelopeReason]) -> None:
        self.steps += 1
        if not reasons:
            self._open = False
            return
        self.interventions += 1
        for r in reasons:
            self.by_reason[r] += 1
        if self._open and self.runs:
            run = self.runs[-1]
            run.t_end, run.steps = t, run.steps + 1
            run.reasons |= reasons
        elif len(self.runs) < MAX_RUNS:
            self.runs.append(Run(t, t, 1, set(reasons)))
            self._open = True
        else:
            self.runs_dropped += 1


def _axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rotation matrix of ``angle`` about the unit ``axis`` (Rodrigues)."""
    k = axis / np.linalg.norm(axis)
    kx = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    return np.eye(3) + math.sin(angle) * kx + (1 - math.cos(angle)) * (kx @ kx)


def _rotvec_matrix(v: np.ndarray) -> np.ndarray:
    angle = float(np.linalg.norm(v))
    return np.eye(3) if angle < 1e-12 else _axis_angle(v, angle)


def _tilt(r: np.ndarray) -> float:
    """Angle between the tool's z axis and straight down (rad)."""
    return math.acos(max(-1.0, min(1.0, -float(r[2, 2]))))


def _largest(ok: Callable[[float], bool], upper: float = 1.0) -> float:
    """The largest fraction s ≤ ``upper`` with ``ok(s)``, given ``ok(0)``."""
    if ok(upper):
        return upper
    lo, hi = 0.0, upper
    for _ in range(_BISECT):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


@dataclass(frozen=True)
class _Excess:
    """How far a pose is outside the box (m) and the orientation cone (rad)."""

    box: float
    cone: float

    def no_worse_than(self, base: _Excess) -> bool:
        return self.box <= base.box + _SLACK and self.cone <= base.cone + _SLACK


class Envelope:
    """One episode's envelope: ``guard`` every command before it is sent."""

    def __init__(
        self,
        settings: EnvelopeSettings,
        tool_model: ToolModel,
        *,
        q_min: tuple[float, ...],
        q_max: tuple[float, ...],
        control_hz: float,
    ) -> None:
        s = settings
        self.settings = s
        self.lo = np.array(s.workspace_min, dtype=np.float64)
        self.hi = np.array(s.workspace_max, dtype=np.float64)
        self.lo[2] = max(self.lo[2], s.table_z + s.table_margin_m)
        self.cone = math.radians(s.cone_deg)
        self.horizon = max(1.0 / control_hz, s.velocity_horizon_s)
        self.q_min, self.q_max = np.asarray(q_min), np.asarray(q_max)
        self.fk = tool_model
        self.log = EnvelopeLog()
        self._first = True

    # -- the limits ----------------------------------------------------------
    def bounds(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The box for the tool point with orientation ``r``: the fingertips,
        ``tcp_extra_m`` along the tool's z axis, must be inside it too."""
        tip = self.settings.tcp_extra_m * r[:, 2]
        return self.lo + np.maximum(0.0, -tip), self.hi - np.maximum(0.0, tip)

    def excess(self, p: np.ndarray, r: np.ndarray) -> _Excess:
        lo, hi = self.bounds(r)
        box = max(0.0, float(np.max(lo - p)), float(np.max(p - hi)))
        return _Excess(box, max(0.0, _tilt(r) - self.cone))

    def _excess_t(self, t: np.ndarray) -> _Excess:
        return self.excess(t[:3, 3], t[:3, :3])

    def watch(self, state: ArmState) -> str | None:
        """Why the MEASURED tool must stop the episode, or None: farther outside
        the box or the cone than the watch tolerates (a prediction the arm did
        not follow; the commands themselves never leave them)."""
        s = self.settings
        r = geo.quat_to_matrix(state.ee_pose[3:])
        excess = self.excess(state.ee_pose[:3], r)
        if excess.box > s.watch_tolerance_m:
            return (
                f"envelope: the measured tool was {excess.box * 1000:.0f} mm outside the "
                f"workspace box (tolerance {s.watch_tolerance_m * 1000:.0f} mm)"
            )
        if excess.cone > math.radians(s.watch_tilt_deg):
            return (
                f"envelope: the measured tool tilted {math.degrees(_tilt(r)):.0f}° from "
                f"straight down (cone {s.cone_deg:g}° + {s.watch_tilt_deg:g}°)"
            )
        return None

    def report(self) -> dict[str, Any]:
        """The manifest's ``envelope``: the contract with the board and the explorer."""
        return {
            "interventions": self.log.interventions,
            "by_reason": {r.value: n for r, n in self.log.by_reason.items()},
            "limits": self.settings.model_dump(mode="json"),
        }

    # -- guarding ------------------------------------------------------------
    def guard(self, command: ArmCommand, state: ArmState) -> Guarded:
        """The command as it may be sent, given the arm's measured ``state``;
        raises ``EnvelopeStop`` when it must not be sent at all."""
        first, self._first = self._first, False
        target, reasons = _GUARDS[command.kind](self, command.target, state, first)
        cap = self.settings.max_tool_speed
        if not reasons:
            target = command.target  # bit for bit what the policy asked
        guarded = Guarded(replace(command, target=target, max_tool_speed=cap), frozenset(reasons))
        self.log.record(state.t, guarded.reasons)
        return guarded

    def _fk(self, q: np.ndarray) -> np.ndarray:
        t = self.fk(q)
        if t is None:
            raise EnvelopeStop(
                EnvelopeReason.workspace,
                "envelope: this arm has no kinematic model, so a joint command cannot be checked",
            )
        return t

    def _jump(self, what: str, size: float, limit: float, unit: str) -> EnvelopeStop:
        return EnvelopeStop(
            EnvelopeReason.jump,
            f"envelope: the first target lay {size:.3f} {unit} {what} from the arm "
            f"(limit {limit:g} {unit}): stopped, not clamped",
        )

    def _cartesian_pose(
        self, target: np.ndarray, state: ArmState, first: bool
    ) -> tuple[np.ndarray, set[EnvelopeReason]]:
        s, reasons = self.settings, set()
        p0, r0 = state.ee_pose[:3], geo.quat_to_matrix(state.ee_pose[3:])
        p, r = target[:3].copy(), geo.quat_to_matrix(target[3:])
        turn = float(np.linalg.norm(geo.rotation_error(r, r0)))
        if first and np.linalg.norm(p - p0) > s.first_jump_m:
            raise self._jump("(tool travel)", float(np.linalg.norm(p - p0)), s.first_jump_m, "m")
        if first and turn > s.first_jump_rad:
            raise self._jump("(tool rotation)", turn, s.first_jump_rad, "rad")
        r, coned = self._into_cone(r, r0)
        if coned:
            reasons.add(EnvelopeReason.orientation)
        lo, hi = self.bounds(r)
        clipped = np.clip(p, lo, hi)
        if np.any(clipped != p):
            reasons.add(EnvelopeReason.workspace)
        d = clipped - p0
        dist = float(np.linalg.norm(d))
        if dist > s.max_step_m:
            clipped = p0 + d * (s.max_step_m / dist)
            reasons.add(EnvelopeReason.step)
        turn_vec = geo.rotation_error(r, r0)
        turn = float(np.linalg.norm(turn_vec))
        if turn > s.max_step_rad:
            r = _rotvec_matrix(turn_vec * (s.max_step_rad / turn)) @ r0
            reasons.add(EnvelopeReason.step)
        return np.concatenate([clipped, geo.matrix_to_quat(r)]), reasons

    def _into_cone(self, r: np.ndarray, r0: np.ndarray) -> tuple[np.ndarray, bool]:
        """``r`` tilted back onto the cone's edge if its z axis is outside it
        (an arm already tilted farther may keep, never grow, its tilt)."""
        limit = max(self.cone, _tilt(r0))
        tilt = _tilt(r)
        if tilt <= limit + _SLACK:
            return r, False
        z = r[:, 2]
        axis = np.cross(z, np.array([0.0, 0.0, -1.0]))
        if np.linalg.norm(axis) < 1e-9:  # pointing straight up: any horizontal axis
            axis = r[:, 0]
        return _axis_angle(axis, tilt - limit) @ r, True

    def _cartesian_velocity(
        self, target: np.ndarray, state: ArmState, first: bool
    ) -> tuple[np.ndarray, set[EnvelopeReason]]:
        s, reasons = self.settings, set()
        v, w = target[:3].copy(), target[3:].copy()
        for part, cap in ((v, s.max_tool_speed), (w, s.max_tool_rotation_speed)):
            norm = float(np.linalg.norm(part))
            if norm > cap:
                part *= cap / norm
                reasons.add(EnvelopeReason.speed)
        p0, r0 = state.ee_pose[:3], geo.quat_to_matrix(state.ee_pose[3:])
        h = self.horizon
        lo, hi = self.bounds(r0)
        # each axis on its own: the tool slides along a wall it may not cross
        ahead = p0 + v * h
        out_hi = (v > 0) & (ahead > hi)
        out_lo = (v < 0) & (ahead < lo)
        if out_hi.any() or out_lo.any():
            v[out_hi] = np.maximum(0.0, (hi - p0)[out_hi] / h)
            v[out_lo] = np.minimum(0.0, (lo - p0)[out_lo] / h)
            reasons.add(EnvelopeReason.workspace)
        base = max(0.0, _tilt(r0) - self.cone)
        w_full = w.copy()

        def tilt_ok(f: float) -> bool:
            return _tilt(_rotvec_matrix(w_full * f * h) @ r0) - self.cone <= base + _SLACK

        scale = _largest(tilt_ok)
        if scale < 1.0:
            w = w_full * scale
            reasons.add(EnvelopeReason.orientation)
        return np.concatenate([v, w]), reasons

    def _joint_path(
        self,
        q0: np.ndarray,
        dq: np.ndarray,
        reasons: set[EnvelopeReason],
        upper: float,
    ) -> float:
        """The largest fraction of ``q0 → q0 + dq`` (at most ``upper``) whose end
        and midpoint leave the tool no farther outside the box and the cone."""
        base = self._excess_t(self._fk(q0))

        def ok(f: float) -> bool:
            return all(
                self._excess_t(self._fk(q0 + g * dq)).no_worse_than(base) for g in (f, 0.5 * f)
            )

        frac = _largest(ok, upper)
        if frac < upper:  # which limit the whole step broke, at its end or midpoint
            worst = [self._excess_t(self._fk(q0 + g * upper * dq)) for g in (1.0, 0.5)]
            if any(e.box > base.box + _SLACK for e in worst):
                reasons.add(EnvelopeReason.workspace)
            if any(e.cone > base.cone + _SLACK for e in worst):
                reasons.add(EnvelopeReason.orientation)
        return frac

    def _joint_position(
        self, target: np.ndarray, state: ArmState, first: bool
    ) -> tuple[np.ndarray, set[EnvelopeReason]]:
        s, reasons = self.settings, set()
        q0 = state.q
        qt = np.clip(target, self.q_min, self.q_max)
        p0 = self._fk(q0)[:3, 3]
        dq = qt - q0
        widest = float(np.max(np.abs(dq)))
        if first and widest > s.first_jump_rad:
            raise self._jump("(joint travel)", widest, s.first_jump_rad, "rad")
        travel = float(np.linalg.norm(self._fk(qt)[:3, 3] - p0))
        if first and travel > s.first_jump_m:
            raise self._jump("(tool travel)", travel, s.first_jump_m, "m")
        frac = min(1.0, s.max_step_rad / widest) if widest > 0 else 1.0

        def near(f: float) -> bool:
            return float(np.linalg.norm(self._fk(q0 + f * dq)[:3, 3] - p0)) <= s.max_step_m

        step_frac = _largest(near, frac)
        if step_frac < 1.0:
            reasons.add(EnvelopeReason.step)
        frac = self._joint_path(q0, dq, reasons, step_frac)
        if frac >= 1.0 and not reasons:
            return qt, reasons
        return q0 + frac * dq, reasons

    def _joint_velocity(
        self, target: np.ndarray, state: ArmState, first: bool
    ) -> tuple[np.ndarray, set[EnvelopeReason]]:
        s, reasons = self.settings, set()
        q0, dq = state.q, target.copy()
        t0 = self._fk(q0)
        t1 = self._fk(q0 + dq * _DIFF_S)
        speed = float(np.linalg.norm(t1[:3, 3] - t0[:3, 3])) / _DIFF_S
        spin = float(np.linalg.norm(geo.rotation_error(t1[:3, :3], t0[:3, :3]))) / _DIFF_S
        scale = min(
            1.0,
            s.max_tool_speed / speed if speed > 0 else 1.0,
            s.max_tool_rotation_speed / spin if spin > 0 else 1.0,
        )
        if scale < 1.0:
            dq *= scale
            reasons.add(EnvelopeReason.speed)
        frac = self._joint_path(q0, dq * self.horizon, reasons, 1.0)
        return dq * frac, reasons


_GUARDS: dict[
    ArmCommandKind,
    Callable[[Envelope, np.ndarray, ArmState, bool], tuple[np.ndarray, set[EnvelopeReason]]],
] = {
    ArmCommandKind.cartesian_pose: Envelope._cartesian_pose,
    ArmCommandKind.cartesian_velocity: Envelope._cartesian_velocity,
    ArmCommandKind.joint_position: Envelope._joint_position,
    ArmCommandKind.joint_velocity: Envelope._joint_velocity,
}


__all__ = [
    "MAX_RUNS",
    "Envelope",
    "EnvelopeLog",
    "EnvelopeStop",
    "Guarded",
    "Run",
    "ToolModel",
    "envelope_settings",
]
