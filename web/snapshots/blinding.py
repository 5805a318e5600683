"""Blinded views of a result: every policy name replaced by its arm label.

An admin previewing an unreleased campaign sees the leaderboard the way it
will look, under the same arm labels ``proctor campaign status`` prints
(``arm A``, … in an order drawn from the sealed seed: neither policy ids nor
allocation order give them away). Naming the arms before release is the
scheduler's audited unblinding, not a page view.

The replacement walks the whole result — values, dictionary keys, and free
text such as notes — so a name cannot leak through a field added later.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa

from proctor.db.engine import ProctorSession
from proctor.db.models import Campaign, CampaignPolicy, Policy
from scheduler.service import _arm_labels as scheduler_arm_labels


def arm_labels(session: ProctorSession, campaign: Campaign) -> dict[str, str]:
    """Policy name → blinded arm label, for every policy of the campaign."""
    rows = session.execute(
        sa.select(Policy.id, Policy.name)
        .join(CampaignPolicy, CampaignPolicy.policy_id == Policy.id)
        .where(CampaignPolicy.campaign_id == campaign.id)
    ).all()
    by_id = scheduler_arm_labels(campaign, [r.id for r in rows], {})
    return {r.name: by_id[r.id] for r in rows}


class Blinder:
    """Replaces names with labels in any JSON-like structure."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = dict(labels)
        names = sorted(self.labels, key=len, reverse=True)
        self._pattern = (
            re.compile("|".join(re.escape(n) for n in names if n)) if any(names) else None
        )

    def text(self, value: str) -> str:
        exact = self.labels.get(value)
        if exact is not None:
            return exact
        if self._pattern is None:
            return value
        return self._pattern.sub(lambda m: self.labels[m.group(0)], value)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {(self.text(k) if isinstance(k, str) else k): self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        return value


def blind_result(result: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """A copy of ``result`` naming arms instead of policies. Policies the
    campaign does not list (a stray reference) get labels of their own."""
    labels = dict(labels)
    extra = sorted(
        {p["policy"] for p in result.get("policies", [])}
        | {e["policy"] for e in result.get("excluded", []) if e.get("policy")}
    )
    for name in extra:
        if name not in labels:
            labels[name] = f"arm ?{len(labels) + 1}"
    return Blinder(labels)(result)
