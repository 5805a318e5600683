"""Who an export is for, and so which episodes it may hold and what it calls
each policy.

* **The public** (no submitter): a released campaign only — before release
  who ran what is sealed — every episode, each policy under the name the
  public board shows (``proctor.scheduler.naming``: named if its submitter
  opted in, the reference always, otherwise its arm label).
* **A submitter**: the episodes of their own policies only (or of the one
  they name), in any campaign state: a private export, theirs before
  release too. Another submitter's policy is refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Campaign, CampaignPolicy, Policy, User
from proctor.core.domain import CampaignStatus
from proctor.core.errors import UsageError


@dataclass(frozen=True)
class Audience:
    campaign: Campaign
    submitter: str | None  # None: the public
    policy_ids: frozenset[int] | None  # the episodes' policies; None: every one
    labels: dict[str, str]  # policy name → what the export calls it
    withheld: tuple[str, ...]  # the labels standing for a withheld name

    @property
    def private(self) -> bool:
        return self.submitter is not None


def find_campaign(session: ProctorSession, ref: str) -> Campaign:
    q = sa.select(Campaign)
    c = session.scalar(
        q.where(Campaign.id == int(ref)) if ref.isdigit() else q.where(Campaign.name == ref)
    )
    if c is None:
        raise UsageError(f"campaign: no campaign '{ref}'")
    return c


def require_released(c: Campaign) -> Campaign:
    if c.status != CampaignStatus.released:
        raise UsageError(
            f"campaign '{c.name}' is {c.status.value}, not released: who ran what is sealed "
            "until release (`proctor campaign release`); a submitter may export their own "
            "policy's episodes with --submitter"
        )
    return c


def _public(session: ProctorSession, c: Campaign, policy: str | None) -> Audience:
    from proctor.scheduler.naming import campaign_naming

    if policy is not None:
        raise UsageError("policy: choosing a policy is for a submitter's export (--submitter)")
    naming = campaign_naming(session, require_released(c))
    hidden = naming.hidden_from(None)
    return Audience(
        campaign=c,
        submitter=None,
        policy_ids=None,
        labels=naming.labels(),
        withheld=tuple(sorted(hidden.values())),
    )


def _submitter(session: ProctorSession, c: Campaign, username: str, policy: str | None) -> Audience:
    user = session.scalar(sa.select(User).where(User.username == username))
    if user is None:
        raise UsageError(f"submitter: no user '{username}'")
    entered = {
        p.name: p
        for p in session.scalars(
            sa.select(Policy)
            .join(CampaignPolicy, CampaignPolicy.policy_id == Policy.id)
            .where(CampaignPolicy.campaign_id == c.id)
        )
    }
    own = {name: p for name, p in entered.items() if p.owner_id == user.id}
    if policy is not None:
        if policy not in own:
            raise UsageError(
                f"policy: '{policy}' is not a policy of submitter '{username}' in campaign "
                f"'{c.name}'; a submitter exports only their own policies' episodes"
            )
        own = {policy: own[policy]}
    if not own:
        raise UsageError(f"submitter: '{username}' has no policy in campaign '{c.name}'")
    return Audience(
        campaign=c,
        submitter=username,
        policy_ids=frozenset(p.id for p in own.values()),
        labels={name: name for name in own},
        withheld=(),
    )


def audience(
    session: ProctorSession, *, campaign: str, submitter: str | None, policy: str | None
) -> Audience:
    """The audience of an export of ``campaign``; refuses what it may not see."""
    c = find_campaign(session, campaign)
    if submitter is None:
        return _public(session, c, policy)
    return _submitter(session, c, submitter, policy)
