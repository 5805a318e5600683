"""The simulated cell's gripper (a Robotiq 2F-85), behind the station's ``Gripper`` interface.

The fingers' physics lives in the world (``SimWorld``: finite finger speed,
the squeeze on an item, the instant it comes free). This driver reports them
the way the real driver (``proctor.station.drivers.gripper.robotiq``) sees a 2F-85,
which is not the truth:

* **polled status** — the driver reads the status registers at ≈ 50 Hz
  (``poll_hz``; the poller thread wakes with a little scheduling jitter),
  and ``read_state`` returns the latest status that has *arrived*: between
  one and two poll periods old at worst;
* **late** — the gripper answers a status request ≈ 0.7 ms after it starts
  (8 bytes at 115200 baud), and the reply reaches the driver a few
  milliseconds later (11 bytes on the wire plus the USB-serial adapter's
  latency timer): ``reply_latency_s``, drawn per poll;
* **8-bit position** — gPO is a byte: the position moves in steps of 1/255
  (≈ 0.33 mm of finger travel);
* **object flag after a stall** — gOBJ reports an object only once the
  fingers have stopped on it and the firmware has seen the motor stall for
  a moment (``object_detect_s``), and it drops the moment a new goal makes
  the fingers move, or the item slips out.

Everything is drawn from a generator seeded by the episode's sim seed, so an
episode's reported signals are as reproducible as its physics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from proctor.station.drivers.gripper.base import (
    GRIPPERS,
    Gripper,
    GripperCommand,
    GripperConfig,
    GripperFault,
    GripperHalted,
    GripperState,
)
from proctor.station.sim.world import SimWorld

# the gripper starts its answer once the 8-byte request has arrived (115200 baud)
_ANSWER_S = 8 * 10 / 115200


@dataclass(frozen=True)
class SimGripperConfig(GripperConfig):
    driver: ClassVar[str] = "sim"
    # the 2F-85 takes and reports positions in 1/255 steps (rPR, gPO are bytes)
    quantisation: int = 255
    # the real driver's status poll rate, and how late its thread may wake (s)
    poll_hz: float = 50.0
    poll_jitter_s: float = 0.002
    # request → reply parsed: ≈ 2.5 ms on the wire plus the adapter's latency timer
    reply_latency_s: tuple[float, float] = (0.003, 0.008)
    # how long the fingers must sit stalled before gOBJ reports an object
    object_detect_s: float = 0.03


@dataclass(frozen=True)
class _Status:
    t: float  # when the reply reached the driver (station clock)
    position: float  # quantised
    object_detected: bool


@GRIPPERS.register("sim")
class SimGripper(Gripper[SimGripperConfig]):
    def __init__(self, world: SimWorld, config: SimGripperConfig | None = None) -> None:
        self.world = world
        self.config = config or SimGripperConfig()
        self._connected = False
        self._rng = np.random.default_rng(0)
        self._status: _Status | None = None
        self._nominal: float | None = None  # the poller's schedule: one period apart
        self._next_request = 0.0  # … and when the thread actually sends (a little late)
        self._next_latency = 0.0
        # activations so far: on a real 2F-85 each one sweeps the fingers
        self.activations = 0
        self._halted = False
        world.on_reset.append(self._reseed)

    def _reseed(self) -> None:
        """A new episode: its own draws, from its sim seed (the poll phase runs on)."""
        seed = self.world.seed if self.world.seed is not None else 0
        self._rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x2F85])

    def connect(self) -> None:
        w = self.world
        with w.lock:
            w.sync()
            # the real driver reads the status once while connecting
            self._status = self._sample(w.t, w.t)
            self._nominal = w.t + 1.0 / self.config.poll_hz
            self._schedule()
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
        self.activations += 1

    def needs_activation(self) -> bool:
        # every simulated fault stands for a major one: only activation clears it
        with self.world.lock:
            return not self.world.grip_activated or bool(self.world.grip_fault)

    def inject_fault(self, text: str) -> None:
        """Make the gripper report a fault (tests and fault drills)."""
        with self.world.lock:
            self.world.sync()
            self.world.grip_fault = text

    def halt(self) -> None:
        with self.world.lock:
            self._halted = True
            self.world.sync()
            # the fingers stop where they are (a held item stays held)
            self.world.grip_target = self.world.grip

    def resume(self) -> None:
        self._halted = False

    @property
    def halted(self) -> bool:
        return self._halted

    def send(self, command: GripperCommand) -> GripperCommand:
        if not self._connected:
            raise GripperFault("simulated gripper: not connected")
        if self._halted:
            raise GripperHalted("gripper halted by a safety stop")
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

    # -- the polled status ----------------------------------------------------
    def _schedule(self) -> None:
        """The next poll: a thread wakes late, never early; the reply takes its time."""
        c = self.config
        assert self._nominal is not None
        self._next_request = self._nominal + float(self._rng.uniform(0.0, c.poll_jitter_s))
        self._next_latency = float(self._rng.uniform(*c.reply_latency_s))

    def _sample(self, t_request: float, t_reply: float) -> _Status:
        w = self.world
        t_answer = t_request + _ANSWER_S
        n = self.config.quantisation
        return _Status(
            t=t_reply,
            position=round(w.finger_position_at(t_answer) * n) / n,
            object_detected=w.stalled_on_object(t_answer, self.config.object_detect_s),
        )

    def _poll_until(self, now: float) -> None:
        """Every poll whose reply has arrived by ``now``; only the latest is read."""
        if self._nominal is None:
            return
        period = 1.0 / self.config.poll_hz
        latest: tuple[float, float] | None = None
        while self._next_request + self._next_latency <= now:
            latest = (self._next_request, self._next_request + self._next_latency)
            self._nominal += period
            self._schedule()
        if latest is not None:
            self._status = self._sample(*latest)

    def read_state(self) -> GripperState:
        if not self._connected:
            raise GripperFault("simulated gripper: not connected")
        w = self.world
        with w.lock:
            w.sync()
            self._poll_until(w.t)
            status = self._status
            assert status is not None  # read on connect
            return GripperState(
                t=status.t,
                target=w.grip_target,
                position=status.position,
                object_detected=status.object_detected,
                activated=w.grip_activated,
                fault=w.grip_fault,
            )
