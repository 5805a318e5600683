"""Arm faults attributed to their cause: the franky driver's table, on
libfranka's own flag names and texts (pure; the twin and the simulated cell are in
tests/station/drivers/test_twin.py and tests/station/test_faults.py)."""

from __future__ import annotations

import pytest

from proctor.core.domain import Outcome
from proctor.station.control.attribution import Attribution, Cause, Origin
from proctor.station.control.attribution import attribute as attribute_with
from proctor.station.drivers.arm.base import ArmErrorKind
from proctor.station.drivers.arm.flags import LIBFRANKA_ERROR_FLAGS, flags_in
from proctor.station.drivers.arm.franky_faults import FLAG_CAUSES

REFLEX = ArmErrorKind.reflex


def attribute(kind: ArmErrorKind | None, flags: tuple[str, ...], origin: Origin) -> Attribution:
    """With libfranka's table, as the franky driver and the simulated cell hand it."""
    return attribute_with(kind, flags, FLAG_CAUSES, origin)


# libfranka's text for a reflex, as createControlException writes it (src/robot_impl.cpp)
REFLEX_TEXT = (
    "libfranka: Move command aborted: motion aborted by reflex! "
    '["joint_velocity_violation", "cartesian_motion_generator_joint_velocity_discontinuity"]\n'
    "control_command_success_rate: 0.93 packets lost in a row in the last sample: 2"
)


def test_every_libfranka_flag_has_a_cause() -> None:
    assert set(FLAG_CAUSES) == set(LIBFRANKA_ERROR_FLAGS)
    assert len(LIBFRANKA_ERROR_FLAGS) == len(set(LIBFRANKA_ERROR_FLAGS)) == 41


def test_flags_are_read_from_libfrankas_text() -> None:
    assert flags_in(REFLEX_TEXT) == (
        "joint_velocity_violation",
        "cartesian_motion_generator_joint_velocity_discontinuity",
    )
    assert flags_in("cartesian_reflex: contact with the tote wall at 0.40 m/s") == (
        "cartesian_reflex",
    )
    # a flag's name inside a longer word is not that flag
    assert flags_in("not_a_joint_reflex_at_all") == ()
    assert flags_in(None) == flags_in("") == ()


@pytest.mark.parametrize(
    ("flags", "kind", "cause", "outcome"),
    [
        # a contact during the policy's motion: the policy's safety stop
        (("cartesian_reflex",), REFLEX, Cause.policy, Outcome.safety),
        (("joint_reflex",), REFLEX, Cause.policy, Outcome.safety),
        # the realtime link, an unreachable target, limits the station should keep
        (("communication_constraints_violation",), REFLEX, Cause.station, Outcome.system),
        (
            ("cartesian_motion_generator_joint_position_limits_violation",),
            REFLEX,
            Cause.station,
            Outcome.system,
        ),
        (("joint_velocity_violation",), REFLEX, Cause.station, Outcome.system),
        (("power_limit_violation",), REFLEX, Cause.station, Outcome.system),
        # several flags: a broken link outranks a contact, a contact the rest
        (
            ("cartesian_reflex", "communication_constraints_violation"),
            REFLEX,
            Cause.station,
            Outcome.system,
        ),
        (("joint_velocity_violation", "cartesian_reflex"), REFLEX, Cause.policy, Outcome.safety),
        # no flag: by kind
        ((), ArmErrorKind.communication, Cause.station, Outcome.system),
        ((), ArmErrorKind.control, Cause.station, Outcome.system),
        ((), ArmErrorKind.user_stop, Cause.operator, Outcome.safety),
        ((), REFLEX, Cause.unknown, Outcome.safety),
        ((), None, Cause.unknown, Outcome.safety),
    ],
)
def test_causes_during_the_policys_motion(
    flags: tuple[str, ...], kind: ArmErrorKind | None, cause: Cause, outcome: Outcome
) -> None:
    a = attribute(kind, flags, Origin.policy)
    assert (a.cause, a.outcome) == (cause, outcome)
    record = a.record()
    assert record["cause"] == cause.value and record["proposed_outcome"] == outcome.value
    assert record["flags"] == list(flags)


def test_a_fault_during_the_stations_own_motion_is_the_stations() -> None:
    # homing into a tote wall is a contact, but no policy was driving
    a = attribute(REFLEX, ("cartesian_reflex",), Origin.station)
    assert (a.cause, a.outcome) == (Cause.station, Outcome.system)
    assert "homing" in a.why
    # the operator's hardware stop stays the operator's
    assert attribute(ArmErrorKind.user_stop, (), Origin.station).cause == Cause.operator


@pytest.mark.parametrize(
    ("kind", "flags", "origin", "charged"),
    [
        # limits and unreachable targets after the policy's motion: charged
        (ArmErrorKind.reflex, ("joint_position_limits_violation",), Origin.policy, True),
        (
            ArmErrorKind.reflex,
            ("cartesian_motion_generator_joint_velocity_limits_violation",),
            Origin.policy,
            True,
        ),
        (ArmErrorKind.control, (), Origin.policy, True),  # a refused command
        # the realtime link is no motion's doing
        (ArmErrorKind.reflex, ("communication_constraints_violation",), Origin.policy, False),
        (ArmErrorKind.communication, (), Origin.policy, False),
        # during the station's own homing nobody but the station drove
        (ArmErrorKind.reflex, ("joint_position_limits_violation",), Origin.station, False),
        # a contact is the policy's safety stop already, not a system ending
        (ArmErrorKind.reflex, ("cartesian_reflex",), Origin.policy, False),
    ],
)
def test_station_faults_after_the_policys_motion_are_marked_for_the_charge(
    kind: ArmErrorKind, flags: tuple[str, ...], origin: Origin, charged: bool
) -> None:
    """Hardware review #4: which system endings the scheduler may charge."""
    assert attribute(kind, flags, origin).follows_policy_motion is charged
