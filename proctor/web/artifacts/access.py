"""Who may see an episode's recording, and whether its policy may be named.

The rules (docs/architecture.md, "Blinding is structural"):

* an episode of a **released** campaign is public: anyone may watch it, and
  its policy's identity may be shown;
* any other episode (a running or closed campaign, an ad-hoc run outside a
  campaign) is visible only to the staff who work with blinded data —
  admins, reviewers and operators — and never named: the pages show its run
  code only. Admins preview unreleased results blinded too; naming arms
  before release is the scheduler's audited ``unblind``;
* to everyone else such an episode does not exist (404, the same answer as
  for an unknown id, so a probe learns nothing).

A name is not the only thing that tells policies apart. Before release,
operators and reviewers (staff other than admins: ``EpisodeAccess.redacted``)
do not see how the policy spoke to the station — its dialect, action space,
image size, session flag — nor its call timing (latency figures, calls), in
any place they can read an episode (``proctor.web.artifacts.redaction``): a policy
that is the only one of its dialect, or one that chose an odd image size as a
beacon, would otherwise be named by it. Everything stays stored in full for
the analysis and is shown to admins, and to everyone after release.

Checkpoints are a policy's identity (their sha256 is the checkpoint hash):
only admins may fetch them through the web app. So is the simulated cell's
ground truth (the true placement times): a reviewer who could read it would
copy it instead of reviewing blind. It stays admin-only after release too,
since reviewing (and scoring the annotator against it) can go on then.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from fastapi import HTTPException, status

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Campaign, Episode
from proctor.core.domain import ArtifactKind, CampaignStatus, Role
from proctor.web.auth.identity import Principal

# the roles that handle blinded recordings in their work
STAFF_ROLES: tuple[Role, ...] = (Role.admin, Role.reviewer, Role.operator)
# artifact kinds that identify a policy: never served to anyone but admins
IDENTIFYING_KINDS = frozenset({ArtifactKind.checkpoint})
# all artifact kinds served to admins only (the ground truth: see the module's notes)
ADMIN_ONLY_KINDS = IDENTIFYING_KINDS | {ArtifactKind.ground_truth}

EPISODE_NOT_FOUND = "episode not found"


@dataclass(frozen=True)
class EpisodeAccess:
    """What the caller may do with one episode."""

    visible: bool
    # the campaign is released: the policy may be named, responses may be cached publicly
    public: bool
    # staff other than admins, before release: what tells policies apart besides their
    # names (dialect, image size, call timing…) is withheld (proctor.web.artifacts.redaction)
    redacted: bool = False

    @property
    def identified(self) -> bool:
        return self.public


def is_staff(who: Principal | None) -> bool:
    return who is not None and who.has_role(*STAFF_ROLES)


def campaign_released(session: ProctorSession, campaign_id: int | None) -> bool:
    if campaign_id is None:
        return False
    state = session.scalar(sa.select(Campaign.status).where(Campaign.id == campaign_id))
    return state == CampaignStatus.released


def episode_access(
    session: ProctorSession, episode: Episode, who: Principal | None
) -> EpisodeAccess:
    public = campaign_released(session, episode.campaign_id)
    admin = who is not None and who.has_role(Role.admin)
    return EpisodeAccess(
        visible=public or is_staff(who), public=public, redacted=not public and not admin
    )


def visible_episode(
    session: ProctorSession, uid: str, who: Principal | None
) -> tuple[Episode, EpisodeAccess]:
    """The episode with this uid if the caller may see it, else 404."""
    episode = session.scalar(sa.select(Episode).where(Episode.uid == uid))
    if episode is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, EPISODE_NOT_FOUND)
    access = episode_access(session, episode, who)
    if not access.visible:
        raise HTTPException(status.HTTP_404_NOT_FOUND, EPISODE_NOT_FOUND)
    return episode, access


def cache_control(access: EpisodeAccess) -> str:
    """Recorded data never changes once stored; only its audience differs."""
    if access.public:
        return "public, max-age=3600"
    return "private, no-cache"
