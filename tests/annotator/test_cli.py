"""``proctor annotate`` through the real entry point (``proctor.cli.main``):
progress, the summary counts, and one clear line for every error."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from proctor.cli import main
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import migrate
from proctor.core.db.engine import make_engine, make_session_factory, session_scope
from proctor.core.db.models import Artifact, Episode
from proctor.core.domain import ArtifactKind, EpisodeState, LabelStatus
from tests.annotator.helpers import SOURCE_XY, Op, store_episode

OPS = [Op(1.0, 3.0), Op(7.0, 9.0, release_xy=SOURCE_XY), Op(10, 12)]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, LocalArtifactStore]:
    url = f"sqlite:///{tmp_path / 'proctor.db'}"
    migrate.upgrade(url)
    for name in list(__import__("os").environ):
        if name.startswith("PROCTOR_") and name != "PROCTOR_TEST_BACKENDS":
            monkeypatch.delenv(name)
    monkeypatch.setenv("PROCTOR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PROCTOR_DATABASE_URL", url)
    monkeypatch.setenv("PROCTOR_ARTIFACTS", str(tmp_path / "artifacts"))
    return url, LocalArtifactStore(tmp_path / "artifacts")


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["annotate", *args])
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, out.err


def add(url: str, store: LocalArtifactStore, placed: int, **kw: object) -> str:
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            return store_episode(s, store, ops=OPS, duration=14, items=4, placed=placed, **kw).uid
    finally:
        engine.dispose()


def statuses(url: str) -> dict[str, LabelStatus]:
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            return {e.uid: e.label_status for e in s.scalars(sa.select(Episode))}
    finally:
        engine.dispose()


def test_all_pending_with_progress_and_summary(
    site: tuple[str, LocalArtifactStore], capsys: pytest.CaptureFixture[str]
) -> None:
    url, store = site
    agree = add(url, store, placed=2)
    disagree = add(url, store, placed=3)
    waiting = add(url, store, placed=0, state=EpisodeState.awaiting_log)
    code, out, err = run(capsys, "--all-pending")
    assert code == 0, err
    assert "annotating" in out and "2/2" in out
    assert "auto (detector agrees with the operator)" in out
    lines = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert lines["auto (detector agrees with the operator)"] == "1"
    assert lines["needs review (queued for a reviewer)"] == "1"
    assert lines["failed"] == "0"
    assert statuses(url) == {
        agree: LabelStatus.auto,
        disagree: LabelStatus.needs_review,
        waiting: LabelStatus.pending,
    }
    code, out, _ = run(capsys, "--all-pending")
    assert code == 0 and "nothing to annotate" in out


def test_one_episode_and_its_errors(
    site: tuple[str, LocalArtifactStore], capsys: pytest.CaptureFixture[str]
) -> None:
    url, store = site
    uid = add(url, store, placed=2)
    waiting = add(url, store, placed=0, state=EpisodeState.awaiting_log)
    code, _, err = run(capsys)
    assert code == 2 and "give either --episode UID or --all-pending" in err
    code, _, err = run(capsys, "--episode", uid, "--all-pending")
    assert code == 2 and "give either" in err
    code, _, err = run(capsys, "--episode", "nope")
    assert code == 2 and "no episode 'nope'" in err
    code, _, err = run(capsys, "--episode", waiting)
    assert code == 2 and "only closed episodes" in err
    code, _, err = run(capsys, "--episode", uid)
    assert code == 0, err
    assert statuses(url)[uid] == LabelStatus.auto
    code, _, err = run(capsys, "--episode", uid)
    assert code == 2 and "already annotated (label status auto)" in err
    assert err.count("\n") == 1  # one line, no traceback


def test_a_bad_thresholds_file_is_named(
    site: tuple[str, LocalArtifactStore], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "t.toml"
    bad.write_text(
        'format = "proctor.annotator.thresholds/1"\nversion = "x"\n'
        '[detector]\nmin_hold_s = "long"\n'
    )
    code, _, err = run(capsys, "--all-pending", "--thresholds", str(bad))
    assert code == 2 and "detector.min_hold_s: must be a number" in err
    code, _, err = run(capsys, "--all-pending", "--thresholds", str(tmp_path / "missing.toml"))
    assert code == 2 and "not found" in err


def test_an_unmigrated_database_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROCTOR_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("PROCTOR_DATABASE_URL", f"sqlite:///{tmp_path / 'empty.db'}")
    code, _, err = run(capsys, "--all-pending")
    assert code == 2 and "proctor db upgrade" in err


def test_a_broken_recording_is_listed_and_the_rest_annotated(
    site: tuple[str, LocalArtifactStore], capsys: pytest.CaptureFixture[str]
) -> None:
    url, store = site
    good = add(url, store, placed=2)
    broken = add(url, store, placed=2, object_name="spoons-broken")
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            ep = s.scalar(sa.select(Episode).where(Episode.uid == broken))
            assert ep is not None
            art = s.scalar(
                sa.select(Artifact).where(
                    Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.telemetry
                )
            )
            assert art is not None
            # the telemetry of both episodes is the same content: re-register a corrupt copy
            corrupt = store.put_bytes(b"not parquet at all")
            art.sha256, art.uri, art.size_bytes = corrupt.sha256, corrupt.uri, corrupt.size_bytes
    finally:
        engine.dispose()
    code, out, err = run(capsys, "--all-pending")
    assert code == 1
    assert f"failed {broken}" in out.replace("\n", " ")
    assert "telemetry" in out and "is unreadable" in out
    assert "1 of 2 episode(s) could not be annotated" in err
    assert statuses(url) == {good: LabelStatus.auto, broken: LabelStatus.pending}


def test_propose_failures_tags_what_telemetry_makes_evident(
    site: tuple[str, LocalArtifactStore], capsys: pytest.CaptureFixture[str]
) -> None:
    from proctor.core.db.models import ReviewAction
    from proctor.core.domain import ReviewActionKind

    url, store = site
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            uid = store_episode(
                s, store, ops=[Op(1.0, 3.0), Op(4.0, 5.0, held=False)], duration=7, items=2,
                placed=1,
            ).uid  # fmt: skip
    finally:
        engine.dispose()
    code, out, _ = run(capsys, "--episode", uid, "--propose-failures")
    assert code == 0, out
    assert "failure-mode tags proposed" in out
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            rows = list(
                s.scalars(
                    sa.select(ReviewAction).where(
                        ReviewAction.action == ReviewActionKind.tag_failure
                    )
                )
            )
    finally:
        engine.dispose()
    assert [(r.after["mode"], r.reviewer_label) for r in rows] == [
        ("missed_grasp", "failure-proposer/1")
    ]
