"""libfranka's error flags, by name: the vocabulary the controller uses to
say why it stopped a motion.

The names are those of ``franka::Errors`` (libfranka ``include/franka/errors.h``,
``src/errors.cpp``), which franky 2.0 binds one read-only property each
(``python/bind_errors.cpp``; libfranka ≥ 0.9 has these 41). libfranka prints an
``Errors`` as a JSON-like list of the active flags' names, ``["cartesian_reflex",
"joint_reflex"]`` (``Errors::operator std::string``), and appends that list to
the text of the ``ControlException`` a reflex raises
(``createControlException`` in ``src/robot_impl.cpp``): so a fault's text
carries its flags, and so does the simulated cell's.

No hardware library is imported here: the simulated cell uses the names too,
and the franky driver's attribution table is keyed by them
(``proctor.station.drivers.arm.franky_faults``).
``tests/station/drivers/test_franky_arm.py`` checks this list against the
installed franky's ``Errors``, so a libfranka that adds a flag fails loudly
instead of leaving it unattributed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

LIBFRANKA_ERROR_FLAGS: tuple[str, ...] = (
    "joint_position_limits_violation",
    "cartesian_position_limits_violation",
    "self_collision_avoidance_violation",
    "joint_velocity_violation",
    "cartesian_velocity_violation",
    "force_control_safety_violation",
    "joint_reflex",
    "cartesian_reflex",
    "max_goal_pose_deviation_violation",
    "max_path_pose_deviation_violation",
    "cartesian_velocity_profile_safety_violation",
    "joint_position_motion_generator_start_pose_invalid",
    "joint_motion_generator_position_limits_violation",
    "joint_motion_generator_velocity_limits_violation",
    "joint_motion_generator_velocity_discontinuity",
    "joint_motion_generator_acceleration_discontinuity",
    "cartesian_position_motion_generator_start_pose_invalid",
    "cartesian_motion_generator_elbow_limit_violation",
    "cartesian_motion_generator_velocity_limits_violation",
    "cartesian_motion_generator_velocity_discontinuity",
    "cartesian_motion_generator_acceleration_discontinuity",
    "cartesian_motion_generator_elbow_sign_inconsistent",
    "cartesian_motion_generator_start_elbow_invalid",
    "cartesian_motion_generator_joint_position_limits_violation",
    "cartesian_motion_generator_joint_velocity_limits_violation",
    "cartesian_motion_generator_joint_velocity_discontinuity",
    "cartesian_motion_generator_joint_acceleration_discontinuity",
    "cartesian_position_motion_generator_invalid_frame",
    "force_controller_desired_force_tolerance_violation",
    "controller_torque_discontinuity",
    "start_elbow_sign_inconsistent",
    "communication_constraints_violation",
    "power_limit_violation",
    "joint_p2p_insufficient_torque_for_planning",
    "tau_j_range_violation",
    "instability_detected",
    "joint_move_in_wrong_direction",
    "cartesian_spline_motion_generator_violation",
    "joint_via_motion_generator_planning_joint_limit_violation",
    "base_acceleration_initialization_timeout",
    "base_acceleration_invalid_reading",
)
_KNOWN = frozenset(LIBFRANKA_ERROR_FLAGS)
_WORD = re.compile(r"[a-z][a-z0-9_]*")


def flags_in(text: str | None) -> tuple[str, ...]:
    """The libfranka flag names in ``text``, in order of first appearance.

    Whole words only: a flag is a snake_case identifier distinctive enough
    that finding it in libfranka's text, or in the simulated cell's, means it."""
    if not text:
        return ()
    return unique(w for w in _WORD.findall(text) if w in _KNOWN)


def unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


__all__ = ["LIBFRANKA_ERROR_FLAGS", "flags_in", "unique"]
