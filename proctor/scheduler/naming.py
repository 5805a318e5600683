"""Who is named where: policy names or blinded arm labels, for one campaign
and one caller.

* **Before release** every policy — the reference included — appears under
  its blinded arm label, to everyone (admins preview the leaderboard that
  way). The labels are the ones ``proctor campaign status`` prints (``arm
  A``, … in an order drawn from the sealed seed: neither policy ids nor
  allocation order give them away). Naming arms before release is the
  scheduler's audited unblinding, not a page view.
* **After release** a policy is named (name, owner, description, its
  submission) only if its submitter opted in to the public board
  (``Policy.visibility == public``); the human reference is always named.
  The others keep their arm label, with the note :data:`WITHHELD_NOTE`.
  Their owners and admins still learn the name (:meth:`CampaignNaming.known_to`),
  beside the label — the label stays what every URL and every row uses.

The replacement is structural (:func:`relabel_result`): it renames the
fields of a result that hold policy names, never text that merely looks
like a name — a policy called ``policy`` or ``estimate`` or after an object
would otherwise rewrite keys and words, break the board and show which label
hides which name. Names that collide with the result's words are also
refused at registration (``proctor.runner.manifest``, ``service.policy_for``).

The rule is the scheduler's, not the web's: it reads only campaign state and
who is looking (a :class:`Viewer`: a user id and whether they are an admin),
so the web app, the export and the campaigns API apply the same rule, and the
web adapts its signed-in ``Principal`` to a ``Viewer``
(``proctor.web.auth.identity.viewer``) — docs/architecture.md, "Layers".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from proctor.analysis.notes import relabel_note
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Campaign, CampaignPolicy, Policy
from proctor.core.domain import CampaignStatus, PolicyKind, Visibility
from proctor.scheduler.service import arm_labels as scheduler_arm_labels

WITHHELD_NOTE = "identity withheld by the submitter"


@dataclass(frozen=True)
class Viewer:
    """Who is looking, as far as naming cares: a user, and whether they hold
    the admin role. ``None`` in its place is the public."""

    user_id: int
    is_admin: bool


@dataclass(frozen=True)
class Arm:
    """One policy of a campaign, as the naming rules see it."""

    policy_id: int
    name: str
    arm: str  # the blinded label
    reference: bool
    opted_in: bool  # the submitter agreed to be named on the public board
    owner_id: int | None


@dataclass(frozen=True)
class CampaignNaming:
    released: bool
    arms: tuple[Arm, ...]

    def named(self, arm: Arm) -> bool:
        """Whether everyone may see this policy's identity."""
        if not self.released:
            return False
        if not (arm.reference or arm.opted_in):
            return False
        # a name that equals another arm's label would give two rows one label
        return arm.name not in self._arm_labels_of_others(arm)

    def _arm_labels_of_others(self, arm: Arm) -> set[str]:
        return {a.arm for a in self.arms if a.policy_id != arm.policy_id}

    def label(self, arm: Arm) -> str:
        """What every page, URL and JSON row calls this policy."""
        return arm.name if self.named(arm) else arm.arm

    def labels(self) -> dict[str, str]:
        """Policy name → label."""
        return {a.name: self.label(a) for a in self.arms}

    def ids(self) -> dict[str, int]:
        """Label → policy id."""
        return {self.label(a): a.policy_id for a in self.arms}

    def withheld(self) -> list[Arm]:
        """Released, but not named: under the arm label with :data:`WITHHELD_NOTE`."""
        return [a for a in self.arms if self.released and not self.named(a)]

    def known_to(self, who: Viewer | None) -> dict[str, str]:
        """Label → name of the withheld policies this caller may still see
        named: admins all of them, a submitter their own. Nothing before
        release (an admin's preview stays blinded)."""
        if who is None:
            return {}
        return {
            a.arm: a.name
            for a in self.withheld()
            if who.is_admin or (a.owner_id is not None and a.owner_id == who.user_id)
        }

    def hidden_from(self, who: Viewer | None) -> dict[str, str]:
        """Name → label of every policy whose name this caller may not see."""
        known = set(self.known_to(who).values())
        return {
            a.name: self.label(a)
            for a in self.arms
            if self.label(a) != a.name and a.name not in known
        }

    def key(self) -> tuple[object, ...]:
        """What the public's view depends on (cache keys): which policies are named."""
        return (self.released, tuple(sorted(a.policy_id for a in self.arms if self.named(a))))


def campaign_naming(session: ProctorSession, campaign: Campaign) -> CampaignNaming:
    rows = session.execute(
        sa.select(Policy.id, Policy.name, Policy.kind, Policy.visibility, Policy.owner_id)
        .join(CampaignPolicy, CampaignPolicy.policy_id == Policy.id)
        .where(CampaignPolicy.campaign_id == campaign.id)
        .order_by(Policy.id)
    ).all()
    by_id = scheduler_arm_labels(campaign, [r.id for r in rows], {})
    return CampaignNaming(
        released=campaign.status == CampaignStatus.released,
        arms=tuple(
            Arm(
                policy_id=r.id,
                name=r.name,
                arm=by_id[r.id],
                reference=r.kind == PolicyKind.reference,
                opted_in=r.visibility == Visibility.public,
                owner_id=r.owner_id,
            )
            for r in rows
        ),
    )


def named_policy_ids(session: ProctorSession, campaign_id: int) -> tuple[int, ...]:
    """The ids of a campaign's policies that may be named once it is
    released (one cheap query: the public pages' cache keys)."""
    return tuple(
        session.scalars(
            sa.select(Policy.id)
            .join(CampaignPolicy, CampaignPolicy.policy_id == Policy.id)
            .where(
                CampaignPolicy.campaign_id == campaign_id,
                sa.or_(
                    Policy.visibility == Visibility.public,
                    Policy.kind == PolicyKind.reference,
                ),
            )
            .order_by(Policy.id)
        )
    )


def arm_labels(session: ProctorSession, campaign: Campaign) -> dict[str, str]:
    """Policy name → blinded arm label, for every policy of the campaign."""
    return {a.name: a.arm for a in campaign_naming(session, campaign).arms}


def relabel_result(result: dict[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    """A copy of an analysis result (``proctor/analysis/README.md``, "The result
    JSON") with each policy name replaced by its label (``labels``: name →
    label; names it lacks stay), in exactly the fields that hold names: the
    reference, each policy row, each pair's members and winner, the letter
    tables' keys, the matrix, the exclusions, the notes written about
    policies (``proctor.analysis.notes``), an adaptive campaign's early stops,
    the drift sentinels, the per-object letters and the rankings by rule.
    Nothing else is touched: a name that is also a word of the result (a
    key, an object, free text) stays that word,
    so the labels never tell which name they stand for. Nested parts not
    relabelled are shared with ``result``, which is not modified."""

    def name(value: Any) -> Any:
        return labels.get(value, value) if isinstance(value, str) else value

    out = dict(result)
    if isinstance(result.get("protocol"), dict):
        out["protocol"] = {
            **result["protocol"],
            "reference": name(result["protocol"].get("reference")),
        }
    out["policies"] = [{**p, "policy": name(p.get("policy"))} for p in result.get("policies", [])]
    out["pairs"] = [
        {**q, "a": name(q.get("a")), "b": name(q.get("b")), "winner": name(q.get("winner"))}
        for q in result.get("pairs", [])
    ]
    for key in ("letters", "letters_completion"):
        if isinstance(result.get(key), dict):
            out[key] = {name(k): v for k, v in result[key].items()}
    matrix = result.get("matrix")
    if isinstance(matrix, dict):
        out["matrix"] = {
            **matrix,
            "policies": [name(n) for n in matrix.get("policies", [])],
            "winner": [[name(w) for w in row] for row in matrix.get("winner", [])],
        }
    out["excluded"] = [{**e, "policy": name(e.get("policy"))} for e in result.get("excluded", [])]
    out["notes"] = [
        relabel_note(n, labels) if isinstance(n, str) else n for n in result.get("notes", [])
    ]
    stops = result.get("early_stops")
    if isinstance(stops, dict):
        out["early_stops"] = {
            **stops,
            "sentinels": [name(n) for n in stops.get("sentinels", [])],
            "pairs": [{**q, "a": name(q.get("a")), "b": name(q.get("b"))} for q in stops["pairs"]],
            "stopped": [{**q, "policy": name(q.get("policy"))} for q in stops["stopped"]],
        }
    if isinstance(result.get("drift"), list):
        out["drift"] = [{**d, "policy": name(d.get("policy"))} for d in result["drift"]]
    # the per-object letter tables and the rankings by rule (proctor.analysis.claims)
    if isinstance(result.get("letters_per_object"), list):
        out["letters_per_object"] = [
            {**x, "letters": {name(k): v for k, v in x.get("letters", {}).items()}}
            for x in result["letters_per_object"]
        ]
    if isinstance(result.get("rankings"), list):
        out["rankings"] = [
            {**r, "policies": [{**q, "policy": name(q.get("policy"))} for q in r["policies"]]}
            for r in result["rankings"]
        ]
    return out


def blind_result(result: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """A copy of ``result`` with every policy name replaced by its label
    (``labels``: name → label; a name that stays maps to itself). Policies
    the campaign does not list (a stray reference) get labels of their own."""
    labels = dict(labels)
    extra = sorted(
        {p["policy"] for p in result.get("policies", [])}
        | {e["policy"] for e in result.get("excluded", []) if e.get("policy")}
    )
    for name in extra:
        if name not in labels:
            labels[name] = f"arm ?{len(labels) + 1}"
    if all(k == v for k, v in labels.items()):
        return result  # nothing to hide
    return relabel_result(result, labels)
