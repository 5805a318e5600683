"""What a station is handed: one rollout (``Work``), its latency budget, and
the source it comes from (``WorkSource``).

The contract between the station, which runs work, and whoever hands it out
(the ad-hoc source of ``proctor station episode``, the scheduler's campaign
allocation, a remote server over the station API): all of them depend on
this module, none on another's.

Blinding: in a campaign the policy URL is an opaque gateway URL
(``ws://…/policy/<handle>``) that the server relays to the real policy. The
station never needs, stores or shows a policy's name; ``Work.policy_url`` is
kept out of ``repr`` and out of ``public_view()`` (what the local API and the
operator console see), and the runner never writes it to the database, the
manifest or a log line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from proctor.core.domain import ActionUnitsName, EndpointDialect, Outcome, Side
from proctor.core.errors import FieldError

_RUN_CODE = re.compile(r"^[A-Z0-9][A-Z0-9-]{1,15}$")
_OBJECT = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True)
class LatencyBudget:
    """A campaign's bound on the policy's round trip: a call whose reply took
    longer than ``budget_ms`` (wall clock, request sent → reply decoded) is over
    it, and an episode with more than ``tolerance`` calls over it ends, charged
    to the policy (docs/methods.md §1)."""

    budget_ms: float
    tolerance: int = 0  # calls over the budget an episode may have

    def __post_init__(self) -> None:
        budget = self.budget_ms
        if isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0:
            raise FieldError("latency_budget.budget_ms", f"must be positive, got {budget!r}")
        if not math.isfinite(budget):
            raise FieldError("latency_budget.budget_ms", f"must be finite, got {budget!r}")
        tol = self.tolerance
        if isinstance(tol, bool) or not isinstance(tol, int) or tol < 0:
            raise FieldError(
                "latency_budget.tolerance", f"must be a non-negative integer, got {tol!r}"
            )


@dataclass(frozen=True)
class Work:
    """One rollout to run. Validated on construction (messages name the field)."""

    run_code: str  # opaque, e.g. "R-7F3K": what the operator sees
    object_name: str  # ObjectType.name, e.g. "spoons"
    items: int  # items set out in the source bin
    per_item_cap_s: float  # time budget per item; episode budget = items × cap
    tote_side: Side  # where the target tote stands
    camera_side: Side  # where the exterior camera stands
    policy_url: str = field(repr=False)  # ws:// or wss://; opaque gateway URL in a campaign
    sim_seed: int | None = None  # the simulated cell's layout and physics seed
    prompt: str = ""  # language instruction sent to the policy ("" → derived from the object)
    # None: detect from the server's metadata (RoboArena keys → roboarena, else openpi)
    dialect: EndpointDialect | None = None
    # the number of the first exterior camera's observation key (None: the
    # station's default, 1); the endpoint's wire setting, like the dialect
    exterior_numbering: int | None = None
    # the action units the endpoint selects (None: the server's metadata decides,
    # ``proctor.core.domain.ActionUnitsName``); a wire setting, like the dialect
    action_units: str | None = None
    assignment_id: int | None = None  # set by the campaign source
    campaign_id: int | None = None
    # extra headers for the policy connection (e.g. a gateway token); never shown or stored
    policy_headers: dict[str, str] = field(default_factory=dict, repr=False)
    # the campaign's latency budget (None: latency is measured, never enforced)
    latency_budget: LatencyBudget | None = None

    def __post_init__(self) -> None:
        if not _RUN_CODE.match(self.run_code):
            raise FieldError(
                "run_code", f"'{self.run_code}' must be 2–16 characters of A–Z, 0–9 and '-'"
            )
        if not _OBJECT.match(self.object_name):
            raise FieldError(
                "object", f"'{self.object_name}' must be lowercase letters, digits, '-' or '_'"
            )
        if isinstance(self.items, bool) or not isinstance(self.items, int) or self.items < 1:
            raise FieldError("items", f"must be a positive integer, got {self.items!r}")
        if self.items > 100:
            raise FieldError("items", f"{self.items} is more than a tote holds (at most 100)")
        if not self.per_item_cap_s > 0:
            raise FieldError("per_item_cap_s", f"must be positive, got {self.per_item_cap_s!r}")
        object.__setattr__(self, "tote_side", _side("tote_side", self.tote_side))
        object.__setattr__(self, "camera_side", _side("camera_side", self.camera_side))
        if not re.match(r"^wss?://[^\s]+$", self.policy_url):
            # never echo the URL itself: in a campaign it is a sealed handle
            raise FieldError("policy", "the policy URL must start with ws:// or wss://")
        if self.sim_seed is not None and (
            isinstance(self.sim_seed, bool) or not isinstance(self.sim_seed, int)
        ):
            raise FieldError("sim_seed", f"must be an integer, got {self.sim_seed!r}")
        if self.dialect is not None:
            object.__setattr__(self, "dialect", EndpointDialect(self.dialect))
        if self.action_units is not None:
            _action_units(self.action_units)

    @property
    def budget_s(self) -> float:
        return self.items * self.per_item_cap_s

    def public_view(self) -> dict[str, Any]:
        """What the operator may see: never the policy URL, name, owner or checkpoint."""
        return {
            "run_code": self.run_code,
            "object": self.object_name,
            "items": self.items,
            "per_item_cap_s": self.per_item_cap_s,
            "budget_s": self.budget_s,
            "tote_side": self.tote_side.value,
            "camera_side": self.camera_side.value,
        }

    def with_seed(self, sim_seed: int | None) -> Work:
        return replace(self, sim_seed=sim_seed)


def _action_units(value: object) -> str:
    if not isinstance(value, str) or value not in ActionUnitsName.__members__:
        # the value is the submitter's: not repeated
        raise FieldError(
            "action_units",
            f"must be one of {', '.join(n.value for n in ActionUnitsName)} "
            "(what the numbers of a velocity action mean)",
        )
    return value


def _side(name: str, value: object) -> Side:
    if isinstance(value, str) and value in Side.__members__.values():
        return Side(value)
    raise FieldError(name, f"must be 'left' or 'right', got {value!r}")


@runtime_checkable
class WorkSource(Protocol):
    """Hands the station its next rollout and hears how each one ended.

    ``claim`` is called when the operator (or a headless loop) asks for the
    next episode; it returns ``None`` when there is nothing to do now.
    Exactly one of ``completed`` / ``abandoned`` follows each claimed work:
    ``completed`` once the episode is closed (the operator's log saved) or
    interrupted, ``abandoned`` when it never started (e.g. the policy
    endpoint did not answer its pre-flight), so the source can reschedule it.
    Implementations do their own transactions: the runner calls them outside
    any session of its own.
    """

    def claim(self) -> Work | None: ...

    def completed(self, work: Work, *, episode_uid: str, outcome: Outcome) -> None: ...

    def abandoned(self, work: Work, *, reason: str) -> None: ...
