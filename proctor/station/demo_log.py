"""DEMO / TEST HELPER — NOT AN OPERATOR.

Fills an episode's post-rollout log from the simulated cell's ground truth,
for headless demo and test runs where no person stands at the cell. Every
log written this way is labelled ``GROUND_TRUTH_LABEL`` (in the episode's
``operator_log`` event and its notes), so it can never pass for a person's
count. The station itself never uses the ground truth to fill a log.
"""

from __future__ import annotations

import json

import sqlalchemy as sa

from proctor.core import episode_record
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Episode
from proctor.core.domain import ArtifactKind, Outcome
from proctor.core.errors import UsageError
from proctor.station import episodes

GROUND_TRUTH_LABEL = "demo: log filled from the simulator's ground truth (no operator)"


def ground_truth_log(
    session: ProctorSession, *, store: ArtifactStore, uid: str
) -> episode_record.OperatorLog:
    """The log a perfectly attentive operator would write, from the ground truth."""
    episode = episodes.get_episode(session, uid)
    artifact = session.scalar(
        sa.select(Artifact).where(
            Artifact.episode_id == episode.id, Artifact.kind == ArtifactKind.ground_truth
        )
    )
    if artifact is None:
        raise UsageError(f"episode {uid}: has no ground truth (not recorded on the simulated cell)")
    truth = json.loads(store.read_bytes(artifact.sha256))
    final = truth["final"]
    placed, lost, dropped = int(final["placed"]), int(final["lost"]), int(final["dropped"])
    proposed = episodes.proposed_outcome(session, episode=episode) or Outcome.system
    outcome = proposed
    if outcome == Outcome.success and placed + lost + dropped != episode.items:
        outcome = Outcome.operator_stop
    return episode_record.OperatorLog(placed, lost, dropped, outcome, notes=GROUND_TRUTH_LABEL)


def close_with_ground_truth(session: ProctorSession, *, store: ArtifactStore, uid: str) -> Episode:
    log = ground_truth_log(session, store=store, uid=uid)
    return episodes.submit_log(session, uid=uid, log=log, label=GROUND_TRUTH_LABEL)
