"""The recorder on its own: counted drops, crash-safe pieces, the final files."""

from __future__ import annotations

import shutil
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest

from proctor.core.recording import keys
from proctor.station.drivers.camera.base import Frame
from proctor.station.recorder import Recorder, VideoSettings, finalize_spool, read_segments


def _image(i: int) -> np.ndarray:
    img = np.full((120, 160, 3), 90, dtype=np.uint8)
    img[40:80, (3 * i) % 120 : (3 * i) % 120 + 40] = (250, 40, 40)
    return img


def _recorder(folder: Path, virtual: bool) -> Recorder:
    return Recorder(
        folder,
        t0=100.0,
        cameras={"wrist": VideoSettings(160, 120, 10)},
        telemetry_hz=100,
        segment_s=0.5,
        virtual_clock=virtual,
        state={"cameras": {"wrist": {}}},
    )


def test_frames_the_recorder_cannot_take_are_counted_not_hidden(tmp_path: Path) -> None:
    rec = _recorder(tmp_path / "ep", virtual=False)
    for i in range(200):  # 20 s of video pushed in an instant: far faster than real time
        rec.add_frame("wrist", Frame(t=100.0 + i / 10, index=i, image=_image(i)))
    result = rec.close().cameras["wrist"]
    assert result.dropped > 0
    assert result.frames + result.dropped == 200
    final = finalize_spool(tmp_path / "ep", ["wrist"])
    frames = pq.read_table(final.frame_tables["wrist"])
    assert frames.num_rows == result.frames == final.videos["wrist"][1]


def test_a_virtual_clock_waits_for_the_encoder_instead(tmp_path: Path) -> None:
    rec = _recorder(tmp_path / "ep", virtual=True)
    for i in range(60):
        rec.add_frame(
            "wrist", Frame(t=100.0 + i / 10, index=i + (5 if i >= 30 else 0), image=_image(i))
        )
    result = rec.close().cameras["wrist"]
    assert (result.frames, result.dropped) == (60, 0)
    assert result.device_gaps == 5  # the camera's own counter skipped five frames


def test_a_crash_leaves_complete_segments_and_a_readable_video(tmp_path: Path) -> None:
    """Copy the spool mid-recording (what a SIGKILL leaves) and finish that copy."""
    folder = tmp_path / "ep"
    rec = _recorder(folder, virtual=True)
    row = np.zeros(len(keys.TELEMETRY_FLOAT_COLUMNS))
    for i in range(120):  # 1.2 s of telemetry: two 0.5 s segments complete, one filling
        rec.telemetry.append(100.0 + i / 100, keys.TelemetryPhase.running, "", i, row, False, 0)
    for i in range(25):  # 2.5 s of video at 10 fps: keyframes every second
        rec.add_frame("wrist", Frame(t=100.0 + i / 10, index=i, image=_image(i)))
    # let the writers catch up, then take the snapshot a crash would leave
    import time

    deadline = time.monotonic() + 10
    while len(list((folder / "telemetry").glob("seg-*.parquet"))) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(0.5)
    crashed = tmp_path / "crashed"
    shutil.copytree(folder, crashed)
    rec.close()

    telemetry = read_segments(crashed / "telemetry")
    assert telemetry is not None and telemetry.num_rows in (100, 120)  # never a torn segment
    final = finalize_spool(crashed, ["wrist"])
    video, n = final.videos["wrist"]
    with av.open(str(video)) as c:
        assert sum(1 for _ in c.decode(c.streams.video[0])) == n
    assert 10 <= n <= 25  # at least the first complete fragment (1 s)
    frames = pq.read_table(final.frame_tables["wrist"])
    assert frames.num_rows == n
    assert frames.column(keys.FRAME_T).to_pylist() == pytest.approx(
        [100.0 + i / 10 for i in range(n)]
    )


def test_telemetry_time_cannot_go_backwards(tmp_path: Path) -> None:
    rec = _recorder(tmp_path / "ep", virtual=True)
    row = np.zeros(len(keys.TELEMETRY_FLOAT_COLUMNS))
    rec.telemetry.append(101.0, keys.TelemetryPhase.running, "", 0, row, False, 0)
    with pytest.raises(ValueError, match="went backwards"):
        rec.telemetry.append(100.5, keys.TelemetryPhase.running, "", 1, row, False, 0)
    rec.close()


def test_the_video_presents_each_frame_at_its_tables_pts(tmp_path: Path) -> None:
    """The MP4's own timestamps are the frame table's ``pts_s`` (episode clock
    since start), even when the first frame comes well after the start: a
    player seeking by ``pts_s`` must land on that row's frame. (FFmpeg used to
    shift the fragmented file so that its first frame presented at 0.)"""
    folder = tmp_path / "ep"
    rec = _recorder(folder, virtual=True)
    lag = 0.073  # more than half a frame at 10 fps: an off-by-one would show
    times = [100.0 + lag + i / 10 + (0.013 if i % 3 == 0 else 0.0) for i in range(25)]
    for i, t in enumerate(times):
        rec.add_frame("wrist", Frame(t=t, index=i, image=_image(i)))
    rec.close()
    final = finalize_spool(folder, ["wrist"])
    table = pq.read_table(final.frame_tables["wrist"])
    pts_s = table.column(keys.FRAME_PTS).to_numpy()
    np.testing.assert_allclose(pts_s, np.asarray(times) - 100.0, atol=1e-4)
    video, n = final.videos["wrist"]
    with av.open(str(video)) as c:
        stream = c.streams.video[0]
        shown = [float(f.pts * stream.time_base) for f in c.decode(stream)]
    assert len(shown) == n == 25
    np.testing.assert_allclose(shown, pts_s, atol=1e-4)
