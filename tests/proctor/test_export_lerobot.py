"""``proctor export --format lerobot``: a small released campaign recorded
through the station's own recorder, exported as a LeRobot v3 dataset, loaded
back with LeRobot itself (its own environment) and compared with the
recording; and the refusals (the public before release, a submitter asking
for another's policy)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Episode
from proctor.core.domain import AssignmentStatus, CampaignStatus
from proctor.core.errors import UsageError
from proctor.core.recording import keys
from proctor.core.recording.reader import load_recording
from proctor.export.lerobot import export_lerobot
from proctor.export.lerobot_video import PixelStats, VideoMode
from proctor.policywire.wire import keys as wire_keys
from proctor.runner.envs import BuiltEnv
from tests import factories as f
from tests.backends import once
from tests.web.recordings import CODE_BITS, RecordingSpec, read_code, record_episode

HERE = Path(__file__).resolve().parent
SPEC = RecordingSpec(duration_s=3.0, fps=10, width=80, height=64, actions=True)
PLACEMENTS_S = (1.05, 2.32)
PROMPT = "put the spoons into the target bin"


@dataclass
class Demo:
    campaign: str
    uids: dict[str, str]  # policy name → episode uid
    owner: str  # the submitter of "sams-model"


def _demo(
    db: ProctorSession,
    store: LocalArtifactStore,
    tmp: Path,
    status: CampaignStatus,
    specs: tuple[RecordingSpec, RecordingSpec, RecordingSpec] = (SPEC, SPEC, SPEC),
) -> Demo:
    from proctor.core.db.models import CampaignPolicy, EpisodeEvent, PlacementEvent
    from proctor.core.domain import (
        EpisodeState,
        LabelStatus,
        Outcome,
        PlacementSource,
        PlacementStatus,
        PolicyKind,
        Role,
        Visibility,
    )

    camp = f.campaign(db, status=status, allocation_seed="ef" * 32)
    obj = f.object_type(db, "spoons", prompt=PROMPT)
    sam = f.user(db, "sam-submits", Role.submitter)
    olga = f.user(db, "olga-submits", Role.submitter)
    ref = f.policy(db, "the-reference", kind=PolicyKind.reference)
    shy = f.policy(db, "sams-model")
    shy.owner_id, shy.visibility = sam.id, Visibility.private
    proud = f.policy(db, "olgas-model")
    proud.owner_id, proud.visibility = olga.id, Visibility.public
    sessions = sessionmaker(
        bind=db.connection(), class_=ProctorSession, join_transaction_mode="create_savepoint"
    )
    uids = {}
    for i, pol in enumerate((ref, shy, proud)):
        db.add(CampaignPolicy(campaign_id=camp.id, policy_id=pol.id))
        a = f.assignment(db, camp, pol, obj, sequence=i, status=AssignmentStatus.done)
        ep = f.episode(
            db, obj, items=2, campaign_id=camp.id, assignment_id=a.id, run_code=a.run_code,
            state=EpisodeState.closed, outcome=Outcome.success, placed=2, lost=0, dropped=0,
            clock_start_s=SPEC.clock_start_s, clock_end_s=SPEC.clock_start_s + SPEC.duration_s,
            label_status=LabelStatus.auto,
        )  # fmt: skip
        for t in PLACEMENTS_S:
            db.add(
                PlacementEvent(
                    episode_id=ep.id,
                    t_s=t + 0.1 * i,
                    source=PlacementSource.detector,
                    status=PlacementStatus.accepted,
                )
            )
        db.add(EpisodeEvent(episode_id=ep.id, t_s=0.42, kind="operator_log", message="ok"))
        db.add(EpisodeEvent(episode_id=ep.id, t_s=1.5, kind=keys.ENVELOPE_EVENT, message="x"))
        db.flush()
        uids[pol.name] = ep.uid
        record_episode(
            sessions=sessions, store=store, episode_id=ep.id, spool=tmp / f"spool-{i}",
            spec=specs[i], seed=i, ground_truth={"items": [[0.1, 0.2, 0.3, 2]]},
        )  # fmt: skip
    db.expire_all()
    return Demo(camp.name, uids, sam.username)


def _load(env: BuiltEnv, root: Path) -> dict:
    done = subprocess.run(
        [str(env.python), str(HERE / "lerobot_load.py"), str(root)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _telemetry_at(t_rel: float) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic recording's joints and sent arm command at a sample time."""
    q = np.array([0.3 * np.sin(0.5 * t_rel + i) for i in range(keys.N_JOINTS)])
    sent = np.array([0.3 * np.sin(0.5 * (t_rel + 0.05) + i) for i in range(keys.N_JOINTS)])
    return q, sent


@pytest.mark.slow
@once()
def test_a_released_campaign_loads_in_lerobot_and_matches_the_recording(
    db_session: ProctorSession,
    artifact_store: LocalArtifactStore,
    tmp_path: Path,
    lerobot_env: BuiltEnv,
) -> None:
    demo = _demo(db_session, artifact_store, tmp_path, CampaignStatus.released)
    out = tmp_path / "lerobot"
    summary = export_lerobot(db_session, artifact_store, campaign=demo.campaign, out=out)
    assert summary.episodes == 3
    got = _load(lerobot_env, out)

    n = int(SPEC.duration_s * SPEC.fps)  # frames the recorder wrote per camera
    assert got["fps"] == SPEC.fps
    assert got["lengths"] == [n, n, n] and got["num_frames"] == 3 * n
    assert got["uids"] == [demo.uids[p] for p in ("the-reference", "sams-model", "olgas-model")]
    # the public board's naming: the reference and the opted-in policy named, the other an arm
    assert got["policies"][0] == "the-reference" and got["policies"][2] == "olgas-model"
    assert got["policies"][1].startswith("arm ")
    assert sorted(got["video_keys"]) == ["observation.images.exterior", "observation.images.wrist"]
    frames = got["frames"]
    assert [fr["index"] for fr in frames] == list(range(3 * n))
    for fr in frames:
        k = fr["frame_index"]
        assert fr["task"] == PROMPT
        assert fr["timestamp"] == pytest.approx(k / SPEC.fps, abs=1e-6)
        # the decoded pictures are the recorded frame k of each camera (its bar code)
        assert fr["exterior"] == k and fr["wrist"] == k, fr
        assert fr["shape"] == [3, SPEC.height, SPEC.width]
        # telemetry held at the frame's capture time: the 100 Hz sample at k / fps
        t_rel = round(k / SPEC.fps * SPEC.telemetry_hz) / SPEC.telemetry_hz
        q, sent = _telemetry_at(t_rel)
        np.testing.assert_allclose(fr["state"][:7], q, atol=1e-5)
        np.testing.assert_allclose(fr["action"][:7], sent, atol=1e-5)
        np.testing.assert_allclose(fr["requested"][:7], sent + 0.01, atol=1e-5)
        assert fr["outcome"] == 0  # Outcome.success
    for ep in range(3):
        mine = [fr for fr in frames if fr["episode_index"] == ep]
        placed_on = [fr["frame_index"] for fr in mine for _ in range(fr["placement"])]
        assert placed_on == [int((t + 0.1 * ep) * SPEC.fps) for t in PLACEMENTS_S]
        assert [fr["frame_index"] for fr in mine if fr["operator_event"]] == [4]
        assert [fr["frame_index"] for fr in mine if fr["envelope_event"]] == [15]
    assert "action" in got["stats_keys"] and "observation.images.exterior" in got["stats_keys"]
    # the station's recordings are exactly the dataset's frames: copied, none re-encoded
    doc = json.loads((out / "meta" / "proctor.json").read_text())
    assert doc["videos"] == {"mode": "copy", "copied": 6, "reencoded": 0}


def _packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as src:
        return [bytes(p) for p in src.demux(video=0) if p.dts is not None]


@pytest.mark.slow
@once()
def test_recordings_that_cannot_be_copied_go_to_files_of_their_own_and_still_load(
    db_session: ProctorSession,
    artifact_store: LocalArtifactStore,
    tmp_path: Path,
    lerobot_env: BuiltEnv,
) -> None:
    """Episode 1 was recorded with another x264 preset (other codec parameters:
    copied, but not into episode 0's file); episode 2's wrist camera lost frame 5,
    so its wrist video repeats frame 4 there and must be re-encoded."""
    specs = (SPEC, replace(SPEC, preset="veryfast"), replace(SPEC, wrist_skips=(5,)))
    demo = _demo(db_session, artifact_store, tmp_path, CampaignStatus.released, specs)
    out = tmp_path / "lerobot"
    export_lerobot(db_session, artifact_store, campaign=demo.campaign, out=out)
    doc = json.loads((out / "meta" / "proctor.json").read_text())
    assert doc["videos"] == {"mode": "copy", "copied": 5, "reencoded": 1}
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    files = {
        camera: [ep[f"videos/observation.images.{camera}/file_index"] for ep in episodes]
        for camera in ("exterior", "wrist")
    }
    assert files == {"exterior": [0, 1, 0], "wrist": [0, 1, 2]}
    # a copied video is the recording's bytes: episode 0's exterior packets are file 0's first
    recorded = db_session.scalars(
        sa.select(Episode).where(Episode.uid == demo.uids["the-reference"])
    ).one()
    rec = load_recording(db_session, artifact_store, recorded)
    try:
        source = _packets(rec.video_path(keys.CAMERA_EXTERIOR))
    finally:
        rec.close()
    exported = _packets(out / "videos/observation.images.exterior/chunk-000/file-000.mp4")
    assert exported[: len(source)] == source

    got = _load(lerobot_env, out)
    n = int(SPEC.duration_s * SPEC.fps)
    assert got["lengths"] == [n, n, n]
    for fr in got["frames"]:
        k, ep = fr["frame_index"], fr["episode_index"]
        assert fr["exterior"] == k, fr
        # the lost wrist frame: the nearest in time is taken, the earlier on a tie
        assert fr["wrist"] == (4 if (ep, k) == (2, 5) else k), fr


def test_reencode_decodes_every_video_and_keeps_the_frames(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    demo = _demo(db_session, artifact_store, tmp_path, CampaignStatus.released)
    out = tmp_path / "lerobot"
    export_lerobot(
        db_session, artifact_store, campaign=demo.campaign, out=out, video=VideoMode.reencode
    )
    doc = json.loads((out / "meta" / "proctor.json").read_text())
    assert doc["videos"] == {"mode": "reencode", "copied": 0, "reencoded": 6}
    n = int(SPEC.duration_s * SPEC.fps)
    with av.open(str(out / "videos/observation.images.wrist/chunk-000/file-000.mp4")) as src:
        frames = list(src.decode(video=0))
    assert [round(float(fr.time) * SPEC.fps) for fr in frames] == list(range(3 * n))
    stripe = SPEC.width // CODE_BITS
    centres = [i * stripe + stripe // 2 for i in range(CODE_BITS)]
    rows = [fr.to_ndarray(format="rgb24")[SPEC.height // 3].mean(axis=1) for fr in frames]
    codes = [read_code([int(row[c]) for c in centres]) for row in rows]
    assert codes == [k % n for k in range(3 * n)]


@once()
def test_the_export_leaves_out_ground_truth_and_withheld_names(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    demo = _demo(db_session, artifact_store, tmp_path, CampaignStatus.released)
    out = tmp_path / "lerobot"
    export_lerobot(db_session, artifact_store, campaign=demo.campaign, out=out)
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_episodes"] == 3
    assert not any(name.startswith(wire_keys.SIM_PREFIX) for name in info["features"])
    text = "".join(p.read_text() for p in (out / "meta").glob("*.json"))
    text += str(pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet"))
    assert "sams-model" not in text and "ground" not in text
    doc = json.loads((out / "meta" / "proctor.json").read_text())
    assert doc["audience"] == "public" and len(doc["identities_withheld"]) == 1


@pytest.mark.parametrize("status", [CampaignStatus.running, CampaignStatus.closed])
def test_the_public_cannot_export_an_unreleased_campaign(
    db_session: ProctorSession,
    artifact_store: LocalArtifactStore,
    tmp_path: Path,
    status: CampaignStatus,
) -> None:
    camp = f.campaign(db_session, status=status)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="not released: who ran what is sealed"):
        export_lerobot(db_session, artifact_store, campaign=camp.name, out=out)
    assert not out.exists() and not (tmp_path / ".out.partial").exists()


@once()
def test_a_submitter_exports_their_own_episodes_before_release_and_no_one_elses(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    demo = _demo(db_session, artifact_store, tmp_path, CampaignStatus.closed)
    with pytest.raises(UsageError, match="'olgas-model' is not a policy of submitter"):
        export_lerobot(
            db_session, artifact_store, campaign=demo.campaign, out=tmp_path / "theirs",
            submitter=demo.owner, policy="olgas-model",
        )  # fmt: skip
    assert not (tmp_path / "theirs").exists()
    out = tmp_path / "mine"
    summary = export_lerobot(
        db_session, artifact_store, campaign=demo.campaign, out=out, submitter=demo.owner
    )
    assert summary.episodes == 1
    episodes = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    assert episodes.column("proctor/episode_uid").to_pylist() == [demo.uids["sams-model"]]
    assert episodes.column("proctor/policy").to_pylist() == ["sams-model"]
    doc = json.loads((out / "meta" / "proctor.json").read_text())
    assert doc["audience"] == "private: submitter sam-submits"


def test_statistics_skip_unused_channels_and_give_zeros_for_never_recorded_ones() -> None:
    """NaN marks a channel a command did not use (a 6-wide velocity command in
    the 7-wide columns) or the time before the first command: the statistics
    are over the recorded values, and a channel never recorded gets zeros."""
    import warnings

    from proctor.export.lerobot import _stats

    values = np.array([[np.nan, np.nan], [1.0, np.nan], [3.0, np.nan]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "All-NaN slice" on the way
        got = _stats(values)
    assert got["min"] == [1.0, 0.0] and got["max"] == [3.0, 0.0]
    assert got["mean"] == [2.0, 0.0] and got["std"] == [1.0, 0.0]
    assert got["count"] == [3] and got["q50"] == [2.0, 0.0]


def test_pixel_statistics_are_those_of_the_sampled_pixels() -> None:
    """Every other row and column of each frame added, scaled to [0, 1]; the
    figures computed directly from those pixels, in float64."""
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(3)]
    frames[1][::2, ::2] //= 3  # a darker frame: the pooled figures are not one frame's
    stats = PixelStats()
    for rgb in frames:
        stats.add(rgb)
    sampled = np.stack([rgb[::2, ::2].reshape(-1, 3) for rgb in frames]) / 255.0
    got = stats.as_lerobot()
    flat = sampled.reshape(-1, 3)
    np.testing.assert_allclose(np.ravel(got["mean"]), flat.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(np.ravel(got["std"]), flat.std(axis=0), rtol=1e-9)
    np.testing.assert_array_equal(np.ravel(got["min"]), flat.min(axis=0))
    np.testing.assert_array_equal(np.ravel(got["max"]), flat.max(axis=0))
    assert got["count"] == [3]
