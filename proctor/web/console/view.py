"""What the operator may see of the station, as a whitelist.

The station's ``/api/status`` (and each ``/api/events`` frame) is parsed into
``ConsoleStatus``: pydantic drops every key these models do not name, so
only the fields below ever reach the browser — the run code, object, item
count, spatial configuration, states, countdown and the station's own
notices. A field the station adds later stays on the station until it is
added here, deliberately.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from proctor.core.domain import Outcome, Side

# the station's runner states, plus "offline" when the console cannot reach it
StationState = Literal["idle", "armed", "running", "finishing", "awaiting_log", "homing", "offline"]
# the robot's own mode (proctor.station.drivers.arm.base.RobotMode: libfranka's RobotMode)
RobotModeName = Literal[
    "idle", "move", "guiding", "reflex", "user_stopped", "automatic_error_recovery", "other"
]
CameraName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
CAMERA_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# free text from the station (notices, reasons): bounded, never structure
Text = Annotated[str, StringConstraints(max_length=2000)]


class _View(BaseModel):
    # extra="ignore" is the whitelist: unknown keys are dropped, not relayed
    model_config = ConfigDict(extra="ignore", frozen=True)


class RunView(_View):
    """The armed run, as the operator sets it out."""

    run_code: Annotated[str, StringConstraints(pattern=r"^[A-Z0-9][A-Z0-9-]{1,15}$")]
    object: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")]
    items: int = Field(ge=1, le=100)
    per_item_cap_s: float = Field(gt=0)
    budget_s: float = Field(gt=0)
    tote_side: Side
    camera_side: Side


class CameraHealthView(_View):
    state: Literal["ok", "stalled", "reconnecting", "not started"]
    error: Text | None = None
    reconnects: int = 0


class CameraView(_View):
    width: int
    height: int
    fps: float
    health: CameraHealthView | None = None


class NoticeView(_View):
    level: Literal["info", "warning", "error"]
    message: Text


class LastEpisodeView(_View):
    episode: str
    run_code: str
    proposed_outcome: Outcome
    reason: Text = ""
    duration_s: float | None = None


class UplinkView(_View):
    """A station host's link to the server (its ledger, forwarded): whether the
    server answers and how many episodes it does not hold in full yet."""

    online: bool
    waiting: int = Field(ge=0)
    last_error: Text | None = None


class ConsoleStatus(_View):
    state: StationState
    station: str | None = None
    profile: str | None = None
    arm_error: Text | None = None
    robot_mode: RobotModeName | None = None
    at_home: bool | None = None  # the arm stands at its home pose (arming needs it)
    work: RunView | None = None
    episode: str | None = None  # the episode's uid (opaque)
    elapsed_s: float | None = None
    remaining_s: float | None = None
    proposed_outcome: Outcome | None = None
    reason: Text | None = None
    cameras: dict[CameraName, CameraView] = Field(default_factory=dict)
    notice: NoticeView | None = None
    last_episode: LastEpisodeView | None = None
    uplink: UplinkView | None = None  # None: the station writes to the server's database
    version: int | None = None
    # set by the console when the station does not answer
    detail: Text | None = None


class StationReplyInvalid(ValueError):
    """The station answered with something the console cannot read."""


def public_status(raw: Any) -> ConsoleStatus:
    """The whitelisted view of a station status document."""
    if not isinstance(raw, dict):
        raise StationReplyInvalid("the station's status is not a JSON object")
    try:
        return ConsoleStatus.model_validate(raw)
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:3])
        raise StationReplyInvalid(f"the station's status did not validate ({where})") from None


def offline_status(detail: str) -> ConsoleStatus:
    return ConsoleStatus(state="offline", detail=detail)


class HomeIn(BaseModel):
    """The operator's homing: the cell confirmed clear, and whether to open the gripper."""

    model_config = ConfigDict(extra="forbid")

    cell_clear: bool = Field(description="the operator confirms nobody and nothing is in the way")
    open_gripper: bool = Field(
        default=False, description="also open the gripper at home (whatever it holds drops)"
    )


class LogIn(BaseModel):
    """The post-rollout form. Types and ranges are checked here; the counts
    against the run's items and the outcome against the counts are checked
    by the station (the authority that closes the episode), and both
    answers name the field."""

    model_config = ConfigDict(extra="forbid")

    placed: int = Field(ge=0, le=100, description="items put into the target tote")
    lost: int = Field(ge=0, le=100, description="items that left the workspace")
    dropped: int = Field(
        ge=0, le=100, description="items dropped inside the workspace and left there"
    )
    outcome: Outcome
    notes: str = Field(default="", max_length=4000)


OUTCOME_LABELS: dict[Outcome, str] = {
    Outcome.success: "Success — every item handled",
    Outcome.ran_out_of_time: "Ran out of time",
    Outcome.operator_stop: "Operator stop",
    Outcome.safety: "Safety stop",
    Outcome.system: "System failure (not the policy's doing)",
}
