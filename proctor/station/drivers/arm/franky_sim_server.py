"""franky-sim embedded: MuJoCo behind the real libfranka protocol, on a
loopback address, for the driver tests and the twin profile.

In-process: ``with FrankySimServer() as sim: FrankyArm(FrankyArmConfig(host=sim.host, …))``.
As a peer process: ``python -m proctor.station.drivers.arm.franky_sim_server`` prints
``READY <host>`` once the libfranka server is listening and runs until
SIGTERM/SIGINT.

franky-sim's own CLI needs ``--simulator mujoco`` (its ``auto`` choice
crashes without Genesis); embedding the ``SimulationServer`` avoids that.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

import franky_sim
from franky_sim.mujoco_simulator import MujocoSimulator

from proctor.station.drivers.peer_process import watch_parent

log = logging.getLogger(__name__)

# the arm's rest pose in franky-sim, unless told otherwise
DEFAULT_INITIAL_Q: tuple[float, ...] = tuple(franky_sim.DEFAULT_INITIAL_JOINT_POS)


class FrankySimServer:
    def __init__(
        self,
        initial_q: Sequence[float] = DEFAULT_INITIAL_Q,
        hostname: str | None = None,
    ) -> None:
        self.initial_q = tuple(float(v) for v in initial_q)
        self.hostname = hostname
        self._sim: MujocoSimulator | None = None
        self._server: franky_sim.SimulationServer | None = None
        self.host: str | None = None

    def start(self) -> str:
        if self._server is not None:
            raise RuntimeError("franky-sim is already running")
        sim = MujocoSimulator(enable_visualization=False)
        sim.init()
        try:
            robot = sim.add_robot(initial_q=self.initial_q)
            kwargs = {} if self.hostname is None else {"hostname_candidates": [self.hostname]}
            server = franky_sim.SimulationServer(sim, **kwargs)
            server.init()
            server.run_async()
        except BaseException:
            sim.cleanup()
            raise
        self._sim, self._server = sim, server
        self.host = str(robot.hostname)
        return self.host

    def stop(self) -> None:
        server, sim = self._server, self._sim
        self._server = self._sim = None
        if server is not None:
            server.cleanup()
        if sim is not None:
            try:
                sim.cleanup()
            except RuntimeError:
                log.debug("franky-sim simulator already cleaned up", exc_info=True)

    def __enter__(self) -> FrankySimServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="franky-sim (MuJoCo) on a loopback address")
    parser.add_argument(
        "--hostname", default=None, help="bind this address (default: first free 127.x.y.z)"
    )
    parser.add_argument(
        "--initial-q", default=None, help="7 comma-separated joint angles (rad) to start from"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    initial_q = DEFAULT_INITIAL_Q
    if args.initial_q:
        initial_q = tuple(float(v) for v in args.initial_q.split(","))
    server = FrankySimServer(initial_q=initial_q, hostname=args.hostname)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    watch_parent(done)
    host = server.start()
    sys.stdout.write(f"READY {host}\n")
    sys.stdout.flush()
    try:
        done.wait()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
