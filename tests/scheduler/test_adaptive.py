"""The adaptive rule as a pure replay (proctor/scheduler/adaptive_rule.py): a
policy whose every pair resolved stops, its slots shift to the unresolved
policy, the reference stays in every block, blocks keep their object and
configuration, and the plan re-derives from the seed and the outcomes only
(a wrong seed or a tampered outcome is caught)."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from proctor.analysis.episodes import Episode
from proctor.analysis.resolution import Outcome
from proctor.core.domain import Side
from proctor.scheduler.adaptive_rule import AdaptiveRule, Plan, compare, replay
from proctor.scheduler.allocation import AllocationProtocol, SpatialConfig, derive_allocation

REF, SLOW, PEER = 10, 20, 30
SEED = "ab" * 32
SCALE = {REF: 4.0, SLOW: 40.0, PEER: 4.0}  # mean seconds per item
CONFIGS = (SpatialConfig(Side.left, Side.left), SpatialConfig(Side.right, Side.left))


def _protocol(policies: tuple[int, ...], lag: int = 1) -> tuple[AllocationProtocol, AdaptiveRule]:
    rule = AdaptiveRule(sentinels=(REF,), alpha=0.05, lag_blocks=lag)
    protocol = AllocationProtocol.canonical(
        policies=policies,
        objects=[1, 2],
        configs=CONFIGS,
        episodes_per_cell=16,
        adaptive=rule.to_json(),
    )
    return protocol, rule


def _episode(seq: int, policy: int, obj: int, rng: np.random.Generator) -> Episode:
    times = np.cumsum(rng.exponential(SCALE[policy], size=4))
    placed = tuple(float(t) for t in times if t < 100)
    return Episode(
        episode_id=f"e{seq}",
        policy=str(policy),
        object=str(obj),
        items=4,
        duration_s=100.0 if len(placed) < 4 else placed[-1],
        placements_s=placed,
        lost=0,
        dropped=0,
        outcome="success" if len(placed) == 4 else "ran_out_of_time",
        budget_s=100.0,
    )


def _run(
    protocol: AllocationProtocol, rule: AdaptiveRule, seed: str = SEED
) -> tuple[Plan, list[Outcome]]:
    """Block by block as the scheduler hands them out: block b runs as the
    plan stood with blocks 0…b−1−lag settled."""
    rng = np.random.default_rng(7)
    outcomes: list[Outcome] = []
    blocks = protocol.block_count
    for b in range(blocks):
        settled = [o for o in outcomes if o.block_index < b - rule.lag_blocks]
        plan = replay(seed, protocol, rule, settled)
        for s in plan.slots():
            if s.block_index == b:
                outcomes.append(
                    Outcome(b, s.sequence, _episode(s.sequence, s.policy_id, s.object_type_id, rng))
                )
    return replay(seed, protocol, rule, outcomes), outcomes


@pytest.fixture(scope="module")
def three() -> tuple[AllocationProtocol, AdaptiveRule, Plan, list[Outcome]]:
    protocol, rule = _protocol((REF, SLOW, PEER))
    plan, outcomes = _run(protocol, rule)
    return protocol, rule, plan, outcomes


def test_the_resolved_policy_stops_and_its_slots_shift_to_the_unresolved_one(three) -> None:
    protocol, _rule, plan, outcomes = three
    assert [s.policy_id for s in plan.policy_stops] == [SLOW]
    stop = plan.policy_stops[0]
    assert stop.first_changed_block < protocol.block_count - 4  # early, not at the end
    resolved = {(p.a, p.b) for p in plan.pair_stops}
    assert (REF, SLOW) in resolved and (SLOW, PEER) in resolved and (REF, PEER) not in resolved
    after = [s for s in plan.slots() if s.block_index >= stop.first_changed_block]
    assert after and SLOW not in {s.policy_id for s in after}
    assert not plan.withdrawn  # PEER still has an unresolved pair: nothing is wasted
    # what ran matches the plan: nothing of SLOW after its stop took effect
    assert not [
        o
        for o in outcomes
        if o.episode.policy == str(SLOW) and o.block_index >= stop.first_changed_block
    ]


def test_blocks_keep_their_cell_and_the_reference_recurs_in_every_block(three) -> None:
    protocol, _rule, plan, _ = three
    base = derive_allocation(SEED, protocol)
    cell = {s.block_index: (s.object_type_id, s.config) for s in base}
    by_block: dict[int, list[int]] = {}
    for s in plan.slots():
        assert (s.object_type_id, s.config) == cell[s.block_index]
        by_block.setdefault(s.block_index, []).append(s.policy_id)
    assert set(by_block) == set(cell)
    for members in by_block.values():
        assert Counter(members)[REF] == 1 and len(members) == 3
    # objects × configurations: the planned totals equal the fixed design's
    assert Counter((s.object_type_id, s.config) for s in plan.slots()) == Counter(
        (s.object_type_id, s.config) for s in base
    )

    # the slow policy's slots went to the peer on their own object: per object,
    # the two together have what they had in the fixed design
    def together(slots: list) -> Counter:
        return Counter(s.object_type_id for s in slots if s.policy_id in (SLOW, PEER))

    assert together(plan.slots()) == together(base)


def test_with_no_unresolved_policy_left_the_later_blocks_are_withdrawn() -> None:
    protocol, rule = _protocol((REF, SLOW))
    plan, outcomes = _run(protocol, rule)
    stop = plan.policy_stops[0]
    assert plan.withdrawn
    assert {s.block_index for s in plan.slots()} == set(range(stop.first_changed_block))
    assert len(outcomes) == len(plan.slots()) < protocol.slot_count


def test_the_plan_re_derives_and_a_wrong_seed_or_a_tampered_outcome_is_caught(three) -> None:
    protocol, rule, plan, outcomes = three
    logged = {s.sequence: s.policy_id for s in plan.slots()}
    assert compare(replay(SEED, protocol, rule, outcomes), logged) == []
    # a wrong seed: the same outcomes under another seed's blocks
    assert compare(replay("cd" * 32, protocol, rule, outcomes), logged)
    # a tampered outcome: the slow policy's episodes before its stop made fast
    stop = plan.policy_stops[0]
    rng = np.random.default_rng(99)
    tampered = [
        replace(
            o,
            episode=replace(
                _episode(o.sequence, PEER, int(o.episode.object), rng), policy=str(SLOW)
            ),
        )
        if o.episode.policy == str(SLOW) and o.block_index <= stop.block
        else o
        for o in outcomes
    ]
    assert compare(replay(SEED, protocol, rule, tampered), logged)


def test_a_fixed_protocol_digest_is_unchanged_by_the_adaptive_field() -> None:
    fixed = AllocationProtocol.canonical(
        policies=[1, 2], objects=[1], configs=CONFIGS, episodes_per_cell=2
    )
    assert "adaptive" not in fixed.to_json()
    adaptive, _ = _protocol((1, 2))
    assert AllocationProtocol.from_json(adaptive.to_json()) == adaptive
    assert adaptive.digest() != replace(adaptive, adaptive=None).digest()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("alpha", 1.5, "adaptive.alpha"),
        ("lag_blocks", -1, "adaptive.lag_blocks"),
        ("rule", "x", "adaptive.rule"),
    ],
)
def test_a_bad_rule_is_refused_naming_its_field(field: str, value: object, message: str) -> None:
    good = AdaptiveRule(sentinels=(REF,)).to_json()
    with pytest.raises(ValueError, match=message):
        AdaptiveRule.from_json({**good, field: value})


def test_pairs_are_counted_once() -> None:
    protocol, _ = _protocol((REF, SLOW, PEER))
    assert len(list(itertools.combinations(protocol.policies, 2))) == 3


def test_on_null_campaigns_no_policy_is_stopped_more_often_than_alpha() -> None:
    """All three policies alike: until the first crossing the rule changes
    nothing, so a campaign in which no pair ever crosses on the full fixed
    allocation is one the rule never touched; the familywise rate of any
    crossing, watched after every block, must stay within α."""
    from scipy import stats

    from proctor.analysis.resolution import pair_crossings

    protocol, rule = _protocol((REF, SLOW, PEER))
    slots = derive_allocation(SEED, protocol)
    rng = np.random.default_rng(11)
    reps, crossed = 300, 0
    for _ in range(reps):
        outcomes = [
            Outcome(s.block_index, s.sequence, _episode(s.sequence, PEER, s.object_type_id, rng))
            for s in slots
        ]
        # every arm behaves as PEER; relabel the episodes with their slot's policy
        outcomes = [
            replace(o, episode=replace(o.episode, policy=str(s.policy_id)))
            for o, s in zip(outcomes, slots, strict=True)
        ]
        crossed += bool(pair_crossings(protocol.policies, protocol.objects, rule.alpha, outcomes))
    low = stats.binomtest(crossed, reps).proportion_ci(0.99).low
    assert low <= rule.alpha, crossed / reps


def test_the_protocol_names_a_bad_sentinel_or_adaptive_field() -> None:
    from proctor.core.errors import UsageError
    from proctor.scheduler.protocol import parse_protocol

    base = {
        "name": "c",
        "items_per_episode": 1,
        "per_item_cap_s": 10,
        "tau_s": 10,
        "episodes_per_cell": 2,
        "reference": "ref",
        "policies": ["a"],
        "objects": ["spoons"],
    }
    assert parse_protocol({**base, "sentinels": ["a"], "adaptive": {}}).adaptive is not None
    with pytest.raises(UsageError, match=r"sentinels\[0\]: 'ghost' is not a policy"):
        parse_protocol({**base, "sentinels": ["ghost"]})
    with pytest.raises(UsageError, match=r"adaptive\.alpha"):
        parse_protocol({**base, "adaptive": {"alpha": 2}})
    with pytest.raises(UsageError, match=r"adaptive\.rule"):
        parse_protocol({**base, "adaptive": {"rule": "peek-and-stop"}})
