"""Action units: what the numbers of a velocity action mean, one convention each,
behind a registry keyed by the name a server declares (``metadata.action_units``).

``si`` (rad/s, m/s): a velocity row is a joint or tool velocity, sent to the arm
as a velocity command. ``droid``: a velocity row is DROID's *normalised per-step
delta*, which DROID's runtime turns into a position target each control step;
a DROID-trained policy read as ``si`` moves about three times slower than it
was trained to (six at full deflection), so the station would score the
adapter, not the policy.

DROID's convention, as its own robot code applies it (droid-dataset/droid):

* ``droid/robot_ik/robot_ik_solver.py``, ``RobotIKSolver.__init__``:
  ``max_joint_delta = 0.2`` (rad per step, every joint), ``max_lin_delta =
  0.075`` (m per step), ``max_rot_delta = 0.15`` (rad per step), ``control_hz = 15``;
* ``RobotIKSolver.joint_velocity_to_delta``: if the largest ``|v_i|`` exceeds 1 the
  whole vector is divided by it (direction kept), then ``delta = v * 0.2``;
* ``RobotIKSolver.cartesian_velocity_to_delta``: the linear and the angular
  parts are each divided by their Euclidean norm when it exceeds 1, then
  ``lin * 0.075`` and ``rot * 0.15``;
* ``droid/franka/robot.py``, ``FrankaRobot.update_joints(velocity=True)`` and
  ``create_action_dict``: ``q_target = delta + q_measured`` (the MEASURED joints,
  read that step), sent as a joint position target; Cartesian:
  ``add_poses(delta, measured pose)`` (``droid/misc/transformations.py``: position
  added, the rotation delta, extrinsic xyz Euler angles, composed on the left);
* ``droid/robot_env.py``, ``RobotEnv``: one step per 1/15 s; ``RobotEnv.step``
  asserts velocity actions lie in [-1, 1], and openpi's DROID client
  (``examples/droid/main.py``) clips every column to [-1, 1] before stepping.

So 1.0 is 0.2 rad per step (3 rad/s at 15 Hz) on a joint and 0.075 m per step
(1.125 m/s) of tool travel. The station follows the same order: clip each
column to [-1, 1], rescale as the solver does, add to the state measured for
this step, and send the position target through the envelope like every
other command. The gripper column stays a position in [0, 1] in both
conventions (openpi's DROID client runs ``gripper_action_space="position"``).
Position action spaces are absolute in both conventions and pass unchanged.

Where the station differs from DROID's runtime, and why: a Cartesian row
becomes the pose target DROID computes (``create_action_dict``'s
``cartesian_position``), sent to the arm's own Cartesian control, instead of
DROID's one-step IK (``cartesian_velocity_to_joint_velocity``, a MuJoCo model
of DROID's Franka with its nullspace terms), which the station's arms do not
carry. openpi's DROID client also binarises the gripper at 0.5; the station
keeps the policy's gripper target as sent, as for every other policy.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import numpy as np

from proctor.core import geometry as geo
from proctor.core.domain import ActionUnitsName
from proctor.core.registry import Registry

# the metadata key a server declares its convention under
METADATA_KEY = "action_units"


class Measured(Protocol):
    """What a convention of deltas adds to: the arm as measured for the step
    (a ``Proprio``, or the station's own arm state; plain arrays either way)."""

    @property
    def q(self) -> np.ndarray: ...  # (7,) rad

    @property
    def ee_pose(self) -> np.ndarray: ...  # (7,) [x, y, z, qx, qy, qz, qw]


def _si_target(arm_part: np.ndarray, space: str) -> np.ndarray:
    if space == "cartesian_position":
        rot = geo.euler_to_matrix(arm_part[3:6])
        return np.concatenate([arm_part[:3], geo.matrix_to_quat(rot)])
    return arm_part


class ActionUnits:
    """One convention: the arm command an action row's arm part becomes."""

    name: ClassVar[str]
    # a few words on what a velocity number is, for the endpoint form
    summary: ClassVar[str]
    # how the conformance report and the docs say what a velocity row holds
    velocity_text: ClassVar[dict[str, str]]

    def command_space(self, space: str) -> str:
        """The action space of the command a row of ``space`` becomes (in SI
        units, its own; the station maps it to an arm command kind)."""
        return space

    def arm_target(
        self, arm_part: np.ndarray, space: str, state: Measured | None, control_hz: float
    ) -> np.ndarray:
        """The command's target for one row (``state``: the arm measured for this step)."""
        return _si_target(arm_part, space)


# the built-in conventions are defined below, in this module
# the names are the kernel's (``ActionUnitsName``): a station's work is checked
# against them without the policy wire
_units: Registry[ActionUnits] = Registry(
    METADATA_KEY, dict.fromkeys(n.value for n in ActionUnitsName)
)
register = _units.register_instance
names = _units.names


def get(name: str) -> ActionUnits:
    """The convention called ``name``; ``ValueError`` naming the known ones."""
    return _units.get(name)


def check(value: Any) -> str:
    """A convention an endpoint or a checkpoint's policy.toml selects: the name of
    a registered one (``ValueError`` naming the field; the value is the
    submitter's, so it is not repeated)."""
    if not isinstance(value, str) or value not in _units:
        raise ValueError(
            f"{METADATA_KEY}: must be one of {', '.join(names())} "
            "(what the numbers of a velocity action mean)"
        )
    return value


@register
class Si(ActionUnits):
    name = "si"
    summary = "rad/s and m/s"
    velocity_text: ClassVar[dict[str, str]] = {
        "joint_velocity": "joint velocities in rad/s, sent as a velocity command",
        "cartesian_velocity": "tool velocities in m/s and rad/s, sent as a velocity command",
    }


# DROID's scaling (droid/robot_ik/robot_ik_solver.py, RobotIKSolver.__init__)
DROID_MAX_JOINT_DELTA = 0.2  # rad per step, every joint (relative_max_joint_delta.max())
DROID_MAX_LIN_DELTA = 0.075  # m per step
DROID_MAX_ROT_DELTA = 0.15  # rad per step
DROID_CONTROL_HZ = 15.0  # droid/robot_env.py, RobotEnv.control_hz


def _unit_norm(v: np.ndarray) -> np.ndarray:
    """``v`` divided by its Euclidean norm when that exceeds 1
    (``RobotIKSolver.cartesian_velocity_to_delta``)."""
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 1.0 else v


@register
class Droid(ActionUnits):
    name = "droid"
    summary = "DROID's normalised per-step deltas in [-1, 1] (DROID-trained policies)"
    velocity_text: ClassVar[dict[str, str]] = {
        "joint_velocity": (
            "DROID's normalised joint velocities in [-1, 1]: each step the station adds "
            f"v × {DROID_MAX_JOINT_DELTA:g} rad to the measured joints and sends that as a "
            "joint position target"
        ),
        "cartesian_velocity": (
            "DROID's normalised tool velocities in [-1, 1]: each step the station moves "
            f"the measured pose by v × {DROID_MAX_LIN_DELTA:g} m and "
            f"w × {DROID_MAX_ROT_DELTA:g} rad and sends that as a pose target"
        ),
    }
    # a delta added to the measured state is a position target
    _COMMAND_SPACES: ClassVar[dict[str, str]] = {
        "joint_velocity": "joint_position",
        "cartesian_velocity": "cartesian_position",
    }

    def command_space(self, space: str) -> str:
        return self._COMMAND_SPACES.get(space, space)

    def arm_target(
        self, arm_part: np.ndarray, space: str, state: Measured | None, control_hz: float
    ) -> np.ndarray:
        adapt = {"joint_velocity": self._joints, "cartesian_velocity": self._pose}.get(space)
        if adapt is None:
            return _si_target(arm_part, space)
        if state is None:
            raise ValueError(f"{self.name} units need the measured arm state for {space}")
        # openpi's DROID client clips every column before DROID's runtime sees it
        v = np.clip(np.asarray(arm_part, dtype=np.float64), -1.0, 1.0)
        # a delta is per DROID step (1/15 s): at another control rate the same
        # speed is a proportionally smaller (or larger) delta per step
        per_step = DROID_CONTROL_HZ / control_hz
        return adapt(v, state, per_step)

    @staticmethod
    def _joints(v: np.ndarray, state: Measured, per_step: float) -> np.ndarray:
        # RobotIKSolver.joint_velocity_to_delta: the largest |v_i| above 1 rescales
        # the whole vector (a no-op after the clip, kept for the order DROID applies)
        largest = float(np.max(np.abs(v)))
        if largest > 1.0:
            v = v / largest
        return np.asarray(state.q, dtype=np.float64) + v * DROID_MAX_JOINT_DELTA * per_step

    @staticmethod
    def _pose(v: np.ndarray, state: Measured, per_step: float) -> np.ndarray:
        lin = _unit_norm(v[:3]) * DROID_MAX_LIN_DELTA * per_step
        rot = _unit_norm(v[3:6]) * DROID_MAX_ROT_DELTA * per_step
        p0, r0 = state.ee_pose[:3], geo.quat_to_matrix(state.ee_pose[3:])
        # transformations.add_angles: R(delta) · R(source), both extrinsic xyz Euler
        r = geo.euler_to_matrix(rot) @ r0
        return np.concatenate([p0 + lin, geo.matrix_to_quat(r)])


__all__ = [
    "DROID_CONTROL_HZ",
    "DROID_MAX_JOINT_DELTA",
    "DROID_MAX_LIN_DELTA",
    "DROID_MAX_ROT_DELTA",
    "METADATA_KEY",
    "ActionUnits",
    "Droid",
    "Measured",
    "Si",
    "check",
    "get",
    "names",
    "register",
]
