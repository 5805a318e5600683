"""The simulated cell's arm, behind the station's ``Arm`` interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from station.drivers.arm.base import (
    ARMS,
    Arm,
    ArmCommand,
    ArmCommandKind,
    ArmConfig,
    ArmFault,
    ArmState,
)
from station.sim.world import SimWorld


@dataclass(frozen=True)
class SimArmConfig(ArmConfig):
    driver: ClassVar[str] = "sim"
    # homing gives up after this much clock time (the real arm would raise too)
    home_timeout_s: float = 15.0
    home_tolerance_rad: float = 0.005


@ARMS.register("sim")
class SimArm(Arm):
    def __init__(self, world: SimWorld, config: SimArmConfig | None = None) -> None:
        self.world = world
        self.config = config or SimArmConfig()
        self._connected = False

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    @property
    def is_connected(self) -> bool:
        return self._connected

    def _need(self) -> None:
        if not self._connected:
            raise ArmFault("simulated arm: not connected")

    def read_state(self) -> ArmState:
        self._need()
        w = self.world
        with w.lock:
            w.sync()
            return ArmState(t=w.t, q=w.q.copy(), dq=w.dq.copy(), ee_pose=w.ee_pose(), error=w.error)

    def send(self, command: ArmCommand) -> ArmCommand:
        self._need()
        return self.world.command_arm(command)

    def stop(self) -> None:
        if self._connected:
            self.world.stop_arm()

    def recover(self) -> None:
        self._need()
        self.world.recover()

    def home(self) -> None:
        """Drive to ``home_q`` on the clock (a virtual clock is advanced by this call)."""
        self._need()
        w = self.world
        target = np.array(self.config.home_q)
        self.send(ArmCommand(ArmCommandKind.joint_position, target))
        clock = w.clock
        deadline = clock.now() + self.config.home_timeout_s
        while True:
            with w.lock:
                w.sync()
                if w.error is not None:
                    raise ArmFault(f"homing failed: {w.error}")
                err = float(np.max(np.abs(w.q - target)))
                moving = bool(np.any(np.abs(w.dq) > 1e-3))
            if err < self.config.home_tolerance_rad and not moving:
                return
            if clock.now() > deadline:
                raise ArmFault(f"homing did not finish in {self.config.home_timeout_s:g} s")
            clock.sleep_until(clock.now() + w.dt)
