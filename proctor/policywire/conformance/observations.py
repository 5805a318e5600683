"""The observations the conformance check sends: recorded once from the
simulated cell (``proctor/station/tools/record_conformance.py`` writes the
file, which is
committed) and built for each server's dialect and image size by the
station's own ``build_observation``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from proctor.core import geometry
from proctor.core.recording import keys
from proctor.policywire.conformance.state import CheckOptions
from proctor.policywire.observation import build_observation
from proctor.policywire.wire import keys as wire_keys
from proctor.policywire.wire.proprio import Proprio
from proctor.policywire.wire.spec import ServerInfo

OBSERVATIONS = Path(__file__).with_name("observations.npz")


@dataclass(frozen=True)
class Recorded:
    proprio: Proprio
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
            items = data["sim_items"][i]
            out.append(
                Recorded(
                    proprio=Proprio(
                        q=data["joint_position"][i].astype(np.float64),
                        dq=np.zeros(7),
                        ee_pose=np.concatenate([cart[:3], quat]),
                        gripper=float(data["gripper_position"][i][0]),
                    ),
                    images={
                        keys.CAMERA_EXTERIOR: data["exterior"][i],
                        keys.CAMERA_WRIST: data["wrist"][i],
                    },
                    privileged={
                        wire_keys.SIM_ITEMS: items,
                        wire_keys.SIM_SOURCE_BIN: data["sim_source_bin"][i],
                        wire_keys.SIM_TARGET_BIN: data["sim_target_bin"][i],
                        wire_keys.SIM_BIN_HEIGHT: data["sim_bin_height"][i],
                        wire_keys.SIM_SEED: data["sim_seed"][i],
                        wire_keys.SIM_TIME: data["sim_t"][i],
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
            proprio=r.proprio,
            images=r.images,
            prompt=options.prompt or prompt,
            privileged=r.privileged if options.sim_keys else None,
        )
        for r in chosen
    ]
