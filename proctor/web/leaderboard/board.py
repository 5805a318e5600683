"""Opening a campaign's leaderboard for a caller: which campaign, which
snapshot, and who is named in it (``proctor.scheduler.naming``).

* A **released** campaign's latest snapshot is public. A policy appears by
  name only if its submitter opted in to the public board (the human
  reference always does); the others keep their blinded arm label, with the
  note "identity withheld by the submitter" — their owners and admins see
  the name beside the label.
* An unreleased campaign is invisible (404, as if it did not exist) to
  everyone but admins, who see a **blinded preview**: arm labels instead of
  policy names, no owners, no endpoints, no checkpoints.

Everything a page shows of a policy is keyed by its *label*: the same for
every caller (its name when named, its arm label otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode

import sqlalchemy as sa
from fastapi import HTTPException, status

from proctor.analysis.snapshot import LeaderboardSnapshot, PolicySnapshot, migrate, read_snapshot
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import AnalysisSnapshot, Campaign
from proctor.core.domain import CampaignStatus, LabelStream
from proctor.core.errors import FieldError
from proctor.scheduler.naming import WITHHELD_NOTE, blind_result, campaign_naming, named_policy_ids
from proctor.web.auth.identity import Principal, viewer
from proctor.web.snapshots import service as snapshots

CAMPAIGN_NOT_FOUND = "campaign not found"


@dataclass(frozen=True)
class CampaignInfo:
    id: int
    name: str
    status: CampaignStatus
    started_at: datetime | None
    closed_at: datetime | None
    released_at: datetime | None
    tau_s: float
    per_item_cap_s: float
    items_per_episode: int
    episodes_per_cell: int

    @property
    def released(self) -> bool:
        return self.status == CampaignStatus.released

    @classmethod
    def of(cls, c: Campaign) -> CampaignInfo:
        return cls(
            id=c.id,
            name=c.name,
            status=CampaignStatus(c.status),
            started_at=c.started_at,
            closed_at=c.closed_at,
            released_at=c.released_at,
            tau_s=float(c.tau_s),
            per_item_cap_s=float(c.per_item_cap_s),
            items_per_episode=c.items_per_episode,
            episodes_per_cell=c.episodes_per_cell,
        )


@dataclass(frozen=True)
class Board:
    campaign: CampaignInfo
    stream: LabelStream
    meta: snapshots.SnapshotMeta
    result: dict[str, Any]  # labels in place of every name the public may not see
    # the same result, typed (proctor.analysis.snapshot): what views read
    snapshot: LeaderboardSnapshot
    blinded: bool  # an admin's preview of an unreleased campaign
    streams: list[LabelStream]
    # label → policy id (the route from a page's label back to rows)
    policy_ids: dict[str, int]
    # labels of released policies whose identity is withheld from the public
    withheld: frozenset[str] = frozenset()
    # label → name of the withheld policies this caller may see named (owner, admins)
    known: dict[str, str] = field(default_factory=dict)
    naming_key: tuple[object, ...] = ()

    def is_withheld(self, label: str) -> bool:
        return label in self.withheld

    def name_of(self, label: str) -> str | None:
        """The policy's name if this caller may know it, else None."""
        if self.blinded:
            return None
        if label in self.withheld:
            return self.known.get(label)
        return label if label in self.policy_ids else None

    def note(self, label: str) -> str | None:
        return WITHHELD_NOTE if label in self.withheld else None

    def cache_key(self) -> tuple[object, ...]:
        """What a view of this board depends on besides the snapshot."""
        return (self.blinded, self.naming_key, tuple(sorted(self.known.items())))

    # -- links: every number points at what it was computed from
    def _q(self, **params: str | None) -> str:
        if self.stream != snapshots.DEFAULT_STREAM:
            params["stream"] = self.stream.value
        clean = {k: v for k, v in params.items() if v is not None}
        return ("?" + urlencode(clean)) if clean else ""

    def board_url(self) -> str:
        return f"/leaderboard/{self.campaign.id}" + self._q()

    def policy_url(self, label: str, anchor: str = "") -> str:
        return (
            f"/leaderboard/{self.campaign.id}/policies/{quote(label, safe='')}"
            + self._q()
            + (f"#{anchor}" if anchor else "")
        )

    def compare_url(self, a: str, b: str) -> str:
        """Two policies side by side on matched episodes (proctor.web.policies.matched)."""
        return f"/leaderboard/{self.campaign.id}/compare" + self._q(a=a, b=b)

    def episodes_url(self, label: str | None = None, obj: str | None = None) -> str:
        return f"/leaderboard/{self.campaign.id}/episodes" + self._q(policy=label, object=obj)

    def policy(self, label: str) -> PolicySnapshot:
        for p in self.snapshot.policies:
            if p.policy == label:
                return p
        raise HTTPException(status.HTTP_404_NOT_FOUND, "policy not found in this leaderboard")


def visible_campaign(session: ProctorSession, campaign_id: int, who: Principal | None) -> Campaign:
    c = session.get(Campaign, campaign_id)
    if c is None or (c.status != CampaignStatus.released and not (who and who.is_admin)):
        raise HTTPException(status.HTTP_404_NOT_FOUND, CAMPAIGN_NOT_FOUND)
    return c


def parse_stream(raw: str | None) -> LabelStream:
    if raw is None or raw == "":
        return snapshots.DEFAULT_STREAM
    try:
        return LabelStream(raw)
    except ValueError:
        raise FieldError(
            "stream",
            f"unknown label stream '{raw}'; one of {', '.join(s.value for s in LabelStream)}",
        ) from None


def open_board(
    session: ProctorSession,
    campaign_id: int,
    stream: LabelStream,
    who: Principal | None,
    *,
    results: snapshots.ResultCache,
) -> Board:
    """The caller's view of a campaign's latest leaderboard; its labelled
    result is kept in the app's ``results`` cache."""
    campaign = visible_campaign(session, campaign_id, who)
    meta = snapshots.latest_meta(session, campaign_id=campaign.id, stream=stream)
    if meta is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no leaderboard has been computed for this campaign under {stream.value} yet",
        )
    naming = campaign_naming(session, campaign)
    key = ("labelled", meta.id, naming.key())
    cached = results.get(key)
    if cached is None:
        raw = snapshots.snapshot_result(session, meta.id, results=results)
        # brought to the current schema once: every reader below sees one version
        labelled = migrate(blind_result(raw, naming.labels()))
        cached = results.put(key, (labelled, read_snapshot(labelled)))
    result, typed = cached
    return Board(
        campaign=CampaignInfo.of(campaign),
        stream=stream,
        meta=meta,
        result=result,
        snapshot=typed,
        blinded=not naming.released,
        streams=snapshots.streams_available(session, campaign_id=campaign.id),
        policy_ids=naming.ids(),
        withheld=frozenset(a.arm for a in naming.withheld()),
        known=naming.known_to(viewer(who)),
        naming_key=naming.key(),
    )


@dataclass(frozen=True)
class BoardVersion:
    """What identifies a public leaderboard response, in one cheap query."""

    snapshot_id: int
    data_version: str
    released: bool
    listing: tuple[int, str]  # released campaigns: how many, the latest release
    named: tuple[int, ...]  # the policies that may be named (their opt-ins change views)

    def key(self) -> tuple[object, ...]:
        return (self.snapshot_id, self.data_version, self.released, self.listing, self.named)


def board_version(
    session: ProctorSession, campaign_id: int, stream: LabelStream
) -> BoardVersion | None:
    """The latest snapshot of a campaign under a stream and whether the
    campaign is released (None: no snapshot or no campaign)."""
    row = session.execute(
        sa.select(AnalysisSnapshot.id, AnalysisSnapshot.data_version, Campaign.status)
        .join(Campaign, Campaign.id == AnalysisSnapshot.campaign_id)
        .where(AnalysisSnapshot.campaign_id == campaign_id, AnalysisSnapshot.label_stream == stream)
        .order_by(AnalysisSnapshot.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    count, latest = session.execute(
        sa.select(sa.func.count(), sa.func.max(Campaign.released_at)).where(
            Campaign.status == CampaignStatus.released
        )
    ).one()
    return BoardVersion(
        snapshot_id=row[0],
        data_version=row[1],
        released=row[2] == CampaignStatus.released,
        listing=(int(count), str(latest)),
        named=named_policy_ids(session, campaign_id),
    )


def listed_campaigns(session: ProctorSession, who: Principal | None) -> list[CampaignInfo]:
    """Campaigns with a leaderboard the caller may see, newest release first
    (admins also see unreleased ones, as previews)."""
    has_snapshot = sa.exists().where(AnalysisSnapshot.campaign_id == Campaign.id)
    q = sa.select(Campaign).where(has_snapshot)
    if not (who and who.is_admin):
        q = q.where(Campaign.status == CampaignStatus.released)
    rows = [CampaignInfo.of(c) for c in session.scalars(q)]

    def when(c: CampaignInfo) -> float:
        at = c.released_at or c.closed_at or c.started_at
        return at.timestamp() if at else 0.0

    rows.sort(key=lambda c: (c.released, when(c), c.id), reverse=True)
    return rows
