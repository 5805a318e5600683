"""Where the bins stand: the station records the cell's layout in every
episode's manifest, and the annotator reads it from there; the thresholds
file's ``[cell]`` is the fallback for recordings without one."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import sqlalchemy as sa

from proctor.annotator.config import CellGeometry, Thresholds
from proctor.annotator.pipeline import layout_for, parse_layout
from proctor.annotator.reconcile import annotate_episode
from proctor.core.artifacts import ArtifactStore, LocalArtifactStore
from proctor.core.db import migrate
from proctor.core.db.engine import ProctorSession, make_engine, make_session_factory, session_scope
from proctor.core.db.models import Artifact, Episode
from proctor.core.domain import ArtifactKind, LabelStatus, Side
from proctor.core.errors import UsageError
from proctor.core.recording.reader import read_json
from proctor.demo.simulated_episodes import EpisodeSpec, simulate
from proctor.station.sim.world import Layout
from tests.annotator.helpers import Op, store_episode

TH = Thresholds(version="test-layout")
# a [cell] that is wrong for every recording here: bins a metre away
WRONG_CELL = dataclasses.replace(TH, cell=CellGeometry(bin_centre_x=1.5))


def _manifest(session: ProctorSession, store: ArtifactStore, ep: Episode) -> dict:
    art = session.scalar(
        sa.select(Artifact).where(
            Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.manifest
        )
    )
    assert art is not None
    return read_json(store, art.sha256)


def test_the_station_records_the_layout_and_the_annotator_uses_it(
    fresh_db_url: str, tmp_path: Path
) -> None:
    migrate.upgrade(fresh_db_url)
    engine = make_engine(fresh_db_url)
    sessions = make_session_factory(engine)
    store = LocalArtifactStore(tmp_path / "artifacts")
    plan = [
        EpisodeSpec("reference", "towels", 1, Side(tote), Side(camera), sim_seed=(21, 23)[i])
        for i, (tote, camera) in enumerate([("left", "right"), ("right", "left")])
    ]
    try:
        done = simulate(plan, sessions=sessions, store=store, spool_root=tmp_path / "spool")
        with session_scope(sessions) as s:
            for spec, sim in zip(plan, done, strict=True):
                ep = s.scalar(sa.select(Episode).where(Episode.uid == sim.uid))
                assert ep is not None and ep.placed == 1
                layout = _manifest(s, store, ep)["layout"]
                # the simulated cell's own geometry in this episode's configuration
                assert layout == json.loads(
                    json.dumps(Layout.make(spec.tote_side, spec.camera_side).describe())
                )
                assert layout["tote_side"] == spec.tote_side.value
                target_y = layout["target_bin"][1]
                assert (target_y > 0) == (spec.tote_side == Side.left)  # +y: the robot's left
                assert layout["source_bin"][1] == pytest.approx(-target_y)
                # the [cell] is wrong, yet the placement is found: the bins came from the manifest
                result = annotate_episode(s, store=store, episode=ep, thresholds=WRONG_CELL)
                assert (result.successes, result.label_status) == (1, LabelStatus.auto)
    finally:
        engine.dispose()


OPS = [Op(1.0, 3.0), Op(4.0, 6.0)]  # two placements in the target bin (tote side left)


def _add_manifest(
    session: ProctorSession, store: ArtifactStore, ep: Episode, manifest: dict
) -> None:
    stored = store.put_bytes(json.dumps(manifest).encode())
    session.add(
        Artifact(
            episode_id=ep.id,
            kind=ArtifactKind.manifest,
            uri=stored.uri,
            sha256=stored.sha256,
            size_bytes=stored.size_bytes,
            media_type="application/json",
        )
    )
    session.flush()


def test_without_a_layout_the_thresholds_cell_decides(
    db_session: ProctorSession, artifact_store: ArtifactStore
) -> None:
    # no manifest at all: the right [cell] finds both, the wrong one none
    ep = store_episode(db_session, artifact_store, ops=OPS, duration=8, items=2, placed=2)
    right = annotate_episode(db_session, store=artifact_store, episode=ep, thresholds=TH)
    assert right.successes == 2
    ep2 = store_episode(db_session, artifact_store, ops=OPS, duration=8, items=2, placed=2)
    wrong = annotate_episode(db_session, store=artifact_store, episode=ep2, thresholds=WRONG_CELL)
    assert (wrong.successes, wrong.label_status) == (0, LabelStatus.needs_review)
    # a manifest from before the station wrote layouts (or a cell without one)
    ep3 = store_episode(db_session, artifact_store, ops=OPS, duration=8, items=2, placed=2)
    _add_manifest(db_session, artifact_store, ep3, {"format": "proctor.episode/1", "layout": None})
    old = annotate_episode(db_session, store=artifact_store, episode=ep3, thresholds=WRONG_CELL)
    assert old.successes == 0


def test_a_manifest_layout_overrides_the_thresholds_cell(
    db_session: ProctorSession, artifact_store: ArtifactStore
) -> None:
    ep = store_episode(db_session, artifact_store, ops=OPS, duration=8, items=2, placed=2)
    layout = Layout.make(Side.left, Side.right).describe()
    _add_manifest(db_session, artifact_store, ep, {"format": "proctor.episode/1", "layout": layout})
    result = annotate_episode(db_session, store=artifact_store, episode=ep, thresholds=WRONG_CELL)
    assert (result.successes, result.label_status) == (2, LabelStatus.auto)
    # the same telemetry against a layout with the totes swapped: released over the source
    swapped = {**layout, "source_bin": layout["target_bin"], "target_bin": layout["source_bin"]}
    swapped.pop("tote_side")
    ep2 = store_episode(db_session, artifact_store, ops=OPS, duration=8, items=2, placed=2)
    _add_manifest(
        db_session, artifact_store, ep2, {"format": "proctor.episode/1", "layout": swapped}
    )
    result = annotate_episode(db_session, store=artifact_store, episode=ep2, thresholds=TH)
    assert result.successes == 0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"target_bin": [0.5, 0.23, 0.15]}, "manifest.layout.target_bin"),
        ({"source_bin": "left"}, "manifest.layout.source_bin"),
        ({"source_bin": [0.5, -0.23, 0.0, 0.12]}, "manifest.layout.source_bin"),
        ({"bin_height": -1}, "manifest.layout.bin_height"),
        ({"format": "proctor.cell_layout/9"}, "manifest.layout.format"),
        ({"tote_side": "right"}, "manifest.layout.tote_side"),
    ],
)
def test_a_bad_layout_is_refused_naming_the_field(change: dict, field: str) -> None:
    layout = {**Layout.make(Side.left, Side.right).describe(), **change}
    with pytest.raises(UsageError, match=re.escape(field)):
        layout_for(TH, tote_side="left", manifest={"layout": layout})
    with pytest.raises(UsageError, match=r"manifest\.layout: expected a table"):
        parse_layout(["not", "a", "table"])


def test_the_recorded_layout_matches_the_thresholds_default_cell() -> None:
    """The shipped [cell] describes the simulated cell: the fallback is right for it."""
    for side in (Side.left, Side.right):
        recorded = parse_layout(Layout.make(side, Side.right).describe())
        assert recorded == TH.cell.layout(side.value)
