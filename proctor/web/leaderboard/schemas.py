"""The leaderboard as the JSON API serves it and the page renders it (one
model for both: the page is a view of this JSON).

Intervals are 95 % episode-clustered percentile bootstrap intervals (the
protocol block says which B and seed); ``null`` marks a value that does
not exist (an unbounded MTBF/A, the reference's own HRT interval).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from proctor.core.domain import CampaignStatus, LabelStream
from proctor.web.leaderboard.board import Board, CampaignInfo


class IntervalOut(BaseModel):
    estimate: float | None
    lo: float | None
    hi: float | None

    @classmethod
    def of(cls, iv: dict[str, Any] | None) -> IntervalOut | None:
        if iv is None:
            return None
        lo, hi = (iv.get("ci") or [None, None])[:2]
        return cls(estimate=iv.get("estimate"), lo=lo, hi=hi)


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
    def of(cls, x: dict[str, Any] | None) -> LatencyOut | None:
        """From a result's ``latency`` (snapshots computed before it have none)."""
        if not x:
            return None
        return cls(
            p50_ms=x.get("p50_ms"),
            p95_ms=x.get("p95_ms"),
            p99_ms=x.get("p99_ms"),
            server_p50_ms=x.get("server_p50_ms"),
            stale_action_rate=x.get("stale_action_rate"),
            calls=x.get("calls") or 0,
            calls_per_episode=x.get("calls_per_episode"),
            over_budget=x.get("over_budget") or 0,
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


class RowOut(BaseModel):
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
    rank: int | None
    letters: str = Field(description="compact letter display: rows sharing a letter are unresolved")
    episodes: int
    operations: int
    hrt: IntervalOut | None = Field(description="Human-Relative Throughput, %")
    rmst: IntervalOut = Field(description="macro RMST(τ), s")
    completion: IntervalOut = Field(description="placed / presented items")
    hard_failure_rate: IntervalOut = Field(description="ghosts per operation")
    drops_per_operation: IntervalOut
    lost_per_operation: IntervalOut
    safety_stops_per_episode: IntervalOut
    envelope_interventions_per_episode: IntervalOut = Field(
        description="commands the station's safety envelope clamped or stopped, per episode, "
        "over the episodes whose station counted them (null: none did)"
    )
    interventions_per_episode: IntervalOut = Field(
        description="operator stops per episode (safety stops count under hard failures)"
    )
    policy_faults_per_episode: IntervalOut = Field(
        description="episodes that ended in a fault of the policy's own doing that the score "
        "excludes (a malformed reply, its server failing, an arm fault after its own motion "
        "such as a joint driven into its limit), over every episode it ran; Wilson 95 % "
        "(null: a snapshot computed before they were counted)"
    )
    uph: IntervalOut
    mtbfa: IntervalOut
    objects_missing: list[str]
    latency: LatencyOut | None = None
    links: Links


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
    rmst_diff: IntervalOut = Field(description="macro RMST a − b, s (negative: a faster)")
    auc: IntervalOut = Field(description="P(T_a < T_b) + ½ ties, macro over objects")
    per_object_ks: dict[str, float]
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
    """A drift sentinel's trend and station tests (docs/methods.md §12)."""

    policy: str
    flagged: bool
    level: float
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
    rows: list[RowOut]
    pairs: list[PairOut]
    excluded_episodes: int
    notes: list[str]
    streams: list[LabelStream] = Field(description="label streams with a snapshot")
    links: dict[str, str]
    early_stops: EarlyStopsOut | None = Field(
        default=None, description="adaptive campaigns: pairs resolved and policies stopped early"
    )
    drift: list[DriftOut] = Field(default_factory=list, description="drift sentinels' tests")


def _iv(x: dict[str, Any] | None) -> IntervalOut:
    out = IntervalOut.of(x)
    return out if out is not None else IntervalOut(estimate=None, lo=None, hi=None)


def leaderboard_view(board: Board) -> LeaderboardOut:
    r = board.result
    pr = r["protocol"]
    c = board.campaign
    rows = []
    for p in r["policies"]:
        fm = p["failure_modes"]
        label = p["policy"]
        rows.append(
            RowOut(
                label=label,
                identity_withheld=board.is_withheld(label),
                name=board.name_of(label),
                note=board.note(label),
                reference=p["reference"],
                rank=p["rank"],
                letters=p["letters"],
                episodes=p["episodes"],
                operations=p["operations"],
                hrt=IntervalOut.of(p["hrt"]),
                rmst=_iv(p["rmst"]),
                completion=_iv(p["completion"]),
                hard_failure_rate=_iv(p["hard_failure_rate"]),
                drops_per_operation=_iv(fm["drops_per_operation"]),
                lost_per_operation=_iv(fm["lost_per_operation"]),
                safety_stops_per_episode=_iv(fm["safety_stops_per_episode"]),
                # snapshots computed before the envelope was counted have no such key
                envelope_interventions_per_episode=_iv(
                    fm.get("envelope_interventions_per_episode")
                ),
                interventions_per_episode=_iv(fm["operator_stops_per_episode"]),
                # snapshots computed before these were counted have no such key
                policy_faults_per_episode=_iv((p.get("policy_faults") or {}).get("share")),
                uph=_iv(p["uph"]),
                mtbfa=_iv(p["mtbfa"]),
                objects_missing=p["objects_missing"],
                latency=LatencyOut.of(p.get("latency")),
                links=Links(policy=board.policy_url(label), episodes=board.episodes_url(label)),
            )
        )
    pairs = []
    for q in r["pairs"]:
        power = q.get("power") or {}
        pairs.append(
            PairOut(
                a=q["a"],
                b=q["b"],
                verdict=q["verdict"],
                winner=q["winner"],
                significant=q["significant"],
                ks_statistic=q["macro_ks"]["statistic"],
                ks_p_bonferroni=q["macro_ks"]["p_bonferroni"],
                logrank_p_bonferroni=q["logrank"]["p_bonferroni"],
                rmst_diff=_iv(q["rmst_diff"]),
                auc=_iv(q["auc"]),
                per_object_ks={o["object"]: o["statistic"] for o in q["macro_ks"]["per_object"]},
                # snapshots computed before the interaction tests have no such key
                interactions=list(q.get("interactions", [])),
                more_episodes_per_cell=power.get("more_episodes_per_cell"),
                power_at_current_n=power.get("power_at_current_n"),
                links={
                    "a": board.policy_url(q["a"], "cdf"),
                    "b": board.policy_url(q["b"], "cdf"),
                    "a_episodes": board.episodes_url(q["a"]),
                    "b_episodes": board.episodes_url(q["b"]),
                    "compare": board.compare_url(q["a"], q["b"]),
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
            tau_s=pr["tau"],
            per_item_cap_s=c.per_item_cap_s,
            items_per_episode=c.items_per_episode,
            bootstrap=pr["bootstrap"],
            ks_resamples=pr["ks_resamples"],
            seed=pr["seed"],
            alpha=pr["alpha"],
            reference=pr.get("reference"),
            interval=pr.get("interval", ""),
        ),
        objects=[o["object"] for o in r["objects"]],
        rows=rows,
        pairs=pairs,
        excluded_episodes=len(r["excluded"]),
        notes=r["notes"],
        early_stops=EarlyStopsOut(**r["early_stops"]) if r.get("early_stops") else None,
        drift=[DriftOut(**d) for d in r.get("drift") or []],
        streams=board.streams,
        links={
            "page": board.board_url(),
            "episodes": board.episodes_url(),
            "snapshot": f"/api/leaderboard/{c.id}/snapshot"
            + (f"?stream={board.stream.value}" if board.stream != "auto_and_reviewed" else ""),
        },
    )
