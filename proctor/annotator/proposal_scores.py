"""Scoring the failure-mode proposals against the simulated cell's ground truth.

The simulated world logs what really happened (``proctor.station.sim.world``):
a ``grasp_miss`` when the closing fingers reached an item and pushed it
aside, a ``slip`` when a held item came out of the fingers without a release
command. A rule's proposals are matched one-to-one to the true events of the
kinds it stands for, closest first, within ``tolerance_s`` (the detector's
matching, ``proctor.annotator.scoring.match_times``); precision = matched /
proposed, recall = matched / true. ``no_motion`` has no ground truth in the
simulator (the world does not log stillness as an event) and is not scored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from proctor.annotator.proposals import Proposal
from proctor.annotator.scoring import match_times

# a rule -> the ground-truth event kinds it is meant to find
TRUTH_KINDS: dict[str, tuple[str, ...]] = {
    "closed_on_nothing": ("grasp_miss",),
    "lost_in_transit": ("slip",),
}
DEFAULT_TOLERANCE_S = 1.0


@dataclass(frozen=True)
class RuleScore:
    rule: str
    proposed: int
    true: int
    matched: int

    @property
    def precision(self) -> float | None:
        return self.matched / self.proposed if self.proposed else None

    @property
    def recall(self) -> float | None:
        return self.matched / self.true if self.true else None


def truth_times(ground_truth: dict[str, Any], kinds: Sequence[str]) -> list[float]:
    """Episode times (s) of the ground truth's events of these kinds."""
    return sorted(float(e["t_s"]) for e in ground_truth.get("events", []) if e["kind"] in kinds)


def score_rule(
    rule: str,
    episodes: Iterable[tuple[Sequence[Proposal], dict[str, Any]]],
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> RuleScore:
    """``episodes``: (the episode's proposals, its ground truth) pairs."""
    if rule not in TRUTH_KINDS:
        raise ValueError(f"rule: {rule!r} has no ground truth to be scored on")
    proposed = true = matched = 0
    for proposals, truth in episodes:
        mine = [p.t_s for p in proposals if p.rule == rule]
        real = truth_times(truth, TRUTH_KINDS[rule])
        proposed += len(mine)
        true += len(real)
        matched += len(match_times(real, mine, tolerance_s))
    return RuleScore(rule, proposed, true, matched)
