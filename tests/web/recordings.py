"""Real recordings for the explorer's and the artifacts' tests: synthetic
frames and telemetry pushed through the station's own recorder
(``proctor.station.recorder.Recorder``) and archived by ``proctor.station.archive`` into
the artifact store and the database, exactly as the runner does.

Every frame carries its index as a bar code — ten vertical stripes, stripe
``i`` white when bit ``i`` of the index is set — so a browser test can read
which frame a video is showing from its pixels.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.recording import keys
from proctor.station.archive import Archived, archive_recording
from proctor.station.drivers.camera.base import Frame
from proctor.station.recorder import Recorder, VideoSettings

CODE_BITS = 10


def coded_frame(index: int, width: int, height: int, camera: int, salt: int = 0) -> np.ndarray:
    """An RGB frame whose stripes spell ``index`` in binary (LSB left);
    ``salt`` shades the bottom band, so two recordings never share bytes."""
    img = np.zeros((height, width, 3), dtype=np.uint8)
    stripe = width // CODE_BITS
    for bit in range(CODE_BITS):
        if (index >> bit) & 1:
            img[: height * 3 // 4, bit * stripe : (bit + 1) * stripe] = 255
    # the bottom quarter tells the cameras apart (red: exterior, blue: wrist)
    img[height * 3 // 4 :, :, 0 if camera == 0 else 2] = 120 + salt % 120
    return img


@functools.lru_cache(maxsize=8)
def _texture(width: int, height: int, camera: int, salt: int) -> np.ndarray:
    """A smooth random scene twice as wide as the frame (blurred noise: what a
    camera sees has structure at every scale, unlike flat stripes)."""
    rng = np.random.default_rng(1000 * camera + salt)
    coarse = rng.integers(0, 256, (height // 8 + 1, width // 4 + 1, 3)).astype(np.float32)
    big = np.repeat(np.repeat(coarse, 8, axis=0), 8, axis=1)[:height, : 2 * width]
    fine = rng.integers(-24, 25, big.shape).astype(np.float32)
    return np.clip(big + fine, 0, 255).astype(np.uint8)


def textured_frame(index: int, width: int, height: int, camera: int, salt: int = 0) -> np.ndarray:
    """A camera panning slowly over a textured scene, with a little sensor
    noise in every frame (what makes real video cost its bitrate); the top rows
    still spell ``index`` so a frame can be told from its neighbours."""
    scene = _texture(width, height, camera, salt)
    shift = (index * 2) % width
    img = scene[:, shift : shift + width].copy()
    noise = np.random.default_rng(index).integers(0, 4, img.shape[:2], dtype=np.uint8)
    img += noise[..., None]
    img[: height // 8] = coded_frame(index, width, height // 8, camera, salt)
    return img


PICTURES = {"coded": coded_frame, "textured": textured_frame}


def read_code(pixels: list[int]) -> int:
    """The index from the stripes' brightness, as sampled by a page."""
    return sum(1 << i for i, v in enumerate(pixels) if v > 127)


@dataclass(frozen=True)
class RecordingSpec:
    duration_s: float = 12.0
    fps: int = 15
    width: int = 320
    height: int = 240
    telemetry_hz: float = 100.0
    clock_start_s: float = 1000.0
    # times (s since start) at which the synthetic gripper closes on an item
    picks_s: tuple[float, ...] = (2.0, 6.0, 9.5)
    # fill the action columns (sent: a joint target 50 ms ahead; requested: 0.01 rad more)
    actions: bool = False
    preset: str = "ultrafast"  # the recorder's x264 preset (the station's default)
    wrist_skips: tuple[int, ...] = ()  # frame numbers the wrist camera never delivers
    pictures: str = "coded"  # a key of PICTURES


def _telemetry_row(t_rel: float, spec: RecordingSpec, rng: np.random.Generator) -> np.ndarray:
    floats = np.full(len(keys.TELEMETRY_FLOAT_COLUMNS), np.nan)
    col = {c: i for i, c in enumerate(keys.TELEMETRY_FLOAT_COLUMNS)}
    holding = any(p <= t_rel < p + 1.5 for p in spec.picks_s)
    target = 1.0 if holding else 0.0
    # the fingers follow the target with a 0.15 s lag
    lagging = any(p + 0.15 <= t_rel < p + 1.65 for p in spec.picks_s)
    for i in range(keys.N_JOINTS):
        floats[col[keys.JOINT_POSITION[i]]] = 0.3 * math.sin(0.5 * t_rel + i)
        floats[col[keys.JOINT_VELOCITY[i]]] = 0.15 * math.cos(0.5 * t_rel + i)
    floats[col[keys.EE_X]] = 0.4 + 0.1 * math.sin(0.7 * t_rel)
    floats[col[keys.EE_Y]] = 0.1 * math.cos(0.7 * t_rel)
    floats[col[keys.EE_Z]] = 0.25 - 0.15 * math.exp(-(((t_rel % 4.0) - 2.0) ** 2) / 0.2)
    for name, value in zip(keys.EE_POSE[3:], (0.0, 0.0, 0.0, 1.0), strict=True):
        floats[col[name]] = value  # a fixed orientation: qx qy qz qw
    floats[col[keys.EE_SPEED]] = abs(0.2 * math.sin(1.3 * t_rel))
    floats[col[keys.GRIPPER_TARGET_REQUESTED]] = target
    floats[col[keys.GRIPPER_TARGET]] = target
    floats[col[keys.GRIPPER_POSITION]] = 0.8 if lagging else 0.02
    floats[col[keys.POLICY_LATENCY]] = 0.08 + 0.02 * rng.random() if t_rel > 0.2 else np.nan
    if spec.actions:
        for i in range(keys.N_JOINTS):
            floats[col[keys.ACTION_SENT[i]]] = 0.3 * math.sin(0.5 * (t_rel + 0.05) + i)
            floats[col[keys.ACTION_REQUESTED[i]]] = floats[col[keys.ACTION_SENT[i]]] + 0.01
    return floats


def record_episode(
    *,
    sessions: sessionmaker[ProctorSession],
    store: ArtifactStore,
    episode_id: int,
    spool: Path,
    spec: RecordingSpec = RecordingSpec(),
    seed: int = 0,
    extra_manifest: dict[str, Any] | None = None,
    ground_truth: dict[str, Any] | None = None,
) -> Archived:
    """Record and archive one episode (the row must exist, with its
    ``clock_start_s`` equal to ``spec.clock_start_s``); ``extra_manifest`` and
    ``ground_truth`` as the runner passes them (default: none)."""
    rng = np.random.default_rng(seed)
    t0 = spec.clock_start_s
    video = VideoSettings(spec.width, spec.height, spec.fps, preset=spec.preset)
    cameras = {keys.CAMERA_EXTERIOR: video, keys.CAMERA_WRIST: video}
    rec = Recorder(
        spool,
        t0=t0,
        cameras=cameras,
        telemetry_hz=spec.telemetry_hz,
        segment_s=5.0,
        virtual_clock=True,
        state={"episode_uid": "test", "run_code": "R-TEST"},
    )
    n_frames = int(spec.duration_s * spec.fps)
    n_rows = int(spec.duration_s * spec.telemetry_hz)
    frame_k = 0
    for k in range(n_rows):
        t_rel = k / spec.telemetry_hz
        rec.telemetry.append(
            t0 + t_rel,
            keys.TelemetryPhase.running,
            "joint_position",
            int(t_rel * 15),
            _telemetry_row(t_rel, spec, rng),
            any(p <= t_rel < p + 1.5 for p in spec.picks_s),
            int(t_rel * 15),
        )
        while frame_k < n_frames and frame_k / spec.fps <= t_rel:
            t_frame = t0 + frame_k / spec.fps
            for cam_i, name in enumerate(cameras):
                if name == keys.CAMERA_WRIST and frame_k in spec.wrist_skips:
                    continue
                rec.add_frame(
                    name,
                    Frame(
                        t=t_frame,
                        index=frame_k,
                        image=PICTURES[spec.pictures](
                            frame_k, spec.width, spec.height, cam_i, seed
                        ),
                    ),
                )
            frame_k += 1
    result = rec.close()
    return archive_recording(
        sessions=sessions,
        store=store,
        episode_id=episode_id,
        spool=spool,
        cameras=list(cameras),
        camera_settings={
            n: {"width": spec.width, "height": spec.height, "fps": spec.fps} for n in cameras
        },
        recording=result,
        ground_truth=ground_truth,
        extra_manifest=extra_manifest or {},
        interrupted=False,
    )


def attach_recording(
    *,
    sessions: sessionmaker[ProctorSession],
    store: ArtifactStore,
    uid: str,
    spool: Path,
    spec: RecordingSpec = RecordingSpec(),
    seed: int = 0,
    extra_manifest: dict[str, Any] | None = None,
    ground_truth: dict[str, Any] | None = None,
) -> Archived:
    """Record an existing episode: its clock times are moved onto the
    recording's (start ``spec.clock_start_s``, same duration, at least the
    recording's length), so placements, frames and telemetry share one clock."""
    import sqlalchemy as sa

    from proctor.core.db.engine import session_scope
    from proctor.core.db.models import Episode

    with session_scope(sessions) as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        assert ep is not None, uid
        duration = ep.duration_s or spec.duration_s
        ep.clock_start_s = spec.clock_start_s
        ep.clock_end_s = spec.clock_start_s + duration
        episode_id = ep.id
    return record_episode(
        sessions=sessions,
        store=store,
        episode_id=episode_id,
        spool=spool,
        spec=spec,
        seed=seed,
        extra_manifest=extra_manifest,
        ground_truth=ground_truth,
    )
