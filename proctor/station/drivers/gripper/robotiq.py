"""Robotiq 2F-85 over Modbus RTU (pymodbus).

One bus master, two users: a poller thread reads the status registers at a
steady rate (so ``read_state`` never blocks the control loop and the gripper
never sees a silent line), and ``send``/``activate`` write the command
registers from the caller's thread. A lock serialises the two on the wire.

A line that stops answering is a fault: after ``stale_after_s`` without a
good status frame ``read_state`` and ``send`` raise ``GripperFault`` with the
library's error text. Each request is retried a bounded number of times by
pymodbus; the driver counts every frame it puts on the wire.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pymodbus import FramerType, ModbusException
from pymodbus.client import ModbusSerialClient, ModbusTcpClient

from proctor.station.clock import Clock, MonotonicClock
from proctor.station.drivers.gripper import robotiq_registers as regs
from proctor.station.drivers.gripper.base import (
    GRIPPERS,
    Gripper,
    GripperCommand,
    GripperConfig,
    GripperFault,
    GripperState,
)
from proctor.station.drivers.gripper.robotiq_registers import CommandRegisters, StatusRegisters

log = logging.getLogger(__name__)

TCP_PREFIX = "tcp://"


@dataclass(frozen=True)
class RobotiqGripperConfig(GripperConfig):
    driver: ClassVar[str] = "robotiq_2f85"
    # the RS-485 adapter (a /dev/serial/by-id/… path on the station, so a
    # replugged adapter keeps its name), or tcp://HOST:PORT for RTU framing over
    # TCP (a serial-to-Ethernet gateway, or the simulated gripper)
    port: str = "/dev/ttyUSB0"
    # the 2F-85's factory slave id; only changed with Robotiq's configuration tool
    device_id: int = regs.DEVICE_ID
    # fixed by the gripper: 115200 baud, 8 data bits, no parity, 1 stop bit
    baudrate: int = regs.BAUDRATE
    # a 3-register exchange is 19 bytes ≈ 1.7 ms at 115200 baud; a USB-serial
    # adapter adds up to its 16 ms latency timer, so 50 ms only expires on a
    # frame that is really lost
    timeout_s: float = 0.05
    # resends per request, because the RS-485 pair runs alongside the arm's
    # motor cables and the odd frame arrives corrupted; bounded so a dead line
    # is reported within (retries + 1) × timeout_s = 150 ms
    retries: int = 2
    # status polls per second: the gripper raises gFLT 0x09 after 1 s without
    # traffic, the fingers move ≤ 150 mm/s (≈ 3 mm between polls at 50 Hz),
    # and 50 × 1.7 ms leaves the bus > 90 % free for commands
    poll_hz: float = 50.0
    # with no good status for this long the driver stops trusting its picture
    # of the fingers and reports a fault (≈ 10 missed polls)
    stale_after_s: float = 0.2
    # the manual's activation sweeps the fingers fully open and closed, which
    # takes a few seconds on the real gripper; twice that before giving up
    activation_timeout_s: float = 10.0


@dataclass
class BusStats:
    """What went over the wire: for diagnostics and the retry tests."""

    frames_sent: int = 0
    frames_received: int = 0
    requests: int = 0
    failures: int = 0
    retries: int = 0
    last_error: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def trace(self, sending: bool, data: bytes) -> bytes:
        with self._lock:
            if sending:
                self.frames_sent += 1
            elif data:
                self.frames_received += 1
        return data


def quantise(command: GripperCommand) -> tuple[CommandRegisters, GripperCommand]:
    """The registers for ``command`` and the command they really ask for
    (each field is a byte: 0..255)."""
    position = round(command.position * regs.POSITION_MAX)
    speed = round(command.speed * regs.POSITION_MAX)
    force = round(command.force * regs.POSITION_MAX)
    sent = GripperCommand(
        position=position / regs.POSITION_MAX,
        speed=speed / regs.POSITION_MAX,
        force=force / regs.POSITION_MAX,
    )
    return regs.move(position, speed, force), sent


@GRIPPERS.register("robotiq_2f85")
class RobotiqGripper(Gripper[RobotiqGripperConfig]):
    config_class: ClassVar[type[RobotiqGripperConfig]] = RobotiqGripperConfig

    def __init__(self, config: RobotiqGripperConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or MonotonicClock()
        self.stats = BusStats()
        self._client: ModbusSerialClient | ModbusTcpClient | None = None
        self._bus = threading.Lock()  # one master on the line: poller and writer take turns
        self._state_lock = threading.Lock()
        self._status: StatusRegisters | None = None
        self._status_t: float | None = None
        self._connected_t = 0.0
        self._target = 0.0
        self._last_written: CommandRegisters | None = None
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------
    def _make_client(self) -> ModbusSerialClient | ModbusTcpClient:
        c = self.config
        if c.port.startswith(TCP_PREFIX):
            host, _, port = c.port[len(TCP_PREFIX) :].rpartition(":")
            if not host or not port.isdigit():
                raise GripperFault(f"gripper port {c.port!r} is not tcp://HOST:PORT")
            return ModbusTcpClient(
                host,
                port=int(port),
                framer=FramerType.RTU,
                timeout=c.timeout_s,
                retries=c.retries,
                trace_packet=self.stats.trace,
            )
        return ModbusSerialClient(
            c.port,
            framer=FramerType.RTU,
            baudrate=c.baudrate,
            bytesize=8,
            parity="N",
            stopbits=1,
            timeout=c.timeout_s,
            retries=c.retries,
            trace_packet=self.stats.trace,
        )

    def connect(self) -> None:
        if self._client is not None:
            return
        port = self.config.port
        if not port.startswith(TCP_PREFIX) and not Path(port).exists():
            raise GripperFault(
                f"cannot open the gripper line {port}: no such device "
                "(unplugged? check /dev/serial/by-id/)"
            )
        client = self._make_client()
        if not client.connect():
            client.close()
            raise GripperFault(f"cannot open the gripper line {self.config.port}")
        self._client = client
        try:
            status = self._read_status()  # the device must answer before we claim a link
        except GripperFault:
            self._client = None
            client.close()
            raise
        self._connected_t = self.clock.now()
        self._publish(status)
        self._target = status.gpr / regs.POSITION_MAX
        self._stop.clear()
        self._poller = threading.Thread(target=self._poll_loop, name="robotiq-poll", daemon=True)
        self._poller.start()

    def disconnect(self) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join(timeout=2.0)
            if self._poller.is_alive():
                log.error("gripper poller did not stop within 2 s")
            self._poller = None
        if self._client is not None:
            with self._bus:
                self._client.close()
            self._client = None
        self._last_written = None

    @property
    def is_connected(self) -> bool:
        return self._client is not None

    # -- wire --------------------------------------------------------------
    def _require_client(self) -> ModbusSerialClient | ModbusTcpClient:
        if self._client is None:
            raise GripperFault("gripper is not connected")
        return self._client

    def _failed(self, what: str, detail: str) -> GripperFault:
        text = (
            f"gripper {what} failed on {self.config.port} (device {self.config.device_id}) "
            f"after {self.config.retries} retries: {detail}"
        )
        with self.stats._lock:
            self.stats.failures += 1
            self.stats.last_error = text
        return GripperFault(text)

    def _read_status(self) -> StatusRegisters:
        client = self._require_client()
        with self._bus:
            self.stats.requests += 1
            try:
                rr = client.read_input_registers(
                    regs.REG_STATUS, count=regs.N_REGISTERS, device_id=self.config.device_id
                )
            except ModbusException as exc:
                raise self._failed("status read", str(exc)) from exc
        if rr.isError():
            raise self._failed("status read", f"exception response {rr}")
        self.stats.retries += getattr(rr, "retries", 0)
        return StatusRegisters.decode(list(rr.registers))

    def _write(self, command: CommandRegisters) -> None:
        client = self._require_client()
        with self._bus:
            self.stats.requests += 1
            try:
                rr = client.write_registers(
                    regs.REG_COMMAND, command.encode(), device_id=self.config.device_id
                )
            except ModbusException as exc:
                raise self._failed("command write", str(exc)) from exc
        if rr.isError():
            raise self._failed("command write", f"exception response {rr}")
        self.stats.retries += getattr(rr, "retries", 0)
        self._last_written = command

    def _publish(self, status: StatusRegisters) -> None:
        with self._state_lock:
            self._status = status
            self._status_t = self.clock.now()

    def _poll_loop(self) -> None:
        period = 1.0 / self.config.poll_hz
        next_t = self.clock.now() + period  # connect() has just read the status
        while not self._stop.wait(max(0.0, next_t - self.clock.now())):
            try:
                self._publish(self._read_status())
            except GripperFault as exc:
                # read_state reports it once the picture is stale; logging every
                # miss at 50 Hz would drown the log
                log.debug("%s", exc)
            except Exception:
                log.exception("gripper poller: unexpected error")
            next_t += period
            now = self.clock.now()
            if next_t < now:  # fell behind (a long write): skip, don't burst
                next_t = now

    # -- the Gripper role ----------------------------------------------------
    def _fresh_status(self) -> tuple[StatusRegisters, float]:
        with self._state_lock:
            status, t = self._status, self._status_t
        if status is None or t is None:
            raise GripperFault("gripper is not connected")
        age = self.clock.now() - t
        if age > self.config.stale_after_s:
            raise GripperFault(
                f"gripper on {self.config.port} silent for {age:.2f} s "
                f"(limit {self.config.stale_after_s} s): {self.stats.last_error or 'no answer'}"
            )
        return status, t

    def read_state(self) -> GripperState:
        status, t = self._fresh_status()
        return GripperState(
            t=t,
            target=self._target,
            position=status.gpo / regs.POSITION_MAX,
            object_detected=status.object_detected,
            activated=status.ready,
            fault=status.fault,
            current_ma=status.current_ma,
        )

    def status_registers(self) -> StatusRegisters:
        """The raw status as last polled (pre-flight and diagnostics)."""
        return self._fresh_status()[0]

    def read_status_now(self) -> StatusRegisters:
        """One status exchange on the wire, now, bypassing the poller."""
        status = self._read_status()
        self._publish(status)
        return status

    def activate(self) -> None:
        """Reset, then activate, then wait for gSTA = 3 (manual §4.5)."""
        self._write(regs.RESET)
        self._write(regs.ACTIVATE)
        deadline = self.clock.now() + self.config.activation_timeout_s
        period = 1.0 / self.config.poll_hz
        status = self._read_status()
        while not status.ready:
            if status.gflt in regs.MAJOR_FAULTS:
                raise GripperFault(f"gripper activation failed: {status.fault}")
            if self.clock.now() > deadline:
                raise GripperFault(
                    f"gripper activation did not complete within "
                    f"{self.config.activation_timeout_s} s (gSTA={int(status.gsta)}, "
                    f"gFLT=0x{status.gflt:02X})"
                )
            self._stop.wait(period)
            status = self._read_status()
        self._publish(status)
        self._target = 0.0
        self._last_written = None

    def send(self, command: GripperCommand) -> GripperCommand:
        status, _ = self._fresh_status()
        if status.gflt in regs.MAJOR_FAULTS:
            raise GripperFault(f"gripper refuses to move: {status.fault}; reset and activate")
        if not status.ready:
            raise GripperFault("gripper is not activated")
        registers, sent = quantise(command)
        # the bus is shared with the poller: an unchanged command is already in force
        if registers != self._last_written:
            self._write(registers)
        self._target = sent.position
        return sent
