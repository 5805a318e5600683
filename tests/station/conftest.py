"""Fixtures for the station's tests: simulated cells and the observation a
policy is sent. The policy servers, subprocesses and the committed database
they share with the protocol layer's tests are in ``tests/policy_servers.py``
(a plugin for the whole suite); ``ROOT``, ``PROCTOR`` and ``clean_env`` are
named here too for the modules that import them from here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy.orm import sessionmaker

from proctor.core.db.engine import ProctorSession
from proctor.station.config import StationConfig, load_station_config
from tests.policy_servers import PROCTOR as PROCTOR
from tests.policy_servers import ROOT as ROOT
from tests.policy_servers import clean_env as clean_env


def sim_config(**overrides: Any) -> StationConfig:
    """Small and quick: 160×120 cameras at 10 fps unless a test asks otherwise."""
    data: dict[str, Any] = {
        "cameras": {
            "exterior": {"width": 160, "height": 120, "fps": 10},
            "wrist": {"width": 160, "height": 120, "fps": 10},
        },
        "policy_timeout_s": 5.0,
    }
    data.update(overrides)
    return load_station_config(None, **data)


@contextmanager
def sim_runner(
    sessions: sessionmaker[ProctorSession], store: Any, tmp: Path, config: StationConfig
) -> Iterator[Any]:
    from proctor.station.episode_runner import EpisodeRunner
    from proctor.station.profiles import build_cell

    runner = EpisodeRunner(
        build_cell("sim", config),
        config=config,
        sessions=sessions,
        store=store,
        spool_root=tmp / "spool",
    )
    runner.open()
    try:
        yield runner
    finally:
        runner.close()


def posed_observation(
    info: Any,
    *,
    xyz: tuple[float, float, float] = (0.45, 0.05, 0.35),
    yaw: float = 0.0,
    grip: float = 0.1,
    image_hw: tuple[int, int] = (120, 160),
    prompt: str = "put the towels in the bin",
    privileged: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One observation in ``info``'s dialect, built by the station's own
    ``build_observation``: the arm at ``xyz`` pointing down (roll π) turned by
    ``yaw``, the gripper at ``grip``, both cameras a flat grey frame."""
    import numpy as np

    from proctor.core import geometry
    from proctor.core.recording import keys
    from proctor.policywire.observation import build_observation
    from proctor.policywire.wire.proprio import Proprio

    rot = geometry.euler_to_matrix(np.array([np.pi, 0.0, yaw]))
    proprio = Proprio(
        q=np.zeros(7),
        dq=np.zeros(7),
        ee_pose=np.concatenate([xyz, geometry.matrix_to_quat(rot)]),
        gripper=grip,
    )
    image = np.full((*image_hw, 3), 90, np.uint8)
    return build_observation(
        info,
        proprio=proprio,
        images={keys.CAMERA_EXTERIOR: image, keys.CAMERA_WRIST: image},
        prompt=prompt,
        privileged=privileged,
    )
