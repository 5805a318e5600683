"""The adaptive rule on a running campaign: read the settled outcomes, apply
the replayed plan to the slots not yet handed out, verify it after reveal.

The rule itself is the pure :mod:`proctor.scheduler.adaptive_rule`; this module
is its database side. What it reads, the outcomes of the settled blocks, is
:func:`proctor.analysis.store.read_outcomes`.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.analysis.store import Reading, read_outcomes
from proctor.core.db.models import Assignment, Campaign, CampaignPolicy
from proctor.core.domain import AssignmentStatus
from proctor.scheduler.adaptive_rule import AdaptiveRule, Plan, claim_horizon, compare, replay
from proctor.scheduler.allocation import AllocationProtocol


def rule_of(campaign: Campaign) -> tuple[AllocationProtocol, AdaptiveRule] | None:
    """The committed protocol and adaptive rule; None for a fixed campaign."""
    if campaign.allocation_protocol is None:
        return None
    protocol = AllocationProtocol.from_json(campaign.allocation_protocol)
    if protocol.adaptive is None:
        return None
    return protocol, AdaptiveRule.from_json(protocol.adaptive)


def current_plan(session: Session, campaign: Campaign) -> tuple[Plan, Reading] | None:
    rules = rule_of(campaign)
    if rules is None or campaign.allocation_seed is None:
        return None
    protocol, rule = rules
    reading = read_outcomes(session, campaign.id)
    return replay(campaign.allocation_seed, protocol, rule, reading.outcomes), reading


def apply_plan(session: Session, campaign: Campaign) -> int | None:
    """Bring the pending original slots in line with the rule; returns the
    last block whose slots may be handed out now (None: any, or a fixed
    campaign). Withdrawn pending slots are deleted: they were never shown
    to anyone, and the replay names them."""
    got = current_plan(session, campaign)
    if got is None:
        return None
    plan, reading = got
    rules = rule_of(campaign)
    assert rules is not None
    submission_of = dict(
        session.execute(
            sa.select(CampaignPolicy.policy_id, CampaignPolicy.submission_id).where(
                CampaignPolicy.campaign_id == campaign.id
            )
        ).all()
    )
    pending = session.scalars(
        sa.select(Assignment)
        .where(
            Assignment.campaign_id == campaign.id,
            Assignment.status == AssignmentStatus.pending,
            Assignment.replaces_id.is_(None),
        )
        # one order for every station re-planning at once: no lock-order deadlock
        .order_by(Assignment.sequence)
        .with_for_update()
    ).all()
    withdrawn = set(plan.withdrawn)
    for a in pending:
        if a.sequence in withdrawn:
            session.delete(a)
        elif plan.policy_of[a.sequence] != a.policy_id:
            a.policy_id = plan.policy_of[a.sequence]
            a.submission_id = submission_of[a.policy_id]
    session.flush()
    return claim_horizon(rules[1], reading.first_unsettled)


def verify_plan(session: Session, campaign: Campaign) -> list[str]:
    """The replay against the log, for an adaptive campaign (after close)."""
    got = current_plan(session, campaign)
    if got is None:
        return []
    plan, _reading = got
    logged = dict(
        session.execute(
            sa.select(Assignment.sequence, Assignment.policy_id).where(
                Assignment.campaign_id == campaign.id, Assignment.replaces_id.is_(None)
            )
        ).all()
    )
    return compare(plan, logged)
