"""The admin's campaign pages: every campaign with its state and progress,
and one campaign's protocol, seed commitment and per-cell balance.

Read-only by design: the actions (create, start, close, reveal, release,
unblind) are ``proctor campaign …`` and ``/api/campaigns`` (proctor.web.campaigns.api),
where each one is audited. The arms carry their blinded labels here until
the campaign is released, as in ``proctor campaign status``.
"""

from __future__ import annotations

from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Request, Response

from proctor.analysis.snapshot import read_snapshot
from proctor.core.db.models import AnalysisSnapshot, Campaign
from proctor.core.domain import LabelStream, Role
from proctor.scheduler.naming import blind_result, campaign_naming
from proctor.web.auth.identity import Principal
from proctor.web.campaigns import api as campaigns_api
from proctor.web.deps import DbId, SessionDep, require_role
from proctor.web.snapshots import service as snapshots
from proctor.web.templating import render

page_router = APIRouter(include_in_schema=False)
AdminUser = Annotated[Principal, require_role(Role.admin)]


@page_router.get("/campaigns")
def campaigns_page(request: Request, session: SessionDep, who: AdminUser) -> Response:
    rows = list(session.scalars(sa.select(Campaign).order_by(Campaign.id.desc())))
    reports = {c.id: campaigns_api.campaign_status(c.id, session, who) for c in rows}
    scored = set(
        session.scalars(
            sa.select(AnalysisSnapshot.campaign_id)
            .where(AnalysisSnapshot.campaign_id.in_([c.id for c in rows]))
            .distinct()
        )
    )
    return render(
        request,
        "campaigns/list.html",
        {"campaigns": rows, "reports": reports, "scored": scored},
    )


def _watch(session: SessionDep, campaign: Campaign) -> dict[str, Any] | None:
    """Drift sentinels and early stops from the latest snapshot, under the
    labels the rest of this page uses."""
    meta = snapshots.latest_meta(
        session, campaign_id=campaign.id, stream=LabelStream.auto_and_reviewed
    )
    if meta is None:
        return None
    result = blind_result(
        snapshots.read_result(session, meta.id), campaign_naming(session, campaign).labels()
    )
    snap = read_snapshot(result)
    return {"snapshot": meta.id, "drift": snap.drift or [], "early_stops": snap.early_stops}


@page_router.get("/campaigns/{campaign_id}")
def campaign_page(
    campaign_id: DbId, request: Request, session: SessionDep, who: AdminUser
) -> Response:
    report = campaigns_api.campaign_status(campaign_id, session, who)
    campaign = session.get(Campaign, campaign_id)
    assert campaign is not None  # campaign_status answered 404 otherwise
    objects = sorted({cell.object for cell in report.cells})
    arms = sorted({cell.arm for cell in report.cells})
    grid = {(cell.arm, cell.object): cell for cell in report.cells}
    scored = session.scalar(
        sa.select(sa.func.count())
        .select_from(AnalysisSnapshot)
        .where(AnalysisSnapshot.campaign_id == campaign_id)
    )
    return render(
        request,
        "campaigns/campaign.html",
        {
            "c": report,
            "campaign": campaign,
            "objects": objects,
            "arms": arms,
            "grid": grid,
            "scored": bool(scored),
            "watch": _watch(session, campaign),
        },
    )
