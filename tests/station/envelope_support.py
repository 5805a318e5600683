"""A hostile policy on the openpi wire whose rows attack the envelope in each
action space: out of the box, down through the table, jumps, flips and NaN."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from proctor.core.domain import EndpointDialect
from proctor.policywire.serving import dialects
from proctor.policywire.wire import keys
from proctor.station.drivers.arm.base import ArmConfig

Q_MIN, Q_MAX = np.array(ArmConfig.q_min), np.array(ArmConfig.q_max)

H = 8  # rows per chunk (the station plays open_loop_steps = 8 of them)


# the attack, by policy call (a chunk of H rows each): hold, outwards (and up),
# downwards, jumps, flips, outwards the other way, downwards, and NaN at the end
SCHEDULE = (
    ["hold"]
    + ["out"] * 5
    + ["down"] * 4
    + ["jump"] * 4
    + ["flip"] * 4
    + ["back"] * 5
    + ["down"] * 8
    + ["nan"]
)


def _attack(space: str, phase: str, obs: dict[str, Any]) -> np.ndarray:
    """One chunk (H, width) of the hostile policy in ``space``."""
    q = np.asarray(obs[keys.OBS_JOINT_POSITION], dtype=np.float64)
    pose = np.asarray(obs[keys.OBS_CARTESIAN_POSITION], dtype=np.float64)
    rows = []
    for i in range(H):
        sign = 1.0 if i % 2 == 0 else -1.0
        rows.append(ATTACK_ROWS[space](phase, i, sign, q, pose))
    chunk = np.array(rows, dtype=np.float64)
    if phase == "nan":
        chunk[:, 0] = np.nan
    return chunk


def _cartesian_position(phase: str, i: int, sign: float, q: np.ndarray, pose: np.ndarray):
    down = [math.pi, 0.0, 0.0]
    table = {
        "hold": [*pose, 0.0],
        "out": [1.4, 0.9, 1.2, *down, 1.0],  # far in front, to the left, above the cell
        "down": [pose[0], pose[1], -0.5, *down, 1.0],  # straight through the table
        "jump": [0.55 + 0.5 * sign, 0.6 * sign, 0.3 - 0.4 * sign, *down, 0.0],
        "flip": [0.5, 0.0, 0.3, 0.0 if sign > 0 else math.pi, math.pi / 2 * sign, 0.0, 0.0],
        "back": [-0.3, -0.9, 1.2, *down, 1.0],  # behind the base, to the right, above
        "nan": [*pose, 0.0],
    }
    return table[phase]


def _cartesian_velocity(phase: str, i: int, sign: float, q: np.ndarray, pose: np.ndarray):
    table = {
        "hold": [0.0] * 7,
        "out": [3.0, 3.0, 3.0, 0.0, 0.0, 0.0, 1.0],
        "down": [0.0, 0.0, -3.0, 0.0, 0.0, 0.0, 1.0],
        "jump": [3.0 * sign, -3.0 * sign, -3.0, 0.0, 0.0, 2.5 * sign, 0.0],
        "flip": [0.0, 0.0, 0.0, 2.5 * sign, 2.5, 0.0, 0.0],
        "back": [-3.0, -3.0, 3.0, 0.0, 0.0, 0.0, 1.0],
        "nan": [0.0] * 7,
    }
    return table[phase]


def _joint_position(phase: str, i: int, sign: float, q: np.ndarray, pose: np.ndarray):
    flip = q.copy()
    flip[5], flip[6] = (Q_MAX[5], Q_MAX[6]) if sign > 0 else (Q_MIN[5], Q_MIN[6])
    stoop = q.copy()
    stoop[1], stoop[3] = Q_MAX[1], Q_MAX[3]  # shoulder forward, elbow open: down
    table = {
        "hold": q,
        "out": Q_MAX,  # every joint at the end of its range
        "down": stoop,
        "jump": Q_MAX if sign > 0 else Q_MIN,
        "flip": flip,
        "back": Q_MIN,
        "nan": q,
    }
    return [*table[phase], 0.0]


def _joint_velocity(phase: str, i: int, sign: float, q: np.ndarray, pose: np.ndarray):
    table = {
        "hold": np.zeros(7),
        "out": np.full(7, 3.0),
        "down": np.array([0.0, 3.0, 0.0, 3.0, 0.0, 0.0, 0.0]),
        "jump": np.full(7, 3.0 * sign),
        "flip": np.array([0.0, 0.0, 0.0, 0.0, 5.0 * sign, 4.0, 5.0 * sign]),
        "back": np.full(7, -3.0),
        "nan": np.zeros(7),
    }
    return [*table[phase], 0.0]


ATTACK_ROWS = {
    "cartesian_position": _cartesian_position,
    "cartesian_velocity": _cartesian_velocity,
    "joint_position": _joint_position,
    "joint_velocity": _joint_velocity,
}


class HostilePolicy:
    """A ``ServedPolicy`` on the openpi wire: metadata names the action space."""

    def __init__(self, space: str, schedule: list[str] = SCHEDULE) -> None:
        self.space = space
        self.schedule = schedule

    def metadata(self) -> dict[str, Any]:
        return dialects.get(EndpointDialect.openpi).served_metadata(
            {"action_space": self.space}, action_horizon=H
        )

    def new_session(self) -> _HostileSession:
        return _HostileSession(self)


class _HostileSession:
    def __init__(self, policy: HostilePolicy) -> None:
        self.policy = policy
        self.calls = 0

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        schedule = self.policy.schedule
        phase = schedule[min(self.calls, len(schedule) - 1)]
        self.calls += 1
        return {"actions": _attack(self.policy.space, phase, observation)}

    def reset(self, message: dict[str, Any]) -> None:
        self.calls = 0
