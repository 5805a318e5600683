"""The teleop source served as a policy: the station connects to it over the
policy protocol like to any model, so a human reference episode is driven,
timed and recorded exactly like a policy episode."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from station.policy.spec import ActionSpace
from station.teleop.source import TeleopCommand

ACTION_SPACE = ActionSpace.cartesian_velocity


class CommandSource(Protocol):
    def command(self) -> TeleopCommand: ...


class TeleopPolicy:
    """A ``ServedPolicy`` whose every reply is the operator's command now:
    one ``cartesian_velocity`` row (twist in the base frame + gripper)."""

    def __init__(self, source: CommandSource) -> None:
        self.source = source

    def metadata(self) -> dict[str, Any]:
        # openpi dialect: free-form metadata, the action space the one key read;
        # a chunk of one, so the station asks again every control step
        return {"action_space": ACTION_SPACE.value, "action_horizon": 1}

    def new_session(self) -> _TeleopSession:
        return _TeleopSession(self.source)


class _TeleopSession:
    def __init__(self, source: CommandSource) -> None:
        self.source = source

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        row = self.source.command().action_row()
        return {"actions": np.asarray(row, dtype=np.float32)[None, :]}

    def reset(self, message: dict[str, Any]) -> None:
        pass  # the operator is the state
