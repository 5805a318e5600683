"""An episode's recording as a Rerun ``.rrd`` file.

* each camera: the MP4 as an ``AssetVideo`` (static) at ``cameras/<name>``,
  and one ``VideoFrameReference`` per frame, placed on the ``episode_time``
  timeline at the frame's presentation time from the recorder's frame table
  (``pts_s``: the video's own timestamps, the episode clock since start);
* telemetry as time series under ``telemetry/…`` (gripper target requested,
  target and measured; end-effector position, height and speed; policy
  latency; joint positions), sent column-wise;
* events as markers: placements, detector candidates and the operator log as
  ``TextLog`` entries under ``events/…`` at their times, and placements also
  as points on ``telemetry/markers/placements`` so they show on the plots.

Nothing here names the policy: the file carries the episode uid, its run
code and object, so it is the same whether or not the campaign is released.

Rerun analytics: the SDK's file sink sends nothing (Rerun's analytics
pipeline runs only in its viewer and CLI, and is off when its configuration
says so or ``CI`` is set); the tests run the ``rerun`` CLI with analytics
disabled in a private configuration folder (``rerun_cli_env``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from proctor.core.errors import NotAvailableYet, ProctorError
from proctor.core.recording import keys

RRD_FORMAT = "proctor.rrd/1"  # bump when the layout below changes: cached files are rebuilt
TIMELINE = "episode_time"
APPLICATION_ID = "proctor"

# (entity path, telemetry column, series name, RGB)
SERIES: tuple[tuple[str, str, str, tuple[int, int, int]], ...] = (
    (
        "telemetry/gripper/target_requested",
        keys.GRIPPER_TARGET_REQUESTED,
        "target (policy)",
        (214, 137, 16),
    ),
    ("telemetry/gripper/target", keys.GRIPPER_TARGET, "target (gripper)", (192, 57, 43)),
    ("telemetry/gripper/measured", keys.GRIPPER_POSITION, "measured", (31, 78, 121)),
    ("telemetry/ee/height", keys.EE_Z, "ee height (m)", (46, 139, 87)),
    ("telemetry/ee/speed", keys.EE_SPEED, "ee speed (m/s)", (142, 68, 173)),
    ("telemetry/ee/x", keys.EE_X, "ee x (m)", (22, 160, 133)),
    ("telemetry/ee/y", keys.EE_Y, "ee y (m)", (127, 140, 141)),
    ("telemetry/policy/latency", keys.POLICY_LATENCY, "policy latency (s)", (176, 58, 46)),
    *((f"telemetry/joints/{c}", c, c, (90, 90, 90)) for c in keys.JOINT_POSITION),
)


@dataclass(frozen=True)
class Marker:
    t_s: float  # seconds since the episode start
    text: str
    level: str = "INFO"


@dataclass
class RrdInput:
    uid: str
    title: str  # run code and object: never the policy
    clock_start_s: float
    videos: dict[str, Path] = field(default_factory=dict)  # camera → MP4
    frame_pts: dict[str, np.ndarray] = field(default_factory=dict)  # camera → pts_s
    telemetry: pa.Table | None = None
    placements: list[Marker] = field(default_factory=list)
    candidates: list[Marker] = field(default_factory=list)
    log: list[Marker] = field(default_factory=list)


@dataclass(frozen=True)
class RrdSummary:
    path: Path
    frames: dict[str, int]
    telemetry_rows: int
    markers: int


def _rerun():  # type: ignore[no-untyped-def]
    try:
        import rerun as rr
    except ImportError:  # pragma: no cover - the extra is part of ./run demo and ./run test
        raise NotAvailableYet(
            "the .rrd export needs the rerun extra: pip install 'proctor[rerun]'"
        ) from None
    return rr


def _markers(rec, rr, path: str, markers: list[Marker]) -> None:  # type: ignore[no-untyped-def]
    if not markers:
        return
    ms = sorted(markers, key=lambda m: m.t_s)
    rec.send_columns(
        path,
        indexes=[rr.TimeColumn(TIMELINE, duration=np.array([m.t_s for m in ms]))],
        columns=rr.TextLog.columns(text=[m.text for m in ms], level=[m.level for m in ms]),
    )


def build_rrd(data: RrdInput, out: Path) -> RrdSummary:
    """Write ``data`` to ``out`` (an ``.rrd`` file)."""
    rr = _rerun()
    rec = rr.RecordingStream(
        APPLICATION_ID, recording_id=f"episode-{data.uid}", send_properties=True
    )
    rec.save(str(out))
    try:
        rec.send_recording_name(f"episode {data.uid} · {data.title}")
        frames: dict[str, int] = {}
        for camera, mp4 in data.videos.items():
            pts = np.asarray(data.frame_pts.get(camera, []), dtype=float)
            entity = f"cameras/{camera}"
            rec.log(entity, rr.AssetVideo(path=str(mp4)), static=True)
            if pts.size:
                rec.send_columns(
                    entity,
                    indexes=[rr.TimeColumn(TIMELINE, duration=pts)],
                    columns=rr.VideoFrameReference.columns_nanos(
                        np.round(pts * 1e9).astype(np.int64)
                    ),
                )
            frames[camera] = int(pts.size)

        rows = 0
        if data.telemetry is not None and data.telemetry.num_rows:
            tel = data.telemetry
            t = tel.column(keys.T).to_numpy(zero_copy_only=False).astype(float) - data.clock_start_s
            rows = tel.num_rows
            for entity, column, name, rgb in SERIES:
                if column not in tel.column_names:
                    continue
                v = tel.column(column).to_numpy(zero_copy_only=False).astype(float)
                ok = np.isfinite(v)
                if not ok.any():
                    continue
                rec.log(entity, rr.SeriesLines(colors=[rgb], names=[name]), static=True)
                rec.send_columns(
                    entity,
                    indexes=[rr.TimeColumn(TIMELINE, duration=t[ok])],
                    columns=rr.Scalars.columns(scalars=v[ok]),
                )
        if data.placements:
            ts = np.array(sorted(m.t_s for m in data.placements))
            entity = "telemetry/markers/placements"
            rec.log(
                entity,
                rr.SeriesPoints(colors=[(39, 174, 96)], names=["placement"], markers=["diamond"]),
                static=True,
            )
            rec.send_columns(
                entity,
                indexes=[rr.TimeColumn(TIMELINE, duration=ts)],
                columns=rr.Scalars.columns(scalars=np.arange(1, ts.size + 1, dtype=float)),
            )
        _markers(rec, rr, "events/placements", data.placements)
        _markers(rec, rr, "events/candidates", data.candidates)
        _markers(rec, rr, "events/log", data.log)
        rec.flush()
    finally:
        rec.disconnect()
    return RrdSummary(
        path=out,
        frames=frames,
        telemetry_rows=rows,
        markers=len(data.placements) + len(data.candidates) + len(data.log),
    )


# ------------------------------------------------------------- the rerun CLI


def rerun_cli() -> str:
    """The ``rerun`` executable of this environment."""
    import sys

    beside = Path(sys.executable).with_name("rerun")
    found = str(beside) if beside.exists() else shutil.which("rerun")
    if not found:
        raise NotAvailableYet("the rerun CLI is not installed: pip install 'proctor[rerun]'")
    return found


def rerun_cli_env(config_dir: Path) -> dict[str, str]:
    """An environment for the ``rerun`` CLI with analytics disabled in a
    private configuration folder (the user's own is left alone)."""
    env = dict(os.environ)
    env["XDG_CONFIG_HOME"] = str(config_dir)
    env["XDG_DATA_HOME"] = str(config_dir / "data")
    env.pop("FORCE_RERUN_ANALYTICS", None)
    subprocess.run(
        [rerun_cli(), "analytics", "disable"],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return env


def verify_rrd(path: Path) -> str:
    """Run ``rerun rrd verify`` on a file; returns its output, raises on failure."""
    with tempfile.TemporaryDirectory(prefix="rerun-cfg-") as cfg:
        env = rerun_cli_env(Path(cfg))
        r = subprocess.run(
            [rerun_cli(), "rrd", "verify", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    if r.returncode != 0:
        raise ProctorError(f"rerun rrd verify failed: {r.stderr.strip() or r.stdout.strip()}")
    return (r.stdout + r.stderr).strip()
