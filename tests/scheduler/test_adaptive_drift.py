"""The adaptive rule's null test with planted drift and real shifts
(docs/methods.md §11; issue 31 item 3; the statistics review's §7).

Four policies: the reference (a sentinel), PEER identical to it, and two
much slower policies S1 and S2 whose pairs resolve within a few blocks, so
the rule stops them and their slots shift to PEER (three slots a block
against the reference's one). Every policy's item times grow ×3 over the
campaign. REF–PEER is a true null pair: its e-process may cross its
threshold m/α in at most α/m of the campaigns. Matching the k-th episode
of PEER with the k-th of REF across blocks (the rule before pairing by
design) put PEER's later episodes against REF's much later, slower ones
and crossed in 0.040 of campaigns, 5× the bound; pairing within block
cancels the drift."""

from __future__ import annotations

import math

import numpy as np

from proctor.analysis.episodes import Episode
from proctor.analysis.resolution import Outcome, pair_crossings, policy_stops
from proctor.core.domain import Side
from proctor.scheduler.adaptive_rule import AdaptiveRule, Plan, replay
from proctor.scheduler.allocation import AllocationProtocol, Slot, SpatialConfig

REF, S1, PEER, S2 = 10, 20, 30, 40
SCALE = {REF: 4.0, PEER: 4.0, S1: 30.0, S2: 88.0}  # mean seconds per item (7.5×, 22×)
CONFIGS = (SpatialConfig(Side.left, Side.left), SpatialConfig(Side.right, Side.left))
PER_CELL = 60  # 2 objects × 60 = 120 blocks
DRIFT = 3.0  # item times ×3 from the first block to the last
ITEMS, BUDGET = 4, 600.0


def protocol_and_rule() -> tuple[AllocationProtocol, AdaptiveRule]:
    rule = AdaptiveRule(sentinels=(REF,), alpha=0.05, lag_blocks=1)
    protocol = AllocationProtocol.canonical(
        policies=[REF, S1, PEER, S2],
        objects=[1, 2],
        configs=CONFIGS,
        episodes_per_cell=PER_CELL,
        adaptive=rule.to_json(),
    )
    return protocol, rule


def episode(seq: int, policy: int, obj: int, block: int, blocks: int,
            rng: np.random.Generator) -> Episode:  # fmt: skip
    drift = 1.0 + (DRIFT - 1.0) * block / (blocks - 1)
    times = np.cumsum(rng.exponential(SCALE[policy] * drift, size=ITEMS))
    placed = tuple(float(t) for t in times if t < BUDGET)
    return Episode(
        episode_id=f"e{seq}",
        policy=str(policy),
        object=str(obj),
        items=ITEMS,
        duration_s=placed[-1] if len(placed) == ITEMS else BUDGET,
        placements_s=placed,
        lost=0,
        dropped=0,
        outcome="success" if len(placed) == ITEMS else "ran_out_of_time",
        budget_s=BUDGET,
    )


def campaign(seed: str, rng: np.random.Generator) -> tuple[Plan, list[Outcome]]:
    """Block by block as the scheduler hands them out (block b runs as the
    plan stood with blocks 0…b−1−lag settled). The plan is a function of the
    stops (a crossing read on settled blocks never changes later, and only
    crossings up to a stop's block shape its shifts), so it is re-derived
    only when the stopped set grows. Once S1 and S2 have both stopped, the
    plan can change again only by a stop of PEER, which needs REF–PEER to
    cross first, the event counted: the rule is then read no more."""
    protocol, rule = protocol_and_rule()
    blocks = protocol.block_count
    outcomes: list[Outcome] = []
    plan = replay(seed, protocol, rule, [])
    by_block = _by_block(plan)
    stopped: set[int] = set()
    for b in range(blocks):
        if stopped != {S1, S2}:
            settled = [o for o in outcomes if o.block_index < b - rule.lag_blocks]
            crossed = pair_crossings(protocol.policies, protocol.objects, rule.alpha, settled)
            now = set(policy_stops(protocol.policies, rule.sentinels, crossed))
            if now != stopped:
                stopped = now
                plan = replay(seed, protocol, rule, settled)
                assert {p.policy_id for p in plan.policy_stops} == stopped
                by_block = _by_block(plan)
        for s in by_block.get(b, []):
            ep = episode(s.sequence, s.policy_id, s.object_type_id, b, blocks, rng)
            outcomes.append(Outcome(b, s.sequence, ep))
    return plan, outcomes


def _by_block(plan: Plan) -> dict[int, list[Slot]]:
    out: dict[int, list[Slot]] = {}
    for s in plan.slots():
        out.setdefault(s.block_index, []).append(s)
    return out


def test_a_true_null_pair_holds_its_bound_under_drift_and_real_shifts() -> None:
    from scipy import stats

    protocol, rule = protocol_and_rule()
    m = math.comb(len(protocol.policies), 2)
    bound = rule.alpha / m  # 0.0083 per pair
    rng = np.random.default_rng(31)
    reps, crossed, shifted = 300, 0, 0
    peer_slots, ref_early, ref_late = [], [], []
    for r in range(reps):
        _plan, outcomes = campaign(f"{r:064x}", rng)
        stops = pair_crossings(protocol.policies, protocol.objects, rule.alpha, outcomes)
        crossed += any({c.a, c.b} == {REF, PEER} for c in stops)
        n_peer = sum(o.episode.policy == str(PEER) for o in outcomes)
        shifted += n_peer > protocol.block_count
        peer_slots.append(n_peer)
        ref = [o for o in outcomes if o.episode.policy == str(REF)]
        ref_early.append(np.mean([o.episode.duration_s for o in ref[:20]]))
        ref_late.append(np.mean([o.episode.duration_s for o in ref[-20:]]))
    # the shifts really happen: S1 and S2 stop and PEER gets their slots
    assert shifted == reps, shifted
    assert np.mean(peer_slots) > 2.5 * protocol.block_count
    # the drift is really there: the reference's late episodes are ~×3 slower
    assert 2.3 < np.mean(ref_late) / np.mean(ref_early) < 3.3
    # the per-pair bound holds: the 99 % interval of the rate reaches α/m
    low = stats.binomtest(crossed, reps).proportion_ci(0.99).low
    assert low <= bound, (crossed, reps)
