"""The station API's client: the station host's only way to the server.

HTTPS (plain HTTP on a test's loopback) to ``<server>/api/station/v1``, the
station's bearer token on every call, an ``Idempotency-Key`` on every call
that changes something. The server's refusals come back as
``proctor.core.errors`` types carrying its ``detail`` and ``field``; a
server that cannot be reached, times out or answers 5xx is ``Offline`` — the
one failure the forwarder retries, since nothing was refused.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TypeVar
from urllib.parse import quote, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from proctor.core.errors import Conflict, FieldError, Forbidden, NotFound, ProctorError, UsageError
from proctor.core.station_api_wire import (
    API_PREFIX,
    IDEMPOTENCY_HEADER,
    IDEMPOTENCY_KEY,
    AbandonRequest,
    ClaimReply,
    ClaimRequest,
    CompleteReply,
    CompleteRequest,
    EpisodeReply,
    EpisodeWire,
    Hello,
    HelloReply,
    PartDone,
    UploadPlan,
    UploadRequest,
)

Reply = TypeVar("Reply", bound=BaseModel)

DEFAULT_TIMEOUT_S = 15.0


class Offline(ProctorError):
    """The server did not answer (unreachable, timed out, 5xx): try again later."""

    http_status = 503


class TokenRefused(ProctorError):
    """The server refused the station's token (401): revoked, expired or wrong."""

    exit_code = 2
    http_status = 401


class ServerReplyInvalid(ProctorError):
    """The server answered 2xx with something that is not the wire's reply."""

    http_status = 502


def _refusal(status: int, detail: str, field: str | None) -> ProctorError:
    if status == 401:
        return TokenRefused(f"token refused: {detail}")
    if status == 403:
        return Forbidden(detail)
    if status == 404:
        return NotFound(detail)
    if status == 409:
        return Conflict(detail)
    if field:
        return FieldError(field, detail)
    return UsageError(detail)


def _detail(response: httpx.Response) -> tuple[str, str | None]:
    """The server's ``detail`` and ``field`` (FastAPI's list of problems too)."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase, None
    if not isinstance(body, dict):
        return str(body)[:500], None
    detail, field = body.get("detail", ""), body.get("field")
    if isinstance(detail, list):
        problems = [d for d in detail if isinstance(d, dict)]
        if problems and field is None:
            field = ".".join(str(p) for p in problems[0].get("loc", [])[1:]) or None
        detail = "; ".join(str(d.get("msg", d)) for d in problems) or str(detail)
    return str(detail), (str(field) if field else None)


def check_key(key: str) -> str:
    if not IDEMPOTENCY_KEY.match(key):
        raise FieldError("idempotency_key", f"{key!r} is not a valid idempotency key")
    return key


class StationApiClient:
    """One server, one station token. ``clock_offset_s`` is the latest estimate
    of (server clock − station clock), from the last ``hello``."""

    def __init__(
        self,
        server: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        parts = urlsplit(server.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise FieldError("uplink.server", f"{server!r} must be an http(s):// origin")
        if not token:
            raise FieldError("token", "the station token is empty")
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.clock_offset_s: float | None = None
        self._token = token
        self.http = httpx.Client(
            timeout=timeout_s, transport=transport, headers=self.server_headers
        )

    @property
    def server_headers(self) -> dict[str, str]:
        """What every call to the server carries (also part uploads with ``auth="server"``)."""
        return {"Authorization": f"Bearer {self._token}"}

    @property
    def policy_origin(self) -> str:
        """The server's origin as a WebSocket URL (the policy gateway's)."""
        scheme = "wss" if self.origin.startswith("https:") else "ws"
        return scheme + self.origin[self.origin.index(":") :]

    def close(self) -> None:
        self.http.close()

    # -- transport -------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        reply: type[Reply],
        *,
        body: BaseModel | None = None,
        key: str | None = None,
    ) -> Reply:
        headers = {IDEMPOTENCY_HEADER: check_key(key)} if key is not None else {}
        content = body.model_dump_json().encode() if body is not None else None
        if content is not None:
            headers["Content-Type"] = "application/json"
        try:
            response = self.http.request(
                method, self.origin + API_PREFIX + path, content=content, headers=headers
            )
        except httpx.HTTPError as exc:
            raise Offline(f"the server did not answer ({exc.__class__.__name__})") from None
        if response.status_code >= 500:
            raise Offline(f"the server failed (HTTP {response.status_code})")
        if response.status_code >= 400:
            raise _refusal(response.status_code, *_detail(response))
        if reply is _Anything and not response.content.strip():
            return reply()  # e.g. 204: nothing to read
        try:
            return reply.model_validate_json(response.content)
        except ValidationError as exc:
            raise ServerReplyInvalid(
                f"{method} {path}: the server's reply did not validate ({exc.error_count()} "
                "problem(s))"
            ) from None

    # -- the calls -------------------------------------------------------------------
    def hello(self, hello: Hello) -> HelloReply:
        """Register or heartbeat; updates ``clock_offset_s`` from the reply."""
        sent = time.time()
        stamped = hello.model_copy(
            update={
                "station_time": datetime.fromtimestamp(sent, UTC),
                "clock_offset_s": self.clock_offset_s,
            }
        )
        reply = self._call("POST", "/hello", HelloReply, body=stamped)
        received = time.time()
        self.clock_offset_s = reply.server_time.timestamp() - (sent + received) / 2
        return reply

    def claim(self, campaign: int | str, *, key: str) -> ClaimReply:
        return self._call(
            "POST", "/claims", ClaimReply, body=ClaimRequest(campaign=campaign), key=key
        )

    def abandon(self, run_code: str, reason: str, *, key: str) -> None:
        self._call(
            "POST",
            f"/claims/{quote(run_code, safe='')}/abandon",
            _Anything,
            body=AbandonRequest(reason=reason[:2000]),
            key=key,
        )

    def put_episode(self, episode: EpisodeWire, *, key: str | None = None) -> EpisodeReply:
        """``key`` defaults to ``episode:<uid>:<rev>``; the forwarder adds the
        content's digest, so a revision number used again for other content
        (an outbox begun anew) is not answered from the server's memory."""
        return self._call(
            "PUT",
            f"/episodes/{episode.uid}",
            EpisodeReply,
            body=episode,
            key=key or f"episode:{episode.uid}:{episode.rev}",
        )

    def begin_upload(self, request: UploadRequest) -> UploadPlan:
        return self._call(
            "POST",
            "/uploads",
            UploadPlan,
            body=request,
            key=f"upload:{request.episode_uid}:{request.sha256}",
        )

    def upload_plan(self, upload_id: str) -> UploadPlan:
        return self._call("GET", f"/uploads/{quote(upload_id, safe='')}", UploadPlan)

    def complete_upload(self, upload_id: str, parts: list[PartDone], *, key: str) -> CompleteReply:
        return self._call(
            "POST",
            f"/uploads/{quote(upload_id, safe='')}/complete",
            CompleteReply,
            body=CompleteRequest(parts=parts),
            key=key,
        )


class _Anything(BaseModel):
    """A reply whose content the station does not need (any JSON object)."""

    model_config = ConfigDict(extra="allow")
