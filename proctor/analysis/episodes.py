"""Episodes: the unit of evaluation (docs/methods.md §1) and its validation.

An :class:`Episode` is one rollout as the interchange file (§8) and the store
describe it. Validation returns every problem at once, each naming the field,
so that a reader can report all of a file's problems in one pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from proctor.analysis.latency import EpisodeCalls

# The outcome vocabulary (docs/methods.md §1). It mirrors ``proctor.core.domain.Outcome``
# (a test keeps the two in step); the pure core may not import the kernel.
SUCCESS = "success"
RAN_OUT_OF_TIME = "ran_out_of_time"
OPERATOR_STOP = "operator_stop"
SAFETY = "safety"
SYSTEM = "system"
OUTCOMES = (SUCCESS, RAN_OUT_OF_TIME, OPERATOR_STOP, SAFETY, SYSTEM)
# outcomes whose unfinished attempt is a right-censored operation
CENSORING_OUTCOMES = (RAN_OUT_OF_TIME, OPERATOR_STOP)


# the fault classes a policy is answerable for (proctor.scheduler.claims.POLICY_FAULTS):
# a malformed reply, its checkpoint's server failing by the submitter's fault, an
# arm fault the station is blamed for after the policy's own motion
POLICY_FAULT_CLASSES = ("policy_protocol", "policy_server", "policy_motion")


@dataclass(frozen=True)
class Episode:
    """One rollout of one policy on one object type.

    ``placements_s`` are the times (seconds from episode start) of each
    successful placement. The optional fields follow the interchange file;
    ``tote_placement`` / ``external_camera`` form the spatial configuration
    (docs/methods.md §9) and ``object_tags`` group objects (rigid, deformable, …).
    ``envelope_interventions`` counts the commands the station's safety envelope
    clamped or stopped; None where the station did not count them (unknown, not 0).
    """

    episode_id: str
    policy: str
    object: str
    items: int
    duration_s: float
    placements_s: tuple[float, ...]
    lost: int
    dropped: int
    outcome: str
    budget_s: float | None = None
    tote_placement: str | None = None
    external_camera: str | None = None
    station: str | None = None
    # where the station stands (a lab); results break down by site and station
    site: str | None = None
    started_at: str | None = None
    reference: bool = False
    object_tags: tuple[str, ...] = ()
    envelope_interventions: int | None = None
    # the station's per-call table (proctor.analysis.latency); None: not recorded
    calls: EpisodeCalls | None = None
    # the fault of the policy's own doing behind a system or charged ending
    # (proctor.analysis.policy_faults: policy_protocol, policy_server,
    # policy_motion); None: none
    policy_fault: str | None = None
    # the allocation's block and sequence of the slot the episode ran in
    # (interchange format 2, §8): what pairs episodes by design (§10, §11);
    # None where unknown (then pairing falls back to start order)
    block: int | None = None
    sequence: int | None = None

    @property
    def placed(self) -> int:
        return len(self.placements_s)

    @property
    def unhandled(self) -> int:
        """Items neither placed, lost nor dropped when the episode ended."""
        return self.items - self.placed - self.lost - self.dropped

    @property
    def configuration(self) -> str | None:
        """``tote=<side> camera=<side>``, or None when either is unknown."""
        if not self.tote_placement or not self.external_camera:
            return None
        return f"tote={self.tote_placement} camera={self.external_camera}"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one episode: the field and the reason."""

    field: str
    reason: str


def _design_problems(ep: Episode) -> list[Problem]:
    """Block and sequence (interchange format 2) are both given or neither,
    and neither is negative."""
    out = [
        Problem(name, f"must not be negative, got {value}")
        for name, value in (("block", ep.block), ("sequence", ep.sequence))
        if value is not None and value < 0
    ]
    if (ep.block is None) != (ep.sequence is None):
        out.append(
            Problem("block" if ep.block is None else "sequence", "block and sequence come together")
        )
    return out


def validate_episode(ep: Episode) -> list[Problem]:
    """Every rule of docs/methods.md §2 "Validation", plus the type checks a file
    reader cannot express (positive items, finite times).

    Stricter than §2 in one place, on purpose: a placement must be *after*
    the episode start (> 0 s), because an operation cannot take no time and a
    zero inter-success time would make RMST and HRT degenerate.
    """
    problems: list[Problem] = []

    def bad(name: str, reason: str) -> None:
        problems.append(Problem(name, reason))

    if not ep.episode_id:
        bad("episode_id", "is empty")
    if not ep.policy:
        bad("policy", "is empty")
    if not ep.object:
        bad("object", "is empty")
    if ep.outcome not in OUTCOMES:
        bad("outcome", f"unknown outcome {ep.outcome!r} (expected one of {', '.join(OUTCOMES)})")
    if ep.items < 1:
        bad("items", f"must be at least 1, got {ep.items}")
    for name, value in (("lost", ep.lost), ("dropped", ep.dropped)):
        if value < 0:
            bad(name, f"must not be negative, got {value}")
    if not math.isfinite(ep.duration_s) or ep.duration_s < 0:
        bad("duration_s", f"must be a finite number >= 0, got {ep.duration_s}")
    if ep.budget_s is not None and (not math.isfinite(ep.budget_s) or ep.budget_s <= 0):
        bad("budget_s", f"must be a finite number > 0, got {ep.budget_s}")
    if ep.envelope_interventions is not None and ep.envelope_interventions < 0:
        bad("envelope_interventions", f"must not be negative, got {ep.envelope_interventions}")
    if ep.policy_fault is not None and ep.policy_fault not in POLICY_FAULT_CLASSES:
        bad(
            "policy_fault",
            f"unknown fault class {ep.policy_fault!r} (expected one of "
            f"{', '.join(POLICY_FAULT_CLASSES)})",
        )
    problems.extend(_design_problems(ep))
    problems.extend(_calls_problems(ep))

    placement = _placement_problem(ep)
    if placement is not None:
        problems.append(placement)
    counts = _count_problem(ep)
    if counts is not None:
        problems.append(counts)
    return problems


def _calls_problems(ep: Episode) -> list[Problem]:
    """What is wrong with the episode's per-call table, each naming its column."""
    if ep.calls is None:
        return []
    return [Problem(name, reason) for name, reason in ep.calls.problems()]


def _placement_problem(ep: Episode) -> Problem | None:
    """The first placement time that breaks §2's rules (finite, after the
    start, strictly increasing, within the episode), if any."""
    previous = 0.0
    for i, t in enumerate(ep.placements_s):
        reason = None
        if not math.isfinite(t):
            reason = f"placement {i + 1} is not a finite number ({t})"
        elif t < 0:
            reason = f"placement {i + 1} is negative ({t:g} s)"
        elif i == 0 and t == 0:
            reason = "placement 1 is at 0 s (an operation cannot take no time)"
        elif i > 0 and t <= previous:
            reason = (
                f"not strictly increasing (placement {i + 1} at {t:g} s "
                f"after placement {i} at {previous:g} s)"
            )
        elif math.isfinite(ep.duration_s) and t > ep.duration_s:
            reason = (
                f"placement {i + 1} at {t:g} s is after the episode's end "
                f"(duration_s = {ep.duration_s:g})"
            )
        if reason is not None:
            return Problem("placements_s", reason)
        previous = t
    return None


def _count_problem(ep: Episode) -> Problem | None:
    """Items handled (placed, lost, dropped) against items offered and the
    outcome; only once the counts themselves are valid."""
    if ep.items < 1 or ep.lost < 0 or ep.dropped < 0:
        return None
    handled = ep.placed + ep.lost + ep.dropped
    if handled > ep.items:
        return Problem(
            "items",
            f"placed + lost + dropped = {ep.placed} + {ep.lost} + {ep.dropped} "
            f"= {handled} exceeds items = {ep.items}",
        )
    if ep.outcome == SUCCESS and handled < ep.items:
        return Problem(
            "outcome",
            f"'success' but {ep.items - handled} of {ep.items} items are unhandled "
            f"(placed {ep.placed}, lost {ep.lost}, dropped {ep.dropped})",
        )
    return None


@dataclass(frozen=True)
class Exclusion:
    """An episode left out of every score, and why (``system`` fault,
    labels not final, …)."""

    episode_id: str
    policy: str
    object: str
    reason: str


@dataclass(frozen=True)
class EpisodeTable:
    """The episodes an analysis reads, as produced by the interchange reader
    and by the store layer.

    ``reference`` names the human-reference policy (None: no reference, so
    HRT and AUC are omitted). ``excluded`` lists episodes left out *before*
    analysis (e.g. labels not final); ``system`` episodes stay in
    ``episodes`` and are excluded by the analysis itself.
    """

    episodes: tuple[Episode, ...]
    reference: str | None = None
    excluded: tuple[Exclusion, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def policies(self) -> list[str]:
        return sorted({e.policy for e in self.episodes})

    @property
    def objects(self) -> list[str]:
        return sorted({e.object for e in self.episodes})


def resolve_reference(episodes: Sequence[Episode], reference: str | None) -> str | None:
    """The reference policy: named explicitly, or marked by the episodes'
    ``reference`` flag. Raises ValueError on a contradiction."""
    flagged = sorted({e.policy for e in episodes if e.reference})
    if len(flagged) > 1:
        raise ValueError(
            f"reference: episodes of more than one policy are marked as reference ({flagged})"
        )
    if reference is not None:
        if flagged and flagged[0] != reference:
            raise ValueError(
                f"reference: --reference names {reference!r} but the file marks "
                f"{flagged[0]!r} as the reference"
            )
        if not any(e.policy == reference for e in episodes):
            raise ValueError(f"reference: no episodes of policy {reference!r}")
        return reference
    return flagged[0] if flagged else None


def scored(episodes: Iterable[Episode]) -> tuple[list[Episode], list[Exclusion]]:
    """Split off the ``system`` episodes (§2: excluded and listed)."""
    kept: list[Episode] = []
    excluded: list[Exclusion] = []
    for e in episodes:
        if e.outcome == SYSTEM:
            excluded.append(
                Exclusion(e.episode_id, e.policy, e.object, "system: infrastructure fault")
            )
        else:
            kept.append(e)
    return kept, excluded
