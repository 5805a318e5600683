"""One station host of the stations-anywhere end-to-end test, as its own process.

    python -m tests.station.remote_station_proc CONFIG EVENTS

The station daemon on the simulated cell, opened the way a station host opens
it (``proctor.station.uplink.remote.open_remote_station``: the config's
``[uplink]`` names the server, the token comes from ``PROCTOR_STATION_TOKEN``,
the ledger lives in ``PROCTOR_DATA_DIR``), worked by the demo's stand-in operator
(``proctor.demo.stations.StandInOperator``: home, take the next run, start,
wait, close with the simulated cell's ground-truth log, recover after a
fault). It writes one JSON line per event to EVENTS (the test reads them):
``{"event": "episode", "uid", "run_code"}`` for each episode closed, and
``{"event": "idle", "forwarder": …}`` when it stops. It stops once no run has
been claimable for ``IDLE_EXIT_S`` and its forwarder has nothing waiting, or
when the file ``EVENTS.stop`` appears. Nothing here knows a database or a store.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

# long enough to outlast the server's stop-and-restart in the fault test
IDLE_EXIT_S = 45.0
DRAIN_S = 5.0


def _write(events: Path, **record: Any) -> None:
    with events.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def _parts(opened: Any) -> tuple[Any, Any]:
    """The daemon and its forwarder from what ``open_remote_station`` returns
    (the station API's client decides the shape: a daemon that carries its
    forwarder, or an object holding both)."""
    daemon = getattr(opened, "daemon", opened)
    forwarder = getattr(opened, "forwarder", None) or getattr(daemon, "forwarder", None)
    return daemon, forwarder


def _waiting(forwarder: Any) -> int:
    status = forwarder.status() if forwarder is not None else {}
    if isinstance(status, dict):
        return int(status.get("waiting", 0))
    return int(getattr(status, "waiting", 0))


def serve(config_path: Path, events: Path) -> None:
    from proctor.core.settings import load_settings
    from proctor.demo.stations import StandInOperator
    from proctor.station.config import load_station_config
    from proctor.station.uplink import remote

    config = load_station_config(config_path)
    settings = load_settings()
    opened = remote.open_configured_station(config, "sim", data_dir=settings.data_dir)
    daemon, forwarder = _parts(opened)
    operator = StandInOperator(
        daemon, lambda uid, run_code: _write(events, event="episode", uid=uid, run_code=run_code)
    )
    stop = Path(f"{events}.stop")
    daemon.open()
    _write(events, event="open", station=config.name)
    idle_since: float | None = None
    try:
        while not stop.exists():
            if operator.one_run():
                idle_since = None
                continue
            if forwarder is not None:
                forwarder.drain(DRAIN_S)
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > IDLE_EXIT_S and _waiting(forwarder) == 0:
                break
            time.sleep(0.5)
    finally:
        if forwarder is not None:
            forwarder.drain(30.0)
        status = forwarder.status() if forwarder is not None else None
        _write(events, event="idle", forwarder=status)
        daemon.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    serve(Path(sys.argv[1]), Path(sys.argv[2]))
