"""The simulated cell's ``Scene``: what only a simulator can do for the runner."""

from __future__ import annotations

from typing import Any

import numpy as np

from proctor.core.work import Work
from proctor.policywire.wire import keys
from proctor.station.sim.render import RENDERERS
from proctor.station.sim.world import SimWorld


class SimScene:
    def __init__(self, world: SimWorld) -> None:
        self.world = world

    def prepare(self, work: Work) -> None:
        seed = work.sim_seed if work.sim_seed is not None else 0
        self.world.reset_scene(work.object_name, work.items, work.tote_side, work.camera_side, seed)

    def start_episode(self, t_start: float) -> None:
        with self.world.lock:
            self.world.t_episode = t_start

    def privileged_observation(self) -> dict[str, Any]:
        w = self.world
        with w.lock:
            w.sync()
            t0 = w.t_episode if w.t_episode is not None else w.t
            return {
                keys.SIM_ITEMS: w.items_array(),
                keys.SIM_SOURCE_BIN: w.layout.source.as_array(),
                keys.SIM_TARGET_BIN: w.layout.target.as_array(),
                keys.SIM_BIN_HEIGHT: np.array([w.layout.target.height]),
                keys.SIM_SEED: np.array([w.seed if w.seed is not None else 0], dtype=np.int64),
                keys.SIM_TIME: np.array([w.t - t0]),
            }

    def still(self, camera: str, width: int, height: int) -> np.ndarray:
        """The cell as it stands now, rendered for ``camera`` (H×W×3 uint8):
        right after ``prepare`` and homing, the reference photo of the initial scene."""
        with self.world.lock:
            self.world.sync()
            snap = self.world.snapshot(0)
        return RENDERERS[camera](snap, width, height)

    def all_handled(self) -> bool:
        return self.world.all_handled()

    def ground_truth(self) -> dict[str, Any]:
        return self.world.ground_truth()
