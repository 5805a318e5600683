"""The blinded policy gateway: ``ws://<server>/policy/<handle>``.

The station knows only an opaque handle. The server resolves it (a claimed
run of a running campaign → the submission's endpoint URL, dialect and
decrypted API key; for an uploaded checkpoint, the URL and dialect of its
``ready`` runner server, which the platform's runner host wrote and which is
therefore exempt from the private-address refusal that applies to
submitters' endpoints), opens the upstream connection itself, and relays
WebSocket messages both ways: binary frames byte for byte, text frames as
text, the upstream's metadata message (sent on connect) first. The station
never sees the endpoint, the policy's name or its owner.

What the station sees when something is wrong (see ``proctor/scheduler/README.md``):

* a handle that is malformed, unknown, not claimed (pending, finished,
  skipped) or of a campaign that is not running, a connection without a live
  token of the station holding the claim (none, unknown, revoked, expired, or
  another station's), or a second connection while the handle already has one
  open: the handshake is refused with HTTP 403, identically in every case;
* an uploaded checkpoint's runner server is not ready (building, starting,
  failed, stopped), the policy server cannot be reached, or its host now resolves to an address
  the deployment does not connect to (``proctor.core.netguard``; redirects are not
  followed): accepted, then closed with **1013** (try again later) — a
  pre-flight failure, the run is skipped;
* the policy server drops the connection without a close frame: **1014**
  (bad gateway) — a ``system`` failure;
* the policy server closes with its own code: passed through, but the reason
  text is replaced (it may name the model).

A handle is bound to the station that claimed its run: the station proves
which station it is with its own token (``Authorization: Bearer pst_…`` on
the handshake, sent by ``proctor/scheduler/campaign_work_source.py`` from the station
host's ``PROCTOR_STATION_TOKEN``; issued, rotated and revoked by
``proctor.core.station_credentials``), and a leaked handle is useless without
that station's live token. Only where the settings say so explicitly
(``scheduler.trust_station_header``, refused in production) is a connection
without a token accepted on the station's id alone (``X-Proctor-Station``),
which is a claim, not a proof. The handle is kept out of the server's logs
(``HandleRedaction``). A token revoked or expired while a relay is open does
not cut it: the next connection is refused.

Mount ``gateway_router(GatewayConfig(...))`` on the web app (no prefix).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from fastapi import APIRouter, WebSocket
from pydantic import SecretStr
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from proctor.core import netguard, station_credentials
from proctor.core.db.models import Assignment, Campaign, RunnerServer, Submission
from proctor.core.db.types import utcnow
from proctor.core.domain import AssignmentStatus, CampaignStatus, EndpointDialect, SubmissionKind
from proctor.core.errors import ProctorError
from proctor.policywire.handshake import auth_headers
from proctor.scheduler import runners
from proctor.scheduler.codes import is_endpoint_handle
from proctor.scheduler.endpoint_keys import decrypt_api_key

log = logging.getLogger(__name__)

GATEWAY_PATH = "/policy/{handle}"
# the station's id, as a station without a token sends it; trusted only where
# GatewayConfig.trust_station_header says so (a development set-up)
STATION_HEADER = "X-Proctor-Station"

# close codes the station classifies (RFC 6455 §7.4, IANA registry)
CLOSE_UPSTREAM_UNAVAILABLE = 1013  # "try again later": pre-flight failure, skip the run
CLOSE_UPSTREAM_LOST = 1014  # "bad gateway": the policy vanished mid-episode, a system failure
CLOSE_POLICY_VIOLATION = 1008  # sent before accept: the ASGI server answers HTTP 403
_REASONS = {
    CLOSE_UPSTREAM_UNAVAILABLE: "policy unavailable",
    CLOSE_UPSTREAM_LOST: "policy connection lost",
}
# codes that only describe a missing close frame and may never be sent on the wire
_UNSENDABLE = {1004, 1005, 1006, 1015}


def gateway_url(base: str, handle: str) -> str:
    """The URL a station connects to: ``base`` is the server's ws:// or
    wss:// origin (an http(s):// one is converted)."""
    base = base.rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if base.startswith(http):
            base = ws + base[len(http) :]
    return base + GATEWAY_PATH.format(handle=handle)


@dataclass(frozen=True)
class GatewayConfig:
    session_factory: Callable[[], Session]
    encryption_key: SecretStr | str | None = field(repr=False)
    # the upstream handshake and its metadata must come within this; shorter than
    # the station's own open timeout, so the station hears 1013 rather than timing out
    connect_timeout_s: float = 5.0
    # observations with two camera images run to a few MB; refuse only the absurd
    max_message_bytes: int = 64 * 1024 * 1024
    # whether policy servers may be on loopback or private networks (the site's
    # submissions.allow_private_endpoints); otherwise the host is resolved and judged
    # at every connection, as registration did, and the connection goes to the
    # judged address: a name rebound inward since registration is not followed
    allow_private_endpoints: bool = False
    # a station that closed and reconnects at once (pre-flight, then the episode)
    # may arrive before its first connection is torn down here: it waits this long
    reconnect_grace_s: float = 2.0
    # accept a connection with no token on its X-Proctor-Station id alone (the
    # settings' scheduler.trust_station_header; never in production). A token,
    # when one is sent, is checked either way
    trust_station_header: bool = False


@dataclass(frozen=True)
class UpstreamTarget:
    run_code: str
    station_id: int | None  # the station holding the claim
    url: str = field(repr=False)  # empty: nothing serves the policy now (answered 1013)
    dialect: EndpointDialect | None
    api_key: str | None = field(repr=False)
    # the runner server serving an uploaded checkpoint (its last use is recorded);
    # None for a submitter's endpoint
    runner_id: int | None = None

    @property
    def platform_written(self) -> bool:
        """Whether the URL was written by the platform's own runner host, not by
        a submitter: a runner listens on the inference host's own (usually
        private) network, so the private-address refusal, which keeps
        submitters from pointing the server inward, does not apply to it."""
        return self.runner_id is not None


def resolve_handle(
    session: Session, handle: str, *, encryption_key: SecretStr | str | None
) -> UpstreamTarget | None:
    """The upstream behind a handle, or None if the handle must be refused."""
    if not is_endpoint_handle(handle):
        return None
    row = session.execute(
        sa.select(Assignment, Campaign.status, Submission)
        .join(Campaign, Campaign.id == Assignment.campaign_id)
        .join(Submission, Submission.id == Assignment.submission_id)
        .where(Assignment.endpoint_handle == handle)
    ).one_or_none()
    if row is None:
        return None
    assignment, campaign_status, submission = row
    if assignment.status != AssignmentStatus.claimed or campaign_status != CampaignStatus.running:
        return None
    if submission.kind == SubmissionKind.checkpoint:
        return _runner_target(session, assignment, submission)
    if submission.kind != SubmissionKind.endpoint or not submission.endpoint_url:
        return None
    api_key = None
    if submission.endpoint_api_key_encrypted:
        api_key = decrypt_api_key(
            submission.endpoint_api_key_encrypted, encryption_key=encryption_key
        )
    return UpstreamTarget(
        run_code=assignment.run_code,
        station_id=assignment.station_id,
        url=submission.endpoint_url,
        dialect=submission.endpoint_dialect,
        api_key=api_key,
    )


def _runner_target(
    session: Session, assignment: Assignment, submission: Submission
) -> UpstreamTarget:
    """An uploaded checkpoint is reached at its ready runner server; while it
    has none (building, failed, stopped) the policy is unavailable, exactly as
    an endpoint that does not answer: the station hears 1013, nothing more."""
    server = runners.ready_server(session, submission.id)
    if server is None or server.url is None:
        return UpstreamTarget(
            run_code=assignment.run_code,
            station_id=assignment.station_id,
            url="",
            dialect=None,
            api_key=None,
        )
    return UpstreamTarget(
        run_code=assignment.run_code,
        station_id=assignment.station_id,
        url=server.url,
        dialect=EndpointDialect(server.dialect) if server.dialect else None,
        api_key=None,
        runner_id=server.id,
    )


def touch_runner(session: Session, runner_id: int, *, now: datetime | None = None) -> None:
    """Record that a relay to the runner server started or ended (its host
    stops a server nothing has used for a while)."""
    session.execute(
        sa.update(RunnerServer)
        .where(RunnerServer.id == runner_id)
        .values(last_used_at=now or utcnow()),
        execution_options={"synchronize_session": False},
    )


def _touch(config: GatewayConfig, runner_id: int) -> None:
    session = config.session_factory()
    try:
        touch_runner(session, runner_id)
        session.commit()
    except sa.exc.SQLAlchemyError:
        # a busy database must not end a relay: the host only stops the server sooner
        session.rollback()
        log.warning("policy gateway: could not record the runner's last use", exc_info=True)
    finally:
        session.close()


@dataclass(frozen=True)
class StationProof:
    """What a connection offers as the station's identity."""

    token: str | None = field(default=None, repr=False)  # Authorization: Bearer …
    claimed_id: str | None = None  # X-Proctor-Station

    @classmethod
    def of(cls, websocket: WebSocket) -> StationProof:
        scheme, _, value = websocket.headers.get("authorization", "").partition(" ")
        token = value.strip() if scheme.lower() == "bearer" else ""
        return cls(token=token or None, claimed_id=websocket.headers.get(STATION_HEADER))


@dataclass(frozen=True)
class Proven:
    """A connection from the station holding the claim."""

    token_id: int | None  # the live token it proved it with; None: its trusted id


def proven_station(
    session: Session, target: UpstreamTarget, proof: StationProof, *, trust_station_header: bool
) -> Proven | None:
    """Whether the connection comes from the station holding the claim."""
    if target.station_id is None:
        return None
    if proof.token is not None:
        live = station_credentials.live_token(session, proof.token)
        if live is None or live.station_id != target.station_id:
            return None
        return Proven(live.id)
    if trust_station_header and proof.claimed_id == str(target.station_id):
        return Proven(None)
    return None


def _lookup(config: GatewayConfig, handle: str, proof: StationProof) -> UpstreamTarget | None:
    session = config.session_factory()
    try:
        target = resolve_handle(session, handle, encryption_key=config.encryption_key)
        if target is None:
            return None
        proven = proven_station(
            session, target, proof, trust_station_header=config.trust_station_header
        )
        if proven is None:
            return None
        if proven.token_id is not None:
            _record_use(session, proven.token_id)
        return target
    finally:
        session.rollback()
        session.close()


def _record_use(session: Session, token_id: int) -> None:
    try:
        station_credentials.record_use(session, token_id)
        session.commit()
    except sa.exc.SQLAlchemyError:
        # a busy database must not refuse a proven station: only the note is lost
        session.rollback()
        log.warning("policy gateway: could not record the station token's use", exc_info=True)


def to_station_code(upstream_code: int | None) -> int:
    """The close code the station sees when the policy server closed."""
    if upstream_code is None or upstream_code in _UNSENDABLE:
        return CLOSE_UPSTREAM_LOST
    if 1000 <= upstream_code <= 1014 or 3000 <= upstream_code <= 4999:
        return upstream_code
    return CLOSE_UPSTREAM_LOST


def to_upstream_code(station_code: int | None) -> int:
    """The close code the policy server sees when the station closed."""
    if station_code is None or station_code in _UNSENDABLE:
        return 1001  # going away: the station vanished
    if 1000 <= station_code <= 1014 or 3000 <= station_code <= 4999:
        return station_code
    return 1001


def station_headers(token: str) -> dict[str, str]:
    """What a station sends the gateway to prove which station it is."""
    return {"Authorization": f"Bearer {token}"}


def station_id_headers(station_id: int) -> dict[str, str]:
    """What a station with no token sends: its id, which the gateway trusts
    only where ``trust_station_header`` is set (a development set-up)."""
    return {STATION_HEADER: str(station_id)}


class LiveHandles:
    """The handles with a station connected, one connection each. In memory:
    the web server is one process (``proctor serve``)."""

    def __init__(self) -> None:
        self._ended: dict[str, asyncio.Event] = {}

    async def take(self, handle: str, *, grace_s: float) -> asyncio.Event | None:
        """The handle's token, or None while another connection holds it."""
        held = self._ended.get(handle)
        if held is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(held.wait(), grace_s)
            if handle in self._ended:  # still held, or taken by another waiter
                return None
        token = asyncio.Event()
        self._ended[handle] = token
        return token

    def release(self, handle: str, token: asyncio.Event) -> None:
        if self._ended.get(handle) is token:
            del self._ended[handle]
        token.set()


_HANDLE_IN_PATH = re.compile(r"/policy/[^\s\"?]*")


class HandleRedaction(logging.Filter):
    """Keeps handles out of the server's own log lines: uvicorn writes the
    path of every request (``uvicorn.access``) and of every WebSocket
    handshake (``uvicorn.error``), and a handle in a log is a usable key."""

    LOGGERS = ("uvicorn.access", "uvicorn.error")

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                _HANDLE_IN_PATH.sub("/policy/…", a) if isinstance(a, str) else a
                for a in record.args
            )
        if isinstance(record.msg, str) and "/policy/" in record.msg:
            record.msg = _HANDLE_IN_PATH.sub("/policy/…", record.msg)
        return True

    @classmethod
    def install(cls) -> None:
        """On uvicorn's loggers, once (logging.config keeps a logger's filters)."""
        for name in cls.LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, cls) for f in logger.filters):
                logger.addFilter(cls())


async def _open_upstream(config: GatewayConfig, target: UpstreamTarget) -> ClientConnection:
    # resolved and judged now, not trusted from registration; raises AddressRefused.
    # A runner's URL is the platform's own (target.platform_written): still resolved
    # and pinned, but a private address is where runners live
    pinned = await netguard.pin_async(
        target.url, allow_private=config.allow_private_endpoints or target.platform_written
    )
    # the key as the dialect's own client sends it: Api-Key (openpi, RoboArena),
    # Bearer (Positronic, whose stored URL already has its session path)
    headers = auth_headers(target.dialect, target.api_key)
    # a redirect fails the handshake: it would lead to a host nobody judged
    return await netguard.connect_websocket_async(
        target.url,
        pinned=pinned,
        additional_headers=headers or None,
        open_timeout=config.connect_timeout_s,
        max_size=config.max_message_bytes,
        # images do not compress; the openpi client turns it off too
        compression=None,
        # a policy server that runs inference inside its event loop cannot answer
        # pings meanwhile; the station's own per-call timeout watches liveness
        ping_interval=None,
        proxy=None,  # the endpoint is reached directly, never via an environment proxy
        user_agent_header=None,
    )


async def _pump_from_station(
    websocket: WebSocket, upstream: ClientConnection
) -> tuple[str, int | None]:
    """Station → policy until one side closes: ("station", its close code)
    when the station left, ("policy", None) when the policy is gone."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return "station", message.get("code")
        data = message.get("bytes")
        if data is None:
            data = message.get("text")
        if data is None:
            continue
        try:
            await upstream.send(data)
        except ConnectionClosed:
            return "policy", None


async def _pump_from_upstream(
    websocket: WebSocket, upstream: ClientConnection
) -> tuple[str, int | None]:
    """Policy → station until the policy closes. A failure to send to the
    station (it vanished) propagates as an exception."""
    with contextlib.suppress(ConnectionClosed):
        async for data in upstream:
            if isinstance(data, bytes):
                await websocket.send_bytes(data)
            else:
                await websocket.send_text(data)
    return "policy", None


async def relay(
    websocket: WebSocket, config: GatewayConfig, handle: str, live: LiveHandles
) -> None:
    try:
        target = await run_in_threadpool(_lookup, config, handle, StationProof.of(websocket))
    except ProctorError:
        # e.g. the stored API key no longer decrypts: an admin problem, logged;
        # for the station it looks like any refused handle
        log.exception("policy gateway: resolving a handle failed")
        target = None
    token = await live.take(handle, grace_s=config.reconnect_grace_s) if target else None
    if target is None or token is None:
        await websocket.close(code=CLOSE_POLICY_VIOLATION)
        return
    try:
        # released as soon as the station's side is over, not after the upstream's
        # close handshake: the station reconnects at once between pre-flight and episode
        await _relay_target(websocket, config, target, lambda: live.release(handle, token))
    finally:
        live.release(handle, token)


async def _relay_target(
    websocket: WebSocket,
    config: GatewayConfig,
    target: UpstreamTarget,
    station_gone: Callable[[], None],
) -> None:
    try:
        if not target.url:
            raise ConnectionRefusedError("no runner server is ready")
        upstream = await _open_upstream(config, target)
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI, ValueError) as exc:
        # ValueError includes netguard.AddressRefused: the host resolves inward now
        log.warning(
            "policy gateway: run %s: policy unavailable (%s)", target.run_code, type(exc).__name__
        )
        await websocket.accept()
        await websocket.close(
            code=CLOSE_UPSTREAM_UNAVAILABLE, reason=_REASONS[CLOSE_UPSTREAM_UNAVAILABLE]
        )
        return
    await websocket.accept()
    log.info("policy gateway: run %s: relaying", target.run_code)
    if target.runner_id is not None:
        await run_in_threadpool(_touch, config, target.runner_id)
    try:
        await _relay_open(websocket, upstream, target, station_gone)
    finally:
        if target.runner_id is not None:
            await run_in_threadpool(_touch, config, target.runner_id)


async def _relay_open(
    websocket: WebSocket,
    upstream: ClientConnection,
    target: UpstreamTarget,
    station_gone: Callable[[], None],
) -> None:
    pumps = {
        asyncio.create_task(_pump_from_station(websocket, upstream)),
        asyncio.create_task(_pump_from_upstream(websocket, upstream)),
    }
    try:
        done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        first = done.pop()
        side, station_code = ("station", None) if first.exception() else first.result()
        if side == "station":
            station_gone()
            await upstream.close(code=to_upstream_code(station_code))
            log.info("policy gateway: run %s: station closed (%s)", target.run_code, station_code)
        else:
            await _wait_closed(upstream)
            code = to_station_code(upstream.close_code)
            with contextlib.suppress(Exception):
                await websocket.close(code=code, reason=_REASONS.get(code, ""))
            station_gone()
            log.info(
                "policy gateway: run %s: policy closed (%s, station sees %s)",
                target.run_code,
                upstream.close_code,
                code,
            )
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        await upstream.close()


async def _wait_closed(upstream: ClientConnection) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(upstream.wait_closed(), timeout=5)


def gateway_router(config: GatewayConfig) -> APIRouter:
    router = APIRouter()
    live = LiveHandles()
    HandleRedaction.install()

    @router.websocket(GATEWAY_PATH)
    async def policy_gateway(websocket: WebSocket, handle: str) -> None:
        await relay(websocket, config, handle, live)

    return router
