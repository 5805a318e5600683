"""A campaign's protocol as an admin writes it (TOML file or API body).

Validated here for shape (types, ranges, duplicates); the service then checks
it against the database (policies, submissions and objects exist and may
run). Every problem names its field, e.g. ``policies[1].submission``.

Example ``protocol.toml``::

    name = "spring-2026"
    items_per_episode = 8
    per_item_cap_s = 30
    tau_s = 60
    episodes_per_cell = 20
    reference = "human-teleop"
    policies = ["openpi-droid", { name = "gr00t", submission = 12 }]
    objects = ["spoons", "towels"]
    spatial_configs = [            # optional; default: all four
      { tote = "left", camera = "left" },
      { tote = "right", camera = "left" },
    ]
    # optional: only stations of these cell profiles run it (default: any)
    cell_profiles = ["droid-fr3-2f85", "droid-fr3-robotiq"]
    # optional: the policy's round trip bounded; an episode with more than
    # `tolerance` calls slower than `budget_ms` ends charged to the policy
    latency_budget = { budget_ms = 250, tolerance = 3 }
    sentinels = ["openpi-droid"]   # optional: recur in every block, watched for drift
    [adaptive]                     # optional: stop resolved policies early
    alpha = 0.05
    lag_blocks = 1
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from proctor.core.domain import Side
from proctor.core.errors import UsageError
from proctor.core.labels import CellLabel

# a guard against typos like episodes_per_cell = 20000, not a methodological limit
MAX_SLOTS = 100_000


def no_nul(value: str) -> str:
    # PostgreSQL text cannot hold NUL: refuse it here with a message, not a 500 later
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


Name = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(no_nul)]


class PolicyEntry(BaseModel):
    """A policy taking part, and optionally which of its submissions is evaluated
    (default: its newest endpoint submission that passed the conformance check)."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    submission: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None


class ConfigEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tote: Side
    camera: Side


class LatencyBudgetEntry(BaseModel):
    """The policy's round trip bounded: a call whose reply takes longer than
    ``budget_ms`` is over it, and an episode with more than ``tolerance`` such
    calls ends charged to the policy (docs/methods.md §1)."""

    model_config = ConfigDict(extra="forbid")

    budget_ms: Annotated[float, Field(gt=0, le=600_000, allow_inf_nan=False)]
    tolerance: Annotated[int, Field(ge=0, le=100_000)] = 0


def _entry(value: Any) -> Any:
    return {"name": value} if isinstance(value, str) else value


class AdaptiveEntry(BaseModel):
    """The adaptive allocation rule (``proctor.scheduler.adaptive_rule``), committed
    with the seed: its familywise α and how many blocks stations may run
    ahead of the last settled one."""

    model_config = ConfigDict(extra="forbid")

    rule: Literal["stop-resolved-v1"] = "stop-resolved-v1"
    alpha: Annotated[float, Field(gt=0, lt=1)] = 0.05
    lag_blocks: Annotated[int, Field(ge=0, le=100)] = 1


class CampaignProtocol(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: Name
    description: Annotated[str, Field(max_length=10_000), AfterValidator(no_nul)] = ""
    items_per_episode: Annotated[int, Field(ge=1, le=1000)]
    per_item_cap_s: Annotated[float, Field(gt=0, le=3600)]
    tau_s: Annotated[float, Field(gt=0)]
    episodes_per_cell: Annotated[int, Field(ge=1, le=10_000)]
    policies: Annotated[list[PolicyEntry], Field(min_length=1)]
    reference: PolicyEntry
    objects: Annotated[list[Name], Field(min_length=1)]
    spatial_configs: list[ConfigEntry] = Field(
        default_factory=lambda: [ConfigEntry(tote=t, camera=c) for t in Side for c in Side]
    )
    sentinels: list[Name] = Field(default_factory=list)
    adaptive: AdaptiveEntry | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    latency_budget: LatencyBudgetEntry | None = None
    # the cell profiles whose stations may run it (``cell_profile`` in a station's
    # config); None: any station, whatever it declared
    cell_profiles: Annotated[list[CellLabel], Field(min_length=1, max_length=100)] | None = None

    @field_validator("policies", mode="before")
    @classmethod
    def _policy_names(cls, value: Any) -> Any:
        return [_entry(v) for v in value] if isinstance(value, list) else value

    @field_validator("reference", mode="before")
    @classmethod
    def _reference_name(cls, value: Any) -> Any:
        return _entry(value)

    def _sentinel_problems(self) -> list[str]:
        out: list[str] = []
        listed = {p.name for p in self.policies} | {self.reference.name}
        for i, name in enumerate(self.sentinels):
            if name not in listed:
                out.append(f"sentinels[{i}]: '{name}' is not a policy of this campaign")
        if len(set(self.sentinels)) != len(self.sentinels):
            out.append("sentinels: a policy is listed more than once")
        return out

    def problems(self) -> list[str]:
        """Cross-field checks pydantic cannot express per field."""
        out: list[str] = []
        seen: dict[str, int] = {}
        for i, p in enumerate(self.policies):
            if p.name in seen:
                out.append(
                    f"policies[{i}]: '{p.name}' is already listed at policies[{seen[p.name]}]"
                )
            seen.setdefault(p.name, i)
            if p.name == self.reference.name:
                out.append(
                    f"policies[{i}]: '{p.name}' is the reference; name it only under `reference`"
                )
        out.extend(self._sentinel_problems())
        objs: dict[str, int] = {}
        for i, o in enumerate(self.objects):
            if o in objs:
                out.append(f"objects[{i}]: '{o}' is already listed at objects[{objs[o]}]")
            objs.setdefault(o, i)
        # a policy named like an object could be mistaken for it in the results
        folded = {o.casefold() for o in self.objects}
        for where, p in (
            *((f"policies[{i}]", p) for i, p in enumerate(self.policies)),
            ("reference", self.reference),
        ):
            if p.name.casefold() in folded:
                out.append(
                    f"{where}: '{p.name}' is also the name of an object of this campaign; "
                    "a policy must not be named like an object"
                )
        cfgs: dict[tuple[Side, Side], int] = {}
        if not self.spatial_configs:
            out.append("spatial_configs: at least one configuration is needed")
        for i, c in enumerate(self.spatial_configs):
            key = (c.tote, c.camera)
            if key in cfgs:
                out.append(f"spatial_configs[{i}]: already listed at spatial_configs[{cfgs[key]}]")
            cfgs.setdefault(key, i)
        out.extend(_duplicates("cell_profiles", self.cell_profiles or []))
        extra = json.dumps(self.extra)
        if "\\u0000" in extra:
            out.append("extra: must not contain NUL characters")
        if len(extra) > 100_000:
            out.append("extra: larger than 100 kB")
        slots = (len(self.policies) + 1) * len(self.objects) * self.episodes_per_cell
        if slots > MAX_SLOTS:
            out.append(
                f"episodes_per_cell: {slots} episodes in all exceeds the limit of {MAX_SLOTS}"
            )
        return out


def _duplicates(field: str, values: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for i, v in enumerate(values):
        if v in seen:
            out.append(f"{field}[{i}]: '{v}' is already listed at {field}[{seen[v]}]")
        seen.setdefault(v, i)
    return out


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ""
        for p in err["loc"]:
            loc += f"[{p}]" if isinstance(p, int) else (f".{p}" if loc else str(p))
        parts.append(f"{loc or 'protocol'}: {err['msg']}")
    return "; ".join(parts)


def parse_protocol(data: dict[str, Any], *, source: str = "protocol") -> CampaignProtocol:
    """Validate a protocol mapping; a UsageError names every bad field."""
    try:
        protocol = CampaignProtocol.model_validate(data)
    except ValidationError as exc:
        raise UsageError(f"{source}: {_describe(exc)}") from None
    problems = protocol.problems()
    if problems:
        raise UsageError(f"{source}: {'; '.join(problems)}")
    return protocol


def load_protocol(path: Path, overrides: dict[str, Any] | None = None) -> CampaignProtocol:
    """Read a protocol TOML file; ``overrides`` (CLI options) replace its keys."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"protocol file {path}: not found") from None
    except UnicodeDecodeError:
        raise UsageError(f"protocol file {path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"protocol file {path}: invalid TOML: {exc}") from None
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    return parse_protocol(data, source=f"protocol file {path}")
