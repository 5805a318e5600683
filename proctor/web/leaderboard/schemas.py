"""The leaderboard as the JSON API serves it and the page renders it (one
model for both: the page is a view of this JSON).

Intervals are 95 % episode-clustered bootstrap intervals: expanded
percentile for RMST and HRT (docs/methods.md §4, "Interval coverage"),
percentile for the rest (the protocol block says which B and seed); ``null``
marks a value that does not exist (an unbounded MTBF/A, the reference's own
HRT interval).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, create_model

from proctor.analysis import metrics
from proctor.analysis.metrics import METRICS, Metric
from proctor.analysis.snapshot import (
    IntervalSnapshot,
    LatencySnapshot,
    LeaderboardSnapshot,
    ObjectPairSnapshot,
    PolicySnapshot,
    SuccessSnapshot,
)
from proctor.core.domain import CampaignStatus, LabelStream
from proctor.web.leaderboard.board import Board, CampaignInfo
from proctor.web.leaderboard.format import at_resampling_floor

# the smallest cell (a policy's episodes on one object) a rank is shown for: the
# smallest size whose interval coverage docs/methods.md §4 measured (below it, one or
# two episodes give an interval of width zero or nearly)
MIN_EPISODES_TO_RANK = 3


class IntervalOut(BaseModel):
    estimate: float | None
    lo: float | None
    hi: float | None

    @classmethod
    def of(cls, iv: IntervalSnapshot | None) -> IntervalOut | None:
        if iv is None:
            return None
        return cls(estimate=iv.estimate, lo=iv.lo, hi=iv.hi)


class LatencyOut(BaseModel):
    """A policy's latency (docs/methods.md §4, "Latency"); null values: not recorded."""

    p50_ms: float | None = Field(description="round trip, request sent → reply decoded")
    p95_ms: float | None
    p99_ms: float | None
    server_p50_ms: float | None = Field(description="the server's own time, where it reported")
    stale_action_rate: float | None = Field(
        description="actions played an action period or more after their intended time"
    )
    calls: int = 0
    calls_per_episode: float | None = None
    over_budget: int = 0

    @classmethod
    def of(cls, x: LatencySnapshot | None) -> LatencyOut | None:
        """From a result's ``latency`` (None: no call recorded)."""
        if x is None:
            return None
        return cls(
            p50_ms=x.p50_ms,
            p95_ms=x.p95_ms,
            p99_ms=x.p99_ms,
            server_p50_ms=x.server_p50_ms,
            stale_action_rate=x.stale_action_rate,
            calls=x.calls,
            calls_per_episode=x.calls_per_episode,
            over_budget=x.over_budget,
        )


class CampaignOut(BaseModel):
    id: int
    name: str
    status: CampaignStatus
    started_at: datetime | None
    closed_at: datetime | None
    released_at: datetime | None

    @classmethod
    def of(cls, c: CampaignInfo) -> CampaignOut:
        return cls(
            id=c.id,
            name=c.name,
            status=c.status,
            started_at=c.started_at,
            closed_at=c.closed_at,
            released_at=c.released_at,
        )


class SnapshotOut(BaseModel):
    id: int
    label_stream: LabelStream
    code_version: str = Field(description="the analysis code that computed it")
    data_version: str = Field(description="SHA-256 of the exact input episodes and labels")
    computed_at: datetime


class ProtocolOut(BaseModel):
    tau_s: float = Field(description="RMST integration cap τ, s")
    per_item_cap_s: float = Field(description="time budget per item, s")
    items_per_episode: int
    bootstrap: int = Field(description="bootstrap replicates behind every interval")
    ks_resamples: int = Field(description="label permutations behind each macro-KS p-value")
    seed: int
    alpha: float
    reference: str | None = Field(description="the human reference's label")
    interval: str


class Links(BaseModel):
    policy: str | None = None
    episodes: str | None = None
    cell: str | None = None


class RowBase(BaseModel):
    """A board row's fields that are not interval metrics; ``RowOut`` adds
    one field per board metric (``proctor.analysis.metrics``)."""

    model_config = ConfigDict(extra="allow")

    label: str = Field(
        description="the policy's name once released if its submitter opted in to the public "
        "board (the reference: always); its blinded arm label otherwise"
    )
    identity_withheld: bool = Field(
        description="released, but the submitter has not opted in: the arm label stands in "
        "for the policy's name, owner and description"
    )
    name: str | None = Field(
        description="the policy's name where the caller may know it: named policies; a "
        "withheld one for its owner and admins; null in a blinded preview"
    )
    note: str | None = Field(description="'identity withheld by the submitter' where it is")
    reference: bool
    rank: int | None = Field(
        description="the analysis' order (1 = best); the board prints none where "
        "rank_withheld gives a reason"
    )
    rank_withheld: str | None = Field(
        default=None,
        description="why the board shows no rank for this row: a cell (the policy on one "
        f"object) with fewer than {MIN_EPISODES_TO_RANK} episodes, too few for its interval "
        "to mean anything (docs/methods.md §4, 'Interval coverage'); null: ranked",
    )
    letters: str = Field(description="compact letter display: rows sharing a letter are unresolved")
    episodes: int
    operations: int
    objects_missing: list[str]
    latency: LatencyOut | None = None
    hrt_coverage_warning: str | None = Field(
        default=None,
        description="the HRT rests on a cell (policy or reference) with fewer episodes than "
        "the size from which its 95 % interval was measured to cover at least 93 %; says the "
        "coverage measured at that size (docs/methods.md §4, 'Interval coverage'); null: none",
    )
    links: Links

    def metric(self, name: str) -> IntervalOut | None:
        """A metric's interval by its name in ``proctor.analysis.metrics``."""
        value = getattr(self, name, None)
        if value is None and self.model_extra:
            value = self.model_extra.get(name)
        return value if isinstance(value, IntervalOut) else None


def _metric_field(m: Metric) -> Any:
    described = f"{m.description} ({m.unit}; {m.interval})"
    if m.name == "hrt":
        # the reference's own HRT is not an estimate: null
        return (IntervalOut | None, Field(description=described))
    return (IntervalOut, Field(description=described))


# one field per metric (the board shows those with a ``board_cell`` as
# columns); a metric added to the table at run time (a test's) still
# travels, as an extra field of the row
RowOut = create_model(
    "RowOut",
    __base__=RowBase,
    **{m.name: _metric_field(m) for m in METRICS},
)


class PairOut(BaseModel):
    a: str
    b: str
    verdict: str = Field(
        description="better | crossing | unclear (different, direction unclear) | indistinguishable"
    )
    winner: str | None
    significant: bool
    ks_statistic: float
    ks_p_bonferroni: float
    logrank_p_bonferroni: float
    ks_p_at_floor: bool = Field(
        default=False,
        description="the macro-KS p is the smallest its resamples allow (1/(R + 1)): the "
        "truth is that or smaller",
    )
    logrank_p_at_floor: bool = Field(default=False, description="likewise the log-rank's p")
    rmst_diff: IntervalOut = Field(description="macro RMST a − b, s (negative: a faster)")
    auc: IntervalOut = Field(description="P(T_a < T_b) + ½ ties, macro over objects")
    per_object_ks: dict[str, float]
    success: dict[str, Any] | None = Field(
        default=None,
        description="Barnard's exact test on per-episode success: successes and episodes of "
        "a and b, statistic, p, p_bonferroni (null: a snapshot computed before it)",
    )
    per_object_tests: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the pair on each shared object alone: studentized KS p (and Bonferroni), "
        "Barnard on success, ΔRMST interval",
    )
    more_episodes_per_cell: int | None = Field(
        description="unresolved pairs: episodes per cell the power model says are still needed"
    )
    power_at_current_n: float | None
    interactions: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the pre-registered scene-factor interaction tests of this pair: factor, "
        "levels, per_level effect (macro RMST a − b at each level), p (permutation)",
    )
    links: dict[str, str]


class PairStopOut(BaseModel):
    a: str
    b: str
    resolved_after_block: int = Field(description="the block after which its e-process crossed")
    episodes: int = Field(description="the pair's episodes seen when it crossed")
    e_value: float


class PolicyStopOut(BaseModel):
    policy: str
    after_block: int
    no_slots_from_block: int = Field(description="its later slots went elsewhere or were withdrawn")


class EarlyStopsOut(BaseModel):
    """An adaptive campaign's rule (docs/methods.md §11) and what it stopped."""

    rule: str
    alpha: float
    lag_blocks: int
    sentinels: list[str]
    blocks_read_through: int | None
    pairs: list[PairStopOut]
    stopped: list[PolicyStopOut]


class DriftOut(BaseModel):
    """A drift sentinel's trend and station tests, each stratified by object
    (docs/methods.md §12)."""

    policy: str
    flagged: bool
    level: float
    certifies_no_drift: bool = Field(
        default=False,
        description="always false: a sentinel that is not flagged has not shown the campaign "
        "free of drift (the tests find only a large one)",
    )
    trend: dict[str, Any] | None
    stations: dict[str, Any] | None


class LeaderboardOut(BaseModel):
    campaign: CampaignOut
    blinded: bool = Field(description="true on an admin's preview of an unreleased campaign")
    identities_withheld: int = Field(
        description="released policies shown under their arm label because their submitters "
        "have not opted in to the public board"
    )
    snapshot: SnapshotOut
    protocol: ProtocolOut
    objects: list[str]
    # RowOut's fields, and any extra a metric added at run time brings
    rows: list[SerializeAsAny[RowBase]]
    pairs: list[PairOut]
    excluded_episodes: int
    notes: list[str]
    streams: list[LabelStream] = Field(description="label streams with a snapshot")
    links: dict[str, str]
    early_stops: EarlyStopsOut | None = Field(
        default=None, description="adaptive campaigns: pairs resolved and policies stopped early"
    )
    drift: list[DriftOut] = Field(default_factory=list, description="drift sentinels' tests")
    letters_per_object: list[dict[str, Any]] = Field(
        default_factory=list,
        description="per object: compact letters from that object's own pair tests",
    )
    rankings: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the ranking under each aggregation rule (hrt, rmst_pooled, "
        "auc_vs_reference, success_at_<t>) with each policy's share of bootstrap replicates "
        "ranked first",
    )


def _iv(x: IntervalSnapshot | None) -> IntervalOut:
    out = IntervalOut.of(x)
    return out if out is not None else IntervalOut(estimate=None, lo=None, hi=None)


def rank_withheld(p: PolicySnapshot) -> str | None:
    """Why a policy's rank is not shown: its smallest cell is below
    ``MIN_EPISODES_TO_RANK`` (a view of few labels, such as reviewed-only early
    on, would otherwise rank a policy first on one episode with an interval of
    width zero). None for the reference and for a policy with enough episodes."""
    if p.reference:
        return None
    thin = [(o.episodes, o.object) for o in p.per_object if o.episodes < MIN_EPISODES_TO_RANK]
    if not p.per_object or p.episodes < MIN_EPISODES_TO_RANK:
        return f"{p.episodes} episode(s) in this view: a rank needs {MIN_EPISODES_TO_RANK} a cell"
    if not thin:
        return None
    n, obj = min(thin)
    return (
        f"{n} episode(s) on {obj} in this view: a rank needs {MIN_EPISODES_TO_RANK} on "
        "every object it ran"
    )


def _rows(board: Board, r: LeaderboardSnapshot) -> list[RowBase]:
    rows: list[RowBase] = []
    for p in r.policies:
        label = p.policy
        values: dict[str, IntervalOut | None] = {}
        for m in metrics.METRICS:
            value = p.metric(m.name)
            # the reference's own HRT stays null; an undefined interval otherwise
            # reads as one with no estimate (the page shows "—")
            values[m.name] = IntervalOut.of(value) if m.name == "hrt" else _iv(value)
        warning = p.hrt_coverage_warning
        rows.append(
            RowOut(
                label=label,
                identity_withheld=board.is_withheld(label),
                name=board.name_of(label),
                note=board.note(label),
                reference=p.reference,
                rank=p.rank,
                rank_withheld=rank_withheld(p),
                letters=p.letters,
                episodes=p.episodes,
                operations=p.operations,
                objects_missing=p.objects_missing,
                latency=LatencyOut.of(p.latency),
                hrt_coverage_warning=None if warning is None else warning.text,
                links=Links(policy=board.policy_url(label), episodes=board.episodes_url(label)),
                **values,
            )
        )
    return rows


def _success(x: SuccessSnapshot | None) -> dict[str, Any] | None:
    return None if x is None else asdict(x)


def _object_test(x: ObjectPairSnapshot) -> dict[str, Any]:
    out = asdict(x)
    out["rmst_diff"] = None if x.rmst_diff is None else _interval_json(x.rmst_diff)
    return out


def _interval_json(x: IntervalSnapshot) -> dict[str, Any]:
    return {"estimate": x.estimate, "ci": [x.lo, x.hi]}


def leaderboard_view(board: Board) -> LeaderboardOut:
    r = board.snapshot
    pr = r.protocol
    c = board.campaign
    pairs = []
    for q in r.pairs:
        pairs.append(
            PairOut(
                a=q.a,
                b=q.b,
                verdict=q.verdict,
                winner=q.winner,
                significant=q.significant,
                ks_statistic=q.macro_ks.statistic,
                ks_p_bonferroni=q.macro_ks.p_bonferroni,
                logrank_p_bonferroni=q.logrank.p_bonferroni,
                ks_p_at_floor=at_resampling_floor(q.macro_ks.p, q.macro_ks.resamples),
                logrank_p_at_floor=at_resampling_floor(q.logrank.p, q.logrank.resamples),
                rmst_diff=_iv(q.rmst_diff),
                auc=_iv(q.auc),
                per_object_ks={o.object: o.statistic for o in q.macro_ks.per_object},
                success=_success(q.success_barnard),
                per_object_tests=[_object_test(x) for x in q.per_object_tests],
                interactions=[asdict(x) for x in q.interactions],
                more_episodes_per_cell=None if q.power is None else q.power.more_episodes_per_cell,
                power_at_current_n=None if q.power is None else q.power.power_at_current_n,
                links={
                    "a": board.policy_url(q.a, "cdf"),
                    "b": board.policy_url(q.b, "cdf"),
                    "a_episodes": board.episodes_url(q.a),
                    "b_episodes": board.episodes_url(q.b),
                    "compare": board.compare_url(q.a, q.b),
                },
            )
        )
    return LeaderboardOut(
        campaign=CampaignOut.of(c),
        blinded=board.blinded,
        identities_withheld=len(board.withheld),
        snapshot=SnapshotOut(
            id=board.meta.id,
            label_stream=board.meta.label_stream,
            code_version=board.meta.code_version,
            data_version=board.meta.data_version,
            computed_at=board.meta.created_at,
        ),
        protocol=ProtocolOut(
            tau_s=pr.tau,
            per_item_cap_s=c.per_item_cap_s,
            items_per_episode=c.items_per_episode,
            bootstrap=pr.bootstrap,
            ks_resamples=pr.ks_resamples,
            seed=pr.seed,
            alpha=pr.alpha,
            reference=pr.reference,
            interval=pr.interval,
        ),
        objects=[o.object for o in r.objects],
        rows=_rows(board, r),
        pairs=pairs,
        excluded_episodes=len(r.excluded),
        notes=r.notes,
        early_stops=EarlyStopsOut.model_validate(asdict(r.early_stops)) if r.early_stops else None,
        drift=[DriftOut.model_validate(asdict(d)) for d in r.drift or []],
        letters_per_object=[asdict(x) for x in r.letters_per_object],
        rankings=[asdict(x) for x in r.rankings],
        streams=board.streams,
        links={
            "page": board.board_url(),
            "episodes": board.episodes_url(),
            "snapshot": f"/api/leaderboard/{c.id}/snapshot"
            + (f"?stream={board.stream.value}" if board.stream != "auto_and_reviewed" else ""),
        },
    )
