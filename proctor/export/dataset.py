"""Writing the export (layout in ``proctor.export``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from proctor import __version__
from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    AnnotationCandidate,
    Artifact,
    Campaign,
    Episode,
    EpisodeEvent,
    PlacementEvent,
    ReviewAction,
)
from proctor.core.domain import ArtifactKind, LabelStream
from proctor.export.audience import find_campaign, require_released
from proctor.export.staging import check_free, staged_folder

# artifact kind (and camera) → file name inside the episode's folder
_FILES: dict[ArtifactKind, str] = {
    ArtifactKind.telemetry: "telemetry.parquet",
    ArtifactKind.manifest: "manifest.json",
    ArtifactKind.ground_truth: "ground-truth.json",
}
_PER_CAMERA: dict[ArtifactKind, str] = {
    ArtifactKind.video: "video-{camera}.mp4",
    ArtifactKind.frame_index: "frames-{camera}.parquet",
}
MEDIA = {ArtifactKind.video}


@dataclass(frozen=True)
class ExportSummary:
    folder: Path
    episodes: int
    files: int
    bytes: int


def _campaign(session: ProctorSession, ref: str) -> Campaign:
    return require_released(find_campaign(session, ref))


def _when(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _description(text: str, hidden: dict[str, str]) -> str | None:
    """The campaign's description, unless it mentions a withheld policy's
    name: then none. Free text is never relabelled, because replacing a name
    wherever it occurs would also rewrite words that merely look like it (a
    policy called ``spoons``) and so show which label hides which name."""
    folded = text.casefold()
    if any(name.casefold() in folded for name in hidden):
        return None
    return text


def _episode_document(session: ProctorSession, ep: Episode) -> dict[str, Any]:
    from proctor.web.explorer.service import ANONYMOUS_REVIEWER

    events = session.scalars(
        sa.select(EpisodeEvent).where(EpisodeEvent.episode_id == ep.id).order_by(EpisodeEvent.id)
    )
    candidates = session.scalars(
        sa.select(AnnotationCandidate)
        .where(AnnotationCandidate.episode_id == ep.id)
        .order_by(AnnotationCandidate.t_s)
    )
    placements = session.scalars(
        sa.select(PlacementEvent)
        .where(PlacementEvent.episode_id == ep.id)
        .order_by(PlacementEvent.id)
    )
    reviews = session.scalars(
        sa.select(ReviewAction).where(ReviewAction.episode_id == ep.id).order_by(ReviewAction.id)
    )
    return {
        "format": "proctor.export.episode/1",
        "episode": {
            "uid": ep.uid,
            "run_code": ep.run_code,
            "items": ep.items,
            "budget_s": ep.budget_s,
            "tote_side": ep.tote_side.value,
            "camera_side": ep.camera_side.value,
            "sim_seed": ep.sim_seed,
            "clock_start_s": ep.clock_start_s,
            "clock_end_s": ep.clock_end_s,
            "started_at": _when(ep.started_at),
            "ended_at": _when(ep.ended_at),
            "outcome": ep.outcome.value if ep.outcome else None,
            "outcome_reason": ep.outcome_reason,
            "placed": ep.placed,
            "lost": ep.lost,
            "dropped": ep.dropped,
            "operator_notes": ep.operator_notes,
            "label_status": ep.label_status.value,
        },
        "events": [
            {"t_s": e.t_s, "at": _when(e.at), "kind": e.kind, "message": e.message} for e in events
        ],
        "candidates": [
            {
                "id": c.id,
                "t_s": c.t_s,
                "kind": c.kind,
                "zone": c.zone,
                "verdict": c.verdict.value,
                "rule": c.rule,
                "score": c.score,
                "features": c.features,
                "detector_version": c.detector_version,
            }
            for c in candidates
        ],
        "placements": [
            {
                "id": p.id,
                "t_s": p.t_s,
                "source": p.source.value,
                "status": p.status.value,
                "candidate_id": p.candidate_id,
            }
            for p in placements
        ],
        "reviews": [
            {
                "at": _when(r.at),
                # as the public explorer names them: an automatic reviewer by its
                # label, a person never (their user id would tell reviews apart)
                "reviewer": r.reviewer_label or ANONYMOUS_REVIEWER,
                "action": r.action.value,
                "placement_event_id": r.placement_event_id,
                "before": r.before,
                "after": r.after,
                "note": r.note,
            }
            for r in reviews
        ],
    }


def _copy_verified(store: ArtifactStore, sha256: str, dest: Path) -> int:
    size = 0
    with dest.open("wb") as out, store.open_verified(sha256) as chunks:
        for chunk in chunks:
            out.write(chunk)
            size += len(chunk)
    return size


def _file_entry(path: Path, root: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return {
        "path": path.relative_to(root).as_posix(),
        "sha256": digest.hexdigest(),
        "size": path.stat().st_size,
    }


def export_campaign(
    session: ProctorSession,
    store: ArtifactStore,
    *,
    campaign: str,
    out: Path,
    stream: LabelStream = LabelStream.auto_and_reviewed,
    media: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> ExportSummary:
    from proctor.analysis.interchange import FORMAT as INTERCHANGE_FORMAT
    from proctor.analysis.interchange import write_interchange
    from proctor.analysis.store import load_episodes
    from proctor.scheduler.naming import WITHHELD_NOTE, campaign_naming

    c = _campaign(session, campaign)
    # the public board's naming rule, exactly: a policy is named only if its
    # submitter opted in (the reference always); the others keep their arm label
    naming = campaign_naming(session, c)
    hidden = naming.hidden_from(None)
    out = Path(out)
    check_free(out)
    with staged_folder(out) as partial:
        table = load_episodes(session, campaign_id=c.id, stream=stream)
        write_interchange(
            [dataclasses.replace(e, policy=hidden.get(e.policy, e.policy)) for e in table.episodes],
            partial / "episodes.csv",
        )
        episodes = list(
            session.scalars(
                sa.select(Episode).where(Episode.campaign_id == c.id).order_by(Episode.id)
            )
        )
        files: list[dict[str, Any]] = [_file_entry(partial / "episodes.csv", partial)]
        for i, ep in enumerate(episodes):
            folder = partial / "episodes" / ep.uid
            folder.mkdir(parents=True)
            doc = folder / "episode.json"
            doc.write_text(json.dumps(_episode_document(session, ep), indent=1), encoding="utf-8")
            files.append(_file_entry(doc, partial))
            for art in session.scalars(sa.select(Artifact).where(Artifact.episode_id == ep.id)):
                if art.kind in MEDIA and not media:
                    continue
                name = _FILES.get(art.kind) or _PER_CAMERA.get(art.kind, "").format(
                    camera=art.camera
                )
                if not name:
                    continue  # e.g. an .rrd: derived, regenerate it from the recording
                dest = folder / name
                _copy_verified(store, art.sha256, dest)
                files.append(_file_entry(dest, partial))
            if progress is not None:
                progress(i + 1, len(episodes))
        dataset = {
            "format": "proctor.export/1",
            # episodes.csv's format (docs/methods.md §8): 2 carries block and sequence
            "interchange_format": INTERCHANGE_FORMAT,
            "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "code_version": f"proctor-{__version__}",
            "campaign": {
                "name": c.name,
                "description": _description(c.description, hidden),
                "items_per_episode": c.items_per_episode,
                "per_item_cap_s": c.per_item_cap_s,
                "tau_s": c.tau_s,
                "episodes_per_cell": c.episodes_per_cell,
                "spatial_configs": c.spatial_configs,
                "allocation_protocol": getattr(c, "allocation_protocol", None),
                "seed_commitment": c.seed_commitment,
                "allocation_seed": c.allocation_seed,
                "started_at": _when(c.started_at),
                "closed_at": _when(c.closed_at),
                "released_at": _when(c.released_at),
            },
            "label_stream": stream.value,
            "reference": hidden.get(table.reference or "", table.reference),
            "identities_withheld": [
                {"policy": label, "note": WITHHELD_NOTE} for label in sorted(hidden.values())
            ],
            "episodes": len(episodes),
            "excluded_from_interchange": [
                {"episode_id": x.episode_id, "reason": x.reason} for x in table.excluded
            ],
            "media": media,
            "files": files,
        }
        (partial / "dataset.json").write_text(json.dumps(dataset, indent=1), encoding="utf-8")
    return ExportSummary(
        folder=out,
        episodes=len(episodes),
        files=len(files) + 1,
        bytes=sum(f["size"] for f in files),
    )
