"""A simulated Robotiq 2F-85 behind pymodbus's Modbus server: the peer the
real driver is tested against, and the twin profile's gripper.

It speaks Modbus RTU (over a serial port — a socat pty in tests — or over TCP
with RTU framing) as device id 9 and models what the driver has to cope with:

* activation: a rising edge on rACT → gSTA 1 (activating) for
  ``activation_s``, then gSTA 3 and gACT 1; rACT = 0 resets;
* motion at the speed rSP asks for (20–150 mm/s over the 85 mm stroke),
  finger current while moving and a force-dependent holding current;
* an object between the fingers stops them while closing (gOBJ = 2);
* faults: an action before activation (gFLT 0x07 / 0x05), and any injected
  code (``inject_fault``); major faults stop the fingers until a reset;
* a noisy or dead line: responses dropped or corrupted (CRC errors at the
  client), or no answer at all (``silent``).

Finger kinematics are evaluated lazily from the clock whenever a request
arrives, so the server needs no thread of its own beyond the event loop.

Run standalone: ``python -m proctor.station.drivers.gripper.robotiq_sim --port /dev/pts/N``
(prints ``READY`` once it serves).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import threading
from dataclasses import dataclass

from pymodbus import FramerType
from pymodbus.server import ModbusSerialServer, ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

from proctor.core.clock import Clock, MonotonicClock
from proctor.station.drivers.gripper import robotiq_registers as regs
from proctor.station.drivers.gripper.robotiq_registers import (
    CommandRegisters,
    GFlt,
    GObj,
    GSta,
    StatusRegisters,
)
from proctor.station.drivers.peer_process import watch_parent

log = logging.getLogger(__name__)

FC_READ_HOLDING = 3
FC_READ_INPUT = 4
FC_WRITE_MULTIPLE = 16


@dataclass(frozen=True)
class SimulatedGripperConfig:
    # the real 2F-85 takes a few seconds to activate (it sweeps the fingers);
    # tests shorten it, the twin keeps something visible
    activation_s: float = 0.3
    # 2F-85 datasheet: stroke 85 mm, finger speed 20–150 mm/s
    stroke_mm: float = 85.0
    min_speed_mm_s: float = 20.0
    max_speed_mm_s: float = 150.0
    # motor current while the fingers travel, and the holding current at rFR = 255
    moving_current_ma: float = 300.0
    max_holding_current_ma: float = 600.0
    device_id: int = regs.DEVICE_ID
    # gPO where the empty fingers meet: a real 2F-85 stops short of 255
    # (about 0xE0–0xE6, hardware review, from experience)
    closed_counts: int = regs.POSITION_MAX


class GripperModel:
    """The fingers and the status byte, as a function of commands and time."""

    def __init__(self, config: SimulatedGripperConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self._lock = threading.Lock()
        self.command = regs.RESET
        self._activation_started: float | None = None
        self.activated = False
        self.position = 0.0  # counts, 0 open … 255 closed
        self._motion_t = clock.now()
        self.fault: int = GFlt.none
        self.object_position: float | None = None  # counts where an object blocks closing
        self.gobj = GObj.moving
        self.requests = 0

    # -- operator/test handles -------------------------------------------
    def place_object(self, position: float | None) -> None:
        """Put an object between the fingers: closing stops at ``position``
        (0..1 of the stroke); ``None`` takes it away."""
        with self._lock:
            self._advance(self.clock.now())
            self.object_position = None if position is None else position * regs.POSITION_MAX

    def inject_fault(self, code: int) -> None:
        with self._lock:
            self._advance(self.clock.now())
            self.fault = code

    # -- protocol ----------------------------------------------------------
    def on_write(self, values: list[int]) -> None:
        new = CommandRegisters.decode(values)
        with self._lock:
            now = self.clock.now()
            self._advance(now)
            old = self.command
            self.command = new
            self.requests += 1
            if not new.ract:
                # reset: deactivates and clears every fault; asking to move
                # without rACT is itself a (priority) fault
                self.activated = False
                self._activation_started = None
                self.fault = GFlt.activation_bit_not_set if new.rgto else GFlt.none
                return
            if not old.ract:
                # rising edge on rACT: (re)activation, which also clears a major fault
                self.activated = False
                self._activation_started = now
                self.fault = GFlt.none
            if new.rgto:
                if self._activation_started is not None and not self.activated:
                    self.fault = GFlt.action_delayed
                self.gobj = GObj.moving
                self._motion_t = now
            elif self.fault in (GFlt.action_delayed, GFlt.activation_bit_not_set):
                self.fault = GFlt.none

    def status(self) -> StatusRegisters:
        with self._lock:
            self.requests += 1
            self._advance(self.clock.now())
            cmd = self.command
            gsta = GSta.reset
            if self.activated:
                gsta = GSta.ready
            elif self._activation_started is not None:
                gsta = GSta.activating
            ggto = cmd.rgto and cmd.ract
            return StatusRegisters(
                gact=cmd.ract,
                ggto=ggto,
                gsta=gsta,
                gobj=self.gobj if ggto else GObj.moving,
                gflt=self.fault,
                gpr=cmd.position if cmd.ract else 0,
                gpo=round(self.position),
                gcu=round(self._current_ma(ggto) / regs.CURRENT_MA_PER_COUNT),
            )

    def _current_ma(self, ggto: bool) -> float:
        if not ggto:
            return 0.0
        if self.gobj == GObj.moving:
            return self.config.moving_current_ma
        if self.gobj in (GObj.contact_closing, GObj.contact_opening):
            return self.config.max_holding_current_ma * self.command.force / regs.POSITION_MAX
        return 0.0

    def _speed_counts_s(self) -> float:
        c = self.config
        mm_s = c.min_speed_mm_s + (c.max_speed_mm_s - c.min_speed_mm_s) * (
            self.command.speed / regs.POSITION_MAX
        )
        return mm_s * regs.POSITION_MAX / c.stroke_mm

    def _advance(self, now: float) -> None:
        """Bring the model up to ``now``: finish an activation, move the fingers."""
        if (
            self._activation_started is not None
            and not self.activated
            and now - self._activation_started >= self.config.activation_s
        ):
            self.activated = True
            if self.fault == GFlt.action_delayed:
                self.fault = GFlt.none
        dt = max(0.0, now - self._motion_t)
        self._motion_t = now
        cmd = self.command
        moving = (
            self.activated
            and cmd.ract
            and cmd.rgto
            and self.fault not in regs.MAJOR_FAULTS
            and self.gobj == GObj.moving
        )
        if not moving:
            return
        target = float(min(cmd.position, self.config.closed_counts))
        step = self._speed_counts_s() * dt
        if target > self.position:
            stop = target
            if self.object_position is not None and self.position <= self.object_position < target:
                stop = self.object_position
            self.position = min(stop, self.position + step)
            if self.position >= stop:
                self.gobj = GObj.at_position if stop == target else GObj.contact_closing
        else:
            self.position = max(target, self.position - step)
            if self.position <= target:
                self.gobj = GObj.at_position


class LineNoise:
    """What the wire does to the gripper's answers (a server-side hook on
    every frame it sends): drop some, corrupt some, drop them all, or hold
    each one back (``delay_s``: a slow line or a USB adapter's latency timer;
    the server answers nothing else meanwhile, as a real half-duplex line)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._lock = threading.Lock()
        self._clock = clock or MonotonicClock()
        self.silent = False
        self.delay_s = 0.0
        # drop the answers to command writes only (FC16): status reads still work
        self.deaf_to_writes = False
        self._drop = 0
        self._corrupt = 0
        self.dropped = 0
        self.corrupted = 0
        # every byte the gripper heard, so tests can compare the wire to the manual
        self.heard = bytearray()

    def drop_next(self, n: int) -> None:
        with self._lock:
            self._drop = n

    def corrupt_next(self, n: int) -> None:
        with self._lock:
            self._corrupt = n

    def trace_packet(self, sending: bool, data: bytes) -> bytes:
        if sending and self.delay_s > 0:
            # on the server's loop: it blocks, as the line would
            self._clock.sleep_until(self._clock.now() + self.delay_s)
        with self._lock:
            if not sending:
                if len(self.heard) < 1 << 20:
                    self.heard += data
                return data
            if self.deaf_to_writes and len(data) > 1 and data[1] == FC_WRITE_MULTIPLE:
                self.dropped += 1
                return b""
            if self.silent or self._drop > 0:
                self._drop = max(0, self._drop - 1)
                self.dropped += 1
                return b""
            if self._corrupt > 0 and data:
                self._corrupt -= 1
                self.corrupted += 1
                # flip the last byte: the CRC no longer matches, the client discards the frame
                return data[:-1] + bytes([data[-1] ^ 0xFF])
            return data


class SimulatedGripper:
    """The server: a pymodbus ``SimDevice`` whose action hook drives the model,
    served from an event loop on its own thread."""

    def __init__(
        self, config: SimulatedGripperConfig | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config or SimulatedGripperConfig()
        clock = clock or MonotonicClock()
        self.model = GripperModel(self.config, clock)
        self.noise = LineNoise(clock)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: ModbusSerialServer | ModbusTcpServer | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def _device(self) -> SimDevice:
        blocks = [
            SimData(
                regs.REG_COMMAND,
                count=regs.N_REGISTERS,
                values=0,
                datatype=DataType.REGISTERS,
            ),
            SimData(
                regs.REG_STATUS,
                count=regs.N_REGISTERS,
                values=0,
                datatype=DataType.REGISTERS,
                readonly=True,
            ),
        ]
        return SimDevice(id=self.config.device_id, simdata=blocks, action=self._action)

    async def _action(
        self,
        function_code: int,
        start_address: int,
        address: int,
        count: int,
        current_registers: list[int],
        set_values: list[int] | list[bool] | None,
    ) -> None:
        if function_code == FC_WRITE_MULTIPLE and set_values is not None:
            if address != regs.REG_COMMAND or count != regs.N_REGISTERS:
                return None  # partial writes are stored but not acted upon
            self.model.on_write([int(v) for v in set_values])
        elif function_code in (FC_READ_HOLDING, FC_READ_INPUT) and address >= regs.REG_STATUS:
            status = self.model.status().encode()
            offset = regs.REG_STATUS - start_address
            current_registers[offset : offset + regs.N_REGISTERS] = status
        return None

    # -- lifecycle -----------------------------------------------------------
    def start_serial(self, port: str, timeout_s: float = 5.0) -> None:
        self._start(lambda: self._make_serial(port), timeout_s)

    def start_tcp(self, host: str, port: int, timeout_s: float = 5.0) -> None:
        self._start(lambda: self._make_tcp(host, port), timeout_s)

    def _make_serial(self, port: str) -> ModbusSerialServer:
        return ModbusSerialServer(
            self._device(),
            framer=FramerType.RTU,
            port=port,
            baudrate=regs.BAUDRATE,
            bytesize=8,
            parity="N",
            stopbits=1,
            trace_packet=self.noise.trace_packet,
        )

    def _make_tcp(self, host: str, port: int) -> ModbusTcpServer:
        return ModbusTcpServer(
            self._device(),
            framer=FramerType.RTU,
            address=(host, port),
            trace_packet=self.noise.trace_packet,
        )

    def _start(self, make, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
        if self._thread is not None:
            raise RuntimeError("the simulated gripper is already running")

        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            try:
                self._server = make()
                await self._server.serve_forever(background=True)
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                raise
            self._ready.set()
            await self._server.serving

        def run() -> None:
            try:
                asyncio.run(serve())
            except Exception:
                log.exception("simulated gripper stopped with an error")

        self._thread = threading.Thread(target=run, name="robotiq-sim", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"simulated gripper did not start within {timeout_s} s")
        if self._error is not None:
            raise RuntimeError(f"simulated gripper failed to start: {self._error}")

    def stop(self, timeout_s: float = 5.0) -> None:
        loop, server, thread = self._loop, self._server, self._thread
        if thread is None:
            return
        if loop is not None and server is not None and loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(server.shutdown(), loop).result(timeout_s)
            except TimeoutError:
                log.error("simulated gripper did not shut down within %.1f s", timeout_s)
        thread.join(timeout_s)
        if thread.is_alive():
            log.error("simulated gripper thread did not stop within %.1f s", timeout_s)
        self._thread = self._loop = self._server = None
        self._ready.clear()

    def __enter__(self) -> SimulatedGripper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Simulated Robotiq 2F-85 on Modbus RTU")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", help="serial device (e.g. one end of a socat pty pair)")
    where.add_argument("--tcp", help="HOST:PORT, RTU framing over TCP")
    parser.add_argument("--activation-s", type=float, default=1.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    sim = SimulatedGripper(SimulatedGripperConfig(activation_s=args.activation_s))
    if args.port:
        sim.start_serial(args.port)
    else:
        host, _, port = args.tcp.rpartition(":")
        sim.start_tcp(host, int(port))
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    watch_parent(done)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    done.wait()
    sim.stop(timeout_s=2.0)  # the serving thread is a daemon: exit regardless
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
