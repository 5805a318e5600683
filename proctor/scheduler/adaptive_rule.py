"""Adaptive allocation: a pure replay (seed, protocol, recorded outcomes) → plan.

A campaign may commit, with its seed, to a rule that changes the allocation
as outcomes arrive (docs/methods.md §11). The rule is part of the allocation
protocol (so of its digest, published at start), and the plan it produces
is a function of the seed, the protocol and the outcomes of the blocks
already settled, nothing else: the scheduler applies it to the slots not
yet handed out, and anyone holding the revealed seed and the recorded
outcomes re-derives it after the reveal with :func:`replay`.

Rule ``stop-resolved-v1``:

* after block *b* has settled (every slot of blocks 0…b done), each pair's
  e-process (``proctor.analysis.resolution``: episodes matched within
  block and object by sequence, bet on in block order; threshold m/α over
  the protocol's m pairs) is read on the counted episodes of blocks 0…b;
* a policy that is not a sentinel and whose every pair has crossed the
  threshold is *stopped* at b; sentinels (the reference always) never stop;
* its slots in blocks b + 1 + ``lag_blocks`` onwards go, one by one in
  sequence order, to the running non-sentinel policy with an unresolved
  pair that has the fewest slots planned on that slot's object (ties by a
  draw from the seed under ``shift:<sequence>``); the slot keeps its block,
  object and configuration, so object × configuration balance holds and the
  sentinels stay in every block;
* with no such policy left the slot is withdrawn, and once no non-sentinel
  policy runs, every later block is withdrawn.

``lag_blocks`` exists because stations run ahead: a slot the scheduler hands
out is final, so slots of block j are handed out only once blocks up to
j − 1 − lag have settled (:func:`claim_horizon`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proctor.analysis.resolution import Outcome, PairStop, pair_crossings, policy_stops
from proctor.scheduler.allocation import AllocationProtocol, SeedStream, Slot, derive_allocation

RULE = "stop-resolved-v1"


@dataclass(frozen=True)
class AdaptiveRule:
    """The committed rule: its name, the familywise α of the e-processes,
    the lag, and the sentinel policy ids (the reference among them)."""

    sentinels: tuple[int, ...]
    alpha: float = 0.05
    lag_blocks: int = 1
    rule: str = RULE

    def __post_init__(self) -> None:
        problems = []
        if self.rule != RULE:
            problems.append(f"adaptive.rule: {self.rule!r} is not {RULE!r}")
        if not 0 < self.alpha < 1:
            problems.append(f"adaptive.alpha: must be in (0, 1), got {self.alpha}")
        if not 0 <= self.lag_blocks <= 100:
            problems.append(f"adaptive.lag_blocks: must be in [0, 100], got {self.lag_blocks}")
        if not self.sentinels:
            problems.append("adaptive.sentinels: the reference at least")
        if problems:
            raise ValueError("; ".join(problems))

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "alpha": self.alpha,
            "lag_blocks": self.lag_blocks,
            "sentinels": sorted(self.sentinels),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AdaptiveRule:
        try:
            return cls(
                sentinels=tuple(sorted(int(p) for p in data["sentinels"])),
                alpha=float(data["alpha"]),
                lag_blocks=int(data["lag_blocks"]),
                rule=str(data["rule"]),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"adaptive: not an adaptive rule: {exc!r}") from None


@dataclass(frozen=True)
class PolicyStop:
    policy_id: int
    block: int  # decided once blocks 0…block settled
    first_changed_block: int  # blocks from here on were re-planned


@dataclass
class Plan:
    """The allocation after the rule: ``policy_of`` maps every original
    sequence still planned to its policy; ``withdrawn`` lists the rest."""

    base: list[Slot]
    policy_of: dict[int, int]
    withdrawn: list[int] = field(default_factory=list)
    pair_stops: list[PairStop] = field(default_factory=list)
    policy_stops: list[PolicyStop] = field(default_factory=list)

    def slots(self) -> list[Slot]:
        """The planned original slots, with their (possibly shifted) policy."""
        return [
            Slot(
                s.sequence,
                s.block_index,
                s.slot,
                self.policy_of[s.sequence],
                s.object_type_id,
                s.config,
            )
            for s in self.base
            if s.sequence in self.policy_of
        ]


def replay(
    seed: str, protocol: AllocationProtocol, rule: AdaptiveRule, outcomes: Sequence[Outcome]
) -> Plan:
    """The plan the rule gives after the settled blocks whose outcomes are
    given (pass only blocks that have settled: every counted episode of
    blocks 0…F, F the last settled block)."""
    base = derive_allocation(seed, protocol)
    plan = Plan(base=base, policy_of={s.sequence: s.policy_id for s in base})
    crossings = pair_crossings(protocol.policies, protocol.objects, rule.alpha, outcomes)
    plan.pair_stops = sorted(crossings, key=lambda c: (c.block, c.a, c.b))
    stops = policy_stops(protocol.policies, rule.sentinels, crossings)
    stream = SeedStream(seed)
    stopped: set[int] = set()
    for block in sorted(set(stops.values())):
        newly = sorted(p for p, b in stops.items() if b == block)
        stopped.update(newly)
        first = block + 1 + rule.lag_blocks
        plan.policy_stops.extend(PolicyStop(p, block, first) for p in newly)
        _shift(plan, protocol, rule, stream, stopped, crossings, block, first)
    return plan


def _unresolved(
    protocol: AllocationProtocol, crossings: Sequence[PairStop], block: int
) -> set[int]:
    done = {(c.a, c.b) for c in crossings if c.block <= block}
    return {
        p
        for a, b in itertools.combinations(protocol.policies, 2)
        if (a, b) not in done
        for p in (a, b)
    }


def _shift(
    plan: Plan,
    protocol: AllocationProtocol,
    rule: AdaptiveRule,
    stream: SeedStream,
    stopped: set[int],
    crossings: Sequence[PairStop],
    block: int,
    first: int,
) -> None:
    unresolved = _unresolved(protocol, crossings, block)
    running = [p for p in protocol.policies if p not in rule.sentinels and p not in stopped]
    recipients = [p for p in running if p in unresolved]
    planned = Counter(
        (plan.policy_of[s.sequence], s.object_type_id)
        for s in plan.base
        if s.sequence in plan.policy_of
    )
    for s in plan.base:
        if s.block_index < first or s.sequence not in plan.policy_of:
            continue
        current = plan.policy_of[s.sequence]
        if not running:
            _withdraw(plan, s.sequence)
        elif current in stopped:
            if not recipients:
                _withdraw(plan, s.sequence)
                continue
            fewest = min(planned[(p, s.object_type_id)] for p in recipients)
            tied = [p for p in recipients if planned[(p, s.object_type_id)] == fewest]
            pick = (
                tied[stream.below(len(tied), f"shift:{s.sequence}")] if len(tied) > 1 else tied[0]
            )
            planned[(current, s.object_type_id)] -= 1
            planned[(pick, s.object_type_id)] += 1
            plan.policy_of[s.sequence] = pick


def _withdraw(plan: Plan, sequence: int) -> None:
    del plan.policy_of[sequence]
    plan.withdrawn.append(sequence)


def claim_horizon(rule: AdaptiveRule, first_unsettled_block: int | None) -> int | None:
    """The last block whose slots may be handed out now (None: any)."""
    if first_unsettled_block is None:
        return None
    return first_unsettled_block + rule.lag_blocks


def compare(plan: Plan, logged: Mapping[int, int]) -> list[str]:
    """Mismatches between the plan and the logged original slots
    (sequence → policy id); a withdrawn slot must be absent from the log."""
    out: list[str] = []
    for seq, pid in sorted(plan.policy_of.items()):
        got = logged.get(seq)
        if got is None:
            out.append(f"sequence {seq}: planned for policy {pid}, absent from the log")
        elif got != pid:
            out.append(f"sequence {seq}: logged policy {got}, re-derived {pid}")
    for seq in sorted(plan.withdrawn):
        if seq in logged:
            out.append(f"sequence {seq}: withdrawn by the rule, but the log has it")
    return out
