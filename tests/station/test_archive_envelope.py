"""The safety envelope's intervention count travels from the episode's
manifest into the database (``episodes.envelope_interventions``), where the
analysis reads it: a recording made by the station's own recorder and
archived by ``proctor.station.archive``, on both databases. A manifest without the
block leaves the count unknown (NULL), never zero."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Episode
from tests import factories as f
from tests.web.recordings import RecordingSpec, record_episode

SPEC = RecordingSpec(duration_s=1.0, fps=5, width=64, height=48, telemetry_hz=50.0)
# the shape the station-side envelope writes into the manifest (issue 15 item 3)
ENVELOPE = {
    "interventions": 7,
    "by_reason": {"workspace": 4, "speed": 3},
    "limits": {"tool_speed_m_s": 0.25, "workspace_min": [0.2, -0.45, 0.02]},
}


def _archive(
    sessions: sessionmaker[ProctorSession], tmp_path: Path, extra: dict[str, Any]
) -> tuple[int | None, dict[str, Any], list[str]]:
    with session_scope(sessions) as s:
        ep = f.episode(s, f.object_type(s), items=3, clock_start_s=SPEC.clock_start_s)
        ep.clock_end_s = SPEC.clock_start_s + SPEC.duration_s
        episode_id = ep.id
    store = LocalArtifactStore(tmp_path / "artifacts")
    archived = record_episode(
        sessions=sessions,
        store=store,
        episode_id=episode_id,
        spool=tmp_path / f"spool-{episode_id}",
        spec=SPEC,
        extra_manifest=extra,
    )
    with session_scope(sessions) as s:
        count = s.scalar(sa.select(Episode.envelope_interventions).where(Episode.id == episode_id))
    return count, archived.manifest, archived.notes


def test_the_manifest_count_is_stored_on_the_episode(station_db, tmp_path: Path) -> None:
    _, sessions = station_db
    count, manifest, notes = _archive(sessions, tmp_path, {"envelope": ENVELOPE})
    assert count == 7
    assert manifest["envelope"] == ENVELOPE  # the manifest keeps the whole block
    assert not any("envelope" in n for n in notes)


def test_no_envelope_block_is_an_unknown_count_not_zero(station_db, tmp_path: Path) -> None:
    _, sessions = station_db
    count, manifest, _ = _archive(sessions, tmp_path, {})
    assert count is None and "envelope" not in manifest


@pytest.mark.parametrize(
    "block",
    [{"interventions": -1}, {"interventions": True}, {"interventions": "3"}, {}, [3], 3.0],
    ids=["negative", "bool", "text", "no-count", "list", "float"],
)
def test_a_malformed_block_is_unknown_and_noted(station_db, tmp_path: Path, block: object) -> None:
    _, sessions = station_db
    count, manifest, notes = _archive(sessions, tmp_path, {"envelope": block})
    assert count is None
    problem = "manifest envelope: interventions is not a count; stored as unknown"
    assert problem in notes and problem in manifest["notes"]
    # the note is in the stored manifest too, for whoever reads the recording later
    assert json.loads(json.dumps(manifest))["envelope"] == block
