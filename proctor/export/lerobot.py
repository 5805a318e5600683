"""``proctor export --format lerobot``: a campaign's rollouts as a LeRobot
dataset (format v3.0, as LeRobot 0.4 reads it with ``LeRobotDataset``).

Layout of the output folder (written under a temporary name, renamed into
place when complete)::

    meta/info.json        codebase_version "v3.0", fps, features, path templates,
                          chunks_size, file size limits, totals
    meta/tasks.parquet    one row per task string (index) with its task_index
    meta/episodes/chunk-000/file-000.parquet
                          one row per episode: tasks, length, where its rows and
                          video frames lie (data/*, videos/<key>/*, from/to
                          timestamps), and proctor/* columns: uid, run code,
                          policy (as the audience may see it), object, outcome
    meta/stats.json       min, max, mean, std, count of every feature
    meta/proctor.json     what this is: campaign, audience, label stream, each
                          episode's events (time, frame, kind, message), the
                          episodes left out and why, identities withheld
    data/chunk-000/file-000.parquet         the frames (columns below)
    videos/observation.images.<camera>/chunk-000/file-000.mp4

One LeRobot episode per rollout; its task is the object's prompt (the
object's display name when it has none). The frame rate is the primary
camera's (``exterior`` when recorded); one frame per frame of its video, and
everything else is resampled onto those frames as
``proctor.export.lerobot_frames`` says: telemetry sample-and-hold (the last
sample at or before the frame's capture time), another camera's nearest
frame, events counted on the frame whose interval holds them. Videos are
H.264 at a constant rate so frame ``k`` sits at ``k / fps``, the recording's
packets copied where they are exactly those frames and re-encoded where not
(``proctor.export.lerobot_video``; ``meta/proctor.json`` counts both); the
capture time is kept as ``observation.capture_time``.

Features: ``observation.images.<camera>``; ``observation.state`` (7 joint
positions and the gripper position); ``observation.joint_velocity``;
``observation.ee_pose`` (x y z qx qy qz qw); ``observation.gripper_position``;
``action`` (the arm command the station sent, 7 wide and NaN-padded as the
recording's, then the gripper target); ``action.requested`` (the same as the
policy asked); ``action.kind`` (``ArmCommandKind`` index, -1 before the first
action); annotations: ``annotation.placement`` and ``annotation.placed`` (the
placement rows the export's label stream reads, as labelled: an episode the
analysis excludes keeps them, and ``meta/proctor.json`` says why it is excluded),
``annotation.operator_event``, ``annotation.station_event``,
``annotation.envelope_event`` (counts on the frame), ``annotation.envelope``
(the envelope's bit mask in force, ``EnvelopeReason`` bits) and
``annotation.outcome`` (``Outcome`` index, -1 when none). The simulator's
privileged ground truth is never exported. Files rotate at LeRobot's size
limits (``files_size_in_mb``), a new chunk folder every ``chunks_size`` files.

Who may export what is ``proctor.export.audience``'s rule: the public a
released campaign, named as on the public board; a submitter their own
policies' episodes, before release too (a private export).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import sqlalchemy as sa

from proctor import __version__
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Assignment, Episode, EpisodeEvent, ObjectType, Policy
from proctor.core.domain import EpisodeState, LabelStream
from proctor.core.errors import UsageError
from proctor.core.recording.reader import Recording, load_recording
from proctor.export.audience import Audience, audience
from proctor.export.dataset import ExportSummary
from proctor.export.lerobot_frames import (
    INT_FEATURES,
    TELEMETRY_FEATURES,
    EpisodeFrames,
    TimedEvent,
    episode_frames,
    feature_names,
)
from proctor.export.lerobot_video import (
    CameraVideo,
    CopiedVideo,
    EncodedVideo,
    PixelStats,
    SourceVideo,
    VideoMode,
)
from proctor.export.staging import check_free, staged_folder

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # files per chunk folder (LeRobot's default)
DATA_FILE_MB = 100
VIDEO_FILE_MB = 200
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE.format(chunk_index=0, file_index=0) + ".parquet"
IMAGE_KEY = "observation.images.{camera}"
CAPTURE_TIME = "observation.capture_time"
CAMERA_THREADS = 2  # cameras whose videos are written at once (the station records two)
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)


def _next_file(chunk: int, file: int) -> tuple[int, int]:
    file += 1
    return (chunk + 1, 0) if file >= CHUNKS_SIZE else (chunk, file)


@dataclass
class _DataFiles:
    root: Path
    chunk: int = 0
    file: int = 0
    writer: pq.ParquetWriter | None = None
    rows: int = 0  # frames written so far, all files

    def path(self) -> Path:
        return self.root / DATA_PATH.format(chunk_index=self.chunk, file_index=self.file)

    def write(self, table: pa.Table) -> tuple[int, int]:
        if self.writer is not None and self.path().stat().st_size >= DATA_FILE_MB * 1e6:
            self.writer.close()
            self.writer = None
            self.chunk, self.file = _next_file(self.chunk, self.file)
        if self.writer is None:
            self.path().parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.path(), table.schema)
        self.writer.write_table(table)
        self.rows += table.num_rows
        return self.chunk, self.file

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


@dataclass
class _Videos:
    """Each camera's open video files, rotated at the size limit. A camera
    has one open file of re-encoded episodes and one of copied episodes for
    each set of codec parameters met (``proctor.export.lerobot_video``);
    LeRobot finds an episode's frames by the file each episode names, so
    files of one camera need not hold consecutive episodes."""

    root: Path
    fps: int
    mode: VideoMode = VideoMode.copy
    open: dict[tuple[str, bytes | None], tuple[int, int, CameraVideo]] = field(default_factory=dict)
    last: dict[str, tuple[int, int]] = field(default_factory=dict)  # camera → newest file
    closed: dict[str, list[CameraVideo]] = field(default_factory=dict)
    copied: int = 0  # episode videos copied
    encoded: int = 0  # and re-encoded
    _lock: threading.Lock = field(default_factory=threading.Lock)  # cameras append at once

    def append(
        self, camera: str, size: tuple[int, int], source: SourceVideo, picks: np.ndarray
    ) -> tuple[int, int, float, float]:
        """Add one episode's frames of ``camera``: (chunk, file, from, to)."""
        copy = self.mode is VideoMode.copy and source.copyable(picks, *size)
        kind = source.extradata if copy else None  # the file's codec parameters; None: encoded
        chunk, file, video = self._file(camera, size, kind, source)
        start, end = video.append(source, picks)
        with self._lock:
            if copy:
                self.copied += 1
            else:
                self.encoded += 1
        return chunk, file, start, end

    def _file(
        self, camera: str, size: tuple[int, int], kind: bytes | None, source: SourceVideo
    ) -> tuple[int, int, CameraVideo]:
        current = self.open.get((camera, kind))
        if current is not None:
            if current[2].path.stat().st_size < VIDEO_FILE_MB * 1e6:
                return current
            self._close(camera, current[2])
        chunk, file = self.last.get(camera, (0, -1))
        chunk, file = _next_file(chunk, file) if file >= 0 else (0, 0)
        self.last[camera] = (chunk, file)
        key = IMAGE_KEY.format(camera=camera)
        path = self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
        video: CameraVideo = (
            EncodedVideo(path, self.fps, *size)
            if kind is None
            else CopiedVideo(path, self.fps, source)
        )
        self.open[(camera, kind)] = (chunk, file, video)
        return chunk, file, video

    def _close(self, camera: str, video: CameraVideo) -> None:
        video.close()
        self.closed.setdefault(camera, []).append(video)

    def close(self) -> dict[str, list[CameraVideo]]:
        for (camera, _), (_, _, video) in self.open.items():
            self._close(camera, video)
        self.open.clear()
        return self.closed

    def abort(self) -> None:
        """Close every open file after a failure (the staged folder is then removed)."""
        for _, _, video in self.open.values():
            with contextlib.suppress(Exception):
                video.close()
        self.open.clear()


@dataclass
class _Episode:
    row: Episode
    policy: str
    obj: ObjectType


def _episodes(session: ProctorSession, aud: Audience) -> list[_Episode]:
    q = (
        sa.select(Episode, Policy, ObjectType)
        .join(Assignment, Episode.assignment_id == Assignment.id)
        .join(Policy, Assignment.policy_id == Policy.id)
        .join(ObjectType, Episode.object_type_id == ObjectType.id)
        .where(Episode.campaign_id == aud.campaign.id, Episode.state == EpisodeState.closed)
        .order_by(Episode.id)
    )
    if aud.policy_ids is not None:
        q = q.where(Policy.id.in_(aud.policy_ids))
    return [
        _Episode(ep, aud.labels.get(pol.name, pol.name), obj) for ep, pol, obj in session.execute(q)
    ]


def _task(obj: ObjectType) -> str:
    return obj.prompt.strip() or obj.display_name or obj.name


def _frame_table(frames: EpisodeFrames, episode_index: int, first: int, task: int) -> pa.Table:
    n = frames.length
    columns: dict[str, pa.Array] = {
        "timestamp": pa.array(np.arange(n, dtype=np.float32) / np.float32(frames.fps)),
        "frame_index": pa.array(np.arange(n, dtype=np.int64)),
        "episode_index": pa.array(np.full(n, episode_index, dtype=np.int64)),
        "index": pa.array(np.arange(first, first + n, dtype=np.int64)),
        "task_index": pa.array(np.full(n, task, dtype=np.int64)),
        CAPTURE_TIME: pa.array(frames.capture_s.astype(np.float32)),
    }
    for name, values in frames.floats.items():
        width = values.shape[1]
        if width == 1:
            columns[name] = pa.array(values[:, 0])
        else:
            flat = pa.array(values.reshape(-1))
            columns[name] = pa.FixedSizeListArray.from_arrays(flat, width)
    for name, ints in frames.ints.items():
        columns[name] = pa.array(ints)
    return pa.table(columns)


def _stats(values: np.ndarray) -> dict[str, Any]:
    """LeRobot's per-feature statistics, over the recorded values only (NaN
    marks a channel the command did not use, or no command yet); a channel
    never recorded gets zeros, so a normaliser reading them stays finite."""
    v = values.astype(np.float64).reshape(len(values), -1)
    present = np.isfinite(v).any(axis=0)
    kept = v[:, present]

    def stat(fn: Callable[..., np.ndarray], **kw: Any) -> list[float]:
        out = np.zeros(v.shape[1])
        if kept.size:
            out[present] = fn(kept, axis=0, **kw)
        return [float(x) for x in out]

    result: dict[str, Any] = {
        "min": stat(np.nanmin),
        "max": stat(np.nanmax),
        "mean": stat(np.nanmean),
        "std": stat(np.nanstd),
        "count": [len(v)],
    }
    for q in QUANTILES:
        result[f"q{int(q * 100):02d}"] = stat(np.nanquantile, q=q)
    return result


@dataclass
class _Collected:
    """Everything gathered while writing, for the metadata files."""

    episodes: list[dict[str, Any]] = field(default_factory=list)
    documents: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    tasks: dict[str, int] = field(default_factory=dict)
    values: dict[str, list[np.ndarray]] = field(default_factory=dict)
    cameras: dict[str, tuple[int, int]] = field(default_factory=dict)

    def keep(self, table: pa.Table) -> None:
        for name in table.column_names:
            col = table.column(name).combine_chunks()
            if pa.types.is_fixed_size_list(col.type):
                arr = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), -1)
            else:
                arr = col.to_numpy(zero_copy_only=False).reshape(len(col), -1)
            self.values.setdefault(name, []).append(arr)


def _camera_size(rec: Recording, camera: str) -> tuple[int, int]:
    entry = rec.manifest.get("cameras", {}).get(camera, {})
    width, height = entry.get("width"), entry.get("height")
    if isinstance(width, int) and isinstance(height, int):
        return width, height
    import av

    with av.open(str(rec.video_path(camera))) as src:
        stream = src.streams.video[0]
        return stream.width, stream.height


def _events(session: ProctorSession, ep: Episode) -> list[EpisodeEvent]:
    return list(
        session.scalars(
            sa.select(EpisodeEvent)
            .where(EpisodeEvent.episode_id == ep.id)
            .order_by(EpisodeEvent.id)
        )
    )


@dataclass
class _Writer:
    session: ProctorSession
    store: ArtifactStore
    root: Path
    placements: dict[int, tuple[float, ...]]  # episode id → the stream's placement times
    excluded: dict[str, str]
    fps: int | None = None
    mode: VideoMode = VideoMode.copy
    data: _DataFiles = field(init=False)
    videos: _Videos | None = None
    got: _Collected = field(default_factory=_Collected)
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(CAMERA_THREADS))

    def __post_init__(self) -> None:
        self.data = _DataFiles(self.root)

    def add(self, item: _Episode) -> None:
        ep = item.row
        rec = load_recording(self.session, self.store, ep)
        try:
            self._add(item, rec)
        finally:
            rec.close()

    def abort(self) -> None:
        """Close what is open after a failure, so the staged folder can go."""
        if self.videos is not None:
            self.videos.abort()
        with contextlib.suppress(Exception):
            self.data.close()

    def _video(
        self, rec: Recording, camera: str, size: tuple[int, int], picks: np.ndarray
    ) -> tuple[int, int, float, float]:
        assert self.videos is not None
        with SourceVideo(rec.video_path(camera)) as source:
            return self.videos.append(camera, size, source, picks)

    def _skip(self, ep: Episode, reason: str) -> None:
        self.got.skipped.append({"episode_uid": ep.uid, "reason": reason})

    def _add(self, item: _Episode, rec: Recording) -> None:
        ep = item.row
        if rec.telemetry is None or not rec.frames:
            self._skip(ep, "no recording (telemetry and video)")
            return
        events = _events(self.session, ep)
        frames = episode_frames(
            rec,
            placements_s=list(self.placements.get(ep.id, ())),
            events=[TimedEvent(e.t_s or 0.0, e.kind) for e in events],
            outcome=ep.outcome.value if ep.outcome else None,
        )
        if self.fps is None:
            self.fps = frames.fps
            self.videos = _Videos(self.root, frames.fps, self.mode)
        if frames.fps != self.fps or self.videos is None:
            self._skip(ep, f"camera at {frames.fps} fps; the dataset is at {self.fps} fps")
            return
        index = len(self.got.episodes)
        task = self.got.tasks.setdefault(_task(item.obj), len(self.got.tasks))
        meta: dict[str, Any] = {"episode_index": index, "tasks": [_task(item.obj)]}
        meta["length"] = frames.length
        cameras = list(frames.video_frames)
        sizes = {c: self.got.cameras.setdefault(c, _camera_size(rec, c)) for c in cameras}
        # the cameras' files are independent: each in its own thread (PyAV lets go
        # of the GIL while it reads, decodes and writes)
        placed = self.pool.map(
            lambda camera: self._video(rec, camera, sizes[camera], frames.video_frames[camera]),
            cameras,
        )
        for camera, (chunk, file, start, end) in zip(cameras, placed, strict=True):
            key = IMAGE_KEY.format(camera=camera)
            meta |= {
                f"videos/{key}/chunk_index": chunk,
                f"videos/{key}/file_index": file,
                f"videos/{key}/from_timestamp": start,
                f"videos/{key}/to_timestamp": end,
            }
        first = self.data.rows
        table = _frame_table(frames, index, first, task)
        chunk, file = self.data.write(table)
        self.got.keep(table)
        meta |= {
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": first,
            "dataset_to_index": first + frames.length,
            "meta/episodes/chunk_index": 0,
            "meta/episodes/file_index": 0,
            "proctor/episode_uid": ep.uid,
            "proctor/run_code": ep.run_code or "",
            "proctor/policy": item.policy,
            "proctor/object": item.obj.name,
            "proctor/outcome": ep.outcome.value if ep.outcome else "",
        }
        self.got.episodes.append(meta)
        self.got.documents.append(self._document(index, ep, events, frames))

    def _document(
        self, index: int, ep: Episode, events: list[EpisodeEvent], frames: EpisodeFrames
    ) -> dict[str, Any]:
        def frame_of(t: float) -> int:
            at = int(np.searchsorted(frames.capture_s, t, side="right")) - 1
            return min(max(at, 0), frames.length - 1)

        return {
            "episode_index": index,
            "episode_uid": ep.uid,
            "placements_s": list(self.placements.get(ep.id, ())),
            "excluded_from_analysis": self.excluded.get(ep.uid),
            "events": [
                {
                    "t_s": e.t_s,
                    "frame_index": frame_of(e.t_s or 0.0),
                    "kind": e.kind,
                    "message": e.message,
                }
                for e in events
            ],
        }


def _features(got: _Collected, videos: dict[str, list[CameraVideo]]) -> dict[str, Any]:
    names = feature_names()
    features: dict[str, Any] = {}
    for camera, files in videos.items():
        width, height = got.cameras[camera]
        features[IMAGE_KEY.format(camera=camera)] = {
            "dtype": "video",
            "shape": [height, width, 3],
            "names": ["height", "width", "channels"],
            "info": files[0].info(),
        }
    features[CAPTURE_TIME] = {"dtype": "float32", "shape": [1], "names": None}
    for name, columns in TELEMETRY_FEATURES.items():
        features[name] = {"dtype": "float32", "shape": [len(columns)], "names": names[name]}
    for name in INT_FEATURES:
        features[name] = {"dtype": "int64", "shape": [1], "names": names[name]}
    for name in ("timestamp",):
        features[name] = {"dtype": "float32", "shape": [1], "names": None}
    for name in ("frame_index", "episode_index", "index", "task_index"):
        features[name] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def _stats_of(got: _Collected, videos: dict[str, list[CameraVideo]]) -> dict[str, Any]:
    stats = {name: _stats(np.concatenate(parts)) for name, parts in got.values.items()}
    for camera, files in videos.items():
        merged = PixelStats()
        for video in files:
            merged.merge(video.stats)
        stats[IMAGE_KEY.format(camera=camera)] = merged.as_lerobot()
    return stats


def _write_meta(root: Path, w: _Writer, aud: Audience, stream: LabelStream) -> None:
    got = w.got
    videos = w.videos.close() if w.videos is not None else {}
    w.data.close()
    meta = root / "meta"
    (meta / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    info = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": "proctor",
        "total_episodes": len(got.episodes),
        "total_frames": w.data.rows,
        "total_tasks": len(got.tasks),
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": DATA_FILE_MB,
        "video_files_size_in_mb": VIDEO_FILE_MB,
        "fps": w.fps or 0,
        "splits": {"train": f"0:{len(got.episodes)}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if videos else None,
        "features": _features(got, videos),
    }
    (meta / "info.json").write_text(json.dumps(info, indent=2), encoding="utf-8")
    tasks = pa.table(
        {"task_index": pa.array(list(got.tasks.values()), pa.int64())},
    ).append_column("task", pa.array(list(got.tasks), pa.string()))
    # LeRobot reads the task strings as the pandas index of this table
    tasks = tasks.replace_schema_metadata(
        {
            b"pandas": json.dumps(
                {
                    "index_columns": ["task"],
                    "column_indexes": [],
                    "columns": [
                        {"name": "task_index", "field_name": "task_index",
                         "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
                        {"name": "task", "field_name": "task", "pandas_type": "unicode",
                         "numpy_type": "object", "metadata": None},
                    ],
                    "pandas_version": "2.0.0",
                }
            ).encode()
        }
    )  # fmt: skip
    pq.write_table(tasks, meta / "tasks.parquet")
    pq.write_table(pa.Table.from_pylist(got.episodes), root / EPISODES_PATH)
    (meta / "stats.json").write_text(json.dumps(_stats_of(got, videos), indent=1))
    doc = {
        "format": "proctor.export.lerobot/1",
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "code_version": f"proctor-{__version__}",
        "campaign": aud.campaign.name,
        "audience": f"private: submitter {aud.submitter}" if aud.private else "public",
        "label_stream": stream.value,
        "identities_withheld": list(aud.withheld),
        "episodes": got.documents,
        "skipped": got.skipped,
        # episode videos (one a camera an episode) copied from the recording as
        # they are, and decoded and re-encoded (proctor.export.lerobot_video)
        "videos": {
            "mode": w.mode.value,
            "copied": w.videos.copied if w.videos else 0,
            "reencoded": w.videos.encoded if w.videos else 0,
        },
    }
    (meta / "proctor.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")


def export_lerobot(
    session: ProctorSession,
    store: ArtifactStore,
    *,
    campaign: str,
    out: Path,
    submitter: str | None = None,
    policy: str | None = None,
    stream: LabelStream = LabelStream.auto_and_reviewed,
    progress: Callable[[int, int], None] | None = None,
    video: VideoMode = VideoMode.copy,
) -> ExportSummary:
    """Write ``campaign`` as a LeRobot v3 dataset in ``out`` for the public
    (``submitter`` None) or one submitter (their policies, or ``policy``);
    ``video`` says whether recordings are copied where they allow it."""
    from proctor.analysis.store import load_episodes, stream_placements

    aud = audience(session, campaign=campaign, submitter=submitter, policy=policy)
    out = Path(out)
    check_free(out)
    chosen = _episodes(session, aud)
    if not chosen:
        raise UsageError(f"campaign '{aud.campaign.name}': no closed episodes to export")
    table = load_episodes(session, campaign_id=aud.campaign.id, stream=stream)
    with staged_folder(out) as partial:
        writer = _Writer(
            session,
            store,
            partial,
            placements=stream_placements(session, [c.row for c in chosen], stream),
            excluded={x.episode_id: x.reason for x in table.excluded},
            mode=video,
        )
        try:
            with writer.pool:
                for i, item in enumerate(chosen):
                    writer.add(item)
                    if progress is not None:
                        progress(i + 1, len(chosen))
        except BaseException:
            writer.abort()
            raise
        if not writer.got.episodes:
            raise UsageError(f"campaign '{aud.campaign.name}': no episode has a recording")
        _write_meta(partial, writer, aud, stream)
    files = [p for p in out.rglob("*") if p.is_file()]
    return ExportSummary(
        folder=out,
        episodes=len(writer.got.episodes),
        files=len(files),
        bytes=sum(p.stat().st_size for p in files),
    )
