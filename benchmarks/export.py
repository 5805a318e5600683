"""Export speed: ``proctor export --format lerobot`` of a released campaign,
against a plain file copy of the same recordings in the same process.

    ./run bench export [--episodes 12] [--seconds 20] [--fps 30] [--size 640x480]

Setup (not timed): a released campaign of ``--episodes`` rollouts in a fresh
SQLite database, each recorded through the station's recorder (two cameras
at the real cell's 640×480 and 30 fps by default, 100 Hz telemetry; the
pictures a textured scene panning under mild sensor noise, so that x264 pays
what it pays for a real camera) into a local artifact store.

Timed, in this order, each reading the recordings from the disk: before each,
the recordings and the database are synced and dropped from the page cache
(``posix_fadvise(DONTNEED)`` on those files only). The export's one-time
start-up (its imports, about a second) is paid before the clock starts: the
figure is throughput, episodes per second.
1. **baseline**: ``shutil.copytree`` of the artifact store (every byte of every
   recording: MP4s, frame tables, telemetry, manifests) into a new folder.
2. **export, copy** (the default): videos stream-copied where the recording
   is exactly the dataset's frames (``proctor.export.lerobot_video``).
3. **export, --reencode**: every video decoded and re-encoded (what every
   export did before).

Each prints episodes per second and its ratio to the baseline's episodes per
second (the issue's target: ≥ 0.3 for the default), with the machine's load
average. The LeRobot dataset is not loaded here; ``tests/proctor/
test_export_lerobot.py`` loads copied and re-encoded files in LeRobot itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 0.3


def _seed(tmp: Path, url: str, episodes: int, seconds: float, fps: int, size: tuple[int, int]):  # type: ignore[no-untyped-def]

    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db.engine import make_engine, make_session_factory, session_scope
    from proctor.core.db.models import CampaignPolicy
    from proctor.core.domain import (
        AssignmentStatus,
        CampaignStatus,
        EpisodeState,
        LabelStatus,
        Outcome,
    )
    from tests import factories as f
    from tests.web.recordings import RecordingSpec, record_episode

    engine = make_engine(url)
    sessions = make_session_factory(engine)
    store = LocalArtifactStore(tmp / "artifacts")
    spec = RecordingSpec(
        duration_s=seconds, fps=fps, width=size[0], height=size[1], actions=True,
        pictures="textured",
    )  # fmt: skip
    with session_scope(sessions) as s:
        camp = f.campaign(s, status=CampaignStatus.released, allocation_seed="ab" * 32)
        obj = f.object_type(s, "spoons", prompt="put the spoons into the target bin")
        pol = f.policy(s, "alpha")
        s.add(CampaignPolicy(campaign_id=camp.id, policy_id=pol.id))
        ids = []
        for i in range(episodes):
            a = f.assignment(s, camp, pol, obj, sequence=i, status=AssignmentStatus.done)
            ep = f.episode(
                s, obj, items=2, campaign_id=camp.id, assignment_id=a.id, run_code=a.run_code,
                state=EpisodeState.closed, outcome=Outcome.success, placed=2, lost=0, dropped=0,
                clock_start_s=spec.clock_start_s, clock_end_s=spec.clock_start_s + seconds,
                label_status=LabelStatus.auto,
            )  # fmt: skip
            ids.append(ep.id)
        name = camp.name
    t0 = time.perf_counter()
    for i, episode_id in enumerate(ids):
        record_episode(
            sessions=sessions, store=store, episode_id=episode_id, spool=tmp / f"spool-{i}",
            spec=spec, seed=i,
        )  # fmt: skip
        shutil.rmtree(tmp / f"spool-{i}", ignore_errors=True)
    print(f"recorded {episodes} episodes of {seconds:g} s, 2 × {size[0]}×{size[1]} @ {fps} fps, "
          f"in {time.perf_counter() - t0:.0f} s")  # fmt: skip
    return engine, sessions, store, name


def _evict(*folders: Path) -> None:
    """Drop these files' pages from the page cache, so the next read is the disk's."""
    os.sync()
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--fps", type=int, default=30)
    ap.add_argument("--size", default="640x480")
    args = ap.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    assert len(size) == 2, "--size: WIDTHxHEIGHT"

    import warnings

    warnings.simplefilter("ignore")
    import proctor.analysis.store  # noqa: F401  (the export's own imports, before the clock)
    from proctor.core.db import migrate
    from proctor.core.db.engine import session_scope
    from proctor.export.lerobot import export_lerobot
    from proctor.export.lerobot_video import VideoMode

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory(prefix="proctor-bench-export-") as tmp_name:
        tmp = Path(tmp_name)
        url = f"sqlite:///{tmp / 'proctor.db'}"
        migrate.upgrade(url)
        engine, sessions, store, campaign = _seed(
            tmp, url, args.episodes, args.seconds, args.fps, (size[0], size[1])
        )
        source = tmp / "artifacts"
        print(f"the recordings: {_size_mb(source):.1f} MB in the artifact store\n")
        rows = []
        _evict(source)
        t0 = time.perf_counter()
        shutil.copytree(source, tmp / "copied")
        took = time.perf_counter() - t0
        rows.append(("baseline: copytree of the recordings", took, _size_mb(tmp / "copied")))
        for mode in (VideoMode.copy, VideoMode.reencode):
            out = tmp / f"lerobot-{mode.value}"
            load = os.getloadavg()[0]
            _evict(source, tmp / "proctor.db")
            t0 = time.perf_counter()
            with session_scope(sessions) as s:
                export_lerobot(s, store, campaign=campaign, out=out, video=mode)
            took = time.perf_counter() - t0
            doc = json.loads((out / "meta" / "proctor.json").read_text())["videos"]
            label = (
                f"export --format lerobot, video {mode.value} "
                f"({doc['copied']} copied, {doc['reencoded']} re-encoded; load {load:.1f})"
            )
            rows.append((label, took, _size_mb(out)))
        engine.dispose()
    base_rate = args.episodes / rows[0][1]
    print(f"{'':62} {'seconds':>8} {'episodes/s':>11} {'ratio':>6} {'MB out':>7}")
    for label, took, mb in rows:
        rate = args.episodes / took
        print(f"{label:62} {took:8.2f} {rate:11.2f} {rate / base_rate:6.3f} {mb:7.1f}")
    ratio = (args.episodes / rows[1][1]) / base_rate
    verdict = "MET" if ratio >= TARGET_RATIO else "MISSED"
    print(f"\ndefault export vs a plain copy: {ratio:.3f} of its episodes per second; "
          f"target >= {TARGET_RATIO}: {verdict}. Re-encoding is {rows[2][1] / rows[1][1]:.1f}x "
          f"slower than copying. Load average {os.getloadavg()[0]:.1f} at the end.")  # fmt: skip


if __name__ == "__main__":
    main()
