"""The JSON API's bodies (separate from the tables and from the service's
dataclasses). Nothing here carries an endpoint URL or an API key."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from proctor.core.domain import AssignmentStatus, CampaignStatus
from proctor.scheduler import service
from proctor.scheduler.protocol import no_nul


class CampaignSummary(BaseModel):
    id: int
    name: str
    status: CampaignStatus
    commitment: str | None
    created_at: datetime
    started_at: datetime | None
    closed_at: datetime | None
    released_at: datetime | None


class CellOut(BaseModel):
    arm: str
    is_reference: bool | None  # null while the arms are blinded
    object: str
    target: int
    done: int
    claimed: int
    pending: int
    requeued: int
    skipped: int
    done_by_config: dict[str, int]
    # why its pending runs wait ("waiting for runner: building environment"), or null
    waiting: str | None = None


class ConfigOut(BaseModel):
    config: str
    blocks_planned: int
    blocks_complete: int
    done: int


class CampaignStatusOut(BaseModel):
    id: int
    name: str
    status: CampaignStatus
    identities: bool
    items_per_episode: int
    per_item_cap_s: float
    tau_s: float
    episodes_per_cell: int
    commitment: str | None
    seed: str | None
    protocol_digest: str | None
    started_at: datetime | None
    closed_at: datetime | None
    released_at: datetime | None
    slots: int
    done: int
    claimed: int
    pending: int
    requeued: int
    skipped: int
    blocks: int
    blocks_complete: int
    config_spread: int
    cells: list[CellOut]
    configs: list[ConfigOut]

    @classmethod
    def of(cls, r: service.CampaignReport) -> CampaignStatusOut:
        return cls(
            **{k: getattr(r, k) for k in cls.model_fields if k not in ("cells", "configs")},
            cells=[
                CellOut(
                    arm=c.arm,
                    is_reference=c.is_reference,
                    object=c.object_name,
                    target=c.target,
                    done=c.done,
                    claimed=c.claimed,
                    pending=c.pending,
                    requeued=c.requeued,
                    skipped=c.skipped,
                    done_by_config=c.done_by_config,
                    waiting=c.waiting,
                )
                for c in r.cells
            ],
            configs=[ConfigOut(**vars(c)) for c in r.configs],
        )


class StartOut(BaseModel):
    campaign_id: int
    commitment: str
    protocol_digest: str
    slots: int
    blocks: int


class CloseOut(BaseModel):
    campaign_id: int
    seed: str
    commitment: str | None


class RevealOut(BaseModel):
    campaign_id: int
    seed: str
    commitment: str
    commitment_verified: bool
    protocol: dict[str, Any]
    protocol_digest: str
    slots_checked: int
    replacements: int
    mismatches: list[str]
    verified: bool


class UnblindIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(no_nul)]
    run_codes: Annotated[
        list[Annotated[str, Field(max_length=16), AfterValidator(no_nul)]],
        Field(max_length=10_000),
    ] = []


class UnblindedRunOut(BaseModel):
    run_code: str
    sequence: int
    block_index: int
    status: AssignmentStatus
    object: str
    config: str
    policy: str
    is_reference: bool
    owner: str | None
    submission_id: int | None
