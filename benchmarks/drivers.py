"""Hardware drivers against their protocol peers: how fast and how precise.

    ./run bench drivers [--seconds 2]

1. **Arm** (franky → franky-sim in its own process): state reads per second
   unpaced, idle (the baseline) and while a motion runs (ratio to idle); a
   100 Hz telemetry loop's achieved rate (ratio to 100 Hz); joint tracking
   error after five joint targets and position error after three Cartesian
   targets; time from ``stop()`` to rest.
2. **Gripper** (Modbus RTU over a socat pty → the simulated 2F-85 in its
   own process): one
   status round trip, p50/p99 (baseline), and a command's latency until the
   gripper echoes it (gPR) through the driver's 50 Hz poller (ratio to the
   round trip); polls per second achieved.
3. **RealSense playback** (software-device recording through ``rs.pipeline``):
   time per ``read`` in non-real-time playback.

The machine's load changes every figure: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from proctor.core.clock import MonotonicClock
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmConfig
from proctor.station.drivers.arm.franky import FrankyArm, FrankyArmConfig
from proctor.station.drivers.camera.realsense import RealSenseCamera, RealSenseCameraConfig
from proctor.station.drivers.camera.realsense_record import record_pattern
from proctor.station.drivers.gripper.base import GripperCommand
from proctor.station.drivers.gripper.robotiq import RobotiqGripper, RobotiqGripperConfig
from proctor.station.twin.peers import FrankySimProcess, GripperSimProcess, SocatPtyPair

HOME = np.asarray(ArmConfig.home_q)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def reads_per_second(arm: FrankyArm, seconds: float) -> float:
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < seconds:
        arm.read_state()
        n += 1
    return n / (time.monotonic() - t0)


def settle(arm: FrankyArm, timeout_s: float = 10.0) -> np.ndarray:
    deadline = time.monotonic() + timeout_s
    while arm.moving and time.monotonic() < deadline:
        time.sleep(0.005)
    last = arm.read_state().q
    while time.monotonic() < deadline:
        time.sleep(0.1)
        q = arm.read_state().q
        if np.max(np.abs(q - last)) < 5e-4:
            return q
        last = q
    return last


def bench_arm(seconds: float, work: Path) -> None:
    print("\n== arm: franky → franky-sim ==")
    sim = FrankySimProcess(initial_q=HOME, log_path=work / "franky-sim.log")
    host = sim.start()
    try:
        arm = FrankyArm(
            FrankyArmConfig(host=host, realtime="ignore", relative_dynamics_factor=0.5)  # type: ignore[arg-type]
        )
        with arm:
            arm.home()
            idle = reads_per_second(arm, seconds)
            arm.send(
                ArmCommand(ArmCommandKind.joint_position, HOME + np.array([0.6, 0, 0, 0, 0, 0, 0]))
            )
            moving = reads_per_second(arm, min(seconds, 1.0))
            settle(arm)
            print(f"state reads, idle (baseline):  {idle:8.0f} /s")
            print(f"state reads, during a motion:  {moving:8.0f} /s  ({moving / idle:.2f}× idle)")

            clock, period, samples = MonotonicClock(), 0.01, []
            arm.send(ArmCommand(ArmCommandKind.joint_position, HOME))
            t0 = next_t = clock.now()
            while clock.now() - t0 < seconds:
                samples.append(arm.read_state().t)
                next_t += period
                clock.sleep_until(next_t)
            ts = np.asarray(samples)
            rate = (len(ts) - 1) / (ts[-1] - ts[0])
            print(
                f"100 Hz telemetry loop:         {rate:8.1f} Hz ({rate / 100:.3f}× target), "
                f"interval p99 {1000 * pct(list(np.diff(ts)), 99):.1f} ms"
            )
            settle(arm)

            rng = np.random.default_rng(5)
            joint_err = []
            for _ in range(5):
                target = HOME + rng.uniform(-0.3, 0.3, size=7)
                arm.send(ArmCommand(ArmCommandKind.joint_position, target))
                joint_err.append(float(np.max(np.abs(settle(arm) - target))))
            print(
                f"joint tracking error (max over joints): median {1000 * np.median(joint_err):.1f}"
                f" mrad, worst {1000 * max(joint_err):.1f} mrad"
            )
            arm.home()
            pos_err = []
            start = arm.read_state().ee_pose
            for d in ([0.05, 0, 0], [0, 0.05, -0.03], [-0.04, -0.04, 0.04]):
                target = start.copy()
                target[:3] += d
                arm.send(ArmCommand(ArmCommandKind.cartesian_pose, target))
                settle(arm)
                pos_err.append(float(np.linalg.norm(arm.read_state().ee_pose[:3] - target[:3])))
            print(
                f"Cartesian position error: median {1000 * np.median(pos_err):.2f} mm, "
                f"worst {1000 * max(pos_err):.2f} mm"
            )
            arm.home()
            arm.send(
                ArmCommand(ArmCommandKind.joint_position, HOME + np.array([1.0, 0, 0, 0, 0, 0, 0]))
            )
            time.sleep(0.5)
            t_stop = time.monotonic()
            arm.stop()
            settle(arm)
            print(f"stop() to rest:                {time.monotonic() - t_stop:8.2f} s")
            arm.home()
    finally:
        sim.stop()


def bench_gripper(seconds: float, work: Path) -> None:
    print("\n== gripper: Modbus RTU over a socat pty → simulated 2F-85 ==")
    socat = SocatPtyPair(work / "ttyA", work / "ttyB")
    socat.start()
    # the peer in its own process, as in the twin: not competing for this GIL
    sim = GripperSimProcess(socat.device_end, activation_s=0.05, log_path=work / "gripper.log")
    sim.start()
    try:
        gripper = RobotiqGripper(RobotiqGripperConfig(port=str(socat.driver_end)))
        with gripper:
            gripper.activate()
            round_trip = []
            for _ in range(200):
                t0 = time.perf_counter()
                gripper.read_status_now()
                round_trip.append(time.perf_counter() - t0)
            rt50 = pct(round_trip, 50)
            print(
                f"status round trip (baseline):  p50 {1000 * rt50:.2f} ms, "
                f"p99 {1000 * pct(round_trip, 99):.2f} ms"
            )
            echo = []
            for i in range(20):
                target = (i % 2) * 0.5 + 0.25
                t0 = time.perf_counter()
                sent = gripper.send(GripperCommand(position=target))
                want = round(sent.position * 255)
                while gripper.status_registers().gpr != want:
                    time.sleep(0.0005)
                echo.append(time.perf_counter() - t0)
            e50 = pct(echo, 50)
            print(
                f"command → echoed in status:    p50 {1000 * e50:.1f} ms, "
                f"p99 {1000 * pct(echo, 99):.1f} ms ({e50 / rt50:.1f}× a round trip)"
            )
            before, t0 = gripper.stats.frames_sent, time.monotonic()
            time.sleep(seconds)
            polls = (gripper.stats.frames_sent - before) / (time.monotonic() - t0)
            print(f"status polls achieved:         {polls:8.1f} /s (configured 50)")
    finally:
        sim.stop()
        socat.stop()


def bench_camera(work: Path) -> None:
    print("\n== RealSense: software-device recording through rs.pipeline ==")
    path = record_pattern(work / "cam.db3", width=640, height=480, fps=30, frames=60)
    cam = RealSenseCamera(
        RealSenseCameraConfig(
            name="exterior",
            serial="SOFTWARE0001",
            playback_file=str(path),
            playback_real_time=False,
        )
    )
    with cam:
        times = []
        for _ in range(60):
            t0 = time.perf_counter()
            cam.read(timeout_s=2.0)
            times.append(time.perf_counter() - t0)
    print(
        f"read(), 640×480 RGB:           p50 {1000 * pct(times, 50):.2f} ms, "
        f"p99 {1000 * pct(times, 99):.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-drivers-") as tmp:
        work = Path(tmp)
        bench_arm(args.seconds, work)
        bench_gripper(args.seconds, work)
        bench_camera(work)


if __name__ == "__main__":
    main()
