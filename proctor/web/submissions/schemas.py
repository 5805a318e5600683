"""Request and response bodies of the submissions API (separate from the tables)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, StringConstraints

from proctor.core.domain import (
    CampaignStatus,
    ConformanceRunStatus,
    ConformanceStatus,
    EndpointDialect,
    RunnerFailure,
    RunnerFault,
    RunnerStatus,
    SubmissionKind,
    Visibility,
)
from proctor.policywire.wire.spec import ActionSpace
from proctor.runner.manifest import PolicyName, Prompt, PromptKey, Text

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
Filename = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True, min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f/\\]+$"
    ),
]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- uploads --------------------------------------------------------------------------
class UploadIn(_In):
    filename: Filename = Field(description="the archive's file name (tar, tar.gz, zip…)")
    size_bytes: int = Field(ge=1, le=2**62, description="the archive's exact size")
    sha256: Sha256 | None = Field(
        default=None,
        description="the archive's SHA-256 (hex); may be given at completion instead",
    )


class UploadOut(BaseModel):
    id: str
    filename: str
    size_bytes: int
    offset: int = Field(description="bytes received so far: send the next chunk from here")
    sha256: str | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime = Field(description="unfinished uploads are deleted after this")
    complete: bool = Field(description="every byte is in: POST …/complete to submit")


class CompleteIn(_In):
    sha256: Sha256 | None = Field(
        default=None, description="the archive's SHA-256, if not declared when the upload began"
    )


# -- endpoints ------------------------------------------------------------------------
class EndpointIn(_In):
    policy_name: PolicyName
    description: Text = ""
    url: str = Field(max_length=512, description="the policy server: ws://host:port or wss://…")
    dialect: EndpointDialect = Field(
        default=EndpointDialect.openpi,
        description=(
            "openpi, roboarena or positronic_v1 (Positronic's offboard protocol v1: the URL "
            "ws(s)://host[:port] is stored as …/api/v1/session, the server's default model; "
            "…/api/v1/session/<model_id> names one)"
        ),
    )
    api_key: SecretStr | None = Field(
        default=None,
        max_length=4096,
        description=(
            "sent as 'Authorization: Api-Key <key>' (openpi, roboarena) or "
            "'Authorization: Bearer <key>' (positronic_v1); stored encrypted, never shown again"
        ),
    )
    exterior_numbering: int | None = Field(
        default=None,
        ge=0,
        le=1,
        description=(
            "openpi and roboarena: the number of the first exterior camera's observation key. "
            "1 (the default) sends observation/exterior_image_1_left, as openpi's DROID "
            "policies read it; 0 sends observation/exterior_image_0_left, as RoboArena's test "
            "script and vLLM-Omni's DreamZero do. The conformance check says which your "
            "server reads."
        ),
    )
    action_units: str | None = Field(
        default=None,
        max_length=32,
        description=(
            "openpi and roboarena: what the numbers of a velocity action mean, 'si' (rad/s, "
            "m/s) or 'droid' (DROID's normalised per-step deltas in [-1, 1]). Left out, the "
            "server's metadata decides (its action_units, else its dialect's default: DROID's "
            "units for metadata naming no action space and for RoboArena, SI otherwise). A "
            "selection that differs from what the metadata declares fails the conformance "
            "check."
        ),
    )
    action_space: ActionSpace | None = Field(
        default=None, description="the action space you declare (checked against the metadata)"
    )
    chunk_length: int | None = Field(default=None, ge=1, le=1000, description="actions per reply")
    deterministic: bool = Field(
        default=False, description="the same observations always give the same actions"
    )
    prompts: dict[PromptKey, Prompt] = Field(default_factory=dict, max_length=256)


# -- submissions and policies ------------------------------------------------------------
class RunOut(BaseModel):
    id: int
    status: ConformanceRunStatus
    requested_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None = Field(description="why the check itself could not run")


class RunnerOut(BaseModel):
    """A checkpoint's latest runner server, for its owner and the admins only."""

    id: int
    status: RunnerStatus
    stage: str = Field(description="what the runner host is doing now, in words")
    requested_for: str
    requested_at: datetime
    ready_at: datetime | None
    last_used_at: datetime | None
    finished_at: datetime | None
    device: str | None = Field(description='"cpu" or "cuda:N"')
    failure: RunnerFailure | None
    failure_words: str | None
    fault: RunnerFault | None = Field(description="a platform fault never counts against a policy")
    fault_words: str | None
    message: str | None
    exit_code: int | None
    signal: int | None
    memory_peak_bytes: int | None
    gpu_memory_peak_bytes: int | None
    output_tail: str | None = Field(description="the last lines of the server's output")
    build_log_tail: str | None
    limits_hit: list[str] = Field(description="the sandbox limits the server reached")
    limits: dict[str, Any]
    sandbox_attempts: list[Any] = Field(description="what the sandbox refused or recorded")


class SubmissionOut(BaseModel):
    id: int
    policy_id: int
    policy_name: str
    kind: SubmissionKind
    created_at: datetime
    checkpoint_sha256: str | None
    checkpoint_size_bytes: int | None
    archive: dict[str, Any] | None = Field(description="what the archive inspection found")
    manifest: dict[str, Any]
    endpoint_url: str | None = Field(description="shown to its owner and admins only")
    endpoint_dialect: EndpointDialect | None
    has_api_key: bool
    conformance_status: ConformanceStatus
    conformance_report: dict[str, Any]
    check: RunOut | None = Field(description="the latest conformance run")
    runner: RunnerOut | None = Field(
        default=None, description="a checkpoint's latest runner server (null for an endpoint)"
    )


class SubmissionBrief(BaseModel):
    id: int
    kind: SubmissionKind
    created_at: datetime
    conformance_status: ConformanceStatus
    checking: bool


class IntervalOut(BaseModel):
    estimate: float | None
    lo: float | None
    hi: float | None


class ResultOut(BaseModel):
    """The policy's row of the campaign's latest snapshot (default label stream)."""

    rank: int | None
    of: int
    episodes: int
    operations: int
    completion: IntervalOut | None
    rmst_s: IntervalOut | None
    hrt_percent: IntervalOut | None
    snapshot_id: int


class CampaignProgressOut(BaseModel):
    campaign_id: int
    campaign: str
    status: CampaignStatus
    submission_id: int | None
    slots_done: int = Field(description="episodes counted so far, all policies together")
    slots_total: int
    my_episodes: int | None = Field(
        description="this policy's counted episodes; hidden (null) while the campaign runs"
    )
    results: ResultOut | None = Field(description="once the campaign is closed: private to you")
    leaderboard: str | None = Field(description="the public page, once released")
    note: str


class PolicyOut(BaseModel):
    id: int
    name: str
    description: str
    visibility: Visibility
    created_at: datetime
    submissions: list[SubmissionBrief]


class PolicyDetailOut(PolicyOut):
    campaigns: list[CampaignProgressOut]


class PolicyPatch(_In):
    visibility: Visibility | None = Field(
        default=None,
        description="public: your policy's name and results may appear on the public board "
        "once a campaign is released",
    )
    description: Text | None = None
