"""The teleop source served as a policy: the station connects to it over the
policy wire like to any model, so a human reference episode is driven,
timed and recorded exactly like a policy episode."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from proctor.policywire.wire.spec import ActionSpace
from proctor.station.teleop.source import TeleopCommand

ACTION_SPACE = ActionSpace.cartesian_velocity


class CommandSource(Protocol):
    def command(self) -> TeleopCommand: ...


# Rows per reply. The station executes a chunk open-loop and, for velocity
# actions, holds the arm still for the one control step in which it asks for
# the next chunk; a chunk of 3 steps (200 ms at 15 Hz) keeps that pause to a
# quarter of the time while the operator's input lags by at most 200 ms.
CHUNK_STEPS = 3


class TeleopPolicy:
    """A ``ServedPolicy`` whose every reply is the operator's command now,
    repeated over a short chunk: ``cartesian_velocity`` rows (twist in the
    base frame + gripper)."""

    def __init__(self, source: CommandSource, chunk_steps: int = CHUNK_STEPS) -> None:
        if chunk_steps < 1:
            raise ValueError("chunk_steps must be at least 1")
        self.source = source
        self.chunk_steps = chunk_steps

    def metadata(self) -> dict[str, Any]:
        # openpi dialect: free-form metadata, the action space the one key read
        return {"action_space": ACTION_SPACE.value, "action_horizon": self.chunk_steps}

    def new_session(self) -> _TeleopSession:
        return _TeleopSession(self.source, self.chunk_steps)


class _TeleopSession:
    def __init__(self, source: CommandSource, chunk_steps: int) -> None:
        self.source = source
        self.chunk_steps = chunk_steps

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        row = self.source.command().action_row()
        return {"actions": np.tile(np.asarray(row, dtype=np.float32), (self.chunk_steps, 1))}

    def reset(self, message: dict[str, Any]) -> None:
        pass  # the operator is the state
