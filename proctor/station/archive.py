"""From a spool folder to the artifact store and the database.

Used at the end of every episode and, after a crash, by recovery: assemble
the final files (``recorder.finalize_spool``), store each with its sha256,
write the manifest, and register an ``Artifact`` row per file. The spool
folder is removed by the caller once this has committed.

The manifest records the cell's ``layout`` in the episode's spatial
configuration (where the totes stand), so that a recording can be read
without the station's configuration: the annotator takes the bins from it.
The count of the safety envelope's interventions (``envelope.interventions``,
from the runner) is also stored on the episode row for the analysis; an
episode archived without it (recovery, a station that does not count) keeps
NULL: unknown, not zero.
The simulated cell's layout is a function of the configuration
(``proctor.station.sim.world.Layout``); a caller that knows its cell's layout passes
it as ``extra_manifest["layout"]`` (the real and twin cells pass their
commissioned layout, ``proctor.station.commissioning.cell_file``); a cell that describes none
(an uncommissioned real or twin cell) records none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Episode
from proctor.core.domain import ArtifactKind, Side
from proctor.core.recording import keys
from proctor.station import episodes
from proctor.station.recorder import RecordingResult, finalize_spool

MANIFEST_FORMAT = "proctor.episode/1"
PARQUET = "application/vnd.apache.parquet"


@dataclass
class Archived:
    shas: dict[str, str] = field(default_factory=dict)  # "video:exterior" → sha256
    notes: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)


def _rate(table_path: Path | None) -> tuple[float, float | None, float | None]:
    if table_path is None:
        return 0.0, None, None
    t = pq.read_table(table_path, columns=[keys.T]).column(keys.T).to_numpy()
    if len(t) < 2 or t[-1] <= t[0]:
        return 0.0, (float(t[0]) if len(t) else None), (float(t[-1]) if len(t) else None)
    return (len(t) - 1) / float(t[-1] - t[0]), float(t[0]), float(t[-1])


def cell_layout(profile: str | None, tote_side: Side, camera_side: Side) -> dict[str, Any] | None:
    """The cell's layout for this spatial configuration, as the manifest's
    ``layout`` (format ``proctor.cell_layout/1``), or None where unknown."""
    if profile != "sim":
        return None
    from proctor.station.sim.world import Layout

    return Layout.make(Side(tote_side), Side(camera_side)).describe()


def archive_recording(
    *,
    sessions: sessionmaker[ProctorSession],
    store: ArtifactStore,
    episode_id: int,
    spool: Path,
    cameras: list[str],
    camera_settings: dict[str, dict[str, Any]],
    recording: RecordingResult | None,
    ground_truth: dict[str, Any] | None,
    extra_manifest: dict[str, Any],
    interrupted: bool,
) -> Archived:
    final = finalize_spool(spool, cameras)
    out = Archived(notes=list(final.notes))
    files: list[episodes.StoredFile] = []

    def put(
        path: Path, kind: ArtifactKind, media: str, camera: str | None = None, **kw: Any
    ) -> str:
        stored = store.put_file(path)
        files.append(
            episodes.StoredFile(
                kind=kind,
                sha256=stored.sha256,
                size_bytes=stored.size_bytes,
                uri=stored.uri,
                media_type=media,
                camera=camera,
                **kw,
            )
        )
        out.shas[f"{kind.value}:{camera}" if camera else kind.value] = stored.sha256
        return stored.sha256

    manifest_cameras: dict[str, Any] = {}
    for name in cameras:
        settings = camera_settings.get(name, {})
        entry: dict[str, Any] = {**settings}
        if recording is not None and name in recording.cameras:
            cam = recording.cameras[name]
            entry.update(dropped=cam.dropped, device_gaps=cam.device_gaps)
        if name in final.videos:
            path, n = final.videos[name]
            entry["frames"] = n
            entry["video_sha256"] = put(
                path,
                ArtifactKind.video,
                "video/mp4",
                name,
                frame_count=n,
                details={
                    **settings,
                    **{k: entry[k] for k in ("dropped", "device_gaps") if k in entry},
                },
            )
            entry["frames_sha256"] = put(
                final.frame_tables[name], ArtifactKind.frame_index, PARQUET, name, frame_count=n
            )
        else:
            entry["frames"] = 0
        manifest_cameras[name] = entry

    rate, t_first, t_last = _rate(final.telemetry)
    telemetry: dict[str, Any] = {
        "rows": final.telemetry_rows,
        "rate_hz": round(rate, 3),
        "first_t": t_first,
        "last_t": t_last,
        "segments": recording.telemetry_segments if recording is not None else None,
    }
    if final.telemetry is not None:
        telemetry["sha256"] = put(
            final.telemetry, ArtifactKind.telemetry, PARQUET, details={"rows": final.telemetry_rows}
        )
    gt_sha = None
    if ground_truth is not None:
        gt_path = spool / "final" / "ground_truth.json"
        gt_path.write_text(json.dumps(ground_truth, indent=1), encoding="utf-8")
        gt_sha = put(gt_path, ArtifactKind.ground_truth, "application/json")

    interventions, problem = episodes.envelope_interventions(extra_manifest.get("envelope"))
    if problem is not None:
        out.notes.append(problem)
    with session_scope(sessions) as s:
        ep = s.get(Episode, episode_id)
        assert ep is not None
        ep.envelope_interventions = interventions
        manifest = {
            "format": MANIFEST_FORMAT,
            "episode_uid": ep.uid,
            "run_code": ep.run_code,
            "object": ep.object_type_id and s.get(episodes.ObjectType, ep.object_type_id).name,  # type: ignore[union-attr]
            "items": ep.items,
            "budget_s": ep.budget_s,
            "tote_side": ep.tote_side.value,
            "camera_side": ep.camera_side.value,
            "layout": cell_layout(extra_manifest.get("profile"), ep.tote_side, ep.camera_side),
            "sim_seed": ep.sim_seed,
            "clock_start_s": ep.clock_start_s,
            "clock_end_s": ep.clock_end_s,
            "interrupted": interrupted,
            "cameras": manifest_cameras,
            "telemetry": telemetry,
            "ground_truth_sha256": gt_sha,
            "notes": out.notes,
            **extra_manifest,
        }
        manifest_path = spool / "final" / "manifest.json"
        manifest_path.write_text(json.dumps(manifest, indent=1, default=str), encoding="utf-8")
        put(manifest_path, ArtifactKind.manifest, "application/json")
        episodes.register_artifacts(s, episode=ep, files=files)
        episodes.add_event(
            s,
            episode=ep,
            kind="recording",
            message=f"recorded {final.telemetry_rows} telemetry rows, "
            + ", ".join(f"{n}: {c.get('frames', 0)} frames" for n, c in manifest_cameras.items()),
            details={
                "telemetry_rate_hz": telemetry["rate_hz"],
                "frames": {n: c.get("frames", 0) for n, c in manifest_cameras.items()},
                "dropped_frames": {n: c.get("dropped", 0) for n, c in manifest_cameras.items()},
                "notes": out.notes,
            },
        )
    out.manifest = manifest
    return out
