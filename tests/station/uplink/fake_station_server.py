"""A FAKE station-API server: a stand-in for the station's contract tests.

The real routes (``proctor.web.stationapi``) are built alongside the
station's uplink; until they land, the station side is tested against this
small FastAPI app, served by uvicorn on 127.0.0.1 (real HTTP, real
connections that really fail when it is stopped) with fake logic: an
in-memory queue of runs, the episodes and artifacts it was sent, and every
call recorded. It speaks the shared wire (``proctor.core.station_api_wire``),
so a field the station gets wrong fails here as it would on the server.
The end-to-end tests use the real server, not this.

What it checks for the tests (``violations``): an idempotency key acted on
twice, a (uid, rev) stored twice, a revision going backwards, an upload for
an episode it never got. It can be stopped and started again on the same
port, made to drop the connection after acting on a call (the reply lost)
or to fail one call without acting (503), and made to refuse the token.

``send_parts`` below is a local stand-in for
``proctor.station.uplink.upload.send_parts`` (written by the uploads' own
work), used only while that module does not exist.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse

from proctor.core.station_api_wire import (
    API_PREFIX,
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
    PartTarget,
    UploadPlan,
    UploadRequest,
    WorkWire,
)

PART_SIZE = 64 * 1024
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


class ConnectionDropped(Exception):
    """Raised after the response's headers went out: uvicorn closes the connection."""


@dataclass
class Upload:
    request: UploadRequest
    parts: dict[int, bytes] = field(default_factory=dict)


@dataclass
class State:
    token: str
    heartbeat_s: float = 0.5
    clock_skew_s: float = 0.0  # the server's clock minus the real one
    runs: list[WorkWire] = field(default_factory=list)  # runs still to hand out
    held: WorkWire | None = None  # the run claimed and not yet settled or abandoned
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)
    hellos: list[Hello] = field(default_factory=list)
    answered: dict[str, tuple[int, Any]] = field(default_factory=dict)  # key → first answer
    acted_keys: list[str] = field(default_factory=list)
    claims: list[str] = field(default_factory=list)  # run codes handed out, per acted claim
    episodes: dict[str, EpisodeWire] = field(default_factory=dict)
    stored_revs: list[tuple[str, int]] = field(default_factory=list)
    abandons: list[tuple[str, str]] = field(default_factory=list)  # (run code, reason)
    uploads: dict[str, Upload] = field(default_factory=dict)
    artifacts: dict[tuple[str, str], UploadRequest] = field(default_factory=dict)
    settled: list[str] = field(default_factory=list)  # run codes
    violations: list[str] = field(default_factory=list)
    drop_after: set[str] = field(default_factory=set)  # "claims", "abandon", … : once each
    refuse_uids: set[str] = field(default_factory=set)  # episodes answered 422
    # claims answered 409 with this detail while set (the held run's episode is live)
    refuse_claims: str | None = None
    unavailable: set[str] = field(default_factory=set)  # answered 503, not acted on: once each
    aborted: set[str] = field(default_factory=set)  # upload ids the server's sweep aborted
    # the sweep's pass landing mid-upload: "up-1/2" aborts up-1 as its part 2
    # arrives, "up-1/complete" as its completion does (each answered 409 then)
    abort_at: set[str] = field(default_factory=set)


def _refuse(status: int, detail: str, field_name: str | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail, "field": field_name}, status_code=status)


@dataclass
class _Ctx:
    state: State
    lock: threading.Lock

    def once(self, key: str | None, act: Callable[[], tuple[int, Any]]) -> JSONResponse:
        """The idempotency contract: a repeated key gets the first answer, nothing done."""
        state = self.state
        with self.lock:
            if key is None:
                return _refuse(422, "Idempotency-Key header required", "Idempotency-Key")
            if key in state.answered:
                status, body = state.answered[key]
                return JSONResponse(body, status_code=status)
            status, body = act()
            if status < 300:
                # as the real server (station_api.once): only answers are kept; a
                # refused call did nothing and may be sent again under its key
                if key in state.acted_keys:
                    state.violations.append(f"key {key} acted on twice")
                state.acted_keys.append(key)
                state.answered[key] = (status, body)
            return JSONResponse(body, status_code=status)


def _app(state: State, lock: threading.Lock) -> FastAPI:
    app = FastAPI()
    ctx = _Ctx(state, lock)

    @app.middleware("http")
    async def record(request: Request, call_next: Any) -> Any:
        state.calls.append(
            (request.method, request.url.path, request.headers.get("Idempotency-Key"))
        )
        if request.headers.get("Authorization") != f"Bearer {state.token}":
            return _refuse(401, "station token refused")
        failing = next((m for m in state.unavailable if request.url.path.endswith(m)), None)
        if failing is not None:
            state.unavailable.discard(failing)
            return _refuse(503, "the server is restarting")
        return await call_next(request)

    @app.post(API_PREFIX + "/hello")
    def hello(body: Hello) -> HelloReply:
        with lock:
            state.hellos.append(body)
        return HelloReply(
            station_id=1,
            server_time=datetime.now(UTC) + timedelta(seconds=state.clock_skew_s),
            heartbeat_s=state.heartbeat_s,
            lease_s=60.0,
        )

    _claims(app, ctx)
    _episodes(app, ctx)
    _uploads(app, ctx)
    return app


def _claims(app: FastAPI, ctx: _Ctx) -> None:
    state = ctx.state

    @app.post(API_PREFIX + "/claims")
    def claim(
        body: ClaimRequest, idempotency_key: str | None = Header(default=None)
    ) -> JSONResponse:
        def act() -> tuple[int, Any]:
            if state.refuse_claims is not None:
                return 409, {"detail": state.refuse_claims}
            if state.held is None and state.runs:
                state.held = state.runs.pop(0)
            if state.held is None:
                reply = ClaimReply(work=None, reason="the campaign has no run left")
                return 200, reply.model_dump(mode="json")
            state.claims.append(state.held.run_code)
            return 200, ClaimReply(work=state.held).model_dump(mode="json")

        return ctx.once(idempotency_key, act)

    @app.post(API_PREFIX + "/claims/{run_code}/abandon")
    def abandon(
        run_code: str, body: AbandonRequest, idempotency_key: str | None = Header(default=None)
    ) -> JSONResponse:
        def act() -> tuple[int, Any]:
            if state.held is None or state.held.run_code != run_code:
                return 409, {"detail": f"run {run_code} is not held by this station"}
            state.abandons.append((run_code, body.reason))
            state.runs.append(state.held)  # rescheduled
            state.held = None
            return 200, {"run_code": run_code, "abandoned": True}

        return ctx.once(idempotency_key, act)


def _episodes(app: FastAPI, ctx: _Ctx) -> None:
    state = ctx.state

    @app.put(API_PREFIX + "/episodes/{uid}")
    def episode(
        uid: str, body: EpisodeWire, idempotency_key: str | None = Header(default=None)
    ) -> JSONResponse:
        if body.uid != uid:
            return _refuse(422, "the body's uid is not the path's", "uid")
        if uid in state.refuse_uids:
            return _refuse(422, "object: no such object type in the campaign", "object")
        if body.operator_id is not None:  # as the real server: a station names no user
            return _refuse(422, "operator_id: a station cannot name a server user", "operator_id")

        def act() -> tuple[int, Any]:
            held = state.episodes.get(uid)
            if held is not None and body.rev <= held.rev:
                return 200, _episode_reply(held, state)  # a replay: nothing changes
            if (uid, body.rev) in state.stored_revs:
                state.violations.append(f"episode {uid} rev {body.rev} stored twice")
            state.episodes[uid] = body
            state.stored_revs.append((uid, body.rev))
            if body.state in ("closed", "interrupted") and body.run_code not in state.settled:
                state.settled.append(body.run_code)
                if state.held is not None and state.held.run_code == body.run_code:
                    state.held = None
            return 200, _episode_reply(body, state)

        return ctx.once(idempotency_key, act)


def _uploads(app: FastAPI, ctx: _Ctx) -> None:
    state, lock = ctx.state, ctx.lock

    @app.post(API_PREFIX + "/uploads")
    def begin(body: UploadRequest, request: Request) -> JSONResponse:
        # as the real server: no stored answer, the artifact's open upload resumed
        # (an aborted one is not open: a begin then starts afresh)
        with lock:
            if body.episode_uid not in state.episodes:
                state.violations.append(f"upload for unknown episode {body.episode_uid}")
                return _refuse(404, f"no episode {body.episode_uid}")
            artifact = (body.episode_uid, body.sha256)
            upload_id = next(
                (
                    k
                    for k, u in state.uploads.items()
                    if (u.request.episode_uid, u.request.sha256) == artifact
                    and k not in state.aborted
                ),
                f"up-{len(state.uploads) + 1}",
            )
            state.uploads.setdefault(upload_id, Upload(body))
            return JSONResponse(
                _plan(upload_id, state, str(request.base_url)).model_dump(mode="json")
            )

    @app.get(API_PREFIX + "/uploads/{upload_id}")
    def plan(upload_id: str, request: Request) -> JSONResponse:
        with lock:
            if upload_id not in state.uploads:
                return _refuse(404, f"no upload {upload_id}")
            if upload_id in state.aborted:
                # as the real server answers (proctor.scheduler.station_uploads)
                return _refuse(409, "upload_id: the upload is aborted; begin again to send it")
            return JSONResponse(
                _plan(upload_id, state, str(request.base_url)).model_dump(mode="json")
            )

    @app.put(API_PREFIX + "/uploads/{upload_id}/parts/{number}")
    async def part(upload_id: str, number: int, request: Request) -> JSONResponse:
        data = await request.body()
        with lock:
            if upload_id not in state.uploads:
                return _refuse(404, f"no upload {upload_id}")
            if f"{upload_id}/{number}" in state.abort_at:
                state.aborted.add(upload_id)
            if upload_id in state.aborted:
                return _refuse(409, "upload_id: the upload is aborted; begin again to send it")
            state.uploads[upload_id].parts[number] = data
        etag = hashlib.sha256(data).hexdigest()
        return JSONResponse({"etag": etag}, headers={"ETag": etag})

    @app.post(API_PREFIX + "/uploads/{upload_id}/complete")
    def complete(
        upload_id: str, body: CompleteRequest, idempotency_key: str | None = Header(default=None)
    ) -> JSONResponse:
        return ctx.once(idempotency_key, lambda: _complete(state, upload_id))


def _complete(state: State, upload_id: str) -> tuple[int, Any]:
    upload = state.uploads.get(upload_id)
    if upload is None:
        return 404, {"detail": f"no upload {upload_id}"}
    if f"{upload_id}/complete" in state.abort_at:
        state.aborted.add(upload_id)
    if upload_id in state.aborted:
        return 409, {"detail": "upload_id: the upload is aborted; begin again to send it"}
    blob = b"".join(upload.parts[n] for n in sorted(upload.parts))
    req = upload.request
    if len(blob) != req.size_bytes or hashlib.sha256(blob).hexdigest() != req.sha256:
        return 422, {"detail": "size or sha256 differs", "field": "parts"}
    key = (req.episode_uid, req.sha256)
    if key in state.artifacts:
        state.violations.append(f"artifact {key} registered twice")
    state.artifacts[key] = req
    reply = CompleteReply(sha256=req.sha256, size_bytes=len(blob), registered=True)
    return 200, reply.model_dump(mode="json")


def _episode_reply(held: EpisodeWire, state: State) -> dict[str, Any]:
    return EpisodeReply(
        uid=held.uid,
        rev=held.rev,
        state=held.state,
        settled=held.run_code in state.settled,
    ).model_dump(mode="json")


def _plan(upload_id: str, state: State, base: str) -> UploadPlan:
    upload = state.uploads[upload_id]
    req = upload.request
    if (req.episode_uid, req.sha256) in state.artifacts:
        return UploadPlan(upload_id=upload_id, part_size=PART_SIZE, parts=[], complete=True)
    count = max(1, -(-req.size_bytes // PART_SIZE))
    base = base.rstrip("/")
    missing = [n for n in range(1, count + 1) if n not in upload.parts]
    return UploadPlan(
        upload_id=upload_id,
        part_size=PART_SIZE,
        parts=[
            PartTarget(
                number=n, url=f"{base}{API_PREFIX}/uploads/{upload_id}/parts/{n}", auth="server"
            )
            for n in missing
        ],
        received=sorted(upload.parts),
    )


class _Dropping:
    """ASGI wrapper: for a path marked in ``state.drop_after``, the app acts,
    the response's headers go out, then the connection is cut (the client
    never reads the reply: a reply lost on the way)."""

    def __init__(self, app: FastAPI, state: State) -> None:
        self.app = app
        self.state = state

    async def __call__(
        self,
        scope: Scope,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        marked = next(
            (m for m in self.state.drop_after if scope.get("path", "").endswith("/" + m)), None
        )
        if scope["type"] != "http" or marked is None:
            await self.app(scope, receive, send)
            return
        self.state.drop_after.discard(marked)

        async def cut(message: Message) -> None:
            if message["type"] == "http.response.start":
                await send(message)
            else:
                raise ConnectionDropped(f"dropped the reply to {scope['path']}")

        await self.app(scope, receive, cut)


class FakeStationServer:
    """``start()``, ``stop()``, ``start()`` again on the same port."""

    def __init__(self, token: str) -> None:
        self.state = State(token=token)
        self.lock = threading.Lock()
        self.app = _Dropping(_app(self.state, self.lock), self.state)
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeStationServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="critical", lifespan="off", access_log=False)
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "fake server did not start"
            time.sleep(0.02)
        self._server, self._thread, self._sock = server, thread, sock
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.should_exit = True
        assert self._thread is not None and self._sock is not None
        self._thread.join(15)
        self._sock.close()
        assert not self._thread.is_alive(), "fake server did not stop"
        self._server = None

    def calls_to(self, suffix: str, method: str | None = None) -> list[tuple[str, str, str | None]]:
        return [c for c in self.state.calls if c[1].endswith(suffix) and (method in (None, c[0]))]


def send_parts(
    client: httpx.Client,
    plan: UploadPlan,
    path: Path,
    *,
    server_headers: dict[str, str],
    progress: Any = None,
) -> list[PartDone]:
    """Stand-in for ``proctor.station.uplink.upload.send_parts`` (see the module's docstring)."""
    done = []
    with path.open("rb") as f:
        for target in plan.parts:
            f.seek((target.number - 1) * plan.part_size)
            data = f.read(plan.part_size)
            headers = dict(target.headers)
            if target.auth == "server":
                headers.update(server_headers)
            response = client.put(target.url, content=data, headers=headers)
            response.raise_for_status()
            done.append(PartDone(number=target.number, etag=response.headers["ETag"]))
    return done


def parts_sender() -> Any:
    """The real ``send_parts`` once it exists, else the stand-in above."""
    try:
        from proctor.station.uplink.upload import send_parts as real
    except ImportError:
        return send_parts
    return real
