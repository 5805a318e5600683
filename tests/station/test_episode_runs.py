"""Whole episodes on the simulated cell against demo policies over real
WebSockets, and what they leave in the database and the artifact store."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pytest
import sqlalchemy as sa

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.models import Artifact, Episode, EpisodeEvent
from proctor.core.domain import ArtifactKind, EpisodeState, Outcome, Side
from proctor.core.recording import keys
from proctor.core.recording.reader import load_recording
from proctor.core.work import Work
from tests.backends import once
from tests.station.conftest import PROCTOR, clean_env, sim_config, sim_runner


def _work(url: str, items: int = 3, seed: int = 4, obj: str = "towels", **kw: object) -> Work:
    return Work(
        run_code="R-E2E01",
        object_name=obj,
        items=items,
        per_item_cap_s=30.0,
        tote_side=kw.pop("tote", Side.right),
        camera_side=kw.pop("camera", Side.left),  # type: ignore[arg-type]
        policy_url=url,
        sim_seed=seed,
        **kw,  # type: ignore[arg-type]
    )


def _decoded_frames(path: Path) -> int:
    with av.open(str(path)) as c:
        return sum(1 for _ in c.decode(c.streams.video[0]))


def test_an_episode_is_recorded_end_to_end(station_db, serve_demo, tmp_path: Path) -> None:
    """Acceptance: both MP4s decode with the expected frame count, frame and
    telemetry times are monotonic and on one clock, telemetry ≥ 100 Hz,
    ground-truth placements exist, the episode and its artifacts are stored."""
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    url = serve_demo("reference")  # `proctor policy serve-demo` in its own process
    cfg = sim_config()
    with sim_runner(sessions, store, tmp_path, cfg) as runner:
        uid = runner.arm(_work(url))
        runner.start(background=False)
        summary = runner.last
    assert summary is not None and summary.uid == uid
    assert summary.proposed == Outcome.success, summary.reason
    assert summary.dropped_frames == {"exterior": 0, "wrist": 0}

    with session_scope(sessions) as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        assert ep.state == EpisodeState.awaiting_log
        assert ep.clock_start_s is not None and ep.clock_end_s > ep.clock_start_s
        rec = load_recording(s, store, uid)
        kinds = {(a.kind, a.camera) for a in rec.artifacts}
        events = [
            e.kind
            for e in s.scalars(sa.select(EpisodeEvent).where(EpisodeEvent.episode_id == ep.id))
        ]
        start, end = ep.clock_start_s, ep.clock_end_s
    assert kinds == {
        (ArtifactKind.video, "exterior"),
        (ArtifactKind.video, "wrist"),
        (ArtifactKind.frame_index, "exterior"),
        (ArtifactKind.frame_index, "wrist"),
        (ArtifactKind.telemetry, None),
        (ArtifactKind.manifest, None),
        (ArtifactKind.ground_truth, None),
    }
    assert events[:3] == ["armed", "policy_connected", "started"]
    assert "finished" in events and "recording" in events
    for art in rec.artifacts:
        store.verify(art.sha256)  # every file hashes to its recorded sha256

    # telemetry: ≥ 100 Hz, strictly increasing, on the episode's clock
    t = rec.column(keys.T)
    assert np.all(np.diff(t) > 0)
    assert (len(t) - 1) / (t[-1] - t[0]) >= 100.0 - 1e-6
    assert t[0] == pytest.approx(start, abs=0.011) and end <= t[-1] <= end + 0.51
    assert set(rec.column(keys.PHASE)) <= {p.value for p in keys.TelemetryPhase}
    assert rec.column(keys.POLICY_CALLS)[-1] == summary.policy_calls > 0
    lat, calls = rec.column(keys.POLICY_LATENCY), rec.column(keys.POLICY_CALLS)
    assert np.isnan(lat[calls == 0]).all() and (lat[calls > 0] > 0).all()
    grip = rec.column(keys.GRIPPER_POSITION)
    assert grip.min() < 0.05 and grip.max() > 0.7  # it opened and closed on items

    # video: decodes, frame count matches the table, times monotonic, one clock
    fps = cfg.cameras["exterior"].fps
    for camera in keys.CAMERAS:
        frames = rec.frames[camera]
        n = frames.num_rows
        assert (
            _decoded_frames(rec.video_path(camera))
            == n
            == rec.artifact(ArtifactKind.video, camera).frame_count
        )
        assert rec.manifest["cameras"][camera]["frames"] == n
        # one frame per period from the start to the end of the recorded tail: none lost
        assert abs(n - ((t[-1] - start) * fps + 1)) <= 1.5
        ft = frames.column(keys.FRAME_T).to_numpy()
        assert np.all(np.diff(ft) > 0)
        assert start <= ft[0] and ft[-1] <= t[-1] + 1e-9
        np.testing.assert_allclose(frames.column(keys.FRAME_PTS).to_numpy(), ft - start, atol=1e-4)
        assert frames.column(keys.FRAME).to_pylist() == list(range(n))

    # ground truth: placements inside the episode, one per placed item
    truth = rec.ground_truth
    assert truth is not None and truth["final"]["placed"] >= 1
    assert len(truth["placements_s"]) == truth["final"]["placed"]
    assert all(0 < p < end - start for p in truth["placements_s"])
    assert rec.manifest["telemetry"]["rate_hz"] >= 100.0 - 1e-6
    # nothing in the manifest points at the policy
    assert "ws://" not in json.dumps(rec.manifest) and url.split(":")[-1] not in json.dumps(
        rec.manifest["policy"]
    )
    rec.close()


@once()  # dialect coverage does not depend on the database
def test_openpi_dialect_and_joint_bookkeeping(
    station_db, policy_server, tmp_path: Path, backend: str
) -> None:
    """The DROID keys path (an openpi-dialect server) with a 4-item episode on
    the other spatial configuration; the requested and sent commands are both
    recorded."""
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    server = policy_server("dawdler")  # declares openpi-style metadata
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        uid = runner.arm(_work(server.url, items=2, seed=11, tote=Side.left, camera=Side.right))
        runner.start(background=False)
        assert runner.last is not None and runner.last.proposed == Outcome.success
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        assert rec.manifest["policy"]["dialect"] == "openpi"
        kind = rec.column(keys.ACTION_KIND)
        running = rec.column(keys.PHASE) == keys.TelemetryPhase.running.value
        assert set(kind[running]) == {"cartesian_pose"}
        req = np.stack([rec.column(c) for c in keys.ACTION_REQUESTED], axis=1)[running]
        sent = np.stack([rec.column(c) for c in keys.ACTION_SENT], axis=1)[running]
        assert np.isfinite(req).all() and np.isfinite(sent).all()
        # the sim accepted every in-range target as sent (no clipping needed)
        np.testing.assert_allclose(req[:, :3], sent[:, :3], atol=1e-9)


def test_the_cli_runs_one_episode_headless(serve_demo, tmp_path: Path) -> None:
    url = serve_demo("reference")
    env = clean_env(PROCTOR_DATA_DIR=str(tmp_path / "data"))
    cfg = tmp_path / "station.toml"
    cfg.write_text(
        "[cameras.exterior]\nwidth = 160\nheight = 120\nfps = 10\n"
        "[cameras.wrist]\nwidth = 160\nheight = 120\nfps = 10\n"
    )
    result = subprocess.run(
        [
            *PROCTOR,
            "station",
            "episode",
            "--policy",
            url,
            "--object",
            "towels",
            "--items",
            "1",
            "--seed",
            "5",
            "--config",
            str(cfg),
            "--ground-truth-log",
            "--home-first",  # the simulated cell starts at home; homing from there is quick
            "--open-gripper",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    out = result.stdout
    assert out.startswith("homing the arm (you confirmed the cell is clear)")
    assert "ended: proposed outcome success" in out
    assert "telemetry" in out and "100.0 Hz" in out
    assert "video:exterior" in out and "video:wrist" in out
    assert "closed with outcome success [demo: log filled from the simulator's ground truth" in out
    uid = out.split("episode ", 1)[1].split(":", 1)[0]
    db = tmp_path / "data" / "proctor.db"
    engine = sa.create_engine(f"sqlite:///{db}")
    with engine.connect() as conn:
        row = conn.execute(
            sa.text("SELECT state, outcome, placed, operator_notes FROM episodes WHERE uid = :u"),
            {"u": uid},
        ).one()
    engine.dispose()
    assert row[0] == "closed" and row[1] == "success" and row[2] == 1
    assert row[3].startswith("demo: log filled from the simulator's ground truth")

    bad = subprocess.run(
        [*PROCTOR, "station", "episode", "--policy", url, "--object", "forks"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "object: the simulated cell has no 'forks'" in bad.stderr


def test_an_unreachable_policy_creates_no_episode(station_db, tmp_path: Path) -> None:
    from proctor.station.episode_runner import PolicyUnreachable

    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    with sim_runner(sessions, store, tmp_path, sim_config(policy_connect_timeout_s=1.0)) as runner:
        with pytest.raises(PolicyUnreachable, match="policy endpoint unreachable") as err:
            runner.arm(_work("ws://127.0.0.1:9/policy/sealed-handle-xyz"))
        assert "sealed-handle" not in str(err.value)
        assert runner.state.value == "idle"
    with session_scope(sessions) as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Episode)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(Artifact)) == 0


@once()  # the schema does not depend on the database
def test_telemetry_table_has_the_documented_schema(
    station_db, policy_server, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    server = policy_server("reference")
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        uid = runner.arm(_work(server.url, items=1, seed=2))
        runner.start(background=False)
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
    assert tuple(rec.telemetry.column_names) == keys.TELEMETRY_COLUMNS
    assert rec.telemetry.schema.field(keys.GRIPPER_OBJECT).type == pa.bool_()
    assert tuple(rec.frames["wrist"].column_names) == keys.FRAME_COLUMNS
