"""The operator console: ``GET /console`` (the page) and ``/api/console/…``.

==================================  ==========================================
``GET  /api/console/status``        the station's state, whitelisted
                                    (``state: "offline"`` when it does not answer)
``POST /api/console/next``          claim the next run and arm it
``POST /api/console/start``         start the armed run
``POST /api/console/stop``          operator stop
``POST /api/console/safety-stop``   safety stop: the arm halts at once
``POST /api/console/recover``       clear the arm's error after a safety stop
``POST /api/console/gripper/activate`` reset and activate the gripper (hands clear)
``POST /api/console/home``          home the arm: ``{cell_clear, open_gripper}``
``POST /api/console/heartbeat``     the page is open (the station's console deadman)
``POST /api/console/disarm``        give up an armed run before it starts
``POST /api/console/log``           the post-rollout form; closes the episode
``GET  /api/console/reference/{c}`` the reference photo of the initial scene
``WS   /api/console/events``        status frames (JSON text) on every change
``WS   /api/console/preview/{c}``   live camera frames (binary JPEG)
==================================  ==========================================

Everything needs the ``operator`` role (a signed-in session, or an API token
with the operator scope); WebSocket handshakes are checked the same way,
plus their ``Origin`` against the host (a page on another site cannot ride
the operator's cookie). There is deliberately no route that edits a closed
episode: corrections go through the review log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import (
    APIRouter,
    HTTPException,
    Request,
    Response,
    WebSocket,
    WebSocketDisconnect,
    status,
)
from fastapi.responses import RedirectResponse
from starlette.concurrency import run_in_threadpool
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from proctor.core.domain import Role
from proctor.core.errors import Forbidden
from proctor.core.settings import Settings
from proctor.web.auth.identity import Principal, principal_from_session, principal_from_token
from proctor.web.auth.sessions import SCOPE_KEY, SessionState
from proctor.web.console.photos import find_photo
from proctor.web.console.station import QUICK_S, SAFETY_S, SLOW_S, StationLink, StationUnreachable
from proctor.web.console.view import (
    CAMERA_NAME,
    OUTCOME_LABELS,
    ConsoleStatus,
    HomeIn,
    LogIn,
    StationReplyInvalid,
    offline_status,
    public_status,
)
from proctor.web.deps import SessionDep, SettingsDep, StoreDep, require_role
from proctor.web.errors import error_responses
from proctor.web.templating import render

log = logging.getLogger(__name__)

api_router = APIRouter(
    prefix="/console", tags=["console"], responses=error_responses(401, 403, 502, 503)
)
page_router = APIRouter()
# `/` on a console-only host (web.surface "station_console"): the console is all it serves
landing_router = APIRouter()
Operator = Annotated[Principal, require_role(Role.operator)]

# while the station is unreachable, the relays try again this often
RETRY_S = 2.0
# a live feed re-checks the sign-in it was opened with this often
RECHECK_S = 60.0
CAMERA_NOT_FOUND = "camera not found"


def station_link(settings: Settings) -> StationLink:
    return StationLink(settings.web.station_url, settings.station_key_path)


def _view(raw: Any) -> ConsoleStatus:
    try:
        return public_status(raw)
    except StationReplyInvalid as exc:
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, str(exc)) from None


# -- the page ------------------------------------------------------------------------


@page_router.get("/console")
def console_page(request: Request, who: Operator, settings: SettingsDep) -> Response:
    return render(
        request,
        "console/console.html",
        {"outcomes": OUTCOME_LABELS, "station_url": settings.web.station_url},
    )


@landing_router.get("/")
def console_landing() -> Response:
    return RedirectResponse("/console", status_code=303)


# -- the JSON API ----------------------------------------------------------------------


@api_router.get("/status", summary="The station's state, as the operator may see it")
async def get_status(who: Operator, settings: SettingsDep) -> ConsoleStatus:
    link = station_link(settings)
    try:
        return _view(await link.json("GET", "/api/status"))
    except StationUnreachable as exc:
        return offline_status(str(exc.detail))


async def _action(settings: Settings, path: str, timeout: float) -> ConsoleStatus:
    return _view(await station_link(settings).json("POST", path, timeout=timeout))


_ACTION_ERRORS = error_responses(404, 409)


@api_router.post(
    "/next", summary="Claim the next run and arm it", responses=error_responses(404, 409)
)
async def next_run(who: Operator, settings: SettingsDep) -> ConsoleStatus:
    return await _action(settings, "/api/next", SLOW_S)


@api_router.post("/start", summary="Start the armed run", responses=_ACTION_ERRORS)
async def start(who: Operator, settings: SettingsDep) -> ConsoleStatus:
    return await _action(settings, "/api/start", QUICK_S)


@api_router.post("/stop", summary="Operator stop", responses=_ACTION_ERRORS)
async def stop(who: Operator, settings: SettingsDep) -> ConsoleStatus:
    return await _action(settings, "/api/stop", QUICK_S)


@api_router.post("/safety-stop", summary="Safety stop: the arm halts now", responses=_ACTION_ERRORS)
async def safety_stop(who: Operator, settings: SettingsDep) -> ConsoleStatus:
    return await _action(settings, "/api/safety-stop", SAFETY_S)


@api_router.post(
    "/recover", summary="Recover the arm after a safety stop", responses=_ACTION_ERRORS
)
async def recover(who: Operator, settings: SettingsDep) -> ConsoleStatus:
    return await _action(settings, "/api/recover", SLOW_S)


@api_router.post(
    "/gripper/activate",
    summary="Reset and activate the gripper (its fingers sweep open and closed)",
    responses=_ACTION_ERRORS,
)
async def activate_gripper(who: Operator, settings: SettingsDep) -> ConsoleStatus:
    return await _action(settings, "/api/gripper/activate", SLOW_S)


@api_router.post(
    "/home",
    summary="Home the arm, the cell confirmed clear",
    responses=error_responses(409, 422),
)
async def home(body: HomeIn, who: Operator, settings: SettingsDep) -> ConsoleStatus:
    link = station_link(settings)
    payload = body.model_dump(mode="json")
    return _view(await link.json("POST", "/api/home", json=payload, timeout=SLOW_S))


@api_router.post("/heartbeat", summary="The console page is open (the station's deadman)")
async def heartbeat(who: Operator, settings: SettingsDep) -> dict[str, bool]:
    await station_link(settings).call("POST", "/api/heartbeat", timeout=SAFETY_S)
    return {"ok": True}


@api_router.post(
    "/disarm", summary="Give up an armed run before it starts", responses=_ACTION_ERRORS
)
async def disarm(who: Operator, settings: SettingsDep) -> ConsoleStatus:
    return await _action(settings, "/api/disarm", QUICK_S)


@api_router.post(
    "/log",
    summary="The post-rollout form: counts and outcome; closes the episode",
    responses=error_responses(409, 422),
)
async def save_log(body: LogIn, who: Operator, settings: SettingsDep) -> ConsoleStatus:
    # both: a station that shares this database keeps the id; a station host
    # whose console has accounts of its own sends the server only the name
    payload = {**body.model_dump(mode="json"), "operator_id": who.id, "operator_name": who.username}
    return _view(await station_link(settings).json("POST", "/api/log", json=payload))


@api_router.get(
    "/reference/{camera}",
    summary="The reference photo of the armed run's initial scene",
    response_class=Response,
    responses={
        200: {"content": {"image/jpeg": {}, "image/png": {}}, "description": "the photo"},
        **error_responses(404),
    },
)
async def reference_photo(
    camera: str, who: Operator, settings: SettingsDep, session: SessionDep, store: StoreDep
) -> Response:
    if not CAMERA_NAME.match(camera):
        raise HTTPException(status.HTTP_404_NOT_FOUND, CAMERA_NOT_FOUND)
    link = station_link(settings)
    headers = {"Cache-Control": "no-store"}
    try:
        rendered = await link.call("GET", f"/api/reference/{camera}")
        return Response(rendered.content, media_type="image/jpeg", headers=headers)
    except HTTPException as exc:
        if exc.status_code != status.HTTP_404_NOT_FOUND:
            raise
    # the station renders none (a real cell): a registered photo of this scene
    work = _view(await link.json("GET", "/api/status")).work
    if work is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no run is armed: nothing to show")
    photo = await run_in_threadpool(
        find_photo,
        session,
        object_name=work.object,
        tote_side=work.tote_side,
        camera_side=work.camera_side,
        camera=camera,
    )
    if photo is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"no reference photo of {work.object} with the tote {work.tote_side.value} and "
            f"the camera {work.camera_side.value} (register one: proctor console photo add)",
        )
    data = await run_in_threadpool(store.read_bytes, photo.sha256)
    return Response(data, media_type=photo.media_type, headers=headers)


# -- the live relays ------------------------------------------------------------------------


def _operator_id(ws: WebSocket) -> int | None:
    """The operator behind a WebSocket handshake (session cookie or API
    token), or None to refuse it."""
    origin = ws.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != ws.headers.get("host"):
        return None
    app_state = ws.app.state.web
    now = app_state.clock()
    with app_state.session_factory() as session:
        authorization = ws.headers.get("authorization", "")
        if authorization.lower().startswith("bearer "):
            try:
                principal, _ = principal_from_token(
                    session=session, token=authorization[7:].strip(), method="GET", now=now
                )
            except (HTTPException, Forbidden):
                return None
        else:
            state = ws.scope.get(SCOPE_KEY)
            if not isinstance(state, SessionState):
                return None
            principal = principal_from_session(
                session=session,
                state=state,
                web=app_state.settings.web,
                secret_key=app_state.secret_key,
                now=now,
            ).principal
        if principal is None or not principal.has_role(Role.operator):
            return None
        return principal.id


async def _admit(ws: WebSocket) -> bool:
    if await run_in_threadpool(_operator_id, ws) is None:
        # before accept: the server answers the handshake with HTTP 403
        await ws.close(code=1008)
        return False
    await ws.accept()
    return True


# how a relay ends when either side goes away: not worth a traceback
_GONE = (WebSocketDisconnect, ConnectionClosed, RuntimeError, OSError)


async def _until_gone(ws: WebSocket, pump: Awaitable[None]) -> None:
    """Run ``pump`` until it ends, the browser goes away, or the sign-in it
    was opened with no longer holds (checked every ``RECHECK_S``; the page
    reconnects with its current cookie), whichever is first."""

    async def gone() -> None:
        while (await ws.receive())["type"] != "websocket.disconnect":
            pass

    async def signed_out() -> None:
        while True:
            await asyncio.sleep(RECHECK_S)
            if await run_in_threadpool(_operator_id, ws) is None:
                return

    tasks = {
        asyncio.ensure_future(pump),
        asyncio.ensure_future(gone()),
        asyncio.ensure_future(signed_out()),
    }
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(BaseException):
            await task
    for task in done:
        exc = task.exception()
        if exc is not None and not isinstance(exc, _GONE):
            log.error("console relay failed", exc_info=exc)
    with contextlib.suppress(Exception):
        await ws.close()


_UPSTREAM_ERRORS = (OSError, TimeoutError, InvalidHandshake, InvalidURI, ConnectionClosed)


@api_router.websocket("/events")
async def events(ws: WebSocket) -> None:
    if not await _admit(ws):
        return
    link = station_link(ws.app.state.web.settings)

    async def pump() -> None:
        while True:
            why = "the station closed the connection"
            try:
                async with link.stream("/api/events") as upstream:
                    async for message in upstream:
                        try:
                            view = public_status(json.loads(message))
                        except (ValueError, StationReplyInvalid) as exc:
                            log.warning("unreadable station status skipped: %s", exc)
                            continue
                        await ws.send_text(view.model_dump_json())
            except _UPSTREAM_ERRORS as exc:
                reason = "connection refused" if isinstance(exc, ConnectionRefusedError) else None
                why = StationUnreachable(link.base, reason or type(exc).__name__).detail
            except StationUnreachable as exc:  # its key file cannot be read
                why = exc.detail
            await ws.send_text(offline_status(str(why)).model_dump_json())
            await asyncio.sleep(RETRY_S)

    await _until_gone(ws, pump())


@api_router.websocket("/preview/{camera}")
async def preview(ws: WebSocket, camera: str) -> None:
    if not CAMERA_NAME.match(camera):
        await ws.close(code=1008)
        return
    if not await _admit(ws):
        return
    link = station_link(ws.app.state.web.settings)

    async def pump() -> None:
        while True:
            closed_with: int | None = None
            try:
                async with link.stream(f"/api/preview/{camera}") as upstream:
                    try:
                        async for frame in upstream:
                            if isinstance(frame, bytes):
                                await ws.send_bytes(frame)
                    finally:
                        closed_with = upstream.close_code
            except (*_UPSTREAM_ERRORS, StationUnreachable):
                pass
            if closed_with == 1008:
                # the station has no such camera: say so, and do not try again
                await ws.close(code=1008, reason=CAMERA_NOT_FOUND)
                return
            await asyncio.sleep(RETRY_S)

    await _until_gone(ws, pump())
