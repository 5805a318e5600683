"""Issue 6 acceptance: a campaign runs on the simulated cell through the
scheduler, and what ran is checked against the allocation.

Everything is real and on loopback: scripted demo policies (the human
reference among them) are policy servers registered as endpoint submissions;
the station daemon on the simulated cell (virtual clock) takes its work from
the campaign through ``CampaignWorkSource`` and reaches each policy only
through the blinded gateway; episodes are closed with the simulated cell's
ground-truth log (standing in for the operator's form).

Checked afterwards, from the episodes that actually ran: block structure
(every arm once per block, one object and one spatial configuration per
block, one initial scene per block), balance across cells and
configurations, claim order = allocation order, each run reached its own
policy, and — after close — that the revealed seed re-derives exactly what
ran.
"""

from __future__ import annotations

import secrets
from collections import Counter, defaultdict
from pathlib import Path

import sqlalchemy as sa

from proctor.core.db.models import (
    Assignment,
    Campaign,
    Episode,
    ObjectType,
)
from proctor.core.domain import (
    AssignmentStatus,
    EpisodeState,
)
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.scheduler import service
from proctor.scheduler.allocation import AllocationProtocol, derive_allocation
from proctor.scheduler.claims import scene_seed
from proctor.scheduler.protocol import parse_protocol
from proctor.scheduler.service import Actor
from tests.scheduler.conftest import Gateway, sim_station, work_the_campaign
from tests.scheduler.sim_support import ARMS, CONFIGS, OBJECTS, register_policies

EPISODES_PER_CELL = 2  # one block per (object, configuration)


def test_a_campaign_on_the_simulated_cell_follows_its_allocation(
    gateway: Gateway, tmp_path: Path
) -> None:
    tag = secrets.token_hex(3)
    servers = {p: PolicyServer(DemoPolicy(p, seed=i)).start() for i, p in enumerate(ARMS)}
    try:
        arm_of = register_policies(gateway, servers, tag)
        with gateway.db.session() as s:
            c = service.create_campaign(
                s,
                protocol=parse_protocol(
                    {
                        "name": f"sim-{tag}",
                        "items_per_episode": 1,
                        "per_item_cap_s": 20,
                        "tau_s": 40,
                        "episodes_per_cell": EPISODES_PER_CELL,
                        "reference": f"reference-{tag}",
                        "policies": [f"swift-{tag}", f"steady-{tag}"],
                        "objects": list(OBJECTS),
                        "spatial_configs": CONFIGS,
                    }
                ),
                actor=Actor(label="test"),
            )
            cid = c.id
            service.start_campaign(s, campaign=cid, actor=Actor(label="test"))

        daemon = sim_station(gateway, cid, f"cell-{tag}", tmp_path)
        daemon.open()
        try:
            work_the_campaign(daemon)
        finally:
            daemon.close()
        connections = {p: servers[p].connections for p in ARMS}
    finally:
        for server in servers.values():
            server.stop()

    n_blocks = len(OBJECTS) * EPISODES_PER_CELL
    with gateway.db.session() as s:
        slots = list(
            s.scalars(
                sa.select(Assignment)
                .where(Assignment.campaign_id == cid)
                .order_by(Assignment.sequence)
            )
        )
        episodes = {
            e.assignment_id: e
            for e in s.scalars(sa.select(Episode).where(Episode.campaign_id == cid))
        }
        objects = dict(s.execute(sa.select(ObjectType.id, ObjectType.name)).all())
        seed_row = s.get(Campaign, cid)
        hidden_seed = seed_row.allocation_seed

    assert len(slots) == len(ARMS) * n_blocks == 12
    assert {a.status for a in slots} == {AssignmentStatus.done}  # nothing lost or requeued
    assert len(episodes) == 12 and all(e.state == EpisodeState.closed for e in episodes.values())
    # the station ran the runs in allocation order
    ordered = sorted(episodes.values(), key=lambda e: e.id)
    assert [e.run_code for e in ordered] == [a.run_code for a in slots]

    # block structure, from what ran
    blocks: dict[int, list[tuple[Assignment, Episode]]] = defaultdict(list)
    for a in slots:
        blocks[a.block_index].append((a, episodes[a.id]))
    assert len(blocks) == n_blocks
    for b, members in blocks.items():
        assert sorted(arm_of[a.policy_id] for a, _ in members) == sorted(ARMS)
        assert len({(e.object_type_id, e.tote_side, e.camera_side) for _, e in members}) == 1
        assert {e.sim_seed for _, e in members} == {scene_seed(hidden_seed, b)}
    assert len({e.sim_seed for e in episodes.values()}) == n_blocks

    # balance: every cell full; per object, each configuration once
    cells = Counter((arm_of[a.policy_id], objects[a.object_type_id]) for a in slots)
    assert set(cells.values()) == {EPISODES_PER_CELL} and len(cells) == len(ARMS) * len(OBJECTS)
    per_obj_cfg = Counter(
        (objects[members[0][1].object_type_id], members[0][1].tote_side.value)
        for members in blocks.values()
    )
    assert set(per_obj_cfg.values()) == {1} and len(per_obj_cfg) == len(OBJECTS) * len(CONFIGS)

    # each run reached its own policy through the gateway: one connection per episode
    assert connections == dict.fromkeys(ARMS, n_blocks)

    # close, reveal: the seed re-derives exactly what ran
    with gateway.db.session() as s:
        seed = service.close_campaign(s, campaign=cid, actor=Actor(label="test"))
        revelation = service.reveal_allocation(s, campaign=cid)
        protocol = AllocationProtocol.from_json(s.get(Campaign, cid).allocation_protocol)
    assert revelation.verified
    derived = derive_allocation(seed, protocol)
    assert [(d.policy_id, d.object_type_id, d.config.tote, d.config.camera) for d in derived] == [
        (a.policy_id, e.object_type_id, e.tote_side, e.camera_side)
        for a, e in ((a, episodes[a.id]) for a in slots)
    ]
