"""Reference photos of initial scenes, for stations that cannot render one.

A simulated cell renders the armed run's scene itself (the station's
``/api/reference/{camera}``). A real cell has nothing to render, so the
console shows a photo registered beforehand: an ``Artifact`` of kind
``photo`` with no episode, whose ``details`` say what it shows::

    {"object": "spoons", "tote_side": "left", "camera_side": "right"}

``tote_side`` / ``camera_side`` may be left out for a photo that fits every
configuration of that object; ``Artifact.camera`` names the camera it
stands in for (or none: any). The most specific match wins, then the newest.
Register one with ``register_photo`` (or ``proctor console photo add``).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from PIL import Image, UnidentifiedImageError

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact
from proctor.core.domain import ArtifactKind, Side
from proctor.core.errors import UsageError

MEDIA_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}
MAX_PHOTO_BYTES = 20 << 20


@dataclass(frozen=True)
class Photo:
    sha256: str
    media_type: str


def find_photo(
    session: ProctorSession,
    *,
    object_name: str,
    tote_side: Side,
    camera_side: Side,
    camera: str,
) -> Photo | None:
    rows = session.scalars(
        sa.select(Artifact)
        .where(Artifact.kind == ArtifactKind.photo, Artifact.episode_id.is_(None))
        .order_by(Artifact.id.desc())
    )
    best: tuple[int, Artifact] | None = None
    for row in rows:
        d = row.details or {}
        if d.get("object") != object_name or row.camera not in (None, camera):
            continue
        score = 0
        for key, wanted in (("tote_side", tote_side), ("camera_side", camera_side)):
            if key in d:
                if d[key] != wanted.value:
                    break
                score += 2
        else:
            score += 1 if row.camera == camera else 0
            if best is None or score > best[0]:
                best = (score, row)
    if best is None:
        return None
    return Photo(best[1].sha256, best[1].media_type)


def register_photo(
    session: ProctorSession,
    *,
    store: ArtifactStore,
    path: Path,
    object_name: str,
    tote_side: Side | None = None,
    camera_side: Side | None = None,
    camera: str | None = None,
) -> Artifact:
    """Store an image file as the reference photo of an initial scene."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"photo: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PHOTO_BYTES:
        raise UsageError(f"photo: {path} is larger than {MAX_PHOTO_BYTES >> 20} MB")
    try:
        with Image.open(io.BytesIO(data)) as image:
            kind = image.format or ""
            width, height = image.size
    except (UnidentifiedImageError, OSError):
        raise UsageError(f"photo: {path} is not an image") from None
    if kind not in MEDIA_TYPES:
        raise UsageError(f"photo: {path} is {kind}; use JPEG, PNG or WebP")
    if not object_name.strip():
        raise UsageError("object: required")
    stored = store.put_bytes(data)
    details: dict[str, object] = {"object": object_name, "width": width, "height": height}
    if tote_side is not None:
        details["tote_side"] = Side(tote_side).value
    if camera_side is not None:
        details["camera_side"] = Side(camera_side).value
    row = Artifact(
        episode_id=None,
        kind=ArtifactKind.photo,
        camera=camera,
        uri=stored.uri,
        sha256=stored.sha256,
        size_bytes=stored.size_bytes,
        media_type=MEDIA_TYPES[kind],
        details=details,
    )
    session.add(row)
    session.flush()
    return row
