"""Rotations: quaternions (scalar-last ``[x, y, z, w]``, the station's
convention), extrinsic x-y-z Euler angles (DROID's), rotation vectors."""

from __future__ import annotations

import math

import numpy as np


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """Rotation matrix → unit quaternion [x, y, z, w] with w ≥ 0."""
    m = r
    tr = m[0, 0] + m[1, 1] + m[2, 2]
    if tr > 0:
        s = math.sqrt(tr + 1.0) * 2
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2]) * 2
        q = [0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s]
    elif m[1, 1] > m[2, 2]:
        s = math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2]) * 2
        q = [(m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s]
    else:
        s = math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1]) * 2
        q = [(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s]
    quat = np.array(q)
    quat /= np.linalg.norm(quat)
    return -quat if quat[3] < 0 else quat


def quat_to_matrix(quat: np.ndarray) -> np.ndarray:
    x, y, z, w = (float(v) for v in quat / np.linalg.norm(quat))
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def euler_to_matrix(rpy: np.ndarray) -> np.ndarray:
    """Extrinsic x-y-z Euler angles (roll, pitch, yaw) → rotation matrix (DROID's convention)."""
    r, p, y = (float(v) for v in rpy)
    cr, sr, cp, sp, cy, sy = (
        math.cos(r),
        math.sin(r),
        math.cos(p),
        math.sin(p),
        math.cos(y),
        math.sin(y),
    )
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def matrix_to_euler(r: np.ndarray) -> np.ndarray:
    """Rotation matrix → extrinsic x-y-z Euler angles (roll, pitch, yaw)."""
    sp = -float(r[2, 0])
    sp = max(-1.0, min(1.0, sp))
    pitch = math.asin(sp)
    if abs(sp) < 0.999999:
        roll = math.atan2(r[2, 1], r[2, 2])
        yaw = math.atan2(r[1, 0], r[0, 0])
    else:  # gimbal lock: put everything into yaw
        roll = 0.0
        yaw = math.atan2(-r[0, 1], r[1, 1])
    return np.array([roll, pitch, yaw])


def rotation_error(r_target: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Rotation vector (axis × angle, base frame) that takes ``r`` to ``r_target``."""
    e = r_target @ r.T
    cos = max(-1.0, min(1.0, (e[0, 0] + e[1, 1] + e[2, 2] - 1.0) / 2.0))
    angle = math.acos(cos)
    v = np.array([e[2, 1] - e[1, 2], e[0, 2] - e[2, 0], e[1, 0] - e[0, 1]])
    if angle < 1e-9:
        return 0.5 * v
    s = math.sin(angle)
    if s < 1e-6:  # ~π: pick the axis from the symmetric part
        axis = np.sqrt(np.maximum(np.diag(e) + 1.0, 0.0) / 2.0)
        return axis * angle
    return v * (angle / (2.0 * s))
