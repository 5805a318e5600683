"""Simulated stations for the demo, one process each.

Each process runs the station daemon (``proctor.station.daemon.StationDaemon``) on
the simulated cell, with its work from the campaign (the scheduler's
``CampaignWorkSource``) and its policy reached through the web server's
gateway, proving itself with the token the demo enrolled it with — the same
code path the operator console drives. The person at the
robot is replaced by a loop that presses Start, waits for the episode to
end, and closes it with the labelled ground-truth log
(``proctor.station.demo_log``); after a safety stop it presses Recover, as the
operator must.

Separate processes, because the simulated cell is CPU-bound Python: two
stations use both cores of a small machine, and they exercise the
scheduler's concurrent claiming for real.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import traceback
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class StationJob:
    database_url: str
    artifacts: str
    data_dir: str
    campaign_id: int
    station_name: str
    gateway: str  # the web server's origin, e.g. http://127.0.0.1:8000
    # the station's credential for the gateway, issued by the demo as an admin
    # enrols a station host (which holds it in PROCTOR_STATION_TOKEN)
    token: str = field(repr=False)


@dataclass(frozen=True)
class StationResult:
    station_name: str
    episodes: int
    skipped: int
    error: str | None = None


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
    from proctor.core.artifacts import open_store
    from proctor.core.db.engine import make_engine, make_session_factory
    from proctor.scheduler.work_source import CampaignWorkSource
    from proctor.station.config import load_station_config
    from proctor.station.daemon import NoWork, StationDaemon
    from proctor.station.runner import PolicyUnreachable

    engine = make_engine(job.database_url)
    sessions = make_session_factory(engine)
    store = open_store(job.artifacts)
    config = load_station_config(None, name=job.station_name)
    source = CampaignWorkSource(
        session_factory=sessions,
        campaign=job.campaign_id,
        station=job.station_name,
        gateway=job.gateway,
        station_token=job.token,
    )
    daemon = StationDaemon(
        config,
        "sim",
        sessions=sessions,
        store=store,
        spool_root=Path(job.data_dir) / "station" / job.station_name / "spool",
        source=source,
    )
    episodes = skipped = 0
    daemon.open()
    try:
        while not stop.is_set():
            if daemon.runner.arm_error is not None:
                daemon.recover_arm()  # the stand-in operator's explicit recovery
            # and their explicit homing (nothing homes on its own): the simulated
            # cell has nobody in it, and the gripper is opened for the next run
            daemon.home_arm(cell_clear=True, open_gripper=True)
            try:
                daemon.next_run()
            except NoWork:
                break
            except PolicyUnreachable:
                skipped += 1  # handed back to the scheduler: skipped, rescheduled
                continue
            daemon.start()
            daemon.runner.wait()
            daemon.close_with_ground_truth()
            episodes += 1
    finally:
        daemon.close()
        engine.dispose()
    return episodes, skipped


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
