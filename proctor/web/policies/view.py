"""The policy page's data: the policy's part of a snapshot, the comparator's
curves (the reference by default), and — once released, if its submitter
opted in (owners and admins: always) — who it is."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import sqlalchemy as sa
from fastapi import HTTPException, status
from pydantic import BaseModel, Field

from proctor.analysis import metrics
from proctor.analysis.leaderboard import QQ_PROBABILITIES
from proctor.analysis.snapshot import (
    AtSnapshot,
    BreakdownSnapshot,
    IntervalSnapshot,
    ObjectSnapshot,
)
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import CampaignPolicy, Policy, Submission, User
from proctor.web.leaderboard.board import Board
from proctor.web.leaderboard.schemas import IntervalOut, LatencyOut
from proctor.web.policies import compare
from proctor.web.policies.behaviour import (
    BehaviourOut,
    ReviewedOut,
    TaggedMoment,
    policy_behaviour,
)


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
    behaviour_reviewed: ReviewedOut = Field(
        default_factory=lambda: ReviewedOut(episodes=0, reviewed=0),
        description="how many of the counted episodes a person reviewed: the behaviour "
        "shares are tagged rates over all of them",
    )
    hrt_interactions: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the pre-registered tests of whether a scene factor changes this policy's "
        "HRT: factor, levels, per_level HRT, p (permutation)",
    )
    notes: list[str]
    links: dict[str, str]
    latency: LatencyOut | None = None


def _breakdown(b: BreakdownSnapshot) -> Breakdown:
    return Breakdown(
        key=b.key,
        episodes=b.episodes,
        objects=b.objects,
        completion=IntervalOut.of(b.completion),
        hrt=IntervalOut.of(b.hrt),
        rmst=IntervalOut.of(b.rmst),
        same_side=b.same_side,
    )


def _at(values: list[AtSnapshot]) -> list[dict[str, Any]]:
    return [
        {"t": v.t, "estimate": v.value.estimate, "lo": v.value.lo, "hi": v.value.hi} for v in values
    ]


def _interval_json(x: IntervalSnapshot) -> dict[str, Any]:
    """The result JSON's form of an interval, which the page's script reads."""
    return {"estimate": x.estimate, "ci": [x.lo, x.hi]}


def _pp(o: ObjectSnapshot, comp_km: dict[str, Any] | None, *, stored: bool) -> Any:
    """P-P against the comparator: the analysis's own against the reference,
    else computed from the two stored curves (``proctor.web.policies.compare``)."""
    if stored and o.pp is not None:
        return asdict(o.pp)
    return compare.pp(comp_km, asdict(o.km)) if comp_km is not None else None


def _qq(o: ObjectSnapshot, comp_km: dict[str, Any] | None, *, stored: bool) -> Any:
    if stored and o.qq is not None:
        return asdict(o.qq)
    if comp_km is None:
        return None
    stored_p = [] if o.qq is None else [p for p in o.qq.p if p is not None]
    probabilities = stored_p or [float(p) for p in QQ_PROBABILITIES]
    plateau = None if o.plateau is None else o.plateau.estimate
    return compare.qq(comp_km, asdict(o.km), probabilities, plateau)


def _pair_ks(board: Board, label: str, comparator: str | None) -> dict[str, float]:
    """Per-object KS distances of the pair (label, comparator) from the snapshot."""
    if comparator is None:
        return {}
    for q in board.snapshot.pairs:
        if {q.a, q.b} == {label, comparator}:
            return {o.object: o.statistic for o in q.macro_ks.per_object}
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


# the policy's headline scores, by their names in proctor.analysis.metrics
_SCORES = (
    *("hrt", "rmst", "rmst_pooled", "uph", "mtbfa", "completion", "median"),
    *("hard_failure_rate", "auc_vs_reference"),
)


def policy_view(session: ProctorSession, board: Board, label: str, vs: str | None) -> PolicyOut:
    typed = board.policy(label)
    reference = board.snapshot.protocol.reference
    others = [q.policy for q in board.snapshot.policies if q.policy != label]
    comparator = vs if vs is not None else (reference if reference != label else None)
    if comparator is not None and comparator not in others:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "comparator not found in this leaderboard")
    comp = board.policy(comparator) if comparator else None
    comp_km = {o.object: asdict(o.km) for o in comp.per_object} if comp else {}
    ks = _pair_ks(board, label, comparator)
    behaviour, moments, reviewed = policy_behaviour(session, board, label)
    objects = [
        ObjectPart(
            object=o.object,
            tags=o.tags,
            episodes=o.episodes,
            operations=o.operations,
            rmst=IntervalOut.of(o.rmst),
            hrt=IntervalOut.of(o.hrt),
            uph=IntervalOut.of(o.uph),
            mtbfa=IntervalOut.of(o.mtbfa),
            completion=IntervalOut.of(o.completion),
            median=IntervalOut.of(o.median),
            plateau=IntervalOut.of(o.plateau),
            hard_failure_rate=IntervalOut.of(o.hard_failure_rate),
            auc_vs_reference=IntervalOut.of(o.auc_vs_reference),
            success_at=_at(o.success_at),
            km=asdict(o.km),
            comparator_km=comp_km.get(o.object),
            pp=_pp(o, comp_km.get(o.object), stored=comparator == reference),
            qq=_qq(o, comp_km.get(o.object), stored=comparator == reference),
            ks_vs_comparator=ks.get(o.object),
            tau_sweep=asdict(o.tau_sweep),
            notes=o.notes,
            links={"cell": board.episodes_url(label, o.object)},
        )
        for o in typed.per_object
    ]
    return PolicyOut(
        campaign_id=board.campaign.id,
        label=label,
        blinded=board.blinded,
        identity_withheld=board.is_withheld(label),
        note=board.note(label),
        identity=identity(session, board, label),
        reference=typed.reference,
        rank=typed.rank,
        letters=typed.letters,
        episodes=typed.episodes,
        operations=typed.operations,
        tau_s=board.snapshot.protocol.tau,
        comparator=comparator,
        comparators=others,
        reference_label=reference,
        scores={k: IntervalOut.of(typed.metric(k)) for k in _SCORES},
        failure_modes={
            m.json_path[-1]: IntervalOut.of(typed.metric(m.name))
            for m in metrics.METRICS
            if m.json_path[0] == "failure_modes"
        },
        success_at=_at(typed.success_at),
        per_object=objects,
        per_configuration=[_breakdown(b) for b in typed.per_configuration],
        per_tag=[_breakdown(b) for b in typed.per_tag],
        per_site=[_breakdown(b) for b in typed.per_site],
        per_station=[_breakdown(b) for b in typed.per_station],
        tau_sweep=asdict(typed.tau_sweep),
        binary={
            "successes": typed.binary.successes,
            "episodes": typed.binary.episodes,
            "success_rate": _interval_json(typed.binary.success_rate),
            "completion_mean": _interval_json(typed.binary.completion_mean),
        },
        behaviour=behaviour,
        tagged_moments=moments,
        behaviour_reviewed=reviewed,
        hrt_interactions=[asdict(x) for x in typed.hrt_interactions],
        notes=typed.notes,
        latency=LatencyOut.of(typed.latency),
        links={
            "leaderboard": board.board_url(),
            "episodes": board.episodes_url(label),
            "page": board.policy_url(label),
        },
    )
