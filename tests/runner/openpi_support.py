"""What the station sends in the openpi dialect, for tests of servers that read it."""

from __future__ import annotations

import numpy as np


def openpi_observation(seed: int = 0) -> dict[str, object]:
    """What the station sends in the openpi dialect (its DROID keys)."""
    rng = np.random.default_rng(seed)
    return {
        "observation/exterior_image_1_left": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8),
        "observation/wrist_image_left": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8),
        "observation/joint_position": rng.normal(size=7).astype(np.float32),
        "observation/cartesian_position": np.zeros(6, np.float32),
        "observation/gripper_position": np.array([0.5], np.float32),
        "prompt": "put the items into the target bin",
    }
