"""The station API's wire: what a station host and the server say to each other.

One module both sides import (the station's uplink, the server's routes in
``proctor.web.stationapi``), so the two cannot drift apart. Every message is
a pydantic model that forbids unknown fields: a station's request is
untrusted, and a typo in a field name is an error that names the field, not
a value silently dropped.

The API is versioned in its path (``/api/station/v1``); a breaking change is
a new prefix served beside the old one until every station has moved.

Calls, all with ``Authorization: Bearer pst_…`` (the station's own token,
``proctor station enrol``), and, on every call that changes something, an
``Idempotency-Key`` header: the server answers a repeated key with the first
answer and does nothing twice.

========================================  =========================================
``POST /hello``                            register or heartbeat: who the station is,
                                           its clock; the server's clock and lease
``POST /claims``                           claim the next run of a campaign (or the
                                           run this station already holds)
``POST /claims/{run_code}/abandon``        a claimed run never started (pre-flight
                                           failed): the scheduler reschedules it
``PUT  /episodes/{uid}``                   the episode as the station's ledger holds
                                           it now: lifecycle, events, operator's log
``POST /uploads``                          begin (or resume) an artifact upload
``GET  /uploads/{upload_id}``              the plan again, with the parts received
``PUT  /uploads/{upload_id}/parts/{n}``    a part, through the server (local store)
``POST /uploads/{upload_id}/complete``     finish: the server checks size and sha256,
                                           then registers the artifact
========================================  =========================================

Blinding: nothing here names a policy, its owner, endpoint or checkpoint. A
claim carries an opaque run code and a gateway path whose handle only the
server resolves; the one absolute policy URL is the human reference's teleop
server on the station host's own loopback.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

API_VERSION = "v1"
API_PREFIX = f"/api/station/{API_VERSION}"
IDEMPOTENCY_HEADER = "Idempotency-Key"
# an idempotency key: what the station derives from the call (e.g.
# "claim:<campaign>:<n>", "abandon:<run code>"), never a secret
IDEMPOTENCY_KEY = re.compile(r"^[A-Za-z0-9:._-]{1,128}$")

_SHA256 = r"^[0-9a-f]{64}$"
_UID = r"^[A-Za-z0-9_-]{8,32}$"
_RUN_CODE = r"^[A-Z0-9][A-Z0-9-]{1,15}$"
_LABEL = r"^[a-z0-9][a-z0-9._-]{0,63}$"
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- hello (register + heartbeat) ---------------------------------------------------


class Hello(Wire):
    """Sent on start and every ``heartbeat_s`` while the link is up."""

    station: str = Field(pattern=_NAME)  # must be the token's own station
    profile: Literal["sim", "twin", "real"]
    site: str | None = Field(default=None, pattern=_LABEL)
    cell_profile: str | None = Field(default=None, pattern=_LABEL)
    # sha256 of the station's cell layout (bins, camera poses): a changed cell
    # is visible on the server, and campaigns can tell its episodes apart
    layout_hash: str = Field(pattern=_SHA256)
    software_version: str = Field(max_length=64)
    # the station's wall clock when it sent this (UTC); with the server's time
    # in the reply and the round trip, the station estimates its offset
    station_time: datetime
    # the station's last estimate of (server clock - station clock), seconds
    clock_offset_s: float | None = Field(default=None, ge=-86400 * 365, le=86400 * 365)
    waiting: int = Field(default=0, ge=0)  # episodes not yet confirmed by the server
    # uids of the episodes this daemon is running now (armed, running, finishing,
    # awaiting the log): each hello keeps them live on the server, so a second
    # claim cannot settle their run however long they run (at most a few: one
    # runner per station)
    live: list[Annotated[str, Field(pattern=_UID)]] = Field(default_factory=list, max_length=8)


class HelloReply(Wire):
    station_id: int
    server_time: datetime
    heartbeat_s: float  # how often to say hello
    # a held claim of a station whose token is revoked is released to the
    # scheduler once the station has been silent this long
    lease_s: float


# -- claims -------------------------------------------------------------------------


class ClaimRequest(Wire):
    campaign: int | str  # id or name


class LatencyBudgetWire(Wire):
    budget_ms: float = Field(gt=0)
    tolerance: int = Field(default=0, ge=0)


class WorkWire(Wire):
    """One rollout, as ``proctor.core.work.Work`` wants it."""

    run_code: str = Field(pattern=_RUN_CODE)
    campaign_id: int
    object: str
    object_display_name: str = ""
    object_prompt: str = ""
    items: int = Field(ge=1, le=100)
    per_item_cap_s: float = Field(gt=0)
    tote_side: Literal["left", "right"]
    camera_side: Literal["left", "right"]
    sim_seed: int | None = None
    prompt: str = ""
    dialect: str | None = None
    exterior_numbering: int | None = None
    action_units: str | None = None
    latency_budget: LatencyBudgetWire | None = None
    # where the policy is: the gateway path on this server (``/policy/<handle>``,
    # the station joins it to the server's origin as ws:// or wss://) or, for the
    # human reference only, the teleop server on the station host's loopback
    gateway_path: str | None = None
    teleop_url: str | None = None


class ClaimReply(Wire):
    work: WorkWire | None  # None: nothing to run now (or the campaign is closed)
    reason: str = ""  # why there is nothing, for the console


class AbandonRequest(Wire):
    reason: str = Field(max_length=2000)


class AbandonReply(Wire):
    run_code: str
    # False: an episode had begun under the run after all, and the server
    # settled the run from it instead of rescheduling it
    rescheduled: bool


# -- episodes -----------------------------------------------------------------------


class EventWire(Wire):
    seq: int = Field(ge=0)  # the event's position in the station's ledger, per episode
    t_s: float | None = None
    at: datetime  # station wall clock
    kind: str = Field(max_length=32)
    message: str = Field(default="", max_length=4000)
    details: dict[str, Any] = Field(default_factory=dict)


class EpisodeWire(Wire):
    """The whole episode as the station's ledger holds it now.

    Sent after every change; ``rev`` grows with each change the station
    makes, so the server keeps the newest and a replay (same or lower
    ``rev``) changes nothing. Times ``*_at`` are the station's wall clock;
    the server maps them with ``clock_offset_s``."""

    uid: str = Field(pattern=_UID)
    rev: int = Field(ge=1)
    run_code: str = Field(pattern=_RUN_CODE)
    object: str
    items: int = Field(ge=1, le=100)
    budget_s: float = Field(gt=0)
    tote_side: Literal["left", "right"]
    camera_side: Literal["left", "right"]
    sim_seed: int | None = None
    state: Literal["armed", "running", "finishing", "awaiting_log", "closed", "interrupted"]
    clock_start_s: float | None = None
    clock_end_s: float | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str | None = None
    outcome_reason: str = Field(default="", max_length=4000)
    envelope_interventions: int | None = Field(default=None, ge=0)
    # the operator's post-rollout log (entered at the station, offline too)
    placed: int | None = Field(default=None, ge=0)
    lost: int | None = Field(default=None, ge=0)
    dropped: int | None = Field(default=None, ge=0)
    operator_notes: str = Field(default="", max_length=4000)
    # who logged it, as text ("cell-a:alice": the station and its host's
    # account); the server keeps it in the operator_log event's details
    operator_label: str | None = Field(default=None, min_length=1, max_length=128)
    # a station cannot know the server's user ids: the server refuses one
    # (422 naming the field). Parsed so that the refusal names it, and never
    # sent (``exclude``): a station that sets nothing sends nothing
    operator_id: int | None = Field(default=None, exclude=True)
    logged_at: datetime | None = None
    events: list[EventWire] = Field(default_factory=list, max_length=20000)
    clock_offset_s: float = Field(default=0.0, ge=-86400 * 365, le=86400 * 365)

    @field_validator("events")
    @classmethod
    def _ordered(cls, events: list[EventWire]) -> list[EventWire]:
        seqs = [e.seq for e in events]
        if seqs != sorted(set(seqs)):
            raise ValueError("event seq numbers must be unique and ascending")
        return events


class EpisodeReply(Wire):
    uid: str
    rev: int  # the revision the server holds now
    state: str
    # the server settled the run (an operator-logged or interrupted episode)
    settled: bool = False


# -- artifact uploads ---------------------------------------------------------------


class UploadRequest(Wire):
    episode_uid: str = Field(pattern=_UID)
    sha256: str = Field(pattern=_SHA256)
    size_bytes: int = Field(ge=0, le=1 << 40)
    kind: str = Field(max_length=32)  # proctor.core.domain.ArtifactKind
    camera: str | None = Field(default=None, max_length=32)
    media_type: str = Field(default="application/octet-stream", max_length=128)
    frame_count: int | None = Field(default=None, ge=0)
    details: dict[str, Any] = Field(default_factory=dict)


class PartTarget(Wire):
    number: int = Field(ge=1, le=10000)
    url: str  # absolute; a presigned store URL or this server's part URL
    # "store": send as is (presigned); "server": add the station's bearer token
    auth: Literal["store", "server"]
    headers: dict[str, str] = Field(default_factory=dict)


class UploadPlan(Wire):
    upload_id: str
    part_size: int  # every part but the last is exactly this long
    parts: list[PartTarget]  # the parts still to send (resume: the missing ones)
    received: list[int] = Field(default_factory=list)  # part numbers already there
    # their ETags, which the completion names with the parts sent now
    received_etags: dict[int, str] = Field(default_factory=dict)
    # the artifact is registered already (a replay): nothing to send
    complete: bool = False


class PartDone(Wire):
    number: int = Field(ge=1, le=10000)
    etag: str = Field(max_length=256)


class CompleteRequest(Wire):
    parts: list[PartDone]


class CompleteReply(Wire):
    sha256: str
    size_bytes: int
    registered: bool  # True once the artifact row exists on the server


class ErrorReply(Wire):
    detail: str
    field: str | None = None
