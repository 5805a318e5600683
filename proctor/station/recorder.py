"""The recorder: camera frames to H.264 MP4 plus a frame-timestamp table,
telemetry to Parquet, all stamped with the station clock, written into the
episode's spool folder in crash-safe pieces.

Nothing here runs on the control thread except ``Telemetry.append`` (a row
copied into a preallocated block; full blocks are handed to a writer
thread) and ``Recorder.add_frame`` (a queue put). Video is encoded on one
thread per camera into a *fragmented* MP4 (a fragment per keyframe, each
packet flushed), so a killed daemon leaves a file readable up to its last
fragment; ``finalize`` remuxes it (no re-encode) into a plain MP4 with its
index up front, for browsers. Telemetry and frame tables are written as
Parquet segments (temp file, fsync, rename): a crash loses at most the
segment being filled.

Frames the recorder could not keep up with are counted, never hidden: on a
real-time clock a full queue drops the frame (``dropped``); on a virtual
clock the producer waits instead, because simulated time can.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from proctor.core.recording import keys
from proctor.station.drivers.camera.base import Frame

log = logging.getLogger(__name__)

VIDEO_TIME_BASE = Fraction(1, 90_000)  # the MPEG clock: sub-millisecond PTS
SPOOL_STATE = "recording.json"

PHASES = tuple(keys.TelemetryPhase)
PHASE_CODE = {p: i for i, p in enumerate(PHASES)}
ACTION_KINDS = ("", "joint_position", "joint_velocity", "cartesian_pose", "cartesian_velocity")
ACTION_KIND_CODE = {k: i for i, k in enumerate(ACTION_KINDS)}
N_FLOATS = len(keys.TELEMETRY_FLOAT_COLUMNS)


def _fsync_write(path: Path, write: Any) -> None:
    """Write via a temp name, fsync, rename: a reader sees nothing or everything."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)


# -- telemetry -----------------------------------------------------------------


class _SegmentWriter(threading.Thread):
    """Writes Parquet segments handed to it, in order, off the caller's thread.
    A segment is a table, or a callable that builds one (built here, so that
    the caller — the control loop — does not spend its time on Arrow)."""

    def __init__(self, folder: Path, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._queue: queue.SimpleQueue[pa.Table | Callable[[], pa.Table] | None] = (
            queue.SimpleQueue()
        )
        self.segments = 0
        self.rows = 0
        self.error: BaseException | None = None
        self.start()

    def put(self, table: pa.Table | Callable[[], pa.Table]) -> None:
        self._queue.put(table)

    def run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self.error is not None:
                continue
            try:
                table = item if isinstance(item, pa.Table) else item()
                self.segments += 1
                path = self.folder / f"seg-{self.segments:06d}.parquet"
                _fsync_write(path, lambda p, t=table: pq.write_table(t, p, compression="zstd"))
                self.rows += table.num_rows
            except BaseException as exc:  # recorded, reported by close()
                log.error("writing %s failed", self.folder, exc_info=True)
                self.error = exc

    def close(self) -> None:
        self._queue.put(None)
        self.join()


def telemetry_schema() -> pa.Schema:
    fields = [
        pa.field(keys.T, pa.float64()),
        pa.field(keys.PHASE, pa.dictionary(pa.int8(), pa.string())),
        pa.field(keys.ACTION_KIND, pa.dictionary(pa.int8(), pa.string())),
        pa.field(keys.ACTION_STEP, pa.int32()),
        *[pa.field(c, pa.float64()) for c in keys.TELEMETRY_FLOAT_COLUMNS],
        pa.field(keys.GRIPPER_OBJECT, pa.bool_()),
        pa.field(keys.POLICY_CALLS, pa.int32()),
    ]
    return pa.schema(fields, metadata={b"format": b"proctor.telemetry/1"})


class Telemetry:
    """Telemetry rows for one episode. ``append`` is called by the control loop."""

    def __init__(self, folder: Path, rows_per_segment: int) -> None:
        self.rows_per_segment = max(1, rows_per_segment)
        self._writer = _SegmentWriter(folder, "telemetry-writer")
        self._new_block()
        self.rows = 0
        self.first_t: float | None = None
        self.last_t: float | None = None
        self._schema = telemetry_schema()

    def _new_block(self) -> None:
        n = self.rows_per_segment
        self._t = np.empty(n)
        self._phase = np.empty(n, dtype=np.int8)
        self._kind = np.empty(n, dtype=np.int8)
        self._step = np.empty(n, dtype=np.int32)
        # column-major: each column is contiguous when handed to Arrow (70× faster)
        self._floats = np.empty((n, N_FLOATS), order="F")
        self._obj = np.empty(n, dtype=bool)
        self._calls = np.empty(n, dtype=np.int32)
        self._i = 0

    def append(
        self,
        t: float,
        phase: keys.TelemetryPhase,
        action_kind: str,
        action_step: int,
        floats: np.ndarray,
        gripper_object: bool,
        policy_calls: int,
    ) -> None:
        """One sample. ``floats`` holds ``keys.TELEMETRY_FLOAT_COLUMNS`` in order."""
        if self.last_t is not None and t < self.last_t:
            raise ValueError(f"telemetry time went backwards: {t} after {self.last_t}")
        i = self._i
        self._t[i] = t
        self._phase[i] = PHASE_CODE[phase]
        self._kind[i] = ACTION_KIND_CODE[action_kind]
        self._step[i] = action_step
        self._floats[i] = floats
        self._obj[i] = gripper_object
        self._calls[i] = policy_calls
        self._i = i + 1
        self.rows += 1
        if self.first_t is None:
            self.first_t = t
        self.last_t = t
        if self._i == self.rows_per_segment:
            self.flush()

    def flush(self) -> None:
        n = self._i
        if n == 0:
            return
        # the block is handed over whole (a fresh one is allocated for the next rows)
        # and turned into Arrow on the writer's thread
        block = (self._t, self._phase, self._kind, self._step, self._floats, self._obj, self._calls)
        self._writer.put(lambda: self._table(block, n))
        self._new_block()

    def _table(self, block: tuple[np.ndarray, ...], n: int) -> pa.Table:
        t, phase, kind, step, floats, obj, calls = block
        columns: list[pa.Array] = [
            pa.array(t[:n]),
            pa.DictionaryArray.from_arrays(
                pa.array(phase[:n]), pa.array([p.value for p in PHASES])
            ),
            pa.DictionaryArray.from_arrays(pa.array(kind[:n]), pa.array(ACTION_KINDS)),
            pa.array(step[:n]),
            *[pa.array(floats[:n, j]) for j in range(N_FLOATS)],
            pa.array(obj[:n]),
            pa.array(calls[:n]),
        ]
        return pa.Table.from_arrays(columns, schema=self._schema)

    def close(self) -> None:
        self.flush()
        self._writer.close()
        if self._writer.error is not None:
            raise RuntimeError(f"telemetry could not be written: {self._writer.error}")

    @property
    def segments(self) -> int:
        return self._writer.segments


# -- video -----------------------------------------------------------------


def frame_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field(keys.FRAME, pa.int32()),
            pa.field(keys.FRAME_T, pa.float64()),
            pa.field(keys.FRAME_PTS, pa.float64()),
            pa.field(keys.FRAME_DEVICE_INDEX, pa.int64()),
            pa.field(keys.FRAME_DEVICE_T, pa.float64()),
        ],
        metadata={b"format": b"proctor.frames/1"},
    )


@dataclass(frozen=True)
class VideoSettings:
    width: int
    height: int
    fps: int
    preset: str = "ultrafast"  # ≈ 500 fps at 640×480 on one core of a small machine
    crf: int = 23


class VideoWriter(threading.Thread):
    """One camera: frames in (from any thread), fragmented MP4 + frame segments out."""

    def __init__(
        self,
        name: str,
        folder: Path,
        settings: VideoSettings,
        t0: float,
        segment_s: float,
        block_when_full: bool,
    ) -> None:
        super().__init__(name=f"video-{name}", daemon=True)
        self.camera = name
        self.settings = settings
        self.t0 = t0
        self.segment_s = segment_s
        self.block_when_full = block_when_full
        self.path = folder / f"{name}.mp4"
        folder.mkdir(parents=True, exist_ok=True)
        # two seconds of frames: enough slack for a slow fsync, small enough to notice a stall
        self._queue: queue.Queue[Frame | None] = queue.Queue(maxsize=max(4, 2 * settings.fps))
        self._frames = _SegmentWriter(folder / f"frames-{name}", f"frames-{name}-writer")
        self._rows: list[tuple[int, float, float, int, float]] = []
        self._segment_start: float | None = None
        self.frames = 0
        self.dropped = 0  # frames the recorder could not take
        self.device_gaps = 0  # frames the camera itself lost (gaps in Frame.index)
        self._last_index: int | None = None
        self._last_pts = -1
        self.error: BaseException | None = None
        self._container: Any = None
        self._stream: Any = None
        self.start()

    def put(self, frame: Frame) -> None:
        if self.block_when_full:
            try:
                self._queue.put(frame, timeout=30)
                return
            except queue.Full:
                pass
        else:
            try:
                self._queue.put_nowait(frame)
                return
            except queue.Full:
                pass
        self.dropped += 1

    def _open(self, frame: Frame) -> None:
        s = self.settings
        h, w = frame.image.shape[:2]
        if (w, h) != (s.width, s.height):
            raise ValueError(
                f"camera {self.camera}: frame is {w}×{h}, configured {s.width}×{s.height}"
            )
        self._container = av.open(
            str(self.path),
            "w",
            format="mp4",
            # delay_moov: with an empty moov written before the first frame, FFmpeg's
            # muxer shifts the whole timeline so that the first frame presents at 0,
            # and the MP4 no longer says what the frame table's pts_s says (every
            # frame early by the first frame's lag behind the episode start; the
            # review page then showed the frame before the one asked for whenever
            # that lag passed half a frame). Holding the moov until the first
            # fragment is cut lets it carry the edit list that keeps the offset,
            # which libavformat and Chromium both honour (measured with PyAV 17/18,
            # Chromium 156). A crash inside that first fragment loses what it
            # would have lost anyway: a fragment is the unit a crash can lose.
            options={"movflags": "frag_keyframe+empty_moov+default_base_moof+delay_moov"},
            container_options={"flush_packets": "1"},
        )
        stream = self._container.add_stream("libx264", rate=s.fps)
        stream.width, stream.height, stream.pix_fmt = s.width, s.height, "yuv420p"
        stream.time_base = VIDEO_TIME_BASE
        stream.codec_context.time_base = VIDEO_TIME_BASE
        # one encoder thread per camera: x264's own threads only add overhead at these
        # sizes (measured: 320×240 ultrafast encodes faster single-threaded), and the
        # recorder already runs one thread per camera
        stream.codec_context.thread_count = 1
        # a keyframe (hence a fragment) every second bounds what a crash can lose
        stream.codec_context.options = {
            "preset": s.preset,
            "tune": "zerolatency",
            "crf": str(s.crf),
            "g": str(s.fps),
        }
        self._stream = stream

    def run(self) -> None:
        while True:
            frame = self._queue.get()
            if frame is None:
                break
            if self.error is not None:
                continue
            try:
                self._encode(frame)
            except BaseException as exc:
                log.error("recording camera %s failed", self.camera, exc_info=True)
                self.error = exc
        try:
            if self._stream is not None:
                for packet in self._stream.encode(None):
                    self._container.mux(packet)
        except BaseException as exc:
            self.error = self.error or exc
        finally:
            if self._container is not None:
                self._container.close()
            self._flush_rows()
            self._frames.close()

    def _encode(self, frame: Frame) -> None:
        if self._container is None:
            self._open(frame)
        if self._last_index is not None and frame.index > self._last_index + 1:
            self.device_gaps += frame.index - self._last_index - 1
        self._last_index = frame.index
        pts_s = frame.t - self.t0
        pts = max(round(pts_s / VIDEO_TIME_BASE), self._last_pts + 1)
        self._last_pts = pts
        vf = av.VideoFrame.from_ndarray(frame.image, format="rgb24")
        vf.pts = pts
        vf.time_base = VIDEO_TIME_BASE
        for packet in self._stream.encode(vf):
            self._container.mux(packet)
        device_t = frame.device_t if frame.device_t is not None else math.nan
        self._rows.append(
            (self.frames, frame.t, float(pts * VIDEO_TIME_BASE), frame.index, device_t)
        )
        self.frames += 1
        if self._segment_start is None:
            self._segment_start = frame.t
        elif frame.t - self._segment_start >= self.segment_s:
            self._flush_rows()
            self._segment_start = frame.t

    def _flush_rows(self) -> None:
        if not self._rows:
            return
        cols = list(zip(*self._rows, strict=True))
        self._rows = []
        table = pa.Table.from_arrays(
            [
                pa.array(cols[0], pa.int32()),
                pa.array(cols[1], pa.float64()),
                pa.array(cols[2], pa.float64()),
                pa.array(cols[3], pa.int64()),
                pa.array(cols[4], pa.float64()),
            ],
            schema=frame_schema(),
        )
        self._frames.put(table)

    def close(self) -> None:
        self._queue.put(None)
        self.join()


# -- the episode's recording ------------------------------------------------


@dataclass
class CameraResult:
    frames: int
    dropped: int
    device_gaps: int
    fragmented_mp4: Path
    frames_dir: Path
    error: str | None = None


@dataclass
class RecordingResult:
    folder: Path
    telemetry_rows: int
    telemetry_segments: int
    telemetry_first_t: float | None
    telemetry_last_t: float | None
    cameras: dict[str, CameraResult] = field(default_factory=dict)


class Recorder:
    """Everything recorded for one episode, under ``folder`` (the spool)."""

    def __init__(
        self,
        folder: Path,
        *,
        t0: float,
        cameras: dict[str, VideoSettings],
        telemetry_hz: float,
        segment_s: float,
        virtual_clock: bool,
        state: dict[str, Any],
    ) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        # what recovery needs to finish this recording if the daemon dies
        _fsync_write(
            folder / SPOOL_STATE,
            lambda p: p.write_text(json.dumps({**state, "t0": t0}, indent=1), encoding="utf-8"),
        )
        self.t0 = t0
        self.telemetry = Telemetry(folder / "telemetry", math.ceil(segment_s * telemetry_hz))
        self.video = {
            name: VideoWriter(name, folder / "video", s, t0, segment_s, virtual_clock)
            for name, s in cameras.items()
        }
        self._closed = False

    def add_frame(self, camera: str, frame: Frame) -> None:
        writer = self.video.get(camera)
        if writer is not None and frame.t >= self.t0:
            writer.put(frame)

    def close(self) -> RecordingResult:
        """Stop recording and wait for every writer (idempotent)."""
        errors: list[str] = []
        if not self._closed:
            self._closed = True
            try:
                self.telemetry.close()
            except RuntimeError as exc:
                errors.append(str(exc))
            for w in self.video.values():
                w.close()
        result = RecordingResult(
            folder=self.folder,
            telemetry_rows=self.telemetry.rows,
            telemetry_segments=self.telemetry.segments,
            telemetry_first_t=self.telemetry.first_t,
            telemetry_last_t=self.telemetry.last_t,
        )
        for name, w in self.video.items():
            result.cameras[name] = CameraResult(
                frames=w.frames,
                dropped=w.dropped,
                device_gaps=w.device_gaps,
                fragmented_mp4=w.path,
                frames_dir=w._frames.folder,
                error=None if w.error is None else f"{type(w.error).__name__}: {w.error}",
            )
        if errors:
            raise RuntimeError("; ".join(errors))
        return result


# -- turning a spool folder into final files (also after a crash) -----------


def read_segments(folder: Path) -> pa.Table | None:
    """Concatenate a folder's complete Parquet segments, in order (temp files ignored)."""
    paths = sorted(folder.glob("seg-*.parquet"))
    if not paths:
        return None
    tables = []
    for p in paths:
        try:
            tables.append(pq.read_table(p))
        except (OSError, pa.ArrowInvalid):
            log.warning("skipping unreadable segment %s", p)
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="none")


def remux_mp4(fragmented: Path, out: Path) -> int:
    """Copy the packets of a (possibly truncated) fragmented MP4 into a plain
    MP4 with its index at the front; returns the number of video frames."""
    frames = 0
    with av.open(str(fragmented)) as src:
        stream = src.streams.video[0]
        with av.open(str(out), "w", format="mp4", options={"movflags": "+faststart"}) as dst:
            ostream = dst.add_stream_from_template(stream)
            for packet in src.demux(stream):
                if packet.dts is None:
                    continue
                packet.stream = ostream
                dst.mux(packet)
                frames += 1
    return frames


def count_decodable_frames(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(c.streams.video[0]))


@dataclass
class FinalFiles:
    telemetry: Path | None
    telemetry_rows: int
    videos: dict[str, tuple[Path, int]]  # camera → (plain mp4, frames)
    frame_tables: dict[str, Path]
    notes: list[str]


def finalize_spool(folder: Path, cameras: Iterable[str]) -> FinalFiles:
    """Assemble the final files from a spool folder: concatenated telemetry, a
    plain MP4 per camera and its frame table, truncated to the frames the
    video really holds (after a crash the table may run ahead of the video)."""
    out = folder / "final"
    out.mkdir(exist_ok=True)
    notes: list[str] = []
    telemetry = read_segments(folder / "telemetry")
    tel_path: Path | None = None
    rows = 0
    if telemetry is not None and telemetry.num_rows:
        tel_path = out / "telemetry.parquet"
        pq.write_table(telemetry, tel_path, compression="zstd")
        rows = telemetry.num_rows
    videos: dict[str, tuple[Path, int]] = {}
    tables: dict[str, Path] = {}
    for name in cameras:
        frag = folder / "video" / f"{name}.mp4"
        if not frag.exists() or frag.stat().st_size == 0:
            notes.append(f"camera {name}: no video recorded")
            continue
        plain = out / f"{name}.mp4"
        try:
            n_video = remux_mp4(frag, plain)
        except (av.error.FFmpegError, OSError, IndexError) as exc:
            notes.append(f"camera {name}: video unreadable ({type(exc).__name__})")
            continue
        if n_video == 0:
            notes.append(f"camera {name}: video holds no complete fragment")
            plain.unlink(missing_ok=True)
            continue
        frames = read_segments(folder / "video" / f"frames-{name}")
        n_rows = frames.num_rows if frames is not None else 0
        if frames is None or n_rows < n_video:
            notes.append(f"camera {name}: frame table has {n_rows} rows for {n_video} frames")
            n = min(n_rows, n_video)
        else:
            n = n_video
            if n_rows > n_video:
                notes.append(
                    f"camera {name}: video ends after {n_video} frames; "
                    f"{n_rows - n_video} timestamped frames were lost with the crash"
                )
        table_path = out / f"frames-{name}.parquet"
        pq.write_table(
            (frames if frames is not None else frame_schema().empty_table()).slice(0, n),
            table_path,
            compression="zstd",
        )
        videos[name] = (plain, n_video)
        tables[name] = table_path
    return FinalFiles(tel_path, rows, videos, tables, notes)
