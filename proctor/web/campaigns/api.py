"""The campaigns API (``/api/campaigns``): the same actions as ``proctor
campaign``. Every write needs the admin role; a campaign is visible to
others only once released (before that, a 404 as if it did not exist).

Mounted by ``proctor.web.app`` as a domain (``api_router``, prefix ``/api``). It
lives in the web, not in ``proctor/scheduler/``: it needs the web's sign-in and roles
(``proctor.web.deps``), and the scheduler sits below the web (docs/architecture.md,
"Layers"); the campaign rules themselves stay in ``proctor.scheduler.service``.
"""

from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query, status

from proctor.core.audit import Actor
from proctor.core.db.models import Campaign
from proctor.core.domain import CampaignStatus, Role
from proctor.core.errors import FieldError
from proctor.scheduler import service
from proctor.scheduler.naming import campaign_naming
from proctor.scheduler.protocol import CampaignProtocol
from proctor.scheduler.schemas import (
    CampaignStatusOut,
    CampaignSummary,
    CloseOut,
    RevealOut,
    StartOut,
    UnblindedRunOut,
    UnblindIn,
)
from proctor.web.auth.identity import Principal, viewer
from proctor.web.deps import DbId, OptionalUser, SessionDep, require_role

api_router = APIRouter(tags=["campaigns"])
AdminUser = Annotated[Principal, require_role(Role.admin)]


def _actor(principal: Principal) -> Actor:
    return Actor(user_id=principal.id, label=principal.username)


def _summary(c: Campaign) -> CampaignSummary:
    return CampaignSummary(
        id=c.id,
        name=c.name,
        status=c.status,
        commitment=c.seed_commitment,
        created_at=c.created_at,
        started_at=c.started_at,
        closed_at=c.closed_at,
        released_at=c.released_at,
    )


def _visible(session: SessionDep, campaign_id: int, who: Principal | None) -> Campaign:
    """The campaign if the caller may see it: admins always, others once released."""
    c = service.get_campaign(session, campaign_id)
    if c.status != CampaignStatus.released and not (who is not None and who.is_admin):
        raise HTTPException(status.HTTP_404_NOT_FOUND, "campaign not found")
    return c


@api_router.get("/campaigns", summary="Campaigns (admins: all; others: released)")
def list_campaigns(session: SessionDep, who: OptionalUser) -> list[CampaignSummary]:
    stmt = sa.select(Campaign).order_by(Campaign.id)
    if who is None or not who.is_admin:
        stmt = stmt.where(Campaign.status == CampaignStatus.released)
    return [_summary(c) for c in session.scalars(stmt)]


@api_router.post("/campaigns", status_code=201, summary="Create a draft campaign")
def create_campaign(body: CampaignProtocol, session: SessionDep, who: AdminUser) -> CampaignSummary:
    problems = body.problems()
    if problems:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, "; ".join(problems))
    c = service.create_campaign(session, protocol=body, actor=_actor(who))
    return _summary(c)


@api_router.get("/campaigns/{campaign_id}", summary="Per-cell progress and balance")
def campaign_status(
    campaign_id: DbId,
    session: SessionDep,
    who: OptionalUser,
    identities: Annotated[bool, Query(include_in_schema=False)] = False,
) -> CampaignStatusOut:
    if identities:
        # naming the arms writes an audit row in the caller's name: a GET would
        # let any page an admin visits do it for them (a link, an <img>)
        raise FieldError(
            "identities",
            f"naming the arms is POST /api/campaigns/{campaign_id}/identities (audited)",
        )
    return _status(session, campaign_id, who, identities=False)


@api_router.post(
    "/campaigns/{campaign_id}/identities",
    summary="Per-cell progress with the arms named (audited until released)",
)
def campaign_status_identified(
    campaign_id: DbId, session: SessionDep, who: AdminUser
) -> CampaignStatusOut:
    # a POST: a signed-in page must send its CSRF token (proctor.web.deps.resolve_principal)
    return _status(session, campaign_id, who, identities=True)


def _status(
    session: SessionDep, campaign_id: int, who: Principal | None, *, identities: bool
) -> CampaignStatusOut:
    c = _visible(session, campaign_id, who)
    released = c.status == CampaignStatus.released
    report = service.campaign_status(
        session,
        campaign=c.id,
        identities=identities or released,
        actor=_actor(who) if who is not None else None,
    )
    out = CampaignStatusOut.of(report)
    if released:
        # a released policy is named only if its submitter opted in to the public
        # board (its owner and admins: always); the others keep their arm label
        hidden = campaign_naming(session, c).hidden_from(viewer(who))
        if hidden:
            for cell in out.cells:
                cell.arm = hidden.get(cell.arm, cell.arm)
            # re-sorted, so that a label's place among the names tells nothing
            out.cells.sort(key=lambda cell: (cell.is_reference is not True, cell.arm))
    return out


@api_router.post("/campaigns/{campaign_id}/start", summary="Seal the seed, write the allocation")
def start_campaign(campaign_id: DbId, session: SessionDep, who: AdminUser) -> StartOut:
    result = service.start_campaign(session, campaign=campaign_id, actor=_actor(who))
    return StartOut(**vars(result))


@api_router.post("/campaigns/{campaign_id}/close", summary="Stop claims, reveal the seed")
def close_campaign(campaign_id: DbId, session: SessionDep, who: AdminUser) -> CloseOut:
    seed = service.close_campaign(session, campaign=campaign_id, actor=_actor(who))
    c = service.get_campaign(session, campaign_id)
    return CloseOut(campaign_id=c.id, seed=seed, commitment=c.seed_commitment)


@api_router.get(
    "/campaigns/{campaign_id}/reveal", summary="The revealed seed, re-derived and checked"
)
def reveal(campaign_id: DbId, session: SessionDep, who: OptionalUser) -> RevealOut:
    c = _visible(session, campaign_id, who)
    r = service.reveal_allocation(session, campaign=c.id)
    return RevealOut(**vars(r), verified=r.verified)


@api_router.post(
    "/campaigns/{campaign_id}/unblind", summary="Who ran under which run code (audited)"
)
def unblind(
    campaign_id: DbId, body: UnblindIn, session: SessionDep, who: AdminUser
) -> list[UnblindedRunOut]:
    runs = service.unblind(
        session,
        campaign=campaign_id,
        actor=_actor(who),
        reason=body.reason,
        run_codes=body.run_codes,
    )
    return [
        UnblindedRunOut(
            run_code=r.run_code,
            sequence=r.sequence,
            block_index=r.block_index,
            status=r.status,
            object=r.object_name,
            config=r.config,
            policy=r.policy_name,
            is_reference=r.is_reference,
            owner=r.owner,
            submission_id=r.submission_id,
        )
        for r in runs
    ]


@api_router.post("/campaigns/{campaign_id}/release", summary="Make identities public")
def release(campaign_id: DbId, session: SessionDep, who: AdminUser) -> CampaignSummary:
    service.release_campaign(session, campaign=campaign_id, actor=_actor(who))
    return _summary(service.get_campaign(session, campaign_id))
