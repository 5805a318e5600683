"""The station API's background sweep, owned by the web app.

Two things the station API leaves behind when stations stop calling:

* a lapsed claim. The lease (``station_api.release_lapsed_claims``) is
  checked when a station says hello or claims; if no station calls, a
  revoked station's run would stay claimed.
* an abandoned upload. An upload begun and never completed holds its parts
  in the store (staged files, or S3's multipart upload, billed). One still
  open ``upload_abandon_s`` after it was begun is marked ``aborted`` (audit
  log: ``scheduler:uploads``) and aborted in the store once that is
  committed; a station that comes back is told the upload is aborted and
  begins it afresh.

``StationSweep`` runs both every ``scheduler.station_sweep_s`` on a thread
of its own (0 turns it off): one pass at a time, a failed pass logged and
the next one run as usual, and the thread stopped when the app shuts down.
Each web process runs its own; on PostgreSQL an upload's row is locked by
the pass that aborts it (one being completed is skipped), so no upload is
aborted twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.artifacts.multipart import MultipartUpload, multipart_for
from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import StationUpload
from proctor.core.domain import StationUploadState
from proctor.core.settings import SchedulerSettings
from proctor.scheduler.station_api import release_lapsed_claims
from proctor.scheduler.station_uploads import multipart_of

log = logging.getLogger(__name__)

# who aborts an abandoned upload, in the audit log
UPLOADS_ACTOR = Actor(label="scheduler:uploads")


def abandon_uploads(session: Session, now: datetime, age_s: float) -> list[MultipartUpload]:
    """Mark aborted the uploads still open ``age_s`` after they were begun,
    audit-logged; their store uploads, for the caller to abort once this is
    committed (aborted first, a failed commit would leave an open row with
    its parts gone). A row being completed now is locked and skipped."""
    rows = session.scalars(
        sa.select(StationUpload)
        .where(
            StationUpload.state == StationUploadState.open,
            StationUpload.created_at < now - timedelta(seconds=age_s),
        )
        .order_by(StationUpload.created_at)
        .with_for_update(skip_locked=True)
    ).all()
    for row in rows:
        row.state, row.completed_at = StationUploadState.aborted, now
        record_audit(
            session,
            actor=UPLOADS_ACTOR,
            action="station_upload.abandoned",
            target_type="station_upload",
            target_id=row.id,
            details={
                "station_id": row.station_id,
                "episode_id": row.episode_id,
                "sha256": row.sha256,
                "size_bytes": row.size_bytes,
                "begun_at": row.created_at.isoformat(),
            },
            at=now,
        )
    session.flush()
    return [multipart_of(row) for row in rows]


def abort_in_store(store: ArtifactStore, uploads: list[MultipartUpload]) -> None:
    """Abort each upload in the store; one that fails is logged (its row is
    aborted already, so the store's own expiry rule is what is left for it)."""
    if not uploads:
        return
    backend = multipart_for(store)
    for upload in uploads:
        try:
            backend.abort(upload)
        except Exception:
            log.warning(
                "station sweep: cannot abort upload %s in the store", upload.key, exc_info=True
            )


@dataclass(frozen=True)
class SweepPass:
    released: list[str]  # run codes handed back to the scheduler
    aborted: list[str]  # upload ids


class StationSweep:
    """The sweep's thread: ``start`` after the app's start-up, ``close`` at shutdown."""

    def __init__(
        self,
        session_factory: sessionmaker[ProctorSession],
        store: ArtifactStore,
        settings: SchedulerSettings,
        clock: Callable[[], datetime],
    ) -> None:
        self.session_factory = session_factory
        self.store = store
        self.settings = settings
        self.clock = clock
        self.passes = 0
        self._running = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> SweepPass | None:
        """One pass now; None if one is running already (nothing is done twice at once)."""
        if not self._running.acquire(blocking=False):
            return None
        try:
            now = self.clock()
            with session_scope(self.session_factory) as s:
                released = release_lapsed_claims(s, now, self.settings.claim_lease_s)
            with session_scope(self.session_factory) as s:
                uploads = abandon_uploads(s, now, self.settings.upload_abandon_s)
            abort_in_store(self.store, uploads)
            self.passes += 1
            return SweepPass(released=released, aborted=[u.key for u in uploads])
        finally:
            self._running.release()

    def start(self) -> None:
        if self.settings.station_sweep_s == 0 or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="station-sweep", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        period = self.settings.station_sweep_s
        while not self._stop.wait(period):
            try:
                done = self.run_once()
            except Exception:
                # the database or the store is down for a moment: the next pass retries
                log.exception("station sweep: a pass failed; the next in %s s", period)
                continue
            if done is not None and (done.released or done.aborted):
                log.info(
                    "station sweep: released %d claim(s), aborted %d upload(s)",
                    len(done.released),
                    len(done.aborted),
                )

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the thread, waiting for a pass under way to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
