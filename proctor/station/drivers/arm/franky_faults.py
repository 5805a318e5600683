"""What libfranka's error flags (``franka::Errors``) say about whose doing a
fault is: the franky driver's table for the control loop's attribution
(``proctor.station.control.attribution``, through ``Arm.fault_flag_causes``).
The simulated cell words its reflexes with the same flags and answers with
the same table.

A reflex is the policy's only when its motion met the world: a collision
reflex (``cartesian_reflex``, ``joint_reflex``), a path or goal the arm could
not follow because something held it, a torque sensor driven out of range, or
the arm folded into itself. Everything else libfranka reports is the
station's: the realtime link (``communication_constraints_violation``), a
trajectory the station generated from a clipped command that the controller
could not execute (the ``*_motion_generator_*`` flags: an unreachable target),
limits the station's clipping should have kept (joint or Cartesian position
and velocity, power), and its set-up (start poses, planning torque, the
controller's stability).

When several flags are set, the one of highest precedence decides: a broken
realtime link first (every later flag may be its consequence), then a
contact, then the rest. What the flags cannot tell: a reflex that a wrong TCP
or payload causes looks like a contact (the controller's model expects other
torques); pre-flight checks them against the commissioned values before any
episode (``proctor.station.drivers.arm.franky_checks``).
"""

from __future__ import annotations

from proctor.station.drivers.arm.faults import Cause, FlagCause, FlagCauses
from proctor.station.drivers.arm.flags import LIBFRANKA_ERROR_FLAGS

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
FLAG_CAUSES: FlagCauses = {
    **{flag: FlagCause(Cause.station, 1) for flag in LIBFRANKA_ERROR_FLAGS},
    **{flag: FlagCause(Cause.policy, 2) for flag in CONTACT_FLAGS},
    **{flag: FlagCause(Cause.station, 3, link=True) for flag in TIMING_FLAGS},
}

__all__ = ["CONTACT_FLAGS", "FLAG_CAUSES", "TIMING_FLAGS"]
