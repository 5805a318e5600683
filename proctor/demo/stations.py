"""Simulated stations for the demo, one process each.

Each process is a station host as production has one: the station daemon
(``proctor.station.daemon.StationDaemon``) on the simulated cell, opened by
``proctor.station.uplink.remote.open_remote_station`` with nothing but the
server's origin and the token the demo enrolled it with. It claims runs,
reports episodes and uploads recordings over the station API on loopback,
keeps its own ledger (a SQLite file and an artifact folder of its own), and
reaches the policies through the server's gateway: the production path is the
path the demo exercises. The person at the robot is replaced by
``StandInOperator``: it presses Start, waits for the episode to end, and
closes it with the labelled ground-truth log (``proctor.station.demo_log``);
after a safety stop it presses Recover, as the operator must.

Separate processes, because the simulated cell is CPU-bound Python: two
stations use both cores of a small machine, and they exercise the
scheduler's concurrent claiming for real.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

# how long a station that found no more work waits for the server to confirm
# everything it recorded (the last recordings' uploads) before it gives up
DRAIN_S = 120.0


@dataclass(frozen=True)
class StationJob:
    server: str  # the web server's origin, e.g. http://127.0.0.1:8000
    data_dir: str  # the station host's own folder: its ledger, spool and artifacts
    campaign_id: int
    station_name: str
    # the station's credential, issued by the demo as an admin enrols a station
    # host (which holds it in PROCTOR_STATION_TOKEN)
    token: str = field(repr=False)


@dataclass(frozen=True)
class StationResult:
    station_name: str
    episodes: int
    skipped: int
    error: str | None = None


class StandInOperator:
    """The person at a simulated station: takes the next run, starts it, waits
    for it to end, closes it with the ground-truth log, and recovers and homes
    the arm explicitly before the next (nothing homes on its own; the
    simulated cell has nobody in it, and the gripper is opened for the next
    run). ``on_episode(uid, run_code)`` hears of each episode closed."""

    def __init__(self, daemon: Any, on_episode: Callable[[str, str], None] | None = None) -> None:
        self.daemon = daemon
        self.on_episode = on_episode or (lambda uid, run_code: None)
        self.episodes = self.skipped = 0

    def one_run(self) -> bool:
        """Take, run and close one run; False when none was claimable."""
        from proctor.station.daemon import NoWork
        from proctor.station.episode_runner import PolicyUnreachable

        daemon = self.daemon
        if daemon.runner.arm_error is not None:
            daemon.recover_arm()
        daemon.home_arm(cell_clear=True, open_gripper=True)
        try:
            daemon.next_run()
        except NoWork:
            return False
        except PolicyUnreachable:
            self.skipped += 1  # handed back to the scheduler: skipped, rescheduled
            return True
        daemon.start()
        daemon.runner.wait()
        last = daemon.close_with_ground_truth()["last_episode"]
        self.episodes += 1
        self.on_episode(last["episode"], last["run_code"])
        return True


def run_station(job: StationJob, stop: Event, results: Any) -> None:
    """Process entry point: run claimed work until the campaign has none left."""
    logging.basicConfig(level=logging.ERROR)
    episodes = skipped = 0
    error: str | None = None
    try:
        episodes, skipped = _serve_campaign(job, stop)
    except BaseException as exc:  # reported to the parent, which decides
        error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
    results.put(StationResult(job.station_name, episodes, skipped, error))


def _serve_campaign(job: StationJob, stop: Event) -> tuple[int, int]:
    from proctor.core.errors import ProctorError
    from proctor.station.config import load_station_config
    from proctor.station.uplink.remote import open_remote_station

    config = load_station_config(None, name=job.station_name)
    daemon = open_remote_station(
        config,
        "sim",
        data_dir=Path(job.data_dir),
        server=job.server,
        token=job.token,
        campaign=job.campaign_id,
    )
    operator = StandInOperator(daemon)
    link = daemon.uplink
    assert link is not None  # a remote station always has its link to the server
    daemon.open()
    try:
        while not stop.is_set() and operator.one_run():
            pass
        # no more work: everything recorded reaches the server before the host stops
        if not stop.is_set() and not link.drain(DRAIN_S):
            raise ProctorError(
                f"station {job.station_name}: the server did not confirm everything "
                f"within {DRAIN_S:.0f} s: {link.status()}"
            )
    finally:
        daemon.close()
    return operator.episodes, operator.skipped


class StationPool:
    """Start N station processes; ``poll`` collects what finished."""

    def __init__(self, jobs: list[StationJob]) -> None:
        # spawn, not fork: the parent runs threads (web server, policy servers)
        self._ctx = mp.get_context("spawn")
        self._stop = self._ctx.Event()
        self._results = self._ctx.Queue()
        self._procs = [
            self._ctx.Process(
                target=run_station,
                args=(job, self._stop, self._results),
                name=job.station_name,
                daemon=True,
            )
            for job in jobs
        ]
        self.finished: list[StationResult] = []

    def start(self) -> None:
        for p in self._procs:
            p.start()

    def alive(self) -> bool:
        return any(p.is_alive() for p in self._procs)

    def poll(self) -> None:
        while not self._results.empty():
            self.finished.append(self._results.get_nowait())

    def stop(self, timeout_s: float = 30.0) -> None:
        """Ask the stations to finish their current episode and exit."""
        self._stop.set()
        for p in self._procs:
            p.join(timeout_s)
            if p.is_alive():
                p.kill()
                p.join(5)
        self.poll()

    def join(self) -> None:
        for p in self._procs:
            p.join()
        self.poll()
