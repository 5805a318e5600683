"""The endpoint's action units, end to end: a campaign on the simulated cell
(virtual clock) through the scheduler's claims and the blinded gateway to
``test_droid_units``'s hand-written DROID server, whose metadata names its
action space and says nothing about units (so the openpi dialect reads its
velocities as SI). Both arms are that server; the one whose endpoint selects
``droid`` runs as DROID's normalised per-step deltas, the other as rad/s, and
each episode's manifest records the convention that ran."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa

from proctor.core.artifacts import open_store
from proctor.core.db.models import Assignment, Episode, ObjectType
from proctor.core.domain import PolicyKind
from proctor.core.recording import keys
from proctor.core.recording.reader import load_recording
from proctor.scheduler import service
from proctor.scheduler.protocol import parse_protocol
from proctor.scheduler.service import Actor
from tests.scheduler import builders
from tests.scheduler.conftest import Gateway, sim_station, work_the_campaign
from tests.station.droid_support import droid_server, joint_chunk, recorded_steps

NAMED = {"action_space": "joint_velocity", "action_horizon": 10}
OBJECT = "towels"


def _actions(obs: dict[str, Any], n: int) -> np.ndarray:
    return joint_chunk([0.05, 0, 0, 0, 0, 0, 0])


def _campaign(gateway: Gateway, url: str, tag: str) -> tuple[int, dict[int, str | None]]:
    """A reference and a policy, both at ``url``; the policy's endpoint selects droid."""
    with gateway.db.session() as s:
        ref, ref_sub, _ = builders.endpoint_policy(
            s, f"ref-{tag}", kind=PolicyKind.reference, url=url
        )
        pol, pol_sub, _ = builders.endpoint_policy(s, f"droid-{tag}", url=url)
        pol_sub.manifest = {"wire": {"action_units": "droid"}}
        if s.scalar(sa.select(ObjectType.id).where(ObjectType.name == OBJECT)) is None:
            s.add(ObjectType(name=OBJECT, prompt=f"put the {OBJECT} into the target bin"))
        s.flush()
        c = service.create_campaign(
            s,
            protocol=parse_protocol(
                {
                    "name": f"units-{tag}",
                    "items_per_episode": 1,
                    "per_item_cap_s": 3.0,
                    "tau_s": 3.0,
                    "episodes_per_cell": 1,
                    "reference": ref.name,
                    "policies": [pol.name],
                    "objects": [OBJECT],
                    "spatial_configs": [{"tote": "left", "camera": "left"}],
                }
            ),
            actor=Actor(label="test"),
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="test"))
        return c.id, {ref_sub.id: None, pol_sub.id: "droid"}


def test_an_endpoint_selecting_droid_units_runs_as_droid_through_the_campaign(
    gateway: Gateway, tmp_path: Path
) -> None:
    tag = secrets.token_hex(3)
    with droid_server(NAMED, _actions) as server:
        cid, selected = _campaign(gateway, server.url, tag)
        daemon = sim_station(gateway, cid, f"cell-{tag}", tmp_path)
        daemon.open()
        try:
            work_the_campaign(daemon, timeout=120)
        finally:
            daemon.close()
    with gateway.db.session() as s:
        ran = list(
            s.execute(
                sa.select(Assignment.submission_id, Episode.uid)
                .join(Assignment, Assignment.id == Episode.assignment_id)
                .where(Episode.campaign_id == cid)
            )
        )
        assert sorted(sub for sub, _ in ran) == sorted(selected)
        store = open_store(str(tmp_path / "artifacts"))
        for sub_id, uid in ran:
            units = selected[sub_id] or "si"
            kind = "joint_position" if units == "droid" else "joint_velocity"
            rec = load_recording(s, store, uid)
            try:
                # the episode's manifest records the convention that ran
                assert rec.manifest["policy"]["action_units"] == units, sub_id
                running = rec.column(keys.PHASE) == keys.TelemetryPhase.running.value
                assert set(rec.column(keys.ACTION_KIND)[running]) == {kind}
                q, req, _ = recorded_steps(rec)
                # DROID: the measured joints plus 0.05 × 0.2 rad; SI: 0.05 rad/s as sent
                step = np.array([0.01, 0, 0, 0, 0, 0, 0])
                want = q + step if units == "droid" else 5 * step
                np.testing.assert_allclose(np.median(req - want, axis=0), 0, atol=2e-3)
            finally:
                rec.close()
