"""The blinded policy gateway: ``ws://<server>/policy/<handle>``.

The station knows only an opaque handle. The server resolves it (a claimed
run of a running campaign → the submission's endpoint URL, dialect and
decrypted API key), opens the upstream connection itself, and relays
WebSocket messages both ways: binary frames byte for byte, text frames as
text, the upstream's metadata message (sent on connect) first. The station
never sees the endpoint, the policy's name or its owner.

What the station sees when something is wrong (see ``scheduler/README.md``):

* a handle that is malformed, unknown, not claimed (pending, finished,
  skipped) or of a campaign that is not running: the handshake is refused
  with HTTP 403, identically in every case;
* the policy server cannot be reached: accepted, then closed with **1013**
  (try again later) — a pre-flight failure, the run is skipped;
* the policy server drops the connection without a close frame: **1014**
  (bad gateway) — a ``system`` failure;
* the policy server closes with its own code: passed through, but the reason
  text is replaced (it may name the model).

Mount ``gateway_router(GatewayConfig(...))`` on the web app (no prefix).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlalchemy as sa
from fastapi import APIRouter, WebSocket
from pydantic import SecretStr
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from proctor.db.models import Assignment, Campaign, Submission
from proctor.domain import AssignmentStatus, CampaignStatus, EndpointDialect, SubmissionKind
from proctor.errors import ProctorError
from scheduler.codes import is_endpoint_handle
from scheduler.endpoint_keys import decrypt_api_key
from station.policy.spec import auth_headers

log = logging.getLogger(__name__)

GATEWAY_PATH = "/policy/{handle}"

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


@dataclass(frozen=True)
class UpstreamTarget:
    run_code: str
    url: str = field(repr=False)
    dialect: EndpointDialect | None
    api_key: str | None = field(repr=False)


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
    if submission.kind != SubmissionKind.endpoint or not submission.endpoint_url:
        return None
    api_key = None
    if submission.endpoint_api_key_encrypted:
        api_key = decrypt_api_key(
            submission.endpoint_api_key_encrypted, encryption_key=encryption_key
        )
    return UpstreamTarget(
        run_code=assignment.run_code,
        url=submission.endpoint_url,
        dialect=submission.endpoint_dialect,
        api_key=api_key,
    )


def _lookup(config: GatewayConfig, handle: str) -> UpstreamTarget | None:
    session = config.session_factory()
    try:
        return resolve_handle(session, handle, encryption_key=config.encryption_key)
    finally:
        session.rollback()
        session.close()


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


async def _open_upstream(config: GatewayConfig, target: UpstreamTarget) -> ClientConnection:
    # the key as the dialect's own client sends it: Api-Key (openpi, RoboArena),
    # Bearer (Positronic, whose stored URL already has its session path)
    headers = auth_headers(target.dialect, target.api_key)
    return await connect(
        target.url,
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


async def relay(websocket: WebSocket, config: GatewayConfig, handle: str) -> None:
    try:
        target = await run_in_threadpool(_lookup, config, handle)
    except ProctorError:
        # e.g. the stored API key no longer decrypts: an admin problem, logged;
        # for the station it looks like any refused handle
        log.exception("policy gateway: resolving a handle failed")
        target = None
    if target is None:
        await websocket.close(code=CLOSE_POLICY_VIOLATION)
        return
    try:
        upstream = await _open_upstream(config, target)
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI, ValueError) as exc:
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
    pumps = {
        asyncio.create_task(_pump_from_station(websocket, upstream)),
        asyncio.create_task(_pump_from_upstream(websocket, upstream)),
    }
    try:
        done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        first = done.pop()
        side, station_code = ("station", None) if first.exception() else first.result()
        if side == "station":
            await upstream.close(code=to_upstream_code(station_code))
            log.info("policy gateway: run %s: station closed (%s)", target.run_code, station_code)
        else:
            await _wait_closed(upstream)
            code = to_station_code(upstream.close_code)
            with contextlib.suppress(Exception):
                await websocket.close(code=code, reason=_REASONS.get(code, ""))
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

    @router.websocket(GATEWAY_PATH)
    async def policy_gateway(websocket: WebSocket, handle: str) -> None:
        await relay(websocket, config, handle)

    return router
