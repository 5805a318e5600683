"""Whose doing an arm fault is: the policy's (proposed outcome ``safety``) or
the station's (``system``, excluded from every score: ``docs/methods.md`` §2).

A reflex is scored against the policy only when its motion met the world: a
collision reflex (``cartesian_reflex``, ``joint_reflex``), a path or goal the
arm could not follow because something held it, a torque sensor driven out of
range, or the arm folded into itself. Everything else libfranka reports is the
station's: the realtime link (``communication_constraints_violation``), a
trajectory the station generated from a clipped command that the controller
could not execute (the ``*_motion_generator_*`` flags: an unreachable target),
limits the station's clipping should have kept (joint or Cartesian position
and velocity, power), and its set-up (start poses, planning torque, the
controller's stability). A fault with no flag goes by its kind: a lost link or
a refused command is the station's; a hardware user stop is the operator's
safety stop. A fault during a motion the station itself commanded (homing,
recovery) is the station's whatever its flags say: no policy was driving.

When several flags are set, the one of highest precedence decides: a broken
realtime link first (every later flag may be its consequence), then a
contact, then the rest. What the flags cannot tell: a reflex that a wrong TCP
or payload causes looks like a contact (the controller's model expects other
torques); pre-flight checks them against the commissioned values before any
episode, and this module cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from proctor.core.domain import Outcome
from proctor.station.drivers.arm.base import ArmErrorKind, ArmFault, ArmState
from proctor.station.drivers.arm.flags import LIBFRANKA_ERROR_FLAGS


class Cause(StrEnum):
    policy = "policy"  # the policy's motion met the world, or the arm itself
    station = "station"  # the station's command, limits, realtime link or set-up
    operator = "operator"  # the hardware user stop was pressed
    unknown = "unknown"  # nothing says: counted as a safety stop, as before attribution


class Origin(StrEnum):
    """Who commanded the motion in force when the fault came."""

    policy = "policy"  # an episode's control loop (its velocity halts included)
    station = "station"  # the station's own motion: homing, recovery


OUTCOMES: dict[Cause, Outcome] = {
    Cause.policy: Outcome.safety,
    Cause.operator: Outcome.safety,
    Cause.unknown: Outcome.safety,
    Cause.station: Outcome.system,
}

# the world pushed back on the policy's motion (or the arm met itself)
CONTACT_FLAGS = (
    "cartesian_reflex",
    "joint_reflex",
    "max_goal_pose_deviation_violation",
    "max_path_pose_deviation_violation",
    "tau_j_range_violation",
    "self_collision_avoidance_violation",
)
# the station missed the controller's 1 kHz deadlines
TIMING_FLAGS = ("communication_constraints_violation",)

# every libfranka flag: (cause, precedence); every flag not named above is the station's
FLAG_CAUSES: dict[str, tuple[Cause, int]] = {
    **{flag: (Cause.station, 1) for flag in LIBFRANKA_ERROR_FLAGS},
    **{flag: (Cause.policy, 2) for flag in CONTACT_FLAGS},
    **{flag: (Cause.station, 3) for flag in TIMING_FLAGS},
}

# a fault without a known flag, by its kind
KIND_CAUSES: dict[ArmErrorKind | None, Cause] = {
    ArmErrorKind.communication: Cause.station,
    ArmErrorKind.control: Cause.station,
    ArmErrorKind.user_stop: Cause.operator,
    ArmErrorKind.reflex: Cause.unknown,
    None: Cause.unknown,
}

_WHY: dict[Cause, str] = {
    Cause.policy: "a contact during the policy's motion",
    Cause.station: "the station's doing (its command, limits, realtime link or set-up)",
    Cause.operator: "the hardware user stop was pressed",
    Cause.unknown: "no libfranka flag names the cause; counted as a safety stop",
}


@dataclass(frozen=True)
class Attribution:
    cause: Cause
    origin: Origin
    kind: ArmErrorKind | None
    flags: tuple[str, ...]
    deciding_flag: str | None  # the flag that decided, if one did

    @property
    def outcome(self) -> Outcome:
        return OUTCOMES[self.cause]

    @property
    def follows_policy_motion(self) -> bool:
        """A station-attributed fault the policy's own motion led to: a limit,
        an unreachable or singular target, a refused command — everything but
        the realtime link, which no motion causes. Such a fault stays
        ``system`` (the station should have kept the arm from it), but the
        scheduler counts it against the policy past a free allowance, as it
        does protocol failures: else a policy could void an episode it is
        losing at will (hardware review #4)."""
        if self.cause != Cause.station or self.origin != Origin.policy:
            return False
        if self.kind == ArmErrorKind.communication:
            return False
        return self.deciding_flag not in TIMING_FLAGS

    @property
    def why(self) -> str:
        if self.origin == Origin.station:
            return "during the station's own motion (homing or recovery), with no policy driving"
        what = self.deciding_flag or (f"{self.kind.value} error" if self.kind else "arm error")
        return f"{what}: {_WHY[self.cause]}"

    def record(self) -> dict[str, Any]:
        """For the manifest and the episode's events."""
        return {
            "cause": self.cause.value,
            "proposed_outcome": self.outcome.value,
            "origin": self.origin.value,
            "kind": self.kind.value if self.kind else None,
            "flags": list(self.flags),
            "deciding_flag": self.deciding_flag,
            "why": self.why,
        }


def attribute(
    kind: ArmErrorKind | None, flags: tuple[str, ...], origin: Origin = Origin.policy
) -> Attribution:
    known = [(FLAG_CAUSES[f], f) for f in flags if f in FLAG_CAUSES]
    if known:
        (cause, _), deciding = max(known, key=lambda entry: entry[0][1])
    else:
        cause, deciding = KIND_CAUSES[kind], None
    if origin == Origin.station and cause in (Cause.policy, Cause.unknown):
        cause = Cause.station
    return Attribution(cause, origin, kind, flags, deciding)


def attribute_state(state: ArmState, origin: Origin = Origin.policy) -> Attribution:
    return attribute(state.error_kind, state.error_flags, origin)


def attribute_fault(fault: ArmFault, origin: Origin = Origin.policy) -> Attribution:
    return attribute(fault.kind, fault.flags, origin)


__all__ = [
    "OUTCOMES",
    "Attribution",
    "Cause",
    "Origin",
    "attribute",
    "attribute_fault",
    "attribute_state",
]
