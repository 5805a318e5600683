"""The export's formats, by name: what ``proctor export --format`` chooses."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import LabelStream
from proctor.core.errors import UsageError
from proctor.export.dataset import ExportSummary


class ExportFormat(StrEnum):
    proctor = "proctor"  # the interchange file plus the raw recordings (``proctor.export``)
    lerobot = "lerobot"  # a LeRobot v3 dataset (``proctor.export.lerobot``)


@dataclass(frozen=True)
class ExportRequest:
    campaign: str
    out: Path
    stream: LabelStream = LabelStream.auto_and_reviewed
    media: bool = True
    submitter: str | None = None  # None: the public
    policy: str | None = None  # a submitter's one policy
    progress: Callable[[int, int], None] | None = None
    reencode: bool = False  # LeRobot: re-encode every video, even one its recording could give


Exporter = Callable[[ProctorSession, ArtifactStore, ExportRequest], ExportSummary]


def _proctor(session: ProctorSession, store: ArtifactStore, r: ExportRequest) -> ExportSummary:
    from proctor.export.dataset import export_campaign

    if r.submitter is not None or r.policy is not None:
        raise UsageError(
            "submitter: a submitter's private export is a LeRobot dataset (--format lerobot)"
        )
    if r.reencode:
        raise UsageError("reencode: --format proctor copies the recordings as they are")
    return export_campaign(
        session,
        store,
        campaign=r.campaign,
        out=r.out,
        stream=r.stream,
        media=r.media,
        progress=r.progress,
    )


def _lerobot(session: ProctorSession, store: ArtifactStore, r: ExportRequest) -> ExportSummary:
    from proctor.export.lerobot import export_lerobot
    from proctor.export.lerobot_video import VideoMode

    if not r.media:
        raise UsageError(
            "media: a LeRobot dataset holds its videos; --no-media is for --format proctor"
        )
    return export_lerobot(
        session,
        store,
        campaign=r.campaign,
        out=r.out,
        submitter=r.submitter,
        policy=r.policy,
        stream=r.stream,
        progress=r.progress,
        video=VideoMode.reencode if r.reencode else VideoMode.copy,
    )


EXPORTERS: dict[ExportFormat, Exporter] = {
    ExportFormat.proctor: _proctor,
    ExportFormat.lerobot: _lerobot,
}
