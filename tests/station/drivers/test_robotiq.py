"""The Robotiq 2F-85 driver against the simulated gripper on pymodbus's
server, over a socat pty pair carrying Modbus RTU (and once over TCP with RTU
framing). Nothing here is mocked: every request and answer is an RTU frame
with a CRC, through a real serial line discipline."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from proctor.core.clock import Clock, VirtualClock
from proctor.station.drivers.gripper import GRIPPERS, GripperCommand, GripperFault
from proctor.station.drivers.gripper import robotiq_registers as regs
from proctor.station.drivers.gripper.base import GripperHalted
from proctor.station.drivers.gripper.robotiq import RobotiqGripper, RobotiqGripperConfig, quantise
from proctor.station.drivers.gripper.robotiq_registers import (
    CommandRegisters,
    GFlt,
    GObj,
    GSta,
    StatusRegisters,
)
from proctor.station.drivers.gripper.robotiq_sim import SimulatedGripper, SimulatedGripperConfig
from tests.station.drivers.conftest import PtyPair, wait_for

pytestmark = pytest.mark.hardware


# -- the register map, pinned to the frames printed in the Robotiq manual ----
# (2F-85/2F-140 instruction manual, §4.8 "Control Logic Example": each frame is
# device id 9, function code, address, count, payload, CRC)
MANUAL_ACTIVATION_REQUEST = bytes.fromhex("091003E8000306000000000000" + "7330")
MANUAL_CLOSE_FULL_SPEED_FORCE = bytes.fromhex("091003E8000306090000FFFFFF" + "4229")


def test_command_registers_match_the_manual_frames() -> None:
    assert regs.RESET.encode() == [0x0000, 0x0000, 0x0000]
    assert regs.move(255, 255, 255).encode() == [0x0900, 0x00FF, 0xFFFF]
    assert regs.ACTIVATE.encode() == [0x0100, 0x0000, 0x0000]
    assert CommandRegisters.decode([0x0900, 0x00FF, 0xFFFF]) == regs.move(255, 255, 255)


def test_status_registers_decode_the_manual_answers() -> None:
    # "09 03 02 11 00": activation in progress; "… 31 00": completed
    assert StatusRegisters.decode([0x1100, 0, 0]).gsta == GSta.activating
    done = StatusRegisters.decode([0x3100, 0, 0])
    assert done.gsta == GSta.ready and done.gact and done.ready
    # closing, not there yet: gOBJ 0, gSTA 3, gGTO 1, gACT 1; gPR FF, gPO 0E, gCU 0A
    moving = StatusRegisters.decode([0x3900, 0x00FF, 0x0E0A])
    assert (moving.gobj, moving.gpr, moving.gpo, moving.current_ma) == (
        GObj.moving,
        0xFF,
        0x0E,
        100.0,
    )
    # stopped on an object while closing at gPO BD: gOBJ 2
    held = StatusRegisters.decode([0xB900, 0x00FF, 0xBD00])
    assert held.gobj == GObj.contact_closing and held.object_detected and held.gpo == 0xBD


def test_status_round_trip_and_fault_text() -> None:
    s = StatusRegisters(
        gact=True, ggto=True, gsta=GSta.ready, gobj=GObj.at_position, gflt=0x0E, kflt=0x3,
        gpr=200, gpo=199, gcu=12,
    )  # fmt: skip
    assert StatusRegisters.decode(s.encode()) == s
    assert s.fault == "gFLT 0x0E: overcurrent triggered"
    assert regs.fault_text(0) is None
    assert "unknown" in (regs.fault_text(0x03) or "")


def test_a_byte_out_of_range_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="rPR"):
        regs.move(256, 0, 0).encode()


def test_quantise_returns_the_command_the_bytes_carry() -> None:
    registers, sent = quantise(GripperCommand(position=0.5, speed=0.1, force=1.0))
    assert (registers.position, registers.speed, registers.force) == (128, 26, 255)
    assert sent.position == pytest.approx(128 / 255)
    assert sent.speed == pytest.approx(26 / 255)
    assert sent.force == 1.0


def test_registry_finds_the_driver() -> None:
    assert GRIPPERS.get("robotiq_2f85") is RobotiqGripper


# -- the driver against the simulated gripper over a pty ----------------------


@pytest.fixture
def sim(pty_pair: PtyPair) -> Iterator[SimulatedGripper]:
    gripper = SimulatedGripper(SimulatedGripperConfig(activation_s=0.3))
    gripper.start_serial(str(pty_pair.device_end))
    try:
        yield gripper
    finally:
        gripper.stop()


# The simulated gripper answers from a thread of this process. On a loaded
# machine (CI shares two cores with the rest of the suite) that thread can be
# kept off the CPU for longer than a real gripper's 50 ms answer time or the
# 0.2 s staleness limit: a late answer would read as a lost frame (an extra
# retry, or a failed connect) and a starved poller as a silent line. The tests
# give the wire generous limits; the staleness rule itself is tested on a
# clock the test moves (test_a_silent_peer_is_a_fault_once_its_status_is_stale).
LOADED_MACHINE = {"timeout_s": 1.0, "stale_after_s": 30.0}


def make_driver(
    pty_pair: PtyPair, clock: Clock | None = None, **overrides: object
) -> RobotiqGripper:
    values = {**LOADED_MACHINE, **overrides}
    return RobotiqGripper(RobotiqGripperConfig(port=str(pty_pair.driver_end), **values), clock)  # type: ignore[arg-type]


@pytest.fixture
def gripper(sim: SimulatedGripper, pty_pair: PtyPair) -> Iterator[RobotiqGripper]:
    driver = make_driver(pty_pair)
    driver.connect()
    try:
        yield driver
    finally:
        driver.disconnect()


def settle(gripper: RobotiqGripper, timeout_s: float = 30.0) -> None:
    """Wait until the device has taken the last command (gPR echoes it) and
    the fingers have stopped (at the target or on an object)."""
    target = round(gripper.read_state().target * regs.POSITION_MAX)

    def stopped() -> bool:
        s = gripper.status_registers()
        return s.gpr == target and s.gobj != GObj.moving

    wait_for(stopped, timeout_s, "the fingers to stop")


def delivered(gripper: RobotiqGripper) -> None:
    """Wait until the poller has put the posted command on the wire."""
    wait_for(lambda: not gripper.command_pending, 30.0, "the command to reach the wire")


def test_activation_waits_for_gsta_3(gripper: RobotiqGripper, sim: SimulatedGripper) -> None:
    assert not gripper.read_state().activated
    with pytest.raises(GripperFault, match="not activated"):
        gripper.send(GripperCommand(position=1.0))
    t0 = time.monotonic()
    gripper.activate()
    took = time.monotonic() - t0
    status = gripper.status_registers()
    assert status.gsta == GSta.ready and status.gact
    assert gripper.read_state().activated
    # it really waited for the device's activation time, not just the write
    assert took >= sim.config.activation_s * 0.9
    # the wire carried the manual's activation request byte for byte (reset first)
    assert MANUAL_ACTIVATION_REQUEST in bytes(sim.noise.heard)


def test_close_and_open(gripper: RobotiqGripper, sim: SimulatedGripper) -> None:
    gripper.activate()
    sent = gripper.send(GripperCommand(position=1.0, speed=1.0, force=1.0))
    assert sent == GripperCommand(position=1.0, speed=1.0, force=1.0)
    delivered(gripper)
    assert MANUAL_CLOSE_FULL_SPEED_FORCE in bytes(sim.noise.heard)
    settle(gripper)
    closed = gripper.read_state()
    assert closed.position == 1.0 and closed.target == 1.0 and not closed.object_detected
    assert closed.fault is None

    sent = gripper.send(GripperCommand(position=0.3, speed=0.5, force=0.2))
    assert sent.position == pytest.approx(round(0.3 * 255) / 255)
    settle(gripper)
    state = gripper.read_state()
    assert state.position == pytest.approx(sent.position)
    assert state.target == pytest.approx(sent.position)
    assert state.t > closed.t


def test_object_detected_while_closing(gripper: RobotiqGripper, sim: SimulatedGripper) -> None:
    gripper.activate()
    sim.model.place_object(0.6)
    gripper.send(GripperCommand(position=1.0, speed=1.0, force=0.5))
    settle(gripper)
    state = gripper.read_state()
    assert state.object_detected
    assert state.position == pytest.approx(0.6, abs=1 / 255)
    assert state.current_ma is not None and state.current_ma > 0
    # opening releases it: no object, at the open position
    gripper.send(GripperCommand(position=0.0))
    settle(gripper)
    assert not gripper.read_state().object_detected
    assert gripper.read_state().position == 0.0


def test_closed_counts_are_measured_by_closing_the_empty_gripper(pty_pair: PtyPair) -> None:
    """Commissioning's ``closed_counts`` (deploy step 9b): a 2F-85 whose empty
    fingers meet at gPO 227 reads 227; with something between the fingers the
    measurement is refused, naming it."""
    sim = SimulatedGripper(SimulatedGripperConfig(activation_s=0.3, closed_counts=227))
    sim.start_serial(str(pty_pair.device_end))
    driver = make_driver(pty_pair)
    try:
        driver.connect()
        driver.activate()
        assert driver.measure_closed_counts(timeout_s=30.0) == 227
        driver.send(GripperCommand(position=0.0))
        settle(driver)
        sim.model.place_object(0.5)
        with pytest.raises(GripperFault, match=r"closed_counts: something stopped the fingers"):
            driver.measure_closed_counts(timeout_s=30.0)
    finally:
        driver.disconnect()
        sim.stop()


def test_a_device_fault_is_surfaced_and_cleared_by_reactivation(
    gripper: RobotiqGripper, sim: SimulatedGripper
) -> None:
    gripper.activate()
    sim.model.inject_fault(GFlt.overcurrent)
    wait_for(lambda: gripper.read_state().fault is not None, 30.0, "the fault to be polled")
    assert gripper.read_state().fault == "gFLT 0x0E: overcurrent triggered"
    with pytest.raises(GripperFault, match="overcurrent"):
        gripper.send(GripperCommand(position=1.0))
    gripper.activate()  # reset + rising edge on rACT clears a major fault (manual §4.7.4)
    assert gripper.read_state().fault is None
    gripper.send(GripperCommand(position=1.0))


def test_a_silent_peer_is_a_fault_once_its_status_is_stale(
    sim: SimulatedGripper, pty_pair: PtyPair
) -> None:
    """The staleness rule at the default limit, judged on the driver's own
    clock, which the test moves: nothing is reported while the last good
    status is at most ``stale_after_s`` old, a fault as soon as it is older.
    (On the wall clock the verdict would also measure how promptly a loaded
    machine schedules the poller and this test.)"""
    clock = VirtualClock()
    gripper = make_driver(pty_pair, clock, stale_after_s=RobotiqGripperConfig.stale_after_s)
    gripper.connect()
    try:
        gripper.activate()
        gripper.read_state()
        sim.noise.silent = True
        # a status exchange that fails on the wire: the bus is serialised, so any
        # poll in flight before the line went silent has been answered by now
        with pytest.raises(GripperFault, match="No response"):
            gripper.read_status_now()
        # every good status was published at virtual time 0; the line stays silent
        limit = gripper.config.stale_after_s
        clock.advance(limit)
        assert gripper.read_state().activated  # exactly at the limit: still trusted
        clock.advance(0.01)
        with pytest.raises(GripperFault) as excinfo:
            gripper.read_state()
        assert f"silent for 0.21 s (limit {limit} s)" in str(excinfo.value)
        assert "No response" in str(excinfo.value)
        with pytest.raises(GripperFault):
            gripper.send(GripperCommand(position=1.0))
        # the line comes back: so does the gripper, without an operator
        sim.noise.silent = False
        wait_for(lambda: _healthy(gripper), 30.0, "the gripper to answer again")
    finally:
        gripper.disconnect()


def _healthy(gripper: RobotiqGripper) -> bool:
    try:
        gripper.read_state()
    except GripperFault:
        return False
    return True


@pytest.fixture
def quiet_gripper(sim: SimulatedGripper, pty_pair: PtyPair) -> Iterator[RobotiqGripper]:
    """A driver whose poller stays off the wire for the test's few seconds
    (a poll every 1000 s), so frames can be counted exactly."""
    driver = make_driver(pty_pair, poll_hz=0.001)
    driver.connect()
    try:
        yield driver
    finally:
        driver.disconnect()


def test_dropped_answers_are_retried_a_bounded_number_of_times(
    quiet_gripper: RobotiqGripper, sim: SimulatedGripper
) -> None:
    retries = quiet_gripper.config.retries
    before = quiet_gripper.stats.frames_sent
    sim.noise.drop_next(retries)  # every retry is needed, and enough
    quiet_gripper.read_status_now()
    assert quiet_gripper.stats.frames_sent - before == retries + 1
    assert quiet_gripper.stats.retries == retries  # every resend is counted

    before = quiet_gripper.stats.frames_sent
    sim.noise.drop_next(retries + 1)  # one more than the driver may try
    with pytest.raises(GripperFault, match=f"after {retries} retries"):
        quiet_gripper.read_status_now()
    assert quiet_gripper.stats.frames_sent - before == retries + 1
    assert sim.noise.dropped == 2 * retries + 1
    assert quiet_gripper.stats.retries == 2 * retries  # a failed request's resends too


def test_a_corrupted_answer_fails_its_crc_and_is_retried(
    quiet_gripper: RobotiqGripper, sim: SimulatedGripper
) -> None:
    before = quiet_gripper.stats.frames_sent
    sim.noise.corrupt_next(1)
    status = quiet_gripper.read_status_now()
    assert sim.noise.corrupted == 1
    assert quiet_gripper.stats.frames_sent - before == 2
    assert quiet_gripper.stats.retries == 1
    assert status.gsta == GSta.reset  # the good second answer, decoded


def test_no_device_on_the_line_fails_connect_clearly(
    sim: SimulatedGripper, pty_pair: PtyPair
) -> None:
    sim.noise.silent = True
    driver = make_driver(pty_pair)
    with pytest.raises(GripperFault, match="No response received"):
        driver.connect()
    assert not driver.is_connected


def test_a_missing_port_fails_connect_clearly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    driver = RobotiqGripper(RobotiqGripperConfig(port=str(tmp_path / "ttyUSB9")))
    with pytest.raises(GripperFault, match="cannot open the gripper line"):
        driver.connect()


def test_rtu_framing_over_tcp() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sim = SimulatedGripper(SimulatedGripperConfig(activation_s=0.05))
    sim.start_tcp("127.0.0.1", port)
    try:
        driver = RobotiqGripper(
            RobotiqGripperConfig(port=f"tcp://127.0.0.1:{port}", **LOADED_MACHINE)  # type: ignore[arg-type]
        )
        with driver:
            driver.activate()
            driver.send(GripperCommand(position=1.0))
            settle(driver)
            assert driver.read_state().position == 1.0
    finally:
        sim.stop()


# -- activation only when needed (hardware review #7) -------------------------

ACTIVATION_FRAME = MANUAL_ACTIVATION_REQUEST  # rACT = 1 written: the fingers sweep


def test_a_ready_gripper_is_not_activated_again(
    gripper: RobotiqGripper, sim: SimulatedGripper
) -> None:
    assert gripper.needs_activation()  # a gripper just powered: gSTA = 0
    assert gripper.ensure_activated() is True
    assert gripper.read_state().activated
    gripper.send(GripperCommand(position=0.6))
    delivered(gripper)
    settle(gripper)
    heard = len(sim.noise.heard)
    written = gripper.stats.commands_written
    # a reconnect (a daemon restart) finds it ready: nothing is written, the fingers stay
    assert gripper.ensure_activated() is False
    assert gripper.stats.commands_written == written
    assert bytes(sim.noise.heard[heard:]).find(bytes.fromhex("091003E8")) == -1
    assert gripper.read_state().position == pytest.approx(round(0.6 * 255) / 255)


def test_a_major_fault_is_the_one_reason_to_reactivate_a_ready_gripper(
    gripper: RobotiqGripper, sim: SimulatedGripper
) -> None:
    gripper.activate()
    sim.model.inject_fault(GFlt.no_communication)  # minor: clears itself, no reset needed
    assert not gripper.needs_activation()
    sim.model.inject_fault(GFlt.overcurrent)  # major: only a reset and activation clear it
    assert gripper.needs_activation()
    heard = len(sim.noise.heard)
    assert gripper.ensure_activated() is True
    assert ACTIVATION_FRAME in bytes(sim.noise.heard[heard:])
    assert gripper.read_state().fault is None


# -- commands through the poller: the control thread never waits on the bus (#12)


def test_send_returns_while_another_exchange_holds_the_bus(
    gripper: RobotiqGripper, sim: SimulatedGripper
) -> None:
    gripper.activate()
    returned: list[GripperCommand] = []
    with gripper._bus:  # an exchange in flight, as the poller's on a slow line
        caller = threading.Thread(
            target=lambda: returned.append(gripper.send(GripperCommand(position=1.0))),
            daemon=True,
        )
        caller.start()
        caller.join(10.0)
        blocked = caller.is_alive()
        assert gripper.command_pending or blocked
    caller.join(10.0)
    assert not blocked, "send() waited for the bus"
    assert returned and returned[0].position == 1.0
    delivered(gripper)  # the poller wrote it once the line was free
    settle(gripper)
    assert gripper.read_state().position == 1.0


def test_on_a_slow_line_send_does_not_wait_and_the_latest_command_wins(
    sim: SimulatedGripper, pty_pair: PtyPair
) -> None:
    """Each answer held back 0.25 s (a slow line): a send takes far less than
    one exchange, and commands posted while one is on the wire replace each
    other; only the newest reaches the gripper."""
    driver = make_driver(pty_pair, timeout_s=3.0)
    driver.connect()
    try:
        driver.activate()
        sim.noise.delay_s = 0.25
        took = []
        targets = [0.2, 0.4, 0.6, 0.8, 0.5, 0.7]
        for target in targets:
            t0 = time.monotonic()
            driver.send(GripperCommand(position=target))
            took.append(time.monotonic() - t0)
        assert max(took) < sim.noise.delay_s, took
        delivered(driver)
        assert sim.model.command.position == round(targets[-1] * 255)
        assert driver.stats.commands_replaced >= 1
        assert driver.stats.commands_written < 2 + len(targets)  # reset + activate + fewer moves
    finally:
        sim.noise.delay_s = 0.0
        driver.disconnect()


def test_status_is_stamped_at_the_middle_of_its_exchange(
    quiet_gripper: RobotiqGripper, sim: SimulatedGripper
) -> None:
    """With every answer held back 0.2 s the exchange lasts at least that; the
    status is stamped half a round trip after the request went out, so at
    least 0.1 s before the answer was in (not when it was decoded)."""
    sim.noise.delay_s = 0.2
    try:
        t0 = quiet_gripper.clock.now()
        quiet_gripper.read_status_now()
        t1 = quiet_gripper.clock.now()
    finally:
        sim.noise.delay_s = 0.0
    rtt = quiet_gripper.stats.last_round_trip_s
    assert rtt is not None and rtt >= 0.2
    t = quiet_gripper.read_state().t
    assert t0 <= t <= t1 - 0.1
    assert t1 - t >= rtt / 2 - 1e-9


def test_closed_reads_one_with_the_commissioned_counts(pty_pair: PtyPair) -> None:
    """A 2F-85 closed on nothing stops short of gPO 255; with its closed count
    commissioned, the measured position of empty closed fingers is 1.0 (and the
    command still asks for 255, so a grasp pushes to the end)."""
    sim = SimulatedGripper(SimulatedGripperConfig(activation_s=0.05, closed_counts=0xE4))
    sim.start_serial(str(pty_pair.device_end))
    driver = make_driver(pty_pair, closed_counts=0xE4)
    try:
        driver.connect()
        driver.activate()
        driver.send(GripperCommand(position=1.0))
        delivered(driver)
        wait_for(lambda: driver.status_registers().gpo == 0xE4, 30.0, "the fingers to close")
        assert driver.read_state().position == 1.0
        assert sim.model.command.position == 255
    finally:
        driver.disconnect()
        sim.stop()


def test_calibration_counts_are_validated() -> None:
    with pytest.raises(ValueError, match="open_counts/closed_counts"):
        RobotiqGripperConfig(open_counts=200, closed_counts=100)


def test_a_command_the_line_does_not_take_is_a_fault_once_stale(
    sim: SimulatedGripper, pty_pair: PtyPair
) -> None:
    """Status reads answered, command writes not: send() keeps returning at
    once, and once a command has waited longer than ``stale_after_s`` (on the
    driver's clock, which the test moves) send() reports it; when the line
    takes commands again, the newest one goes through."""
    clock = VirtualClock()
    gripper = make_driver(
        pty_pair, clock, timeout_s=0.2, stale_after_s=RobotiqGripperConfig.stale_after_s
    )
    gripper.connect()
    try:
        gripper.activate()
        sim.noise.deaf_to_writes = True
        gripper.send(GripperCommand(position=1.0))
        wait_for(lambda: gripper.stats.failures > 0, 30.0, "a failed command write")
        clock.advance(gripper.config.stale_after_s + 0.01)
        gripper.read_status_now()  # the status itself is fresh
        with pytest.raises(GripperFault, match=r"took no command for 0\.21 s"):
            gripper.send(GripperCommand(position=0.8))
        sim.noise.deaf_to_writes = False
        delivered(gripper)
        assert sim.model.command.position == 255  # the command posted, now on the wire
        assert gripper.send(GripperCommand(position=0.5)).position == pytest.approx(128 / 255)
    finally:
        gripper.disconnect()


def test_a_halt_stops_the_fingers_where_they_are_and_refuses_commands(
    gripper: RobotiqGripper, sim: SimulatedGripper
) -> None:
    """A safety stop's halt (hardware review #7): rGTO = 0 on the wire with rACT
    kept (no reset, which would drop a held item), the fingers stop short of
    the target, a command posted before the halt is never written, and every
    send is refused until resume."""
    gripper.activate()
    # slowest closing: the halt lands mid-way
    gripper.send(GripperCommand(position=1.0, speed=0.0, force=0.5))
    delivered(gripper)
    wait_for(lambda: sim.model.position > 20, 30.0, "the fingers to start closing")
    gripper.halt()
    assert gripper.halted
    assert sim.model.command.ract and not sim.model.command.rgto
    stopped_at = sim.model.position
    assert stopped_at < regs.POSITION_MAX - 20
    with pytest.raises(GripperHalted):
        gripper.send(GripperCommand(position=0.0))
    assert not gripper.command_pending
    time.sleep(0.3)  # the fingers would have moved on at their speed by now
    assert sim.model.position == pytest.approx(stopped_at, abs=1.0)
    assert gripper.read_state().activated  # halted, not reset
    gripper.resume()
    gripper.send(GripperCommand(position=0.0, speed=1.0))
    settle(gripper)
    assert gripper.read_state().position == 0.0
