"""The observations the conformance check sends: recorded once from the
simulated cell (``conformance_record.py`` writes the file, which is
committed) and built for each server's dialect and image size by the
station's own ``build_observation``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from proctor.station import geometry, keys
from proctor.station.drivers.arm.base import ArmState
from proctor.station.drivers.gripper.base import GripperState
from proctor.station.policy.conformance_base import CheckOptions
from proctor.station.policy.observation import build_observation
from proctor.station.policy.spec import ServerInfo

OBSERVATIONS = Path(__file__).with_name("conformance_observations.npz")


@dataclass(frozen=True)
class Recorded:
    arm: ArmState
    gripper: GripperState
    images: dict[str, np.ndarray]
    privileged: dict[str, Any]


@cache
def recorded_observations() -> tuple[tuple[Recorded, ...], str, str]:
    """(observations, prompt, where they came from), from the committed file."""
    with np.load(OBSERVATIONS) as data:
        n = len(data["joint_position"])
        out = []
        for i in range(n):
            cart = data["cartesian_position"][i].astype(np.float64)
            quat = geometry.matrix_to_quat(geometry.euler_to_matrix(cart[3:6]))
            t = float(data["sim_t"][i][0])
            items = data["sim_items"][i]
            out.append(
                Recorded(
                    arm=ArmState(
                        t=t,
                        q=data["joint_position"][i].astype(np.float64),
                        dq=np.zeros(7),
                        ee_pose=np.concatenate([cart[:3], quat]),
                    ),
                    gripper=GripperState(
                        t=t,
                        target=float(data["gripper_position"][i][0]),
                        position=float(data["gripper_position"][i][0]),
                        object_detected=False,
                        activated=True,
                    ),
                    images={
                        keys.CAMERA_EXTERIOR: data["exterior"][i],
                        keys.CAMERA_WRIST: data["wrist"][i],
                    },
                    privileged={
                        keys.SIM_ITEMS: items,
                        keys.SIM_SOURCE_BIN: data["sim_source_bin"][i],
                        keys.SIM_TARGET_BIN: data["sim_target_bin"][i],
                        keys.SIM_BIN_HEIGHT: data["sim_bin_height"][i],
                        keys.SIM_SEED: data["sim_seed"][i],
                        keys.SIM_TIME: data["sim_t"][i],
                    },
                )
            )
        return tuple(out), str(data["prompt"]), str(data["source"])


def observations_for(info: ServerInfo, options: CheckOptions) -> list[dict[str, Any]]:
    recorded, prompt, _ = recorded_observations()
    chosen = recorded[: options.observations] if options.observations else recorded
    return [
        build_observation(
            info,
            arm=r.arm,
            gripper=r.gripper,
            images=r.images,
            prompt=options.prompt or prompt,
            privileged=r.privileged if options.sim_keys else None,
        )
        for r in chosen
    ]
