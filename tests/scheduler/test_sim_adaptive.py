"""An adaptive campaign on the simulated cell (docs/methods.md §11): the
clearly slower policy's only pair resolves early, its later slots are
withdrawn, the reference ran in every block that ran, the allocation
re-derives after reveal from the seed and the recorded outcomes, and a
tampered outcome is caught by that re-derivation."""

from __future__ import annotations

import secrets
from collections import Counter
from pathlib import Path

import sqlalchemy as sa

from proctor.analysis.store import snapshot_result
from proctor.core.db.models import Assignment, Campaign, Episode
from proctor.core.domain import AssignmentStatus, LabelStream
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.scheduler import service
from proctor.scheduler.adaptive_campaign import current_plan
from proctor.scheduler.protocol import parse_protocol
from proctor.scheduler.service import Actor
from tests.scheduler.conftest import Gateway, sim_station, work_the_campaign
from tests.scheduler.sim_support import ARMS as ALL_ARMS
from tests.scheduler.sim_support import CONFIGS, register_policies

ARMS = ("reference", "steady")
EPISODES_PER_CELL = 14  # one object, two configurations: 14 blocks of 2


def _work_and_annotate(gateway: Gateway, daemon, cid: int, tmp_path: Path) -> None:
    """The station runs what it may; the annotator labels it; again, until
    the station gets nothing after a pass in which nothing new was labelled
    (the rule reads labelled outcomes only, so it waits for them)."""
    from proctor.core.artifacts import open_store
    from proctor.demo.pipeline import annotate_campaign

    store = open_store(str(tmp_path / "artifacts"))
    while True:
        work_the_campaign(daemon)
        if not annotate_campaign(gateway.db.factory, store, campaign_id=cid, tick=lambda _: None):
            return


def test_an_adaptive_campaign_stops_a_resolved_pair_early(gateway: Gateway, tmp_path: Path) -> None:
    tag = secrets.token_hex(3)
    servers = {p: PolicyServer(DemoPolicy(p, seed=i)).start() for i, p in enumerate(ARMS)}
    try:
        arm_of = register_policies(
            gateway, servers, tag, arms={a: ALL_ARMS[a] for a in ARMS}, objects=("spoons",)
        )
        with gateway.db.session() as s:
            c = service.create_campaign(
                s,
                protocol=parse_protocol(
                    {
                        "name": f"adaptive-{tag}",
                        "items_per_episode": 3,
                        "per_item_cap_s": 20,
                        "tau_s": 60,
                        "episodes_per_cell": EPISODES_PER_CELL,
                        "reference": f"reference-{tag}",
                        "policies": [f"steady-{tag}"],
                        "objects": ["spoons"],
                        "spatial_configs": CONFIGS,
                        "adaptive": {"alpha": 0.1, "lag_blocks": 1},
                    }
                ),
                actor=Actor(label="test"),
            )
            cid = c.id
            started = service.start_campaign(s, campaign=cid, actor=Actor(label="test"))
        assert started.slots == 2 * EPISODES_PER_CELL

        daemon = sim_station(gateway, cid, f"cell-{tag}", tmp_path)
        daemon.open()
        try:
            _work_and_annotate(gateway, daemon, cid, tmp_path)
        finally:
            daemon.close()
    finally:
        for server in servers.values():
            server.stop()

    with gateway.db.session() as s:
        campaign = s.get(Campaign, cid)
        got = current_plan(s, campaign)
        assert got is not None
        plan, _reading = got
        slots = list(
            s.scalars(
                sa.select(Assignment)
                .where(Assignment.campaign_id == cid)
                .order_by(Assignment.sequence)
            )
        )
    # the pair resolved and the policy stopped before the last block
    assert len(plan.pair_stops) == 1 and len(plan.policy_stops) == 1
    stop = plan.policy_stops[0]
    assert arm_of[stop.policy_id] == "steady"
    assert stop.first_changed_block < EPISODES_PER_CELL
    ran = [a for a in slots if a.status == AssignmentStatus.done]
    assert len(ran) < 2 * EPISODES_PER_CELL  # episodes saved
    assert sorted(plan.withdrawn) and len(slots) + len(plan.withdrawn) == 2 * EPISODES_PER_CELL
    # nothing ran past the stop's lag, and the reference ran in every block that ran
    per_block = Counter(a.block_index for a in ran)
    assert max(per_block) == stop.first_changed_block - 1
    for b in per_block:
        assert {arm_of[a.policy_id] for a in ran if a.block_index == b} == set(ARMS)

    with gateway.db.session() as s:
        service.close_campaign(s, campaign=cid, actor=Actor(label="test"))
        revelation = service.reveal_allocation(s, campaign=cid)
        # the leaderboard's result says what stopped, and when
        result, _, _ = snapshot_result(s, campaign_id=cid, stream=LabelStream.detector_only)
    assert revelation.verified, revelation.mismatches
    board = result["early_stops"]
    assert [x["policy"] for x in board["stopped"]] == [f"steady-{tag}"]
    assert board["stopped"][0]["no_slots_from_block"] == stop.first_changed_block
    assert board["pairs"][0]["resolved_after_block"] == stop.block
    assert [d["policy"] for d in result["drift"]] == [f"reference-{tag}"]

    # a tampered outcome: the slower policy's episodes voided after the fact
    with gateway.db.session() as s:
        steady = next(p for p, arm in arm_of.items() if arm == "steady")
        eps = s.scalars(
            sa.select(Episode)
            .join(Assignment, Episode.assignment_id == Assignment.id)
            .where(Assignment.campaign_id == cid, Assignment.policy_id == steady)
        ).all()
        for e in eps:
            e.outcome = e.outcome.__class__("system")
        s.flush()
        tampered = service.reveal_allocation(s, campaign=cid)
        s.rollback()
    assert not tampered.verified
    # without the slower policy's outcomes nothing resolves: the withdrawn slots
    # should have run, and the log lacks them
    assert any("absent from the log" in m for m in tampered.mismatches)
