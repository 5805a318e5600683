"""Resumable checkpoint uploads: the protocol's service functions.

1. ``POST /api/uploads`` declares the file (name, exact size, optionally its
   sha256): an ``UploadSession`` row and an empty staged file.
2. ``PUT /api/uploads/{id}?offset=N`` appends the request body at ``N``,
   which must be the upload's current offset (a ``409`` says where to
   resume). The body is streamed to disk, never held in memory; an
   interrupted request keeps what arrived (fsynced, offset recorded), so the
   client asks ``GET /api/uploads/{id}`` and resumes from its ``offset``.
3. ``POST /api/uploads/{id}/complete`` (every byte in; sha256 declared now
   or before): the file is hashed and compared, inspected as an archive,
   its ``policy.toml`` validated, the framework's own checks run on the
   members it names (``Framework.check_members``: e.g. a LeRobot config's
   features the station cannot provide), then stored content-addressed with an
   ``Artifact`` of kind ``checkpoint`` and a ``Submission``. Any rejection
   deletes the upload — row and staged bytes — so nothing is left behind.

Nothing uploaded is ever unpacked to disk, imported or run here.
"""

from __future__ import annotations

import logging
import posixpath
import secrets
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Submission, UploadSession, User
from proctor.core.domain import ArtifactKind, ConformanceStatus, Role, SubmissionKind
from proctor.core.errors import Conflict, FieldError, NotFound, UsageError
from proctor.core.settings import Settings
from proctor.runner.archive import (
    ArchiveLimits,
    ArchiveRejected,
    ArchiveSummary,
    human_bytes,
    inspect_archive,
    read_member,
)
from proctor.runner.frameworks import framework_for
from proctor.runner.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    ManifestProblem,
    check_paths,
    parse_manifest,
)
from proctor.web.auth.access import check_owner_access
from proctor.web.auth.identity import Principal
from proctor.web.submissions import queue, rates, service, staging

log = logging.getLogger(__name__)

# a staged file without a row (a crash between the two) is removed after this
ORPHAN_AFTER_S = 3600.0
_MEDIA = {
    "tar": "application/x-tar",
    "tar.gz": "application/gzip",
    "tar.bz2": "application/x-bzip2",
    "tar.xz": "application/x-xz",
    "zip": "application/zip",
}
_CLEANUP_KEY = "proctor.upload_cleanup"


class UploadTooLarge(UsageError):
    """The declared or sent size is over the limit (413)."""


class NoRoomForUpload(UsageError):
    """The disk cannot hold the declared size next to the open uploads (507)."""


class OffsetMismatch(Conflict):
    def __init__(self, offset: int) -> None:
        super().__init__(f"offset: the upload is at byte {offset}; send the next bytes from there")
        self.offset = offset


class UploadRejected(UsageError):
    """The completed upload was refused; the upload is gone. Each problem's
    ``loc`` names the field (``["upload", "sha256"]``, ``["policy.toml",
    "runner", "framework"]``)."""

    def __init__(self, problems: list[tuple[list[str], str]]) -> None:
        super().__init__("; ".join(msg for _, msg in problems))
        self.problems = problems

    def detail(self) -> list[dict[str, Any]]:
        return [{"loc": loc, "msg": msg, "type": "upload_rejected"} for loc, msg in self.problems]


def archive_limits(settings: Settings) -> ArchiveLimits:
    s = settings.submissions
    return ArchiveLimits(
        max_unpacked_bytes=s.max_unpacked_bytes,
        max_files=s.max_files,
        max_ratio=s.max_compression_ratio,
    )


def _expiry(settings: Settings, now: datetime) -> datetime:
    return now + timedelta(hours=settings.submissions.upload_expiry_hours)


# -- sessions -----------------------------------------------------------------------
def expire_uploads(session: ProctorSession, *, settings: Settings, now: datetime) -> int:
    """Delete abandoned uploads (rows past their expiry, and staged files with
    no row); returns how many."""
    folder = staging.upload_dir(settings)
    stale = list(session.scalars(sa.select(UploadSession).where(UploadSession.expires_at < now)))
    for up in stale:
        session.delete(up)
        staging.remove(folder, up.id)
    session.flush()
    known = set(session.scalars(sa.select(UploadSession.id)))
    orphans = staging.orphans(folder, known, ORPHAN_AFTER_S)
    for path in orphans:
        path.unlink(missing_ok=True)
    return len(stale) + len(orphans)


def create_upload(
    session: ProctorSession,
    *,
    settings: Settings,
    owner: User,
    filename: str,
    size_bytes: int,
    sha256: str | None,
    now: datetime,
    show_room: bool = False,
) -> UploadSession:
    """``show_room``: the refusal for want of disk says how much room is left
    (for an admin; a submitter learns only that this size does not fit now)."""
    limit = settings.submissions.max_upload_bytes
    if size_bytes > limit:
        raise UploadTooLarge(
            f"size_bytes: the checkpoint is {human_bytes(size_bytes)}; this server accepts "
            f"at most {human_bytes(limit)}"
        )
    # count and insert under the owner's lock: concurrent creates by one
    # submitter queue here, so the cap holds (a bare count-then-insert let 9 of
    # 20 simultaneous creates through a cap of 4)
    rates.lock_owner(session, owner.id)
    rates.enforce(session, "upload", settings=settings, user=owner, now=now)
    expire_uploads(session, settings=settings, now=now)
    open_count = session.scalar(
        sa.select(sa.func.count()).where(UploadSession.owner_id == owner.id)
    )
    if (open_count or 0) >= settings.submissions.max_open_uploads:
        raise Conflict(
            f"you have {open_count} unfinished uploads; resume or cancel one before "
            "starting another"
        )
    _check_room(session, settings=settings, size_bytes=size_bytes, show_room=show_room)
    upload = UploadSession(
        id=secrets.token_hex(16),
        owner_id=owner.id,
        filename=filename,
        size_bytes=size_bytes,
        sha256=sha256,
        received_bytes=0,
        created_at=now,
        updated_at=now,
        expires_at=_expiry(settings, now),
    )
    staging.create(staging.upload_dir(settings), upload.id)
    session.add(upload)
    session.flush()
    return upload


def _check_room(
    session: ProctorSession, *, settings: Settings, size_bytes: int, show_room: bool
) -> None:
    """Refuse an upload the staging disk cannot hold: its size plus the bytes
    the open uploads have yet to receive must leave the margin free. (Across
    submitters this is checked without a shared lock: creates racing each
    other can each pass, by at most one upload size each.)"""
    folder = staging.upload_dir(settings)
    pending = session.scalar(
        sa.select(
            sa.func.coalesce(
                sa.func.sum(UploadSession.size_bytes - UploadSession.received_bytes), 0
            )
        )
    )
    margin = settings.submissions.upload_disk_margin_bytes
    room = staging.free_bytes(folder) - margin - int(pending or 0)
    if size_bytes <= room:
        return
    left = human_bytes(max(0, room))
    # the free room is the host's state, not a submitter's business: the log
    # and an admin get the figure, a submitter only that this size does not fit
    log.warning("upload of %s refused: room for %s more of uploads", size_bytes, left)
    if show_room:
        raise NoRoomForUpload(
            f"size_bytes: the server has room for {left} more of uploads "
            f"now, not {human_bytes(size_bytes)}; try again later"
        )
    raise NoRoomForUpload(
        f"size_bytes: the server has no room for {human_bytes(size_bytes)} more of uploads "
        "now; try again later"
    )


def get_upload(
    session: ProctorSession, principal: Principal, upload_id: str, *, write: bool = False
) -> UploadSession:
    """The upload, for its owner (admins may look, not write); 404 otherwise."""
    upload = session.get(UploadSession, upload_id) if len(upload_id) <= 32 else None
    if upload is None:
        raise NotFound("upload not found")
    check_owner_access(
        principal, upload.owner_id, what="upload", privileged=() if write else (Role.admin,)
    )
    return upload


def list_uploads(session: ProctorSession, principal: Principal) -> list[UploadSession]:
    return list(
        session.scalars(
            sa.select(UploadSession)
            .where(UploadSession.owner_id == principal.id)
            .order_by(UploadSession.created_at.desc())
        )
    )


def discard(session: ProctorSession, *, settings: Settings, upload: UploadSession) -> None:
    """Delete the upload: its staged bytes now, its row with the transaction."""
    staging.remove(staging.upload_dir(settings), upload.id)
    session.delete(upload)
    session.flush()


def record_progress(
    session: ProctorSession,
    *,
    settings: Settings,
    upload: UploadSession,
    received: int,
    now: datetime,
) -> None:
    upload.received_bytes = received
    upload.updated_at = now
    upload.expires_at = _expiry(settings, now)
    session.flush()


def record_progress_now(
    session_factory: sessionmaker[ProctorSession],
    *,
    settings: Settings,
    upload_id: str,
    received: int,
    now: datetime,
    rewind: bool = False,
) -> None:
    """Record the offset in a transaction of its own, committed at once (the
    request's own commits only when it ends): the bytes up to ``received``
    must be fsynced first. Only forward, unless ``rewind`` (the request's
    bytes were dropped after some were recorded)."""
    stmt = sa.update(UploadSession).where(UploadSession.id == upload_id)
    if not rewind:
        stmt = stmt.where(UploadSession.received_bytes < received)
    with session_factory.begin() as s:
        s.execute(
            stmt.values(received_bytes=received, updated_at=now, expires_at=_expiry(settings, now)),
            execution_options={"synchronize_session": False},
        )


def staged_offset(settings: Settings, upload: UploadSession) -> int:
    """The offset a client resumes from (the durable one); 410-style
    NotFound if the staged file vanished."""
    size = staging.size(staging.upload_dir(settings), upload.id)
    if size is None:
        raise StagedFileLost()
    return min(upload.received_bytes, size)


class StagedFileLost(UsageError):
    """The staged bytes are gone (cleaned up, or the disk lost them): start again."""

    def __init__(self) -> None:
        super().__init__(
            "the bytes received for this upload are gone from the server; start the upload again"
        )


# -- completion -----------------------------------------------------------------------
def _reject(
    session: ProctorSession,
    *,
    settings: Settings,
    upload: UploadSession,
    actor: User,
    now: datetime,
    problems: list[tuple[list[str], str]],
) -> UploadRejected:
    record_audit(
        session,
        actor=Actor.of(actor),
        action="upload.rejected",
        target_type="upload",
        target_id=upload.id,
        details={"filename": upload.filename, "problems": [m for _, m in problems][:10]},
        at=now,
    )
    discard(session, settings=settings, upload=upload)
    return UploadRejected(problems)


def _remove_after_commit(session: ProctorSession, path: Path) -> None:
    pending: list[Path] = session.info.setdefault(_CLEANUP_KEY, [])
    pending.append(path)
    if not event.contains(session, "after_commit", _after_commit):
        event.listen(session, "after_commit", _after_commit)
        event.listen(session, "after_soft_rollback", _after_rollback)


def _after_commit(session: Session) -> None:
    for path in session.info.pop(_CLEANUP_KEY, []):
        path.unlink(missing_ok=True)


def _after_rollback(session: Session, previous_transaction: Any) -> None:
    # after_soft_rollback passes the transaction that rolled back; a savepoint's
    # rollback leaves the outer transaction (and what it registered) alive
    if getattr(previous_transaction, "nested", False):
        return
    session.info.pop(_CLEANUP_KEY, None)


def _manifest_loc(field: str) -> list[str]:
    return [MANIFEST_NAME] if field == MANIFEST_NAME else [MANIFEST_NAME, *field.split(".")]


def _framework_problems(
    manifest: Manifest, summary: ArchiveSummary, path: Path
) -> list[ManifestProblem]:
    """The framework's checks of the members it names, read from the archive
    one by one (bounded, never unpacked)."""
    root = summary.manifest_root

    def read(rel: str) -> bytes | None:
        return read_member(path, posixpath.normpath(posixpath.join(root, rel)))

    return framework_for(manifest).check_members(manifest, read)


def complete_upload(
    session: ProctorSession,
    *,
    settings: Settings,
    store: ArtifactStore,
    upload: UploadSession,
    owner: User,
    sha256: str | None,
    now: datetime,
) -> Submission:
    """Turn a fully received upload into a checkpoint submission, or raise
    UploadRejected after deleting it. Conflict/FieldError leave it in place
    (the client can fix the request and complete again)."""
    if sha256 is not None and upload.sha256 is not None and sha256 != upload.sha256:
        raise FieldError(
            "sha256", f"differs from the sha256 declared when the upload began ({upload.sha256})"
        )
    declared = sha256 or upload.sha256
    if declared is None:
        raise FieldError("sha256", "declare the archive's sha256 to complete the upload")
    folder = staging.upload_dir(settings)
    offset = staged_offset(settings, upload)
    if offset != upload.size_bytes:
        raise OffsetMismatch(offset)

    def reject(loc: list[str], message: str) -> UploadRejected:
        return _reject(
            session,
            settings=settings,
            upload=upload,
            actor=owner,
            now=now,
            problems=[(loc, message)],
        )

    with staging.locked(folder, upload.id, "rb") as f:
        actual = staging.sha256_of(f)
        if actual != declared:
            raise reject(
                ["upload", "sha256"],
                f"sha256: the uploaded bytes hash to {actual}, not the declared {declared}; "
                "the upload was discarded (was the file changed or corrupted in transit?)",
            )
        path = staging.staged_path(folder, upload.id)
        try:
            summary = inspect_archive(path, archive_limits(settings))
        except ArchiveRejected as exc:
            raise reject(["upload", "archive"], f"archive: {exc}") from None
        try:
            manifest = parse_manifest(summary.manifest)
        except ManifestError as exc:
            raise _reject(
                session,
                settings=settings,
                upload=upload,
                actor=owner,
                now=now,
                problems=[(_manifest_loc(p.field), str(p)) for p in exc.problems],
            ) from None
        missing = check_paths(manifest, summary.manifest_root, summary.members)
        if missing:
            raise _reject(
                session,
                settings=settings,
                upload=upload,
                actor=owner,
                now=now,
                problems=[(_manifest_loc(p.field), str(p)) for p in missing],
            )
        try:
            refused = _framework_problems(manifest, summary, path)
        except ArchiveRejected as exc:
            raise reject(["upload", "archive"], f"archive: {exc}") from None
        if refused:
            raise _reject(
                session,
                settings=settings,
                upload=upload,
                actor=owner,
                now=now,
                problems=[(_manifest_loc(p.field), str(p)) for p in refused],
            )
        try:
            policy = service.policy_for(
                session,
                owner=owner,
                name=manifest.name,
                description=manifest.description,
                field="name",
            )
        except (Conflict, FieldError) as exc:
            # the name is in the archive: fixing it means a new upload
            raise reject([MANIFEST_NAME, "name"], f"{MANIFEST_NAME}: {exc}") from None
        same = session.scalars(
            sa.select(Submission.id).where(
                Submission.policy_id == policy.id, Submission.checkpoint_sha256 == declared
            )
        ).first()
        if same is not None:
            raise reject(
                ["upload", "sha256"],
                f"this checkpoint is already submission {same} of '{policy.name}'",
            )
        stored = store.put_file(path, expected_sha256=declared)
    artifact = Artifact(
        kind=ArtifactKind.checkpoint,
        uri=stored.uri,
        sha256=stored.sha256,
        size_bytes=stored.size_bytes,
        media_type=_MEDIA.get(summary.format, "application/octet-stream"),
        details={"filename": upload.filename, **summary.public()},
        created_at=now,
    )
    session.add(artifact)
    session.flush()
    sub = Submission(
        policy_id=policy.id,
        kind=SubmissionKind.checkpoint,
        checkpoint_artifact_id=artifact.id,
        checkpoint_sha256=stored.sha256,
        manifest=manifest.model_dump(mode="json"),
        conformance_status=ConformanceStatus.pending,
        conformance_report=service.checkpoint_report(),
        submitted_by_id=owner.id,
        created_at=now,
    )
    session.add(sub)
    session.flush()
    record_audit(
        session,
        actor=Actor.of(owner),
        action="submission.checkpoint",
        target_type="submission",
        target_id=sub.id,
        details={
            "policy": policy.id,
            "sha256": stored.sha256,
            "size_bytes": stored.size_bytes,
            "framework": manifest.runner.framework,
        },
        at=now,
    )
    session.delete(upload)
    session.flush()
    _remove_after_commit(session, staging.staged_path(folder, upload.id))
    # checked like an endpoint: the worker asks a runner host to serve it first
    run = queue.enqueue(session, submission=sub, requested_by_id=owner.id, now=now)
    queue.dispatch_after_commit(session, settings=settings, run_id=run.id)
    return sub
