"""The adaptive rule on a running campaign: read the settled outcomes, apply
the replayed plan to the slots not yet handed out, verify it after reveal.

The rule itself is the pure :mod:`proctor.scheduler.adaptive`; this module
is its database side. A block counts as *settled* when none of its slots is
pending or claimed and every counted episode of it is readable by the
analysis in the detector stream; the rule reads blocks 0…F, F the
last block before the first unsettled one, so what it reads is fixed once
read, and the replay after reveal reads the same.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.analysis.store import load_episodes
from proctor.core.db.models import Assignment, Campaign, CampaignPolicy
from proctor.core.db.models import Episode as EpisodeRow
from proctor.core.domain import AssignmentStatus, LabelStream
from proctor.scheduler.adaptive import AdaptiveRule, Outcome, Plan, claim_horizon, compare, replay
from proctor.scheduler.allocation import AllocationProtocol

# the release detector's placements: fixed once the annotator has run, so a
# later review cannot change what a decision read
STREAM = LabelStream.detector_only
_OPEN = (AssignmentStatus.pending, AssignmentStatus.claimed)


@dataclass(frozen=True)
class Reading:
    """What the rule may read now: the outcomes of blocks 0…``settled``
    (−1: none) and the first block not settled (None: all settled)."""

    outcomes: list[Outcome]
    first_unsettled: int | None


def rule_of(campaign: Campaign) -> tuple[AllocationProtocol, AdaptiveRule] | None:
    """The committed protocol and adaptive rule; None for a fixed campaign."""
    if campaign.allocation_protocol is None:
        return None
    protocol = AllocationProtocol.from_json(campaign.allocation_protocol)
    if protocol.adaptive is None:
        return None
    return protocol, AdaptiveRule.from_json(protocol.adaptive)


def read_outcomes(session: Session, campaign: Campaign) -> Reading:
    table = load_episodes(session, campaign_id=campaign.id, stream=STREAM)
    loaded = {e.episode_id: e for e in table.episodes}
    rows = session.execute(
        sa.select(
            EpisodeRow.uid,
            Assignment.block_index,
            Assignment.sequence,
            Assignment.policy_id,
            Assignment.object_type_id,
            Assignment.status,
        )
        .join(Assignment, EpisodeRow.assignment_id == Assignment.id)
        .where(Assignment.campaign_id == campaign.id, Assignment.status == AssignmentStatus.done)
    ).all()
    unsettled = set(
        session.scalars(
            sa.select(Assignment.block_index).where(
                Assignment.campaign_id == campaign.id, Assignment.status.in_(_OPEN)
            )
        )
    )
    outcomes: list[Outcome] = []
    for uid, block, seq, pid, oid, _status in rows:
        ep = loaded.get(uid)
        if ep is None:
            unsettled.add(block)  # counted, but not readable yet (labels pending)
            continue
        # the rule reads ids, so names (and their blinding) play no part
        outcomes.append(Outcome(block, seq, replace(ep, policy=str(pid), object=str(oid))))
    first = min(unsettled) if unsettled else None
    if first is not None:
        outcomes = [o for o in outcomes if o.block_index < first]
    return Reading(outcomes=outcomes, first_unsettled=first)


def current_plan(session: Session, campaign: Campaign) -> tuple[Plan, Reading] | None:
    rules = rule_of(campaign)
    if rules is None or campaign.allocation_seed is None:
        return None
    protocol, rule = rules
    reading = read_outcomes(session, campaign)
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
        sa.select(Assignment).where(
            Assignment.campaign_id == campaign.id,
            Assignment.status == AssignmentStatus.pending,
            Assignment.replaces_id.is_(None),
        )
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
