"""Store and forward: the thread that brings the server up to the ledger.

Every ``heartbeat_s`` (at once when nudged) the forwarder says hello, then
drains, in the order of the ledger's episode ids:

1. each episode whose snapshot changed since the server confirmed it:
   ``PUT /episodes/{uid}`` with the next revision;
2. each of a confirmed episode's artifacts the server has not registered:
   ``POST /uploads`` (or ``GET`` the plan of one begun before: resume; one
   the server no longer holds open, 404 or 409, is begun afresh),
   the missing parts, ``POST …/complete``; registering the last one changes
   the snapshot's digest, so the final snapshot follows the artifacts;
3. abandon reports, once each.

The outbox records a confirmation only after the server's 2xx. ``Offline``
stops the pass where it is (nothing later overtakes it) and retries after a
backoff growing from 1 s to 30 s. A refusal (4xx) is recorded on its item,
shown in ``status()``, and the pass moves on; the item is tried again only
when it changes. A refused token (401) stops the forwarder: no call can
succeed until the station host gets a new token and restarts.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import httpx
import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Artifact, Episode
from proctor.core.db.types import utcnow
from proctor.core.domain import EpisodeState
from proctor.core.errors import Conflict, NotFound, ProctorError, UsageError
from proctor.core.station_api_wire import Hello, PartDone, UploadPlan, UploadRequest
from proctor.station.uplink import snapshot
from proctor.station.uplink.client import Offline, StationApiClient, TokenRefused
from proctor.station.uplink.outbox import EpisodeMark, Outbox

log = logging.getLogger(__name__)

# corrections after these go through the server's review log, never the station
FINAL_STATES = ("closed", "interrupted")
# episode states a hello names as live (the runner's own episode, until it ends)
LIVE_STATES = (
    EpisodeState.armed,
    EpisodeState.running,
    EpisodeState.finishing,
    EpisodeState.awaiting_log,
)
LIVE_MAX = 8  # the wire's bound on a hello's live list
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0


class UploadGone(Exception):
    """A part's PUT found the upload no longer open (the store's 404, the
    server's 409): the upload is begun afresh, the artifact is not refused."""


class SendParts(Protocol):
    def __call__(
        self,
        client: Any,
        plan: UploadPlan,
        path: Path,
        *,
        server_headers: dict[str, str],
        progress: Any = None,
    ) -> list[PartDone]: ...


def artifact_key(row: Artifact) -> str:
    """Which artifact of an episode a row is, for the outbox: its bytes, kind
    and camera. Two artifacts can share bytes (the frame tables of two cameras
    at one rate are often identical), and each is registered on its own."""
    return f"{row.sha256}:{row.kind.value}:{row.camera or ''}"


def _default_send_parts() -> SendParts:
    # imported when first needed: the upload module is the server link's own
    from proctor.station.uplink.upload import send_parts

    return send_parts


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3])


class Forwarder:
    def __init__(
        self,
        *,
        client: StationApiClient,
        outbox: Outbox,
        sessions: sessionmaker[ProctorSession],
        store: ArtifactStore,
        hello: Callable[[int], Hello],
        heartbeat_s: float = 10.0,
        send_parts: SendParts | None = None,
    ) -> None:
        self.client = client
        self.outbox = outbox
        self.sessions = sessions
        self.store = store
        self._hello = hello  # builds the hello, given the number of episodes waiting
        self.heartbeat_s = heartbeat_s
        self._send_parts = send_parts
        self.online = False
        self.stopped: str | None = None  # why the forwarder gave up (a refused token)
        self.last_error: str | None = None
        self.uploading: str | None = None  # "<uid>/<sha256 prefix>" while a file is sent
        self._wake = threading.Condition()
        self._nudged = False
        self._closing = False
        # passes begun and the last one finished: drain() waits for a pass that
        # began after it was called (one begun before may have read the ledger
        # before the change being waited for)
        self._passes_begun = 0
        self._passes_done = 0
        self._passes = threading.Condition()
        self._thread: threading.Thread | None = None
        self._pass_lock = threading.Lock()
        # told when what the console shows (online, waiting, last error) changes
        self._watchers: list[Callable[[], None]] = []
        self._shown: tuple[object, ...] | None = None
        # ledger ids of episodes the server holds for good (closed, all artifacts in)
        self._done: set[int] = set()
        # episodes created before this are a predecessor's: never named live in a hello
        self._born = utcnow()

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> Forwarder:
        self._thread = threading.Thread(target=self._loop, name="uplink-forwarder", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def nudge(self) -> None:
        """Say hello and drain now (an episode changed, a report was queued)."""
        with self._wake:
            self._nudged = True
            self._wake.notify_all()

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the forwarder's thread) whenever what
        ``status()`` shows the operator changes."""
        self._watchers.append(callback)

    def _announce(self) -> None:
        status = self.status()
        shown = (status["online"], status["waiting"], status["last_error"])
        if shown == self._shown:
            return
        self._shown = shown
        for callback in self._watchers:
            try:
                callback()
            except Exception:
                log.error("an uplink watcher failed", exc_info=True)

    def first_pass(self, timeout: float) -> None:
        """Wait until the first pass (its hello) has ended, however it ended:
        until then ``online`` says nothing about the server yet."""
        with self._passes:
            self._passes.wait_for(
                lambda: self._passes_done >= 1 or self.stopped is not None, timeout
            )

    def mark_offline(self, why: str) -> None:
        """Someone else's call found the server gone (e.g. a claim)."""
        self.online = False
        self.last_error = why
        self.nudge()

    # -- the loop --------------------------------------------------------------------
    def _loop(self) -> None:
        backoff = BACKOFF_FIRST_S
        while not self._closing:
            wait = self.heartbeat_s
            try:
                self.run_once()
                backoff = BACKOFF_FIRST_S
            except Offline as exc:
                self._went_offline(str(exc))
                wait, backoff = backoff, min(backoff * 2, BACKOFF_MAX_S)
            except TokenRefused as exc:
                self.stopped = self.last_error = str(exc)
                self.online = False
                log.error("uplink stopped: %s", exc)
                self._announce()
                with self._passes:
                    self._passes.notify_all()
                return
            except Exception as exc:  # a bug must not end store-and-forward
                log.error("uplink pass failed", exc_info=True)
                self.last_error = f"{exc.__class__.__name__}: {exc}"
            self._announce()
            self._sleep(wait)

    def _went_offline(self, why: str) -> None:
        if self.online:
            log.warning("server offline: %s", why)
        self.online = False
        self.last_error = why

    def _sleep(self, seconds: float) -> None:
        with self._wake:
            if not self._nudged and not self._closing:
                self._wake.wait_for(lambda: self._nudged or self._closing, seconds)
            self._nudged = False

    def run_once(self) -> None:
        """One hello and one drain (the thread's step; tests may call it)."""
        with self._pass_lock:
            with self._passes:
                self._passes_begun += 1
                number = self._passes_begun
            try:
                self._stamp()  # offline too: the status counts what changed
                reply = self.client.hello(self._with_live(self._hello(self.outbox.unconfirmed())))
                self.heartbeat_s = min(self.heartbeat_s, reply.heartbeat_s)
                self.online = True
                self._drain()
            finally:
                with self._passes:
                    self._passes_done = number
                    self._passes.notify_all()

    def _with_live(self, hello: Hello) -> Hello:
        """The hello naming the episodes this daemon is running now: those in a
        live state created since the forwarder started. The server keeps them
        live, so a second claim on this station's token cannot settle their run
        mid-episode. One a killed predecessor left behind is never named: the
        daemon's recovery syncs it as interrupted, and one left awaiting a log
        nobody can write any more goes quiet and is presumed dead after the lease."""
        with session_scope(self.sessions) as s:
            uids = s.scalars(
                sa.select(Episode.uid)
                .where(Episode.state.in_(LIVE_STATES), Episode.created_at >= self._born)
                .order_by(Episode.id.desc())
                .limit(LIVE_MAX)
            ).all()
        return hello.model_copy(update={"live": list(uids)})

    # -- draining --------------------------------------------------------------------
    def _episodes(self) -> list[int]:
        """The ledger's episodes in order, but those the server holds for good."""
        with session_scope(self.sessions) as s:
            ids = s.scalars(sa.select(Episode.id).order_by(Episode.id))
            return [i for i in ids if i not in self._done]

    def _stamp(self) -> None:
        for episode_id in self._episodes():
            self._read(episode_id)

    def _read(self, episode_id: int) -> tuple[dict[str, Any], EpisodeMark]:
        """The episode's content and its revision (stamped anew if it changed)."""
        with session_scope(self.sessions) as s:
            episode = s.get(Episode, episode_id)
            assert episode is not None
            fields = snapshot.content(s, episode)
        uid = str(fields["uid"])
        return fields, self.outbox.stamp(uid, snapshot.digest(fields, self.outbox.registered(uid)))

    def _drain(self) -> None:
        for episode_id in self._episodes():
            self._forward_episode(episode_id)
        for report in self.outbox.pending_abandons():
            try:
                self.client.abandon(report.run_code, report.reason, key=report.key)
            except (Offline, TokenRefused):
                raise
            except ProctorError as exc:
                self._refused(f"abandon {report.run_code}", exc)
                self.outbox.refuse_abandon(report.key, str(exc))
                continue
            self.outbox.abandon_sent(report.key)
        refusals = self.outbox.refusals()
        self.last_error = refusals[-1] if refusals else None

    def _forward_episode(self, episode_id: int) -> None:
        uid = self._send_snapshot(episode_id)
        if uid is None:
            return
        for row in self._artifacts(episode_id, uid):
            self._upload(uid, row)
        self._send_snapshot(episode_id)  # the final one, once the artifacts are in
        fields, mark = self._read(episode_id)
        if (
            fields["state"] in FINAL_STATES
            and mark.confirmed_rev == mark.rev
            and not self._artifacts(episode_id, uid)
        ):
            self._done.add(episode_id)  # a closed episode never changes on the station

    def _send_snapshot(self, episode_id: int) -> str | None:
        """Send the episode if it changed; its uid once the server holds some revision."""
        fields, mark = self._read(episode_id)
        uid = mark.uid
        if mark.confirmed_rev < mark.rev and not mark.refused:
            try:
                wire = snapshot.snapshot(
                    fields, rev=mark.rev, clock_offset_s=self.client.clock_offset_s
                )
                key = f"episode:{uid}:{mark.rev}:{mark.digest[:16]}"
                reply = self.client.put_episode(wire, key=key)
            except (Offline, TokenRefused):
                raise
            except (ProctorError, ValidationError) as exc:
                # refused by the server, or not even sendable (the wire's own checks)
                why = str(exc) if isinstance(exc, ProctorError) else _problems(exc)
                self._refused(f"episode {uid} rev {mark.rev}", why)
                self.outbox.refuse(uid, mark.rev, why)
                return None
            if reply.rev > mark.rev:
                self.outbox.overtake(uid, reply.rev)  # sent again next pass, numbered past it
            else:
                self.outbox.confirm(uid, mark.rev, settled=reply.settled)
        current = self.outbox.episode(uid)
        return uid if current is not None and current.confirmed_rev > 0 else None

    def _artifacts(self, episode_id: int, uid: str) -> list[Artifact]:
        done = self.outbox.registered(uid)
        with session_scope(self.sessions) as s:
            rows = s.scalars(
                sa.select(Artifact).where(Artifact.episode_id == episode_id).order_by(Artifact.id)
            ).all()
            s.expunge_all()
        keyed = [(r, artifact_key(r)) for r in rows]
        refused = self.outbox.upload_error
        return [r for r, key in keyed if key not in done and refused(uid, key) is None]

    def _upload(self, uid: str, row: Artifact) -> None:
        self.uploading = f"{uid}/{row.sha256[:12]}"
        try:
            plan = self._plan(uid, row)
            if not plan.complete:
                parts = self._send(plan, row.sha256)
                reply = self.client.complete_upload(
                    plan.upload_id, parts, key=f"complete:{uid}:{row.sha256}"
                )
                if not reply.registered:
                    return  # the server registers it later; asked again next pass
            self.outbox.register(uid, artifact_key(row))
        except (Offline, TokenRefused):
            raise
        except (NotFound, Conflict, UploadGone) as exc:
            # no longer open at the server or the store: the server's sweep
            # aborted it (left open past scheduler.upload_abandon_s) while it was
            # being sent, or another begin of it holds it now. Refused for good,
            # the recording would never reach the server: begun afresh next pass
            log.info("upload of %s for %s begins again: %s", row.sha256[:12], uid, exc)
            self.outbox.forget_upload(uid, artifact_key(row))
        except ProctorError as exc:
            self._refused(f"artifact {row.sha256[:12]} of {uid}", exc)
            self.outbox.refuse_upload(uid, artifact_key(row), str(exc))
        finally:
            self.uploading = None

    def _send(self, plan: UploadPlan, sha256: str) -> list[PartDone]:
        """The plan's missing parts; a store or server that fails or cannot be
        reached is ``Offline`` (the upload resumes later), a refusal is not."""
        try:
            with self._local_file(sha256) as path:
                return self._parts_sender()(
                    self.client.http, plan, path, server_headers=self.client.server_headers
                )
        except httpx.HTTPStatusError as exc:
            status = exc.response.status_code
            if status >= 500:
                raise Offline(f"a part upload failed (HTTP {status})") from None
            if status == 401:
                raise TokenRefused("token refused: a part upload answered 401") from None
            if status in (404, 409):
                # the store has no such multipart upload (S3: NoSuchUpload), or the
                # server's part route says it is no longer open
                raise UploadGone(f"a part upload found the upload gone (HTTP {status})") from None
            raise UsageError(f"a part upload was refused (HTTP {status})") from None
        except httpx.HTTPError as exc:
            raise Offline(f"a part upload did not get through ({exc.__class__.__name__})") from None

    def _plan(self, uid: str, row: Artifact) -> UploadPlan:
        known = self.outbox.upload_id(uid, artifact_key(row))
        if known is not None:
            try:
                return self.client.upload_plan(known)
            except (NotFound, Conflict):
                # gone, or no longer open (the server's sweep aborts an upload
                # left open past scheduler.upload_abandon_s): the server says
                # to begin again, and a new begin starts afresh
                self.outbox.forget_upload(uid, artifact_key(row))
        plan = self.client.begin_upload(
            UploadRequest(
                episode_uid=uid,
                sha256=row.sha256,
                size_bytes=row.size_bytes,
                kind=row.kind.value,
                camera=row.camera,
                media_type=row.media_type,
                frame_count=row.frame_count,
                details=dict(row.details or {}),
            )
        )
        self.outbox.begin_upload(uid, artifact_key(row), plan.upload_id)
        return plan

    @contextmanager
    def _local_file(self, sha256: str) -> Iterator[Path]:
        path = self.store.local_path(sha256)
        if path is not None:
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="proctor-upload-") as tmp:
            copy = Path(tmp) / sha256
            with copy.open("wb") as f, self.store.open_verified(sha256) as chunks:
                for chunk in chunks:
                    f.write(chunk)
            yield copy

    def _parts_sender(self) -> SendParts:
        if self._send_parts is None:
            self._send_parts = _default_send_parts()
        return self._send_parts

    def _refused(self, what: str, exc: ProctorError | str) -> None:
        self.last_error = f"{what}: {exc}"
        log.warning("the server refused %s: %s", what, exc)

    # -- what the console sees ----------------------------------------------------------
    def waiting(self) -> int:
        """Episodes the server does not hold in full: a snapshot not confirmed
        (or not yet stamped), or an artifact not registered."""
        with session_scope(self.sessions) as s:
            uids = list(s.scalars(sa.select(Episode.uid)))
            pending_files = {
                uid
                for uid, row in s.execute(
                    sa.select(Episode.uid, Artifact).join(
                        Artifact, Artifact.episode_id == Episode.id
                    )
                )
                if artifact_key(row) not in self.outbox.registered(uid)
                and self.outbox.upload_error(uid, artifact_key(row)) is None
            }
        count = 0
        for uid in uids:
            mark = self.outbox.episode(uid)
            behind = mark is None or (mark.confirmed_rev < mark.rev and not mark.refused)
            count += behind or uid in pending_files
        return count

    def unsettled_runs(self) -> list[str]:
        """Run codes of episodes that ended here (closed or interrupted) whose
        ending the server has not settled yet, and of runs given up whose
        abandonment it has not heard, refused ones aside (they never
        will be; the console shows them). Until it has, the server still holds
        the run as this station's claim and would hand it back on a claim."""
        with session_scope(self.sessions) as s:
            ended = s.execute(
                sa.select(Episode.uid, Episode.run_code).where(
                    Episode.state.in_([EpisodeState(state) for state in FINAL_STATES])
                )
            ).all()
        # a run given up before it started is the same: the server still holds it
        pending = [a.run_code for a in self.outbox.pending_abandons()]
        for uid, run_code in ended:
            mark = self.outbox.episode(uid)
            if mark is not None and mark.refused:
                continue
            if not self.outbox.settled(uid):
                pending.append(str(run_code))
        return pending

    def status(self) -> dict[str, Any]:
        return {
            "online": self.online,
            "waiting": self.waiting(),
            "uploading": self.uploading,
            "last_error": self.stopped or self.last_error,
            "refused": len(self.outbox.refusals()),
            "clock_offset_s": self.client.clock_offset_s,
        }

    def drain(self, timeout: float) -> bool:
        """Block until a pass begun after this call finds nothing waiting (True),
        or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.stopped is None:
            with self._passes:
                target = self._passes_begun + 1
            self.nudge()
            with self._passes:
                self._passes.wait_for(
                    partial(self._passed, target), max(0.0, deadline - time.monotonic())
                )
                finished = self._passes_done >= target
            if finished and self.online and self._nothing_waits():
                return True
            time.sleep(0.05)
        return False

    def _passed(self, target: int) -> bool:
        return self._passes_done >= target or self.stopped is not None

    def _nothing_waits(self) -> bool:
        return self.waiting() == 0 and not self.outbox.pending_abandons()
