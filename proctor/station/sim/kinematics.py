"""Franka FR3 kinematics: forward kinematics, the geometric Jacobian, and a
damped least-squares step, for the simulated cell.

Denavit–Hartenberg parameters in Craig's (modified) convention as published
by Franka Robotics for the Panda/FR3 arm (robot and interface
specifications): for joint i the transform is
``RotX(alpha) · TransX(a) · RotZ(q_i) · TransZ(d)``. The tool centre point
sits ``TCP_OFFSET`` beyond the flange along its z axis (a Robotiq 2F-85 on
its coupling), rotated −π/4 about z like the Franka hand.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.linalg import lapack

from proctor.core.geometry import (  # noqa: F401  (re-exported for the simulator)
    euler_to_matrix,
    matrix_to_euler,
    matrix_to_quat,
    quat_to_matrix,
    rotation_error,
)
from proctor.station.drivers.arm.base import ArmKinematics

# (a, d, alpha) per joint, then the flange (fixed)
DH = (
    (0.0, 0.333, 0.0),
    (0.0, 0.0, -math.pi / 2),
    (0.0, 0.316, math.pi / 2),
    (0.0825, 0.0, math.pi / 2),
    (-0.0825, 0.384, -math.pi / 2),
    (0.0, 0.0, math.pi / 2),
    (0.088, 0.0, math.pi / 2),
)
FLANGE_D = 0.107
TCP_OFFSET = 0.16  # flange to fingertip centre of a 2F-85 on its coupling, m
TCP_YAW = -math.pi / 4

# FR3 datasheet limits
DQ_MAX = np.array([2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26])  # rad/s
DDQ_MAX = np.array([10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0])  # rad/s², a conservative subset

_A = np.array([p[0] for p in DH])
_D = np.array([p[1] for p in DH])
_CA = np.cos([p[2] for p in DH])
_SA = np.sin([p[2] for p in DH])
# the q-independent entries of every link transform, filled once
_LINKS = np.zeros((7, 4, 4))
_LINKS[:, 0, 3] = _A
_LINKS[:, 1, 2] = -_SA
_LINKS[:, 1, 3] = -_D * _SA
_LINKS[:, 2, 2] = _CA
_LINKS[:, 2, 3] = _D * _CA
_LINKS[:, 3, 3] = 1.0

_TOOL = np.array(
    [
        [math.cos(TCP_YAW), -math.sin(TCP_YAW), 0.0, 0.0],
        [math.sin(TCP_YAW), math.cos(TCP_YAW), 0.0, 0.0],
        [0.0, 0.0, 1.0, FLANGE_D + TCP_OFFSET],
        [0.0, 0.0, 0.0, 1.0],
    ]
)


def forward(q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Joint frames and the tool pose.

    Returns ``(origins, axes, tool)``: origins (8, 3) of joints 1–7 and the
    TCP, the joint rotation axes (7, 3) in the base frame, and the (4, 4)
    TCP transform.
    """
    cq = np.cos(q)
    sq = np.sin(q)
    links = _LINKS.copy()
    links[:, 0, 0] = cq
    links[:, 0, 1] = -sq
    links[:, 1, 0] = sq * _CA
    links[:, 1, 1] = cq * _CA
    links[:, 2, 0] = sq * _SA
    links[:, 2, 1] = cq * _SA
    origins = np.empty((8, 3))
    axes = np.empty((7, 3))
    t = links[0]
    origins[0] = t[:3, 3]
    axes[0] = t[:3, 2]
    for i in range(1, 7):
        t = t @ links[i]
        origins[i] = t[:3, 3]
        axes[i] = t[:3, 2]
    t = t @ _TOOL
    origins[7] = t[:3, 3]
    return origins, axes, t


def jacobian(origins: np.ndarray, axes: np.ndarray) -> np.ndarray:
    """Geometric Jacobian (6, 7) of the TCP: rows vx, vy, vz, wx, wy, wz."""
    r = origins[7] - origins[:7]
    a = axes
    j = np.empty((6, 7))
    # the cross product a × r, column by column (np.cross costs more than the maths here)
    j[0] = a[:, 1] * r[:, 2] - a[:, 2] * r[:, 1]
    j[1] = a[:, 2] * r[:, 0] - a[:, 0] * r[:, 2]
    j[2] = a[:, 0] * r[:, 1] - a[:, 1] * r[:, 0]
    j[3:] = a.T
    return j


_DIAG6 = np.diag_indices(6)


def dls(j: np.ndarray, twist: np.ndarray, damping: float = 0.02) -> np.ndarray:
    """Joint velocities realising ``twist`` by damped least squares:
    dq = Jᵀ (J Jᵀ + λ² I)⁻¹ v (Wampler 1986); λ keeps it bounded near singularities."""
    jjt = j @ j.T
    jjt[_DIAG6] += damping * damping
    # J Jᵀ + λ² I is symmetric positive definite: Cholesky via LAPACK directly
    # (numpy.linalg.solve's checks cost more than the 6×6 solve itself)
    _, x, info = lapack.dposv(jjt, twist)
    if info != 0:
        x = np.linalg.solve(jjt, twist)
    return j.T @ x


# the arm's body points the envelope keeps above the table: the origins of the
# frames of joint 4 (the elbow) and joint 6 (the wrist), as libfranka's
# ``Frame.Joint4`` / ``Frame.Joint6`` name them (indices into ``forward``'s origins)
BODY_FRAMES = (3, 5)


def point_jacobian(origins: np.ndarray, axes: np.ndarray, k: int) -> np.ndarray:
    """Linear Jacobian (3, 7) of the origin of joint frame ``k`` (0-based):
    joint j < k turns it about axis j; joint k and beyond do not move it."""
    j = np.zeros((3, 7))
    r = origins[k] - origins[:k]
    a = axes[:k]
    # a × r by components, as in ``jacobian``: np.cross was a fifth of a
    # simulated episode's CPU time (it runs for two points on every sample)
    j[0, :k] = a[:, 1] * r[:, 2] - a[:, 2] * r[:, 1]
    j[1, :k] = a[:, 2] * r[:, 0] - a[:, 0] * r[:, 2]
    j[2, :k] = a[:, 0] * r[:, 1] - a[:, 1] * r[:, 0]
    return j


def arm_kinematics(q: np.ndarray) -> ArmKinematics:
    """The envelope's model of the simulated arm at ``q``."""
    origins, axes, tool = forward(np.asarray(q, dtype=np.float64))
    return ArmKinematics(
        tool=tool,
        body=origins[list(BODY_FRAMES)],
        jacobian=jacobian(origins, axes),
        body_jacobians=np.stack([point_jacobian(origins, axes, k) for k in BODY_FRAMES]),
    )
