"""Bodies and answers of the review API (separate from the tables)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from proctor.annotator import review as svc
from proctor.annotator.tags import FailureTag
from proctor.annotator.taxonomy import Taxonomy

Note = Field(default="", max_length=2000, description="why (kept with the review record)")
TimeS = Field(
    ge=0,
    le=86_400,
    allow_inf_nan=False,
    description="seconds since the episode's start (the video's presentation time)",
)
RowId = Field(ge=1, le=2**31 - 1)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ConfirmIn(_Body):
    candidate_id: int = RowId
    note: str = Note


class _OneTarget(_Body):
    placement_id: int | None = Field(default=None, ge=1, le=2**31 - 1)
    candidate_id: int | None = Field(default=None, ge=1, le=2**31 - 1)

    @model_validator(mode="after")
    def _exactly_one(self) -> _OneTarget:
        if (self.placement_id is None) == (self.candidate_id is None):
            raise ValueError("give exactly one of placement_id and candidate_id")
        return self


class MoveIn(_OneTarget):
    t_s: float = TimeS
    note: str = Note


class RejectIn(_OneTarget):
    note: str = Note


class AddIn(_Body):
    t_s: float = TimeS
    note: str = Note


class FlagIn(_Body):
    note: str = Field(min_length=1, max_length=2000, description="what is wrong with the count")


class ResolveIn(_Body):
    note: str = Field(min_length=1, max_length=2000, description="the reason for the decision")
    # all three to correct the log; none to let the count stand
    placed: int | None = Field(default=None, ge=0, le=100)
    lost: int | None = Field(default=None, ge=0, le=100)
    dropped: int | None = Field(default=None, ge=0, le=100)
    outcome: str | None = Field(default=None, max_length=32)

    @model_validator(mode="after")
    def _all_or_none(self) -> ResolveIn:
        given = [v is not None for v in (self.placed, self.lost, self.dropped)]
        if any(given) and not all(given):
            raise ValueError("to correct the log give placed, lost and dropped together")
        if self.outcome is not None and not all(given):
            raise ValueError("outcome: give it with the corrected counts")
        return self


class TagIn(_Body):
    mode: str = Field(min_length=1, max_length=32, description="a key of the failure-mode taxonomy")
    t_s: float = TimeS
    note: str = Note


class RetractIn(_Body):
    note: str = Note


class FailureModeOut(BaseModel):
    key: str
    label: str
    description: str
    proposed_from: str = Field(description="the telemetry rule that proposes it ('' if none)")


class TagOut(BaseModel):
    id: int = Field(description="the tag's review record")
    mode: str
    label: str
    t_s: float
    who: str
    automatic: bool = Field(description="proposed by software from telemetry, not a person")
    at: datetime
    note: str
    retracted: bool
    evidence: dict[str, Any]

    @classmethod
    def of(cls, t: FailureTag, taxonomy: Taxonomy) -> TagOut:
        return cls(
            id=t.id,
            mode=t.mode,
            label=taxonomy.label(t.mode),
            t_s=t.t_s,
            who=t.who,
            automatic=t.automatic,
            at=t.at,
            note=t.note,
            retracted=t.retracted,
            evidence=t.evidence,
        )


class QueueEntryOut(BaseModel):
    uid: str
    run_code: str | None
    object: str
    items: int
    placed: int = Field(description="the operator's count")
    detected: int = Field(description="the detector's placements")
    confirmed: int = Field(description="the reviewer's confirmed placements so far")
    label_status: str
    logged_at: datetime | None
    page: str

    @classmethod
    def of(cls, e: svc.QueueEntry) -> QueueEntryOut:
        return cls(
            uid=e.uid,
            run_code=e.run_code,
            object=e.object,
            items=e.items,
            placed=e.placed,
            detected=e.detected,
            confirmed=e.confirmed,
            label_status=e.label_status.value,
            logged_at=e.logged_at,
            page=f"/review/{e.uid}",
        )


class CandidateOut(BaseModel):
    id: int
    t_s: float
    kind: str = Field(description="release | slump (a slip)")
    zone: str = Field(description="where it comes down: target | source | elsewhere")
    verdict: str = Field(description="success | failure | neutral | unknown")
    rule: str
    score: float | None
    features: dict[str, Any]
    state: str = Field(description="open | confirmed | rejected (by the review so far)")
    placement_id: int | None


class PlacementOut(BaseModel):
    id: int
    t_s: float
    source: str
    status: str
    candidate_id: int | None


class ActionOut(BaseModel):
    id: int
    at: datetime
    action: str
    who: str
    automatic: bool = Field(description="made by software (a labelled reviewer), not a person")
    placement_id: int | None
    before: dict[str, Any]
    after: dict[str, Any]
    note: str


class CameraMedia(BaseModel):
    camera: str
    video_url: str
    frames_url: str
    frames: int | None


class ReviewOut(BaseModel):
    uid: str
    run_code: str | None
    object: str
    items: int
    placed: int
    lost: int
    dropped: int
    outcome: str | None
    duration_s: float
    label_status: str
    in_queue: bool
    remaining: int = Field(description="placements still to confirm to match the operator")
    candidates: list[CandidateOut]
    confirmed: list[PlacementOut]
    detector: list[PlacementOut]
    actions: list[ActionOut]
    cameras: list[CameraMedia] = Field(default_factory=list)
    telemetry_url: str | None = None
    tags: list[TagOut] = Field(
        default_factory=list, description="failure-mode tags, retracted ones included (marked)"
    )
    failure_modes: list[FailureModeOut] = Field(
        default_factory=list, description="the taxonomy a tag's mode comes from"
    )

    @classmethod
    def of(
        cls, s: svc.ReviewState, cameras: list[CameraMedia], telemetry_url: str | None
    ) -> ReviewOut:
        return cls(
            uid=s.uid,
            run_code=s.run_code,
            object=s.object,
            items=s.items,
            placed=s.placed,
            lost=s.lost,
            dropped=s.dropped,
            outcome=s.outcome,
            duration_s=s.duration_s,
            label_status=s.label_status.value,
            in_queue=s.in_queue,
            remaining=s.remaining,
            candidates=[CandidateOut(**vars(c)) for c in s.candidates],
            confirmed=[PlacementOut(**vars(p)) for p in s.confirmed],
            detector=[PlacementOut(**vars(p)) for p in s.detector],
            actions=[ActionOut(**vars(a)) for a in s.actions],
            cameras=cameras,
            telemetry_url=telemetry_url,
        )
