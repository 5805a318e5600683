"""``proctor demo --no-serve`` end to end, as a user runs it, and
``proctor export`` on what it produced.

One small demo (one episode per cell: 5 arms × 4 objects) runs once for the
module in a subprocess with its own data folder: two simulated station
processes, the policy gateway, real WebSocket policy servers, the annotator,
the labelled automatic reviewer and the snapshots. The tests then read the
database, the artifact store and the printed table it left.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.analysis.snapshot import SCHEMA, read_snapshot
from proctor.demo import world

pytestmark = pytest.mark.slow


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env["PROCTOR_DATA_DIR"] = str(data_dir)
    env["COLUMNS"] = "200"  # the printed tables unclipped
    return env


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    data_dir = tmp_path_factory.mktemp("demo") / "proctor-data"
    result = subprocess.run(
        [sys.executable, "-m", "proctor", "demo", "--no-serve", "--episodes", "1", "--seed", "3"],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return data_dir, result.stdout


def _db(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(data_dir / "proctor.db")


def test_the_campaign_ran_every_slot_blinded_and_was_released(demo_run: tuple[Path, str]) -> None:
    data_dir, _ = demo_run
    db = _db(data_dir)
    (status, seed, commitment) = db.execute(
        "SELECT status, allocation_seed, seed_commitment FROM campaigns"
    ).fetchone()
    assert status == "released"
    assert hashlib.sha256(seed.encode()).hexdigest() == commitment
    arms, objects = len(world.ARMS), len(world.OBJECTS)
    done = db.execute(
        "SELECT count(*) FROM assignments WHERE status = 'done' AND replaces_id IS NULL"
    ).fetchone()[0]
    assert done == arms * objects
    # every closed episode is tied to a run code and the run codes say nothing
    rows = db.execute("SELECT state, run_code, label_status FROM episodes").fetchall()
    assert len(rows) >= arms * objects
    assert {r[0] for r in rows} == {"closed"}
    assert all(r[1].startswith("R-") for r in rows)
    # the annotator labelled every episode; the queue was worked
    assert {r[2] for r in rows} <= {"auto", "reviewed"}


def test_one_arm_is_an_uploaded_checkpoint_served_by_the_runner_host(
    demo_run: tuple[Path, str],
) -> None:
    """The checkpoint arm went the submitter's way: uploaded (a stored
    checkpoint artifact), checked against its sandboxed runner server, served
    for the campaign (its runs done, its episodes scored), and stopped when
    the demo ended — never reached by the station except through the gateway."""
    from proctor.demo.checkpoint import CHECKPOINT_ARM

    data_dir, out = demo_run
    db = _db(data_dir)
    name = world.POLICY_NAMES[CHECKPOINT_ARM]
    (sid, kind, status, sha) = db.execute(
        "SELECT s.id, s.kind, s.conformance_status, s.checkpoint_sha256 FROM submissions s "
        "JOIN policies p ON p.id = s.policy_id WHERE p.name = ? ORDER BY s.id DESC",
        (name,),
    ).fetchone()
    assert (kind, status) == ("checkpoint", "passed")
    stored = db.execute(
        "SELECT count(*) FROM artifacts WHERE kind = 'checkpoint' AND sha256 = ?", (sha,)
    ).fetchone()[0]
    assert stored == 1
    servers = db.execute(
        "SELECT status, ready_at, url, failure FROM runner_servers WHERE submission_id = ?",
        (sid,),
    ).fetchall()
    assert servers and all(r[3] is None for r in servers), servers
    assert any(r[1] is not None and r[2].startswith("ws://127.0.0.1:") for r in servers)
    assert {r[0] for r in servers} == {"stopped"}  # the demo's runner host stopped them
    runs = db.execute(
        "SELECT a.status, e.outcome FROM assignments a JOIN episodes e ON e.assignment_id = a.id "
        "WHERE a.submission_id = ? AND a.replaces_id IS NULL",
        (sid,),
    ).fetchall()
    assert len(runs) == len(world.OBJECTS)
    assert all(r[0] == "done" and r[1] != "system" for r in runs), runs
    assert f"checkpoint '{name}': uploaded, built, sandboxed, checked" in out


def test_the_demo_signs_sessions_with_a_key_of_its_own(demo_run: tuple[Path, str]) -> None:
    """Not the published development key: a random one in the data folder,
    readable by its owner only; the admin's one-time password still works."""
    data_dir, _ = demo_run
    key_file = data_dir / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(key_file.read_text().strip()) >= 48
    db = _db(data_dir)
    users = dict(db.execute("SELECT username, password_hash IS NOT NULL FROM users").fetchall())
    assert users[world.DEMO_ADMIN] == 1 and users[world.DEMO_SUBMITTER] == 0


def test_stand_ins_are_labelled_wherever_they_left_a_trace(demo_run: tuple[Path, str]) -> None:
    data_dir, _ = demo_run
    db = _db(data_dir)
    logs = db.execute("SELECT message FROM episode_events WHERE kind = 'operator_log'").fetchall()
    assert logs and all("ground truth" in m for (m,) in logs)
    reviewers = db.execute("SELECT reviewer_id, reviewer_label FROM review_actions").fetchall()
    assert all(rid is None and "automatic" in label for rid, label in reviewers)


def test_artifacts_are_in_the_store_and_verify(demo_run: tuple[Path, str]) -> None:
    data_dir, _ = demo_run
    db = _db(data_dir)
    arts = db.execute("SELECT kind, camera, sha256, size_bytes FROM artifacts").fetchall()
    kinds = {(k, c) for k, c, _, _ in arts}
    for needed in (
        ("video", "exterior"),
        ("video", "wrist"),
        ("frame_index", "exterior"),
        ("telemetry", None),
        ("manifest", None),
        ("ground_truth", None),
    ):
        assert needed in kinds
    for _, _, sha, size in arts[:12]:
        path = data_dir / "artifacts" / "objects" / sha[:2] / sha
        data = path.read_bytes()
        assert len(data) == size and hashlib.sha256(data).hexdigest() == sha


def test_snapshots_and_the_printed_leaderboard_agree(demo_run: tuple[Path, str]) -> None:
    data_dir, stdout = demo_run
    db = _db(data_dir)
    streams = {s for (s,) in db.execute("SELECT label_stream FROM analysis_snapshots")}
    assert "auto_and_reviewed" in streams
    (raw,) = db.execute(
        "SELECT result FROM analysis_snapshots WHERE label_stream = 'auto_and_reviewed' "
        "ORDER BY id DESC LIMIT 1"
    ).fetchone()
    result = json.loads(raw)
    names = [p["policy"] for p in result["policies"]]
    assert sorted(names) == sorted(world.POLICY_NAMES.values())
    assert result["protocol"]["tau"] == 8 * 30.0  # the episode budget
    for p in result["policies"]:
        assert p["policy"] in stdout
        if not p["reference"]:
            hrt = p["hrt"]["estimate"]
            assert f"{hrt:.1f}" in stdout
    pairs = len(names) * (len(names) - 1) // 2
    assert len(result["pairs"]) == pairs
    assert "pairs:" in stdout and "resolved" in stdout
    assert "episodes in" in stdout and "whole demo" in stdout


def test_every_stored_result_reads_as_the_typed_snapshot(demo_run: tuple[Path, str]) -> None:
    """The demo's snapshots and subset results, every label stream, read
    strictly into ``LeaderboardSnapshot`` (an undeclared, missing or
    mistyped key would fail here)."""
    db = _db(Path(demo_run[0]))
    docs = [json.loads(r) for (r,) in db.execute("SELECT result FROM analysis_snapshots")]
    docs += [
        json.loads(r)
        for (r,) in db.execute(
            "SELECT result FROM analysis_subset_results WHERE result IS NOT NULL"
        )
    ]
    assert len(docs) >= 3
    for doc in docs:
        snap = read_snapshot(doc)
        assert snap.schema == SCHEMA
        assert {p.policy for p in snap.policies} <= set(world.POLICY_NAMES.values())


def test_the_leaderboard_carries_every_policys_latency(demo_run: tuple[Path, str]) -> None:
    """Every policy's round trips, from the per-call tables its episodes left:
    the simulated cell stands still while a policy thinks, so nothing is stale."""
    data_dir, _ = demo_run
    (raw,) = (
        _db(data_dir)
        .execute(
            "SELECT result FROM analysis_snapshots WHERE label_stream = 'auto_and_reviewed' "
            "ORDER BY id DESC LIMIT 1"
        )
        .fetchone()
    )
    policies = json.loads(raw)["policies"]
    assert len(policies) == len(world.POLICY_NAMES)
    for p in policies:
        lat = p["latency"]
        assert lat["calls"] > 0 and lat["calls_per_episode"] > 0, p["policy"]
        assert 0 < lat["p50_ms"] <= lat["p95_ms"] <= lat["p99_ms"], p["policy"]
        assert lat["stale_action_rate"] == 0.0 and lat["actions"] > 0
        assert "server_p50_ms" in lat


def test_export_writes_a_verifiable_dataset_that_reanalyses_to_the_snapshot(
    demo_run: tuple[Path, str], tmp_path: Path
) -> None:
    data_dir, _ = demo_run
    out = tmp_path / "dataset"
    env = _env(data_dir)
    result = subprocess.run(
        [sys.executable, "-m", "proctor", "export", "1", str(out), "--no-media"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    dataset = json.loads((out / "dataset.json").read_text())
    assert dataset["campaign"]["allocation_seed"]
    for f in dataset["files"]:
        data = (out / f["path"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == f["sha256"]
    assert not list(out.rglob("*.mp4"))  # --no-media
    first = next((out / "episodes").iterdir())
    assert {"episode.json", "telemetry.parquet", "manifest.json"} <= {
        p.name for p in first.iterdir()
    }

    # anyone can re-run the analysis from the export and get the published numbers
    db = _db(data_dir)
    (raw, proto) = db.execute(
        "SELECT result, protocol FROM analysis_snapshots WHERE label_stream = "
        "'auto_and_reviewed' ORDER BY id DESC LIMIT 1"
    ).fetchone()
    snap, proto = json.loads(raw), json.loads(proto)
    redo = tmp_path / "redo.json"
    analysed = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor",
            "analyze",
            str(out / "episodes.csv"),
            "--tau",
            str(proto["tau"]),
            "--bootstrap",
            str(proto["bootstrap"]),
            "--seed",
            str(proto["seed"]),
            "--json",
            str(redo),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert analysed.returncode == 0, analysed.stderr
    again = json.loads(redo.read_text())
    assert again["data_version"] == snap["data_version"]
    by_name = {p["policy"]: p for p in again["policies"]}
    for p in snap["policies"]:
        assert by_name[p["policy"]]["rmst"]["estimate"] == pytest.approx(p["rmst"]["estimate"])
        assert by_name[p["policy"]]["rmst"]["ci"] == pytest.approx(p["rmst"]["ci"])


def test_export_refuses_unreleased_campaigns_and_occupied_folders(
    demo_run: tuple[Path, str], tmp_path: Path
) -> None:
    data_dir, _ = demo_run
    env = _env(data_dir)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    busy = subprocess.run(
        [sys.executable, "-m", "proctor", "export", "1", str(occupied)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert busy.returncode == 2
    assert "not empty" in busy.stderr
    assert [p.name for p in occupied.iterdir()] == ["keep.txt"]

    missing = subprocess.run(
        [sys.executable, "-m", "proctor", "export", "no-such-campaign", str(tmp_path / "x")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2
    assert "campaign: no campaign 'no-such-campaign'" in missing.stderr
    assert not (tmp_path / "x").exists()


def test_the_demo_exported_as_lerobot_loads_in_lerobot_and_matches_the_recording(
    demo_run: tuple[Path, str], tmp_path: Path, lerobot_env
) -> None:
    """The acceptance check on the real demo: ``proctor export --format
    lerobot`` of the released campaign, loaded with LeRobot itself; episodes,
    frame counts, fps, a sample of joint states and sent actions (decoding
    their video frames) and every placement match the recording."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from proctor.core.recording import keys

    data_dir, _ = demo_run
    out = tmp_path / "lerobot"
    result = subprocess.run(
        [sys.executable, "-m", "proctor", "export", "1", str(out), "--format", "lerobot"],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # the simulated cameras' recordings are the dataset's frames: the primary camera's
    # always, so at least one video an episode is copied bit for bit, not re-encoded
    videos = json.loads((out / "meta" / "proctor.json").read_text())["videos"]
    episodes = json.loads((out / "meta" / "info.json").read_text())["total_episodes"]
    assert videos["mode"] == "copy" and videos["copied"] >= episodes, videos
    assert videos["copied"] + videos["reencoded"] == 2 * episodes, videos
    loaded = subprocess.run(
        [str(lerobot_env.python), str(Path(__file__).parent / "lerobot_load.py"), str(out), "97"],
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    got = json.loads(loaded.stdout.strip().splitlines()[-1])

    db = _db(data_dir)

    def artifact(uid: str, kind: str, camera: str | None = None) -> Path:
        (sha,) = db.execute(
            "SELECT a.sha256 FROM artifacts a JOIN episodes e ON e.id = a.episode_id "
            "WHERE e.uid = ? AND a.kind = ? AND a.camera IS ?",
            (uid, kind, camera),
        ).fetchone()
        return data_dir / "artifacts" / "objects" / sha[:2] / sha

    recorded = [uid for (uid,) in db.execute("SELECT uid FROM episodes ORDER BY id")]
    assert got["uids"] == recorded
    manifest = json.loads(artifact(recorded[0], "manifest").read_text())
    assert got["fps"] == manifest["cameras"][keys.CAMERA_EXTERIOR]["fps"]
    frame_tables = {
        u: pq.read_table(artifact(u, "frame_index", keys.CAMERA_EXTERIOR)) for u in recorded
    }
    assert got["lengths"] == [frame_tables[u].num_rows for u in recorded]
    assert got["num_frames"] == sum(got["lengths"])

    # a sample of frames: the joint state and the sent command held at the frame's capture time
    telemetry: dict[str, pa.Table] = {}
    assert len(got["frames"]) > 20
    for fr in got["frames"]:
        uid = recorded[fr["episode_index"]]
        (start,) = db.execute("SELECT clock_start_s FROM episodes WHERE uid = ?", (uid,)).fetchone()
        t_frame = frame_tables[uid].column(keys.FRAME_T).to_numpy()[fr["frame_index"]]
        assert fr["capture_time"] == pytest.approx(t_frame - start, abs=1e-3)
        tel = telemetry.setdefault(uid, pq.read_table(artifact(uid, "telemetry")))
        row = max(int(np.searchsorted(tel.column(keys.T).to_numpy(), t_frame, "right")) - 1, 0)
        q = [tel.column(c)[row].as_py() for c in keys.JOINT_POSITION]
        sent = [tel.column(c)[row].as_py() for c in keys.ACTION_SENT]
        np.testing.assert_allclose(fr["state"][:7], q, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(fr["action"][:7], sent, rtol=1e-5, atol=1e-6)
        assert fr["shape"][0] == 3

    # every placement of the label stream, on the frame whose interval holds it
    for i, uid in enumerate(recorded):
        (status,) = db.execute("SELECT label_status FROM episodes WHERE uid = ?", (uid,)).fetchone()
        source, state = (
            ("reviewer", "confirmed") if status == "reviewed" else ("detector", "accepted")
        )
        times = [
            t
            for (t,) in db.execute(
                "SELECT p.t_s FROM placement_events p JOIN episodes e ON e.id = p.episode_id "
                "WHERE e.uid = ? AND p.source = ? AND p.status = ? ORDER BY p.t_s",
                (uid, source, state),
            )
        ]
        (start,) = db.execute("SELECT clock_start_s FROM episodes WHERE uid = ?", (uid,)).fetchone()
        capture = frame_tables[uid].column(keys.FRAME_T).to_numpy() - start
        expected = [max(int(np.searchsorted(capture, t, "right")) - 1, 0) for t in times]
        counts = [c for c, e in zip(got["placements"], got["episode_of"], strict=True) if e == i]
        assert [k for k, c in enumerate(counts) for _ in range(c)] == expected, uid


def test_reencode_is_refused_for_the_interchange_format(
    demo_run: tuple[Path, str], tmp_path: Path
) -> None:
    data_dir, _ = demo_run
    out = tmp_path / "raw"
    refused = subprocess.run(
        [sys.executable, "-m", "proctor", "export", "1", str(out), "--reencode"],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "reencode: --format proctor copies the recordings as they are" in refused.stderr
    assert not out.exists()


def test_a_submitter_cannot_export_a_policy_that_is_not_theirs(
    demo_run: tuple[Path, str], tmp_path: Path
) -> None:
    data_dir, _ = demo_run
    out = tmp_path / "theirs"
    refused = subprocess.run(
        [
            sys.executable, "-m", "proctor", "export", "1", str(out), "--format", "lerobot",
            "--submitter", world.DEMO_SUBMITTER,
            "--policy", world.POLICY_NAMES[world.REFERENCE],
        ],
        env=_env(data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2
    assert (
        f"policy: '{world.POLICY_NAMES[world.REFERENCE]}' is not a policy of submitter "
        f"'{world.DEMO_SUBMITTER}'" in refused.stderr
    )
    assert not out.exists()
