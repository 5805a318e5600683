"""Whose doing an arm fault is: the policy's (proposed outcome ``safety``) or
the station's (``system``, excluded from every score: ``docs/methods.md`` §2).

The controller's flags decide, read through the arm's own table
(``Arm.fault_flag_causes``: what only the driver knows, e.g. libfranka's
``franka::Errors`` in ``proctor.station.drivers.arm.franky_faults``). When
several known flags are set, the one of highest precedence decides. A fault
with no known flag goes by its kind: a lost link or a refused command is the
station's; a hardware user stop is the operator's safety stop; a reflex no
flag explains is ``unknown`` (an arm with an empty table has only these). A
fault during a motion the station itself commanded (homing, recovery) is the
station's whatever its flags say: no policy was driving.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from proctor.core.domain import Outcome
from proctor.station.drivers.arm.base import Arm, ArmErrorKind, ArmFault, ArmState
from proctor.station.drivers.arm.faults import Cause, FlagCauses


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

# a fault without a known flag, by its kind
KIND_CAUSES: dict[ArmErrorKind | None, Cause] = {
    ArmErrorKind.communication: Cause.station,
    ArmErrorKind.control: Cause.station,
    ArmErrorKind.user_stop: Cause.operator,
    ArmErrorKind.reflex: Cause.unknown,
    None: Cause.unknown,
}

# the manifest's and events' ``why``: worded as recorded since before the arm's
# table moved to its driver (the franky driver's and the simulated cell's flags
# are libfranka's), so that records read alike across the change
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
    # the deciding flag says the link to the controller failed (no motion's doing)
    deciding_link: bool = False

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
        return not self.deciding_link

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
    kind: ArmErrorKind | None,
    flags: tuple[str, ...],
    causes: FlagCauses,
    origin: Origin = Origin.policy,
) -> Attribution:
    """``causes``: the arm's table of its controller's flags (``Arm.fault_flag_causes``)."""
    known = [(causes[f], f) for f in flags if f in causes]
    if known:
        deciding_cause, deciding = max(known, key=lambda entry: entry[0].precedence)
        cause, link = deciding_cause.cause, deciding_cause.link
    else:
        cause, deciding, link = KIND_CAUSES[kind], None, False
    if origin == Origin.station and cause in (Cause.policy, Cause.unknown):
        cause = Cause.station
    return Attribution(cause, origin, kind, flags, deciding, link)


def attribute_state(state: ArmState, arm: Arm[Any], origin: Origin = Origin.policy) -> Attribution:
    return attribute(state.error_kind, state.error_flags, arm.fault_flag_causes(), origin)


def attribute_fault(fault: ArmFault, arm: Arm[Any], origin: Origin = Origin.policy) -> Attribution:
    return attribute(fault.kind, fault.flags, arm.fault_flag_causes(), origin)


__all__ = [
    "OUTCOMES",
    "Attribution",
    "Cause",
    "Origin",
    "attribute",
    "attribute_fault",
    "attribute_state",
]
