"""The latest stored snapshot of a campaign, for the leaderboard's tests."""

from __future__ import annotations

from proctor.core.db.models import AnalysisSnapshot
from proctor.core.domain import LabelStream
from proctor.web.snapshots import service
from tests.web.conftest import Web


def latest(web: Web, campaign_id: int, stream: str = "auto_and_reviewed") -> AnalysisSnapshot:
    with web.db() as s:
        row = service.latest_row(s, campaign_id=campaign_id, stream=LabelStream(stream))
        assert row is not None
        s.expunge(row)
        return row
