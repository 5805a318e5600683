"""The envelope: every arm command a policy asks for is held to the cell's
limits before it is sent, whatever its action space.

For each command the envelope predicts where the arm goes — the arm's own
model for joint commands (``Arm.kinematics``: franky's ``Model.pose`` and
``Model.zero_jacobian`` on the real arm and the twin, the simulated cell's
``proctor.station.sim.kinematics``), the straight line for Cartesian targets, and the
velocity held for ``velocity_horizon_s`` for velocity commands — and changes
it until:

* the tool point and the fingertips (``tcp_extra_m`` beyond it along the
  tool's z axis) stay inside the commissioned workspace box and above the
  table plane by ``table_margin_m``; so do the gripper's corners and the
  wrist camera (``tool_points_m``) and the elbow and the wrist (the origins
  of joints 4 and 6): for joint commands by the model along the path, for
  Cartesian commands along the joint path the model PREDICTS for the tool's
  commanded motion (below);
* a position target lies at most ``max_step_m`` of tool travel and
  ``max_step_rad`` of any joint or of tool rotation from the MEASURED state;
* the tool's z axis stays within ``cone_deg`` of straight down;
* velocities stay under ONE tool speed cap, ``max_tool_speed``, which is also
  handed to the arm with every command (``ArmCommand.max_tool_speed``) so that
  position targets are approached no faster.

One command, checked as sent (review #1): the envelope first holds a command
to the limits the driver itself clips to (``Arm.limits``), so that what it
checks is exactly what the driver sends; the driver refuses a guarded command
it would still change. A joint velocity is

1. refused as a protocol fault (``EnvelopeProtocolFault``) beyond
   ``joint_velocity_fault_multiple`` × the arm's rated joint velocities: no
   policy means that, and nothing larger ever reaches the arithmetic below;
2. scaled uniformly — all joints alike, so it keeps its direction — into the
   arm's joint velocity limits and ``max_joint_speed`` (which bounds the
   self-motion no tool point shows);
3. scaled so that every joint brakes before its position limit (the wall):
   held for the horizon, then braking at the arm's deceleration;
4. scaled so that the tool, its rotation, the elbow and the wrist stay under
   the caps, by the model's Jacobians at points along the path;
5. shortened to the largest part of its path (integrated in ≤ 0.05 rad steps
   of any joint) that leaves the tool, the gripper's points and the arm's body
   no farther outside the box, the table and the cone.

Cartesian commands are clamped axis by axis (the tool slides along a wall);
joint commands, which cannot be, are shortened along their own direction.
A Cartesian command says where the tool goes, not the arm: the envelope
predicts the joints along the tool's commanded path (damped least squares
from the MEASURED joints, in small steps, on the same model) and shortens the
command to the part of its path along which the predicted elbow and wrist
stay ``cartesian_body_margin_m`` above the table's margin and the gripper's
points, at every orientation along the way, above the table (no lower than
they already were). That is a prediction, not the controller: the arm has
one joint redundant to the tool's pose, and libfranka's controller resolves
it its own, undocumented way (franky sends no elbow with a Cartesian
waypoint); franky-sim resolves it by a damped pseudo-inverse from the
current joints, as the prediction does. The margin is what keeps a
different resolution safe over one command's travel.
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

from proctor.core import geometry as geo
from proctor.core.recording.keys import EnvelopeReason
from proctor.policywire.client import PolicyProtocolError
from proctor.station.config import EnvelopeSettings, StationConfig
from proctor.station.drivers.arm.base import (
    Arm,
    ArmCommand,
    ArmCommandKind,
    ArmKinematics,
    ArmLimits,
    ArmState,
)

# the arm's model: joint positions → its tool, body points and Jacobians, or None
KinematicsModel = Callable[[np.ndarray], ArmKinematics | None]


def _cartesian_steps(travel: np.ndarray, turn: np.ndarray) -> int:
    """Steps along a tool path: at most ``_CART_STEP_M`` of travel and
    ``_CART_STEP_RAD`` of turn each."""
    return max(
        1,
        math.ceil(float(np.linalg.norm(travel)) / _CART_STEP_M),
        math.ceil(float(np.linalg.norm(turn)) / _CART_STEP_RAD),
    )


# the tolerance within which a prediction counts as "no farther out"
_SLACK = 1e-6
# bisection steps for the largest safe fraction of a step: 2⁻¹² of it
_BISECT = 12
# a joint path is checked at points at most this far apart on any joint (rad):
# the FK between two of them departs from the straight chord by well under a
# millimetre for the FR3's links (≤ 1.3 m × 0.05²/8)
_PATH_STEP_RAD = 0.05
# a Cartesian command's joints are predicted at points of its commanded tool
# path at most this far apart (m of travel, rad of rotation), each reached
# by at most _IK_ITERS damped least-squares steps of at most _PATH_STEP_RAD
# on any joint, until within _IK_TOL (m, rad) of the commanded pose; the
# damping is franky-sim's own (λ² = 1e-4 in its Cartesian controllers)
_CART_STEP_M = 0.005
_CART_STEP_RAD = 0.05
_IK_ITERS = 4
_IK_TOL = 1e-4
_IK_DAMPING = 0.01
# what the rows of ``ArmKinematics.body`` are, for the envelope's messages
BODY_POINT_NAMES = ("elbow (joint 4 origin)", "wrist (joint 6 origin)")
# the events an episode records at most (the manifest counts every intervention)
MAX_RUNS = 200


class EnvelopeProtocolFault(PolicyProtocolError):
    """A row no policy can mean (a joint velocity far beyond the arm's rating):
    the policy's protocol fault, charged to it as a malformed reply is."""


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
    # why, in words, where the reasons do not say it all (which point of the
    # arm a Cartesian command would have taken how low)
    note: str | None = None

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
    note: str | None = None  # the first of the run's notes


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

    def record(self, t: float, reasons: frozenset[EnvelopeReason], note: str | None = None) -> None:
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
            run.note = run.note or note
        elif len(self.runs) < MAX_RUNS:
            self.runs.append(Run(t, t, 1, set(reasons), note))
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


def _dls(jacobian: np.ndarray, error: np.ndarray) -> np.ndarray:
    """Joint step toward the pose ``error`` (base frame: m, then rad) by damped
    least squares, Jᵀ(JJᵀ + λ²I)⁻¹e: bounded near singularities, where a plain
    pseudo-inverse would predict an arbitrarily large step."""
    jjt = jacobian @ jacobian.T + _IK_DAMPING * _IK_DAMPING * np.eye(len(error))
    return jacobian.T @ np.linalg.solve(jjt, error)


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
    """How far a pose is outside the box (m), the orientation cone (rad), and
    how far the arm's body (elbow, wrist) is below the table's margin (m)."""

    box: float
    cone: float
    body: float = 0.0

    def no_worse_than(self, base: _Excess) -> bool:
        return (
            self.box <= base.box + _SLACK
            and self.cone <= base.cone + _SLACK
            and self.body <= base.body + _SLACK
        )


def arm_limits(arm: Arm[Any]) -> ArmLimits:
    """The limits the envelope holds commands to for ``arm``: the driver's own
    (what its ``send`` clips to), or, for an arm that clips nothing, its joint
    range and no other."""
    limits = arm.limits()
    if limits is not None:
        return limits
    inf = np.full(7, np.inf)
    return ArmLimits(
        q_min=np.asarray(arm.config.q_min, dtype=np.float64),
        q_max=np.asarray(arm.config.q_max, dtype=np.float64),
        dq_max=inf,
        ddq_max=inf,
        dq_rated=inf,
        max_linear_velocity=math.inf,
        max_angular_velocity=math.inf,
        workspace_min=np.full(3, -np.inf),
        workspace_max=np.full(3, np.inf),
    )


class Envelope:
    """One episode's envelope: ``guard`` every command before it is sent."""

    def __init__(
        self,
        settings: EnvelopeSettings,
        kinematics: KinematicsModel,
        limits: ArmLimits,
        *,
        control_hz: float,
    ) -> None:
        s = settings
        self.settings = s
        self.arm = limits
        # the box: the commissioned one inside the driver's own (a pose target
        # outside the driver's would be clipped there, unchecked)
        self.lo = np.maximum(np.array(s.workspace_min, dtype=np.float64), limits.workspace_min)
        self.hi = np.minimum(np.array(s.workspace_max, dtype=np.float64), limits.workspace_max)
        self.table = s.table_z + s.table_margin_m  # nothing of the arm below this
        # the predicted elbow and wrist of a Cartesian command not below this
        self.body_floor = self.table + s.cartesian_body_margin_m
        self.lo[2] = max(self.lo[2], self.table)
        # the gripper's points (corners, camera) in the reported tool frame
        self.points = np.array(s.tool_points_m, dtype=np.float64).reshape(-1, 3)
        self.points[:, 2] += s.tcp_extra_m
        self.cone = math.radians(s.cone_deg)
        self.horizon = max(1.0 / control_hz, s.velocity_horizon_s)
        # ONE cap each, the driver's clip included: it must not change them
        self.speed_cap = min(s.max_tool_speed, limits.max_linear_velocity)
        self.spin_cap = min(s.max_tool_rotation_speed, limits.max_angular_velocity)
        self.q_min, self.q_max = np.asarray(limits.q_min), np.asarray(limits.q_max)
        self.kin = kinematics
        self.log = EnvelopeLog()
        self._first = True
        self._note: str | None = None  # the guard in progress's note

    @classmethod
    def for_arm(cls, settings: EnvelopeSettings, arm: Arm[Any], *, control_hz: float) -> Envelope:
        return cls(settings, arm.kinematics, arm_limits(arm), control_hz=control_hz)

    # -- the limits ----------------------------------------------------------
    def bounds(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The box for the tool point with orientation ``r``: the fingertips,
        ``tcp_extra_m`` along the tool's z axis, must be inside it too, and the
        gripper's points (``tool_points_m``) above the table's margin."""
        tip = self.settings.tcp_extra_m * r[:, 2]
        lo, hi = self.lo + np.maximum(0.0, -tip), self.hi - np.maximum(0.0, tip)
        if len(self.points):
            lowest = float(np.min(self.points @ r[2]))  # z offsets of the points
            lo[2] = max(lo[2], self.table - min(0.0, lowest))
        return lo, hi

    def excess(self, p: np.ndarray, r: np.ndarray) -> _Excess:
        lo, hi = self.bounds(r)
        box = max(0.0, float(np.max(lo - p)), float(np.max(p - hi)))
        return _Excess(box, max(0.0, _tilt(r) - self.cone))

    def _excess_k(self, k: ArmKinematics) -> _Excess:
        e = self.excess(k.tool[:3, 3], k.tool[:3, :3])
        body = max(0.0, self.table - float(np.min(k.body[:, 2]))) if len(k.body) else 0.0
        return _Excess(e.box, e.cone, body)

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
        return self._watch_body(state)

    def _watch_body(self, state: ArmState) -> str | None:
        """The MEASURED elbow and wrist below the table by more than the watch
        tolerates: under Cartesian commands the controller chooses the joints
        (its redundancy resolution is its own), so what was predicted is held
        here against what the arm did."""
        k = self.kin(np.asarray(state.q, dtype=np.float64))
        if k is None or not len(k.body):
            return None
        j = int(np.argmin(k.body[:, 2]))
        z = float(k.body[j, 2])
        if self.table - z <= self.settings.watch_tolerance_m:
            return None
        name = BODY_POINT_NAMES[j] if j < len(BODY_POINT_NAMES) else f"body point {j}"
        return (
            f"envelope: the measured {name} was {(self.table - z) * 1000:.0f} mm below the "
            f"table's margin (tolerance {self.settings.watch_tolerance_m * 1000:.0f} mm)"
        )

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
        raises ``EnvelopeStop`` when it must not be sent at all, and
        ``EnvelopeProtocolFault`` for a row no policy can mean."""
        first, self._first = self._first, False
        self._note = None
        target, reasons = _GUARDS[command.kind](self, command.target, state, first)
        if not reasons:
            target = command.target  # bit for bit what the policy asked
        guarded = Guarded(
            replace(
                command,
                target=target,
                max_tool_speed=self.speed_cap,
                max_tool_rotation_speed=self.spin_cap,
            ),
            frozenset(reasons),
            self._note,
        )
        self.log.record(state.t, guarded.reasons, guarded.note)
        return guarded

    def _model(self, q: np.ndarray) -> ArmKinematics:
        k = self.kin(q)
        if k is None:
            raise EnvelopeStop(
                EnvelopeReason.workspace,
                "envelope: this arm has no kinematic model, so a joint command cannot be checked",
            )
        return k

    def _fk(self, q: np.ndarray) -> np.ndarray:
        return self._model(q).tool

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
            # part of the way along the rotation the z axis can bulge past the
            # cone, and the next step would allow that grown tilt (the tilt
            # ratchet): back onto the cone's edge, then the box for it again
            r, coned = self._into_cone(r, r0)
            if coned:
                reasons.add(EnvelopeReason.orientation)
                lo, hi = self.bounds(r)
                inside = np.clip(clipped, lo, hi)
                if np.any(inside != clipped):
                    reasons.add(EnvelopeReason.workspace)
                clipped = inside
        # the arm's body along the joints predicted for this path
        frac = self._cartesian_body(state.q, p0, r0, clipped, r, reasons)
        if frac < 1.0:
            clipped = p0 + frac * (clipped - p0)
            r = _rotvec_matrix(frac * geo.rotation_error(r, r0)) @ r0
            # part of a rotation can bulge past the cone (the ratchet above)
            r, coned = self._into_cone(r, r0)
            if coned:
                reasons.add(EnvelopeReason.orientation)
                clipped = np.clip(clipped, *self.bounds(r))
                # the corrected pose is off the path just checked: checked
                # again, and held where the arm is if it no longer passes
                if self._cartesian_body(state.q, p0, r0, clipped, r, reasons) < 1.0:
                    clipped, r = p0.copy(), r0
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
        reasons: set[EnvelopeReason] = set()
        v, w = target[:3].copy(), target[3:].copy()
        for part, cap in ((v, self.speed_cap), (w, self.spin_cap)):
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
        # the arm's body along the joints predicted for the twist held for the
        # horizon: a slower twist covers the first part of the same path
        frac = self._cartesian_body(
            state.q, p0, r0, p0 + v * h, _rotvec_matrix(w * h) @ r0, reasons, turn=w * h
        )
        return np.concatenate([v * frac, w * frac]), reasons

    def _tool_low(self, p: np.ndarray, r: np.ndarray) -> tuple[float, str]:
        """The lowest of the tool point, the fingertips and the gripper's points
        (``tool_points_m``) at pose ``(p, r)``, and which it is."""
        tips = [
            (float(p[2]), "tool point"),
            (float(p[2] + self.settings.tcp_extra_m * r[2, 2]), "fingertips"),
        ]
        if len(self.points):
            z = p[2] + self.points @ r[2]
            i = int(np.argmin(z))
            tips.append(
                (float(z[i]), f"gripper point {tuple(round(float(c), 3) for c in self.points[i])}")
            )
        return min(tips)

    def _cartesian_body(
        self,
        q0: np.ndarray,
        p0: np.ndarray,
        r0: np.ndarray,
        p1: np.ndarray,
        r1: np.ndarray,
        reasons: set[EnvelopeReason],
        *,
        turn: np.ndarray | None = None,
    ) -> float:
        """The largest fraction of the tool's straight path ``(p0, r0) → (p1,
        r1)`` (the rotation about one axis) along which the gripper's points
        stay no farther below the table, and the elbow and wrist of the joints
        PREDICTED for it no farther below ``body_floor``, than at the start.

        The prediction follows the path from the measured joints ``q0`` in
        steps of at most ``_CART_STEP_M`` / ``_CART_STEP_RAD``, each reached by
        damped least-squares steps on the arm's own model (at most
        ``_PATH_STEP_RAD`` of any joint apart, every one checked), the joints
        held in the driver's range: the minimum-norm joint motion, the one
        franky-sim's controller makes. A real FR3's controller may take another
        of the joint paths that give the same tool path (its redundancy
        resolution is its own); ``cartesian_body_margin_m`` is kept in hand
        for that. Where the model cannot follow the path (out of reach, a
        singularity), the prediction lags behind it and checks where the
        joints would get; the controller itself refuses such a motion. An arm
        without a model: the tool alone is checked, as before there was one."""
        k = self.kin(q0)
        if k is None or not len(k.body):
            # no model of the body: the gripper's points along the path alone
            return self._tool_path(p0, r0, p1, r1, reasons, turn=turn)
        floor = self.body_floor
        base_body = max(0.0, floor - float(np.min(k.body[:, 2])))
        base_tool = max(0.0, self.table - self._tool_low(p0, r0)[0])
        # ``turn``: a twist's own rotation vector (a turn past π held for the
        # horizon is not the shorter way round that r0 → r1 would give)
        travel = p1 - p0
        turn = geo.rotation_error(r1, r0) if turn is None else turn
        n = _cartesian_steps(travel, turn)
        q, done = np.asarray(q0, dtype=np.float64).copy(), 0.0
        for i in range(1, n + 1):
            f = i / n
            p, r = p0 + f * travel, _rotvec_matrix(f * turn) @ r0
            z, what = self._tool_low(p, r)
            if self.table - z > base_tool + _SLACK:
                return self._body_refused(reasons, what, z, self.table, done)
            for _ in range(_IK_ITERS):
                error = np.concatenate([p - k.tool[:3, 3], geo.rotation_error(r, k.tool[:3, :3])])
                if float(np.max(np.abs(error))) < _IK_TOL:
                    break
                dq = _dls(k.jacobian, error)
                widest = float(np.max(np.abs(dq)))
                if widest > _PATH_STEP_RAD:
                    dq *= _PATH_STEP_RAD / widest
                q = np.clip(q + dq, self.q_min, self.q_max)
                k = self._model(q)
                j = int(np.argmin(k.body[:, 2]))
                z = float(k.body[j, 2])
                # relative to where the arm is (an arm already low may stay or
                # rise, never sink). The controller's own redundancy may leave
                # the measured start of the next command lower than predicted,
                # so a run of commands could walk the elbow down by that
                # difference each time: ``watch`` holds the MEASURED elbow and
                # wrist against the table, which ends that walk
                if floor - z > base_body + _SLACK:
                    name = BODY_POINT_NAMES[j] if j < len(BODY_POINT_NAMES) else f"body point {j}"
                    return self._body_refused(reasons, f"predicted {name}", z, floor, done)
            done = f
        return 1.0

    def _tool_path(
        self,
        p0: np.ndarray,
        r0: np.ndarray,
        p1: np.ndarray,
        r1: np.ndarray,
        reasons: set[EnvelopeReason],
        *,
        turn: np.ndarray | None = None,
    ) -> float:
        """The largest fraction of the tool's straight path along which the
        gripper's points get no farther below the table than at the start (an
        arm without a body model: this much needs none)."""
        base_tool = max(0.0, self.table - self._tool_low(p0, r0)[0])
        travel = p1 - p0
        turn = geo.rotation_error(r1, r0) if turn is None else turn
        n = _cartesian_steps(travel, turn)
        done = 0.0
        for i in range(1, n + 1):
            f = i / n
            z, what = self._tool_low(p0 + f * travel, _rotvec_matrix(f * turn) @ r0)
            if self.table - z > base_tool + _SLACK:
                return self._body_refused(reasons, what, z, self.table, done)
            done = f
        return 1.0

    def _body_refused(
        self, reasons: set[EnvelopeReason], what: str, z: float, floor: float, done: float
    ) -> float:
        reasons.add(EnvelopeReason.workspace)
        self._note = (
            f"envelope: the Cartesian command would take the {what} to z = {z:.3f} m, "
            f"below {floor:.3f} m (the table plane {self.settings.table_z:.3f} m + its margins); "
            f"held to the first {done:.0%} of its path"
        )
        return done

    def _joint_path(
        self,
        q0: np.ndarray,
        dq: np.ndarray,
        reasons: set[EnvelopeReason],
        upper: float,
    ) -> float:
        """The largest fraction of ``q0 → q0 + dq`` (at most ``upper``) along
        which the tool, the gripper's points and the arm's body get no farther
        outside the box, the cone and the table than at ``q0``: the path is
        walked in steps of at most ``_PATH_STEP_RAD`` on any joint, and the
        step that first breaks a limit is bisected."""
        base = self._excess_k(self._model(q0))
        widest = float(np.max(np.abs(dq))) * upper
        n = max(1, math.ceil(widest / _PATH_STEP_RAD))
        worst: _Excess | None = None

        def ok(f: float) -> bool:
            nonlocal worst
            e = self._excess_k(self._model(q0 + f * dq))
            if e.no_worse_than(base):
                return True
            worst = e
            return False

        done = 0.0
        for i in range(1, n + 1):
            f = upper * i / n
            if not ok(f):
                lo, hi = done, f
                for _ in range(_BISECT):
                    mid = 0.5 * (lo + hi)
                    lo, hi = (mid, hi) if ok(mid) else (lo, mid)
                assert worst is not None
                if worst.box > base.box + _SLACK or worst.body > base.body + _SLACK:
                    reasons.add(EnvelopeReason.workspace)
                if worst.cone > base.cone + _SLACK:
                    reasons.add(EnvelopeReason.orientation)
                return lo
            done = f
        return upper

    def _joint_position(
        self, target: np.ndarray, state: ArmState, first: bool
    ) -> tuple[np.ndarray, set[EnvelopeReason]]:
        s, reasons = self.settings, set()
        q0 = state.q
        # the driver's own joint range (its margin inside the controller's
        # limits): the target checked is the one it sends
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
        s, arm, reasons = self.settings, self.arm, set()
        q0, dq = state.q, target.copy()
        # 1. no policy means a joint at many times its rating: a protocol fault
        over = np.abs(dq) / arm.dq_rated
        worst = int(np.argmax(over))
        if over[worst] > s.joint_velocity_fault_multiple:
            raise EnvelopeProtocolFault(
                f"malformed policy reply: a joint_velocity row asks joint {worst + 1} for "
                f"{dq[worst]:.4g} rad/s, over {s.joint_velocity_fault_multiple:g} × its rated "
                f"{arm.dq_rated[worst]:g} rad/s"
            )
        # 2. uniformly into the arm's limits and the joint speed cap (never
        # joint by joint: that turns the tool off the direction checked)
        scale = min(
            1.0,
            float(np.min(arm.dq_max / np.maximum(np.abs(dq), 1e-300))),
            s.max_joint_speed / max(float(np.max(np.abs(dq))), 1e-300),
        )
        if scale < 1.0:
            dq *= scale
            reasons.add(EnvelopeReason.speed)
        # 3. the wall: every joint can still brake before its limit
        wall = self._wall(q0, dq)
        if wall < 1.0:
            dq *= wall
            reasons.add(EnvelopeReason.joint_limit)
        # 4. the tool's speed and rotation and the body's speeds, from the
        # model's Jacobians along the path the command may take
        fast = self._speed_scale(q0, dq)
        if fast < 1.0:
            dq *= fast
            reasons.add(EnvelopeReason.speed)
        # 5. the path over the horizon and the braking after it, in small steps
        frac = self._joint_path(q0, dq * self._span(dq), reasons, 1.0)
        return dq * frac, reasons

    def _span(self, dq: np.ndarray) -> float:
        """How long (s) the arm may follow ``dq`` before it is at rest: the
        horizon, then braking at the arm's deceleration (the joints slow down
        together, so the path stays on the line; half the stopping time)."""
        a = self.arm.ddq_max
        finite = np.isfinite(a)
        brake = float(np.max(np.abs(dq[finite]) / a[finite])) / 2.0 if finite.any() else 0.0
        return self.horizon + brake

    def _wall(self, q0: np.ndarray, dq: np.ndarray) -> float:
        """The largest uniform scale of ``dq`` with which every joint, moving
        for the horizon and then braking at the arm's deceleration, stops
        inside its limits: v·h + v²/(2a) ≤ room, i.e.
        v ≤ a·(√(h² + 2·room/a) − h)."""
        h, a = self.horizon, self.arm.ddq_max
        room = np.where(dq > 0, self.q_max - q0, q0 - self.q_min)
        room = np.maximum(room, 0.0)
        with np.errstate(invalid="ignore"):
            allowed = np.where(np.isfinite(a), a * (np.sqrt(h * h + 2.0 * room / a) - h), room / h)
        moving = np.abs(dq) > 0
        if not moving.any():
            return 1.0
        return float(min(1.0, np.min(allowed[moving] / np.abs(dq[moving]))))

    def _speed_scale(self, q0: np.ndarray, dq: np.ndarray) -> float:
        """The largest uniform scale of ``dq`` keeping the tool's speed and
        rotation and every body point's speed under the caps at each point of
        the path the command may take (the Jacobians change along it)."""
        span = self._span(dq)
        n = max(1, math.ceil(float(np.max(np.abs(dq))) * span / _PATH_STEP_RAD))
        scale = 1.0
        for i in range(n + 1):
            k = self._model(q0 + dq * span * i / n)
            v = k.jacobian @ dq
            speeds = [float(np.linalg.norm(v[:3]))]
            speeds += [float(np.linalg.norm(j @ dq)) for j in k.body_jacobians]
            for speed, cap in (
                (max(speeds), self.speed_cap),
                (float(np.linalg.norm(v[3:])), self.spin_cap),
            ):
                if speed > cap:
                    scale = min(scale, cap / speed)
        return scale


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
    "EnvelopeProtocolFault",
    "EnvelopeStop",
    "Guarded",
    "KinematicsModel",
    "Run",
    "arm_limits",
    "envelope_settings",
]
