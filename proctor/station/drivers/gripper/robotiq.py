"""Robotiq 2F-85 over Modbus RTU (pymodbus).

One bus master, one thread on the wire: the poller thread reads the status
registers at a steady rate (so ``read_state`` never blocks the control loop
and the gripper never sees a silent line) and writes the commands ``send``
leaves in a single-slot mailbox (the latest command wins; one not yet on the
wire is simply replaced). ``send`` only validates and posts, so the control
thread never waits on the bus, however slow the line. ``activate`` is an
operator's action and writes from the caller's thread; a lock serialises it
with the poller. ``ensure_activated`` activates only a gripper that needs it
(gSTA ≠ 3, or a major fault): activation sweeps the fingers fully open and
closed, which must never happen to a gripper that may be holding something
with a hand nearby.

Every status is stamped at the middle of its exchange (the last request
frame's send time plus half the round trip), not when the answer was decoded:
a USB-serial adapter holds the answer for up to its latency timer.

A line that stops answering is a fault: after ``stale_after_s`` without a
good status frame ``read_state`` and ``send`` raise ``GripperFault`` with the
library's error text. Each request is retried a bounded number of times by
pymodbus; the driver counts every frame it puts on the wire.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pymodbus import FramerType, ModbusException
from pymodbus.client import ModbusSerialClient, ModbusTcpClient

from proctor.core.clock import Clock, MonotonicClock
from proctor.station.drivers.gripper import robotiq_registers as regs
from proctor.station.drivers.gripper.base import (
    GRIPPERS,
    Gripper,
    GripperCommand,
    GripperConfig,
    GripperFault,
    GripperHalted,
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
    # gPO counts of the fingers fully open and fully closed (nothing between
    # them), so that the measured position reads 0.0 open and 1.0 closed. A
    # 2F-85 typically stops short of 255 when closed on nothing (about
    # 0xE0–0xE6: hardware review, from experience, not verifiable here):
    # commission it by closing the empty gripper and reading gPO. Commands
    # keep the full 0–255 scale, so "close" always pushes to the end.
    open_counts: int = 0
    closed_counts: int = regs.POSITION_MAX

    def __post_init__(self) -> None:
        if not 0 <= self.open_counts < self.closed_counts <= regs.POSITION_MAX:
            raise ValueError(
                f"gripper open_counts/closed_counts must satisfy 0 <= open < closed <= 255, "
                f"got {self.open_counts}/{self.closed_counts}"
            )


@dataclass
class BusStats:
    """What went over the wire: for diagnostics and the retry tests."""

    frames_sent: int = 0
    frames_received: int = 0
    requests: int = 0
    failures: int = 0
    retries: int = 0  # request frames resent (frames sent beyond one per request)
    commands_written: int = 0
    commands_replaced: int = 0  # posted, then replaced by a newer one before the wire
    last_round_trip_s: float | None = None  # the last good exchange, send → answer
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
        self._bus = threading.Lock()  # one exchange on the line at a time
        # the command registers' one writer at a time: the poller (mailbox) or activate()
        self._writer = threading.Lock()
        self._state_lock = threading.Lock()
        self._status: StatusRegisters | None = None
        self._status_t: float | None = None
        self._frame_sent_t = 0.0  # when the last request frame went on the wire
        self._connected_t = 0.0
        self._target = 0.0
        self._last_written: CommandRegisters | None = None
        # the single-slot mailbox: the latest command not yet on the wire, and
        # since when a command has been waiting (a line that takes none is a fault)
        self._mailbox: CommandRegisters | None = None
        self._posted: CommandRegisters | None = None  # what will be in force
        # a safety stop's latch: no command until resume() (see halt)
        self._halted = False
        self._waiting_since: float | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------
    def _trace(self, sending: bool, data: bytes) -> bytes:
        if sending:
            self._frame_sent_t = self.clock.now()
        return self.stats.trace(sending, data)

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
                trace_packet=self._trace,
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
            trace_packet=self._trace,
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
            status, t = self._read_status()  # the device must answer before we claim a link
        except GripperFault:
            self._client = None
            client.close()
            raise
        self._connected_t = self.clock.now()
        self._publish(status, t)
        self._target = status.gpr / regs.POSITION_MAX
        # what the gripper holds now is in force: an equal command needs no write
        self._posted = self._last_written = None
        self._stop.clear()
        self._poller = threading.Thread(target=self._poll_loop, name="robotiq-poll", daemon=True)
        self._poller.start()

    def disconnect(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._poller is not None:
            self._poller.join(timeout=2.0)
            if self._poller.is_alive():
                log.error("gripper poller did not stop within 2 s")
            self._poller = None
        if self._client is not None:
            with self._bus:
                self._client.close()
            self._client = None
        with self._state_lock:
            self._last_written = self._posted = self._mailbox = None
            self._waiting_since = None

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

    def _exchange(self, what: str, request: Callable[[], Any]) -> tuple[Any, float]:
        """One request on the wire (pymodbus resends it up to ``retries``
        times); returns the answer and its station time: the last request
        frame's send time plus half the round trip."""
        with self._bus:
            self.stats.requests += 1
            sent_before = self.stats.frames_sent
            try:
                try:
                    rr = request()
                finally:
                    resent = self.stats.frames_sent - sent_before - 1
                    if resent > 0:
                        with self.stats._lock:
                            self.stats.retries += resent
            except ModbusException as exc:
                raise self._failed(what, str(exc)) from exc
            answered = self.clock.now()
            sent = min(self._frame_sent_t, answered)
        if rr.isError():
            raise self._failed(what, f"exception response {rr}")
        self.stats.last_round_trip_s = answered - sent
        return rr, sent + (answered - sent) / 2

    def _read_status(self) -> tuple[StatusRegisters, float]:
        client = self._require_client()
        rr, t = self._exchange(
            "status read",
            lambda: client.read_input_registers(
                regs.REG_STATUS, count=regs.N_REGISTERS, device_id=self.config.device_id
            ),
        )
        return StatusRegisters.decode(list(rr.registers)), t

    def _write(self, command: CommandRegisters) -> None:
        client = self._require_client()
        self._exchange(
            "command write",
            lambda: client.write_registers(
                regs.REG_COMMAND, command.encode(), device_id=self.config.device_id
            ),
        )
        self._last_written = command
        self.stats.commands_written += 1

    def _publish(self, status: StatusRegisters, t: float) -> None:
        with self._state_lock:
            if self._status_t is None or t >= self._status_t:
                self._status, self._status_t = status, t

    def _deliver(self) -> None:
        """Put the mailbox's command on the wire (the poller's thread). A
        failed write leaves it there for the next turn, unless a newer one
        replaced it meanwhile."""
        with self._writer:
            with self._state_lock:
                command = self._mailbox
            if command is None or self._client is None:
                return
            try:
                self._write(command)
            except GripperFault as exc:
                log.debug("%s", exc)
                return
            with self._state_lock:
                if self._mailbox is command:
                    self._mailbox = None
                    self._waiting_since = None
                else:
                    # a newer one came meanwhile: the line takes commands, so its
                    # wait starts now (not at the first of a run of replacements)
                    self._waiting_since = self.clock.now()

    def _poll_loop(self) -> None:
        period = 1.0 / self.config.poll_hz
        next_t = self.clock.now() + period  # connect() has just read the status
        while not self._stop.is_set():
            self._wake.wait(max(0.0, next_t - self.clock.now()))
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._deliver()
                if self.clock.now() < next_t:
                    continue  # woken for a command: the status poll keeps its pace
                self._publish(*self._read_status())
            except GripperFault as exc:
                # read_state reports it once the picture is stale; logging every
                # miss at 50 Hz would drown the log
                log.debug("%s", exc)
            except Exception:
                log.exception("gripper poller: unexpected error")
            next_t += period
            now = self.clock.now()
            if next_t < now:  # fell behind (a slow line): skip, don't burst
                next_t = now

    # -- the Gripper role ----------------------------------------------------
    def _fresh_status(self) -> tuple[StatusRegisters, float]:
        with self._state_lock:
            status, t, waiting = self._status, self._status_t, self._waiting_since
        if status is None or t is None:
            raise GripperFault("gripper is not connected")
        now = self.clock.now()
        age = now - t
        if age > self.config.stale_after_s:
            raise GripperFault(
                f"gripper on {self.config.port} silent for {age:.2f} s "
                f"(limit {self.config.stale_after_s} s): {self.stats.last_error or 'no answer'}"
            )
        if waiting is not None and now - waiting > self.config.stale_after_s:
            raise GripperFault(
                f"gripper on {self.config.port} took no command for {now - waiting:.2f} s "
                f"(limit {self.config.stale_after_s} s): {self.stats.last_error or 'no answer'}"
            )
        return status, t

    def _position(self, gpo: int) -> float:
        c = self.config
        return min(1.0, max(0.0, (gpo - c.open_counts) / (c.closed_counts - c.open_counts)))

    def read_state(self) -> GripperState:
        status, t = self._fresh_status()
        return GripperState(
            t=t,
            target=self._target,
            position=self._position(status.gpo),
            object_detected=status.object_detected,
            activated=status.ready,
            fault=status.fault,
            current_ma=status.current_ma,
        )

    @property
    def command_pending(self) -> bool:
        """A posted command has not reached the wire yet."""
        with self._state_lock:
            return self._mailbox is not None

    def status_registers(self) -> StatusRegisters:
        """The raw status as last polled (pre-flight and diagnostics)."""
        return self._fresh_status()[0]

    def read_status_now(self) -> StatusRegisters:
        """One status exchange on the wire, now, bypassing the poller."""
        status, t = self._read_status()
        self._publish(status, t)
        return status

    def measure_round_trip(self, n: int = 20) -> list[float]:
        """``n`` status exchanges, now; their round trips (s). For pre-flight:
        a USB-serial adapter's latency timer shows here (16 ms by default)."""
        out = []
        for _ in range(n):
            self.read_status_now()
            rtt = self.stats.last_round_trip_s
            if rtt is not None:
                out.append(rtt)
        return out

    def needs_activation(self) -> bool:
        """gSTA is not 3 (activation completed), or a major fault that only a
        reset and activation clear (manual §4.7: gSTA, gFLT), read now."""
        status = self.read_status_now()
        return not status.ready or status.gflt in regs.MAJOR_FAULTS

    def activate(self) -> None:
        """Reset, then activate, then wait for gSTA = 3 (manual §4.5). The
        fingers sweep fully open and closed: an operator's action only."""
        with self._writer:
            with self._state_lock:
                # nothing posted before the activation may move the fingers after it
                self._mailbox = self._posted = None
                self._waiting_since = None
            self._write(regs.RESET)
            self._write(regs.ACTIVATE)
        deadline = self.clock.now() + self.config.activation_timeout_s
        period = 1.0 / self.config.poll_hz
        status, t = self._read_status()
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
            status, t = self._read_status()
        self._publish(status, t)
        self._target = 0.0

    def measure_closed_counts(self, timeout_s: float = 10.0) -> int:
        """Close the empty fingers at full scale and return where they stop
        (gPO): commissioning's ``closed_counts`` (a 2F-85 stops short of 255).
        The fingers move: an operator's action only, hands clear. Refused if
        something stops them (gOBJ: contact while closing) or they do not
        stop in time; the fingers are left closed."""
        sent = self.send(GripperCommand(position=1.0, speed=0.5, force=0.2))
        target = round(sent.position * regs.POSITION_MAX)
        deadline = self.clock.now() + timeout_s
        period = 1.0 / self.config.poll_hz
        while True:
            status, _ = self._fresh_status()
            # gPR echoes the request once the device took it; gOBJ leaves
            # "moving" when the fingers stop
            if status.gpr == target and status.gobj != regs.GObj.moving:
                break
            if self.clock.now() > deadline:
                raise GripperFault(
                    f"closed_counts: the fingers did not stop within {timeout_s:g} s "
                    f"(gPO={status.gpo})"
                )
            self._stop.wait(period)
        if status.gobj == regs.GObj.contact_closing:
            raise GripperFault(
                f"closed_counts: something stopped the fingers at gPO={status.gpo}: "
                "empty the gripper and measure again"
            )
        if status.gpo <= self.config.open_counts:
            raise GripperFault(
                f"closed_counts: the fingers read gPO={status.gpo} closed, not above "
                f"open_counts={self.config.open_counts}"
            )
        return int(status.gpo)

    def halt(self) -> None:
        """Drop the mailbox and write rGTO = 0 ("Stop", manual §4.3: the fingers
        stop where they are), keeping rACT (no reset, which would release the
        grip). Waits at most for an exchange in progress (the writer lock) and
        this one write. Not verified on hardware: that a 2F-85 holding an item
        at rGTO = 0 keeps holding it (its drive is said not to back-drive)."""
        with self._state_lock:
            self._halted = True
            self._mailbox = self._posted = None
            self._waiting_since = None
        last = self._last_written or regs.ACTIVATE
        hold = dataclasses.replace(last, action=regs.BIT_RACT)  # rGTO (and rATR) cleared
        try:
            with self._writer:
                self._write(hold)
        except GripperFault:
            log.critical("FAILED TO HALT THE GRIPPER (rGTO = 0 not written)", exc_info=True)

    def resume(self) -> None:
        with self._state_lock:
            self._halted = False

    @property
    def halted(self) -> bool:
        return self._halted

    def send(self, command: GripperCommand) -> GripperCommand:
        """Validate and post ``command`` for the poller to write; never waits
        on the bus. Raises ``GripperFault`` for a gripper in fault, not
        activated, silent, or not taking commands, ``GripperHalted`` after a
        safety stop's ``halt``."""
        if self._halted:
            raise GripperHalted("gripper halted by a safety stop")
        status, _ = self._fresh_status()
        if status.gflt in regs.MAJOR_FAULTS:
            raise GripperFault(f"gripper refuses to move: {status.fault}; reset and activate")
        if not status.ready:
            raise GripperFault("gripper is not activated")
        registers, sent = quantise(command)
        with self._state_lock:
            if self._halted:  # a halt between the check above and here wins
                raise GripperHalted("gripper halted by a safety stop")
            # an unchanged command is already in force (or on its way)
            if registers != (self._posted or self._last_written):
                if self._mailbox is not None:
                    self.stats.commands_replaced += 1
                self._mailbox = self._posted = registers
                if self._waiting_since is None:
                    self._waiting_since = self.clock.now()
                self._wake.set()
        self._target = sent.position
        return sent
