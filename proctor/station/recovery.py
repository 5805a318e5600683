"""Finding what a killed daemon left behind.

On start the daemon looks for this station's episodes still armed, running
or finishing. Each is finished from its spool folder — the complete
telemetry segments, the video up to its last complete fragment, the frame
tables cut to the frames the video holds — stored and registered like any
recording (manifest marked ``interrupted``), and the episode is marked
``interrupted`` with outcome ``system`` (a station failure, not the
policy's doing; the campaign requeues it).
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Episode, Station
from proctor.core.recording import keys
from proctor.station import episodes
from proctor.station.archive import archive_recording
from proctor.station.recorder import SPOOL_STATE, read_segments

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recovered:
    uid: str
    telemetry_rows: int
    frames: dict[str, int]
    notes: list[str]


def recover_interrupted(
    *,
    sessions: sessionmaker[ProctorSession],
    store: ArtifactStore,
    station_name: str,
    spool_root: Path,
) -> list[Recovered]:
    with session_scope(sessions) as s:
        station = s.scalar(sa.select(Station).where(Station.name == station_name))
        if station is None:
            return []
        found = [(e.id, e.uid, e.state) for e in episodes.live_episodes(s, station=station)]
    out: list[Recovered] = []
    for episode_id, uid, state in found:
        spool = Path(spool_root) / uid
        state_file = spool / SPOOL_STATE
        if not state_file.exists():
            with session_scope(sessions) as s:
                ep = s.get(Episode, episode_id)
                assert ep is not None
                episodes.mark_interrupted(
                    s,
                    episode=ep,
                    reason=f"the station stopped while the episode was {state.value}; "
                    "nothing was recorded",
                )
            out.append(Recovered(uid, 0, {}, ["nothing recorded"]))
            continue
        meta = json.loads(state_file.read_text(encoding="utf-8"))
        cameras = list(meta.get("cameras", {}))
        telemetry = read_segments(spool / "telemetry")
        last_t = (
            float(telemetry.column(keys.T)[-1].as_py())
            if telemetry is not None and telemetry.num_rows
            else None
        )
        with session_scope(sessions) as s:
            ep = s.get(Episode, episode_id)
            assert ep is not None
            if ep.clock_end_s is None and last_t is not None:
                ep.clock_end_s = last_t
        archived = archive_recording(
            sessions=sessions,
            store=store,
            episode_id=episode_id,
            spool=spool,
            cameras=cameras,
            camera_settings=meta.get("cameras", {}),
            recording=None,
            ground_truth=None,
            extra_manifest={
                "profile": meta.get("profile"),
                "telemetry_hz": meta.get("telemetry_hz"),
                "recovered": True,
                # the commissioned layout the episode started with (None: the
                # profile's own, see archive.cell_layout)
                **({"layout": meta["layout"]} if meta.get("layout") else {}),
            },
            interrupted=True,
        )
        with session_scope(sessions) as s:
            ep = s.get(Episode, episode_id)
            assert ep is not None
            episodes.mark_interrupted(
                s,
                episode=ep,
                reason="the station daemon stopped mid-episode; recovered on restart",
            )
        shutil.rmtree(spool, ignore_errors=True)
        frames = {
            name: int(c.get("frames", 0))
            for name, c in archived.manifest.get("cameras", {}).items()
        }
        out.append(
            Recovered(uid, int(archived.manifest["telemetry"]["rows"]), frames, archived.notes)
        )
        log.warning("recovered interrupted episode %s: %s", uid, archived.notes)
    return out


def spool_rows(folder: Path) -> int:
    """Telemetry rows already safe in a spool folder (for tests and diagnostics)."""
    paths = sorted((folder / "telemetry").glob("seg-*.parquet"))
    return sum(pq.read_metadata(p).num_rows for p in paths)
