"""The simulated cell's gripper (2F-85-like), behind the station's ``Gripper`` interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from station.drivers.gripper.base import (
    GRIPPERS,
    Gripper,
    GripperCommand,
    GripperConfig,
    GripperFault,
    GripperState,
)
from station.sim.world import SimWorld


@dataclass(frozen=True)
class SimGripperConfig(GripperConfig):
    driver: ClassVar[str] = "sim"
    # the 2F-85 takes its position register in 1/255 steps
    quantisation: int = 255


@GRIPPERS.register("sim")
class SimGripper(Gripper):
    def __init__(self, world: SimWorld, config: SimGripperConfig | None = None) -> None:
        self.world = world
        self.config = config or SimGripperConfig()
        self._connected = False

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    @property
    def is_connected(self) -> bool:
        return self._connected

    def activate(self) -> None:
        if not self._connected:
            raise GripperFault("simulated gripper: not connected")
        with self.world.lock:
            self.world.grip_activated = True
            self.world.grip_fault = None

    def inject_fault(self, text: str) -> None:
        """Make the gripper report a fault (tests and fault drills)."""
        with self.world.lock:
            self.world.sync()
            self.world.grip_fault = text

    def send(self, command: GripperCommand) -> GripperCommand:
        if not self._connected:
            raise GripperFault("simulated gripper: not connected")
        w = self.world
        if w.grip_fault:
            raise GripperFault(w.grip_fault)
        if not w.grip_activated:
            raise GripperFault("gripper is not activated")
        n = self.config.quantisation
        sent = GripperCommand(
            position=round(command.position * n) / n,
            speed=round(command.speed * n) / n,
            force=round(command.force * n) / n,
        )
        w.command_gripper(sent.position, sent.speed, sent.force)
        return sent

    def read_state(self) -> GripperState:
        if not self._connected:
            raise GripperFault("simulated gripper: not connected")
        w = self.world
        with w.lock:
            w.sync()
            return GripperState(
                t=w.t,
                target=w.grip_target,
                position=w.grip,
                object_detected=w.held is not None,
                activated=w.grip_activated,
                fault=w.grip_fault,
            )
