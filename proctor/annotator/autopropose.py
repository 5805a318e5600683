"""Failure-mode proposals written as review records: the telemetry rules
(``proctor.annotator.proposals``) run on a recorded episode, and each
proposal whose rule the taxonomy maps to a mode becomes a ``tag_failure``
record by the labelled proposer (never a person), with the rule and its
evidence. Running it again adds nothing it proposed before — whether or not
a reviewer has since retracted it (a retraction is a decision to keep)."""

from __future__ import annotations

from datetime import datetime

import pyarrow as pa

from proctor.annotator.config import Thresholds
from proctor.annotator.detector import Signals
from proctor.annotator.pipeline import layout_for
from proctor.annotator.proposals import PROPOSER_LABEL, ProposalThresholds, propose
from proctor.annotator.reconcile import _artifact, find_episode
from proctor.annotator.review import Reviewer
from proctor.annotator.tags import SAME_MOMENT_S, FailureTag, tag_failure, tags_of
from proctor.annotator.taxonomy import Taxonomy, load_taxonomy
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import ArtifactKind
from proctor.core.errors import IntegrityError
from proctor.core.recording.reader import read_json, read_parquet

PROPOSER = Reviewer(label=PROPOSER_LABEL)


def propose_episode(
    session: ProctorSession,
    *,
    store: ArtifactStore,
    uid: str,
    thresholds: Thresholds,
    taxonomy: Taxonomy | None = None,
    pth: ProposalThresholds | None = None,
    now: datetime | None = None,
) -> list[FailureTag]:
    """Tag one closed episode's evident failures; returns the new tags
    (none without telemetry)."""
    taxonomy = taxonomy or load_taxonomy()
    episode = find_episode(session, uid)
    telemetry = _artifact(session, episode, ArtifactKind.telemetry)
    if telemetry is None or episode.clock_start_s is None:
        return []
    manifest_row = _artifact(session, episode, ArtifactKind.manifest)
    manifest = read_json(store, manifest_row.sha256) if manifest_row is not None else None
    try:
        table = read_parquet(store, telemetry.sha256)
    except (pa.ArrowException, OSError) as exc:
        raise IntegrityError(f"episode {uid}: telemetry is unreadable ({exc})") from None
    layout = layout_for(thresholds, tote_side=episode.tote_side.value, manifest=manifest)
    signals = Signals.from_table(table, t0=episode.clock_start_s)
    # anyone's tag of the mode at that moment, live or retracted, already says it
    before = tags_of(session, [episode.id], live_only=False)
    duration = float(episode.duration_s or 0.0)
    made = []
    for p in propose(signals, layout, thresholds, pth):
        mode = taxonomy.for_rule(p.rule)
        if mode is None or not 0 <= p.t_s <= duration:
            continue
        if any(t.mode == mode.key and abs(t.t_s - p.t_s) < SAME_MOMENT_S for t in before):
            continue
        made.append(
            tag_failure(
                session,
                uid=uid,
                mode=mode.key,
                t_s=p.t_s,
                reviewer=PROPOSER,
                taxonomy=taxonomy,
                evidence={"rule": p.rule, **p.evidence},
                now=now,
            )
        )
    return made
