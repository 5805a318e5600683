"""The policy page's data: the policy's part of a snapshot, the comparator's
curves (the reference by default), and — once released, if its submitter
opted in (owners and admins: always) — who it is."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import HTTPException, status
from pydantic import BaseModel, Field

from proctor.analysis.leaderboard import QQ_PROBABILITIES
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import CampaignPolicy, Policy, Submission, User
from proctor.web.leaderboard.board import Board
from proctor.web.leaderboard.schemas import IntervalOut, LatencyOut
from proctor.web.policies import compare
from proctor.web.policies.behaviour import BehaviourOut, TaggedMoment, policy_behaviour


class Identity(BaseModel):
    """Shown once the campaign is released, to everyone if the submitter
    opted in to the public board (the reference: always), else only to the
    policy's owner and admins. Endpoint URLs are never shown (they are a
    submitter's infrastructure), only the dialect."""

    name: str
    public: bool = Field(description="false: shown to this caller only (owner, admins)")
    kind: str
    owner: str | None
    description: str
    submission_kind: str | None
    checkpoint_sha256: str | None
    endpoint_dialect: str | None


class Breakdown(BaseModel):
    key: str
    episodes: int
    objects: list[str]
    completion: IntervalOut | None
    hrt: IntervalOut | None
    rmst: IntervalOut | None
    same_side: bool | None = None


class ObjectPart(BaseModel):
    object: str
    tags: list[str]
    episodes: int
    operations: int
    rmst: IntervalOut | None
    hrt: IntervalOut | None
    uph: IntervalOut | None
    mtbfa: IntervalOut | None
    completion: IntervalOut | None
    median: IntervalOut | None
    plateau: IntervalOut | None = Field(description="F(∞): share of operations that ever succeed")
    hard_failure_rate: IntervalOut | None
    auc_vs_reference: IntervalOut | None
    success_at: list[dict[str, Any]]
    km: dict[str, Any] = Field(description="KM CDF: t, cdf, lo, hi, n_risk (a step function)")
    comparator_km: dict[str, Any] | None = Field(description="the comparator's KM CDF, same form")
    pp: dict[str, Any] | None = Field(
        description="P-P against the comparator (the reference unless ?vs= names another "
        "policy): ref = the comparator's F(t), model = this policy's, as t sweeps"
    )
    qq: dict[str, Any] | None = Field(
        description="Q-Q against the comparator: p, ref = the comparator's quantile times, "
        "model = this policy's (null where a curve never reaches p), last_reachable"
    )
    ks_vs_comparator: float | None = Field(
        description="the pair's KS distance on this object (from the snapshot's pairwise tests)"
    )
    tau_sweep: dict[str, Any]
    notes: list[str]
    links: dict[str, str]


class PolicyOut(BaseModel):
    campaign_id: int
    label: str
    blinded: bool
    identity_withheld: bool = Field(
        description="released, but the submitter has not opted in to the public board"
    )
    note: str | None
    identity: Identity | None
    reference: bool
    rank: int | None
    letters: str
    episodes: int
    operations: int
    tau_s: float
    comparator: str | None = Field(description="whose curves the CDF plots show beside this one")
    comparators: list[str]
    reference_label: str | None
    scores: dict[str, IntervalOut | None]
    failure_modes: dict[str, IntervalOut | None]
    success_at: list[dict[str, Any]]
    per_object: list[ObjectPart]
    per_configuration: list[Breakdown]
    per_tag: list[Breakdown]
    # where the episodes ran; empty for results computed before sites were recorded
    per_site: list[Breakdown] = Field(default_factory=list)
    per_station: list[Breakdown] = Field(default_factory=list)
    tau_sweep: dict[str, Any]
    binary: dict[str, Any]
    behaviour: list[BehaviourOut] = Field(
        default_factory=list,
        description="behavioural failure modes per object: share of episodes tagged, "
        "from the review log's live tags",
    )
    tagged_moments: list[TaggedMoment] = Field(
        default_factory=list, description="every live tag, with a link to its moment"
    )
    hrt_interactions: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the pre-registered tests of whether a scene factor changes this policy's "
        "HRT: factor, levels, per_level HRT, p (permutation)",
    )
    notes: list[str]
    links: dict[str, str]
    latency: LatencyOut | None = None


def _iv(x: dict[str, Any] | None) -> IntervalOut | None:
    return IntervalOut.of(x)


def _breakdown(b: dict[str, Any]) -> Breakdown:
    return Breakdown(
        key=b["key"],
        episodes=b["episodes"],
        objects=b["objects"],
        completion=_iv(b.get("completion")),
        hrt=_iv(b.get("hrt")),
        rmst=_iv(b.get("rmst")),
        same_side=b.get("same_side"),
    )


def _at(values: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "t": v["t"],
            "estimate": v.get("estimate"),
            "lo": (v.get("ci") or [None, None])[0],
            "hi": (v.get("ci") or [None, None])[1],
        }
        for v in values
    ]


def _pp(o: dict[str, Any], comp_km: dict[str, Any] | None, *, stored: bool) -> Any:
    """P-P against the comparator: the analysis's own against the reference,
    else computed from the two stored curves (``proctor.web.policies.compare``)."""
    if stored and o.get("pp") is not None:
        return o["pp"]
    return compare.pp(comp_km, o["km"]) if comp_km is not None else None


def _qq(o: dict[str, Any], comp_km: dict[str, Any] | None, *, stored: bool) -> Any:
    if stored and o.get("qq") is not None:
        return o["qq"]
    if comp_km is None:
        return None
    probabilities = (o.get("qq") or {}).get("p") or [float(p) for p in QQ_PROBABILITIES]
    plateau = (o.get("plateau") or {}).get("estimate")
    return compare.qq(comp_km, o["km"], probabilities, plateau)


def _pair_ks(board: Board, label: str, comparator: str | None) -> dict[str, float]:
    """Per-object KS distances of the pair (label, comparator) from the snapshot."""
    if comparator is None:
        return {}
    for q in board.result.get("pairs", []):
        if {q["a"], q["b"]} == {label, comparator}:
            return {o["object"]: o["statistic"] for o in q["macro_ks"]["per_object"]}
    return {}


def identity(session: ProctorSession, board: Board, label: str) -> Identity | None:
    if board.name_of(label) is None:  # a preview, or withheld from this caller
        return None
    pid = board.policy_ids.get(label)
    if pid is None:
        return None
    policy = session.get(Policy, pid)
    if policy is None:
        return None
    owner = session.get(User, policy.owner_id) if policy.owner_id else None
    sub_id = session.scalar(
        sa.select(CampaignPolicy.submission_id).where(
            CampaignPolicy.campaign_id == board.campaign.id, CampaignPolicy.policy_id == pid
        )
    )
    sub = session.get(Submission, sub_id) if sub_id else None
    return Identity(
        name=policy.name,
        public=not board.is_withheld(label),
        kind=policy.kind.value,
        owner=(owner.display_name or owner.username) if owner else None,
        description=policy.description or "",
        submission_kind=sub.kind.value if sub else None,
        checkpoint_sha256=sub.checkpoint_sha256 if sub else None,
        endpoint_dialect=sub.endpoint_dialect.value if sub and sub.endpoint_dialect else None,
    )


def policy_view(session: ProctorSession, board: Board, label: str, vs: str | None) -> PolicyOut:
    p = board.policy(label)
    reference = board.result["protocol"].get("reference")
    others = [q["policy"] for q in board.result["policies"] if q["policy"] != label]
    comparator = vs if vs is not None else (reference if reference != label else None)
    if comparator is not None and comparator not in others:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "comparator not found in this leaderboard")
    comp = board.policy(comparator) if comparator else None
    comp_km = {o["object"]: o["km"] for o in comp["per_object"]} if comp else {}
    ks = _pair_ks(board, label, comparator)
    fm = p["failure_modes"]
    behaviour, moments = policy_behaviour(session, board, label)
    objects = [
        ObjectPart(
            object=o["object"],
            tags=o["tags"],
            episodes=o["episodes"],
            operations=o["operations"],
            rmst=_iv(o["rmst"]),
            hrt=_iv(o["hrt"]),
            uph=_iv(o["uph"]),
            mtbfa=_iv(o["mtbfa"]),
            completion=_iv(o["completion"]),
            median=_iv(o["median"]),
            plateau=_iv(o["plateau"]),
            hard_failure_rate=_iv(o["hard_failure_rate"]),
            auc_vs_reference=_iv(o["auc_vs_reference"]),
            success_at=_at(o["success_at"]),
            km=o["km"],
            comparator_km=comp_km.get(o["object"]),
            pp=_pp(o, comp_km.get(o["object"]), stored=comparator == reference),
            qq=_qq(o, comp_km.get(o["object"]), stored=comparator == reference),
            ks_vs_comparator=ks.get(o["object"]),
            tau_sweep=o["tau_sweep"],
            notes=o["notes"],
            links={"cell": board.episodes_url(label, o["object"])},
        )
        for o in p["per_object"]
    ]
    return PolicyOut(
        campaign_id=board.campaign.id,
        label=label,
        blinded=board.blinded,
        identity_withheld=board.is_withheld(label),
        note=board.note(label),
        identity=identity(session, board, label),
        reference=p["reference"],
        rank=p["rank"],
        letters=p["letters"],
        episodes=p["episodes"],
        operations=p["operations"],
        tau_s=board.result["protocol"]["tau"],
        comparator=comparator,
        comparators=others,
        reference_label=reference,
        scores={
            k: _iv(p[k])
            for k in (
                "hrt",
                "rmst",
                "rmst_pooled",
                "uph",
                "mtbfa",
                "completion",
                "median",
                "hard_failure_rate",
                "auc_vs_reference",
            )
        },
        failure_modes={k: _iv(v) for k, v in fm.items()},
        success_at=_at(p["success_at"]),
        per_object=objects,
        per_configuration=[_breakdown(b) for b in p["per_configuration"]],
        per_tag=[_breakdown(b) for b in p["per_tag"]],
        per_site=[_breakdown(b) for b in p.get("per_site", [])],
        per_station=[_breakdown(b) for b in p.get("per_station", [])],
        tau_sweep=p["tau_sweep"],
        binary=p["binary"],
        behaviour=behaviour,
        tagged_moments=moments,
        # snapshots computed before the interaction tests have no such key
        hrt_interactions=list(p.get("hrt_interactions", [])),
        notes=p["notes"],
        latency=LatencyOut.of(p.get("latency")),
        links={
            "leaderboard": board.board_url(),
            "episodes": board.episodes_url(label),
            "page": board.policy_url(label),
        },
    )
