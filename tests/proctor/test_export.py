"""``proctor export`` refuses what it must, on both databases (the happy
path runs on the demo's output in test_demo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.artifacts import LocalArtifactStore
from proctor.db.engine import ProctorSession
from proctor.domain import CampaignStatus
from proctor.errors import UsageError
from proctor.export.dataset import export_campaign
from tests import factories as f


@pytest.mark.parametrize(
    "status", [CampaignStatus.draft, CampaignStatus.running, CampaignStatus.closed]
)
def test_unreleased_campaigns_are_sealed(
    db_session: ProctorSession,
    artifact_store: LocalArtifactStore,
    tmp_path: Path,
    status: CampaignStatus,
) -> None:
    camp = f.campaign(db_session, status=status)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="not released: who ran what is sealed"):
        export_campaign(db_session, artifact_store, campaign=camp.name, out=out)
    assert not out.exists()
    assert not any(tmp_path.glob(".out.partial"))


def test_a_failure_half_way_leaves_nothing(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    camp = f.campaign(db_session, status=CampaignStatus.released)
    obj = f.object_type(db_session)
    ep = f.episode(db_session, obj, campaign_id=camp.id)
    from proctor.db.models import Artifact
    from proctor.domain import ArtifactKind

    # an artifact row whose bytes are not in the store: the copy must fail
    db_session.add(
        Artifact(
            episode_id=ep.id, kind=ArtifactKind.telemetry, uri="x", sha256="0" * 64, size_bytes=1
        )
    )
    db_session.flush()
    out = tmp_path / "out"
    with pytest.raises(Exception, match="not in the store"):
        export_campaign(db_session, artifact_store, campaign=camp.name, out=out)
    assert not out.exists()
    assert not (tmp_path / ".out.partial").exists()
