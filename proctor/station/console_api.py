"""The station's local API, for the operator console (loopback only).

==========================  ===============================================
``GET  /api/status``         state, run code, object, items, configuration,
                             countdown, proposed outcome, notices
``POST /api/next``           claim the next run and arm it (the arm must be
                             at home: 409 says to home it first)
``POST /api/start``          start the armed episode (watched by the
                             console-link deadman: ``/api/heartbeat``)
``POST /api/stop``           operator stop
``POST /api/safety-stop``    safety stop, in every state (homing included):
                             the arm halts now and stays latched, the gripper holds
``POST /api/recover``        clear an arm error after a safety stop (explicit;
                             moves nothing; the gripper is left as it is)
``POST /api/home``           home the arm: ``{cell_clear: true, open_gripper}``
                             (the operator's confirmation; 422 without it)
``POST /api/heartbeat``      the console is there (every 0.5 s while open)
``POST /api/gripper/activate`` reset and activate the gripper (explicit, hands
                             clear: the fingers sweep open and closed)
``POST /api/disarm``         give up an armed, not yet started episode
``POST /api/log``            the post-rollout log: ``{placed, lost, dropped,
                             outcome, notes}`` and optionally who wrote it:
                             ``operator_id`` (the console's user, an id in
                             the database a station without an uplink shares)
                             and ``operator_name`` (that user's name; with an
                             uplink, the server gets ``<station>:<name>``);
                             422 names the bad field
``GET  /api/preview/{cam}``  the latest frame of ``exterior`` or ``wrist`` (JPEG)
``GET  /api/reference/{cam}`` the armed run's initial scene as rendered when it
                             was armed (JPEG; simulated cell only, else 404)
``WS   /api/events``         status as JSON text, on every change (≥ 1 Hz)
``WS   /api/preview/{cam}``  binary JPEG frames at ``api.preview_fps``
==========================  ===============================================

Every route, HTTP and WebSocket, answers the operator console alone
(``proctor.station.api_guard``, one middleware over the whole app): a request
must carry the host's station key (``X-Proctor-Station-Key``, from the 0600
file ``settings.station_key_file``), name the daemon's own loopback address
in ``Host``, carry no ``Origin`` (nor ``Sec-Fetch-Site``), and send any body
as ``application/json``; else 401, 403 or 415 naming the header.

Errors are JSON ``{"detail": ..., "field": ...}`` (field only for
validation): 409 when the station is in the wrong state, 404 when there is
no work, 503 when the policy failed its pre-flight, 422 for a bad log.
Nothing here carries a policy's URL, name, owner or checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from proctor.core import episode_record
from proctor.core.errors import FieldError, ProctorError, UsageError, http_answer
from proctor.station.api_guard import StationApiGuard, allowed_names
from proctor.station.daemon import NoWork, StationDaemon

log = logging.getLogger(__name__)


async def proctor_error(request: Request, exc: ProctorError) -> JSONResponse:
    """A service error as JSON: the status and the field come from the
    exception itself (``proctor.core.errors.http_answer``), as in the web app."""
    answer = http_answer(exc)
    body: dict[str, Any] = {"detail": answer.detail}
    if answer.field is not None:
        body["field"] = answer.field
    return JSONResponse(body, status_code=answer.status, headers=answer.headers)


def create_app(daemon: StationDaemon, *, key: str) -> FastAPI:
    """The local API over ``daemon``, answering only requests that carry
    ``key`` (the host's station key) and pass the rest of the guard."""
    app = FastAPI(
        title="Proctor station",
        description="The station daemon's local API for the operator console.",
        docs_url=None,
        redoc_url=None,
    )

    app.add_exception_handler(ProctorError, proctor_error)  # type: ignore[arg-type]
    # app-wide, so that no route (nor one added later) is reached around it
    app.add_middleware(StationApiGuard, key=key, names=allowed_names(daemon.config.api.host))

    @app.get("/api/status")
    async def status() -> dict[str, Any]:
        # off the event loop: the status reads the robot's mode, and the arm's
        # lock can be held for a moment by a stop (the safety stop must not wait)
        return await run_in_threadpool(daemon.status)

    @app.post("/api/next")
    async def next_run() -> dict[str, Any]:
        return await run_in_threadpool(daemon.next_run)

    @app.post("/api/start")
    async def start() -> dict[str, Any]:
        return await run_in_threadpool(lambda: daemon.start(from_console=True))

    @app.post("/api/heartbeat")
    async def heartbeat() -> dict[str, Any]:
        # on the event loop, never queued behind a slow action
        return daemon.heartbeat()

    @app.post("/api/home")
    async def home(request: Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except ValueError:
            raise FieldError("body", "expected a JSON object") from None
        if not isinstance(data, dict):
            raise FieldError("body", "expected a JSON object")
        clear, grip = data.get("cell_clear"), data.get("open_gripper", False)
        if clear is not True:
            raise FieldError(
                "cell_clear", "homing moves the arm across the cell: confirm the cell is clear"
            )
        if not isinstance(grip, bool):
            raise FieldError("open_gripper", "must be true or false")
        return await run_in_threadpool(
            lambda: daemon.home_arm(cell_clear=True, open_gripper=grip, from_console=True)
        )

    @app.post("/api/stop")
    async def stop() -> dict[str, Any]:
        return daemon.stop(safety=False)

    @app.post("/api/safety-stop")
    async def safety_stop() -> dict[str, Any]:
        # not through the thread pool: a safety stop must not queue behind anything
        return daemon.stop(safety=True)

    @app.post("/api/recover")
    async def recover() -> dict[str, Any]:
        return await run_in_threadpool(daemon.recover_arm)

    @app.post("/api/gripper/activate")
    async def activate_gripper() -> dict[str, Any]:
        return await run_in_threadpool(daemon.activate_gripper)

    @app.post("/api/disarm")
    async def disarm() -> dict[str, Any]:
        return await run_in_threadpool(daemon.disarm)

    @app.post("/api/log")
    async def post_log(request: Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except ValueError:
            raise episode_record.LogRejected("body", "expected a JSON object") from None
        if not isinstance(data, dict):
            raise episode_record.LogRejected("body", "expected a JSON object")
        operator_id = data.pop("operator_id", None)
        if operator_id is not None and (
            isinstance(operator_id, bool) or not isinstance(operator_id, int) or operator_id < 1
        ):
            raise episode_record.LogRejected(
                "operator_id", "must be a user id (a positive integer)"
            )
        operator_name = episode_record.check_operator_name(data.pop("operator_name", None))
        return await run_in_threadpool(daemon.submit_log, data, operator_id, operator_name)

    @app.get("/api/preview/{camera}")
    async def preview(camera: str) -> Response:
        jpeg = await run_in_threadpool(daemon.preview_jpeg, camera)
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})

    @app.get("/api/reference/{camera}")
    async def reference(camera: str) -> Response:
        jpeg = daemon.reference_jpeg(camera)
        return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})

    @app.websocket("/api/events")
    async def events(ws: WebSocket) -> None:
        await ws.accept()
        version = -1
        try:
            while True:
                version = daemon.version
                await ws.send_json(await run_in_threadpool(daemon.status))
                await run_in_threadpool(daemon.wait_change, version, 1.0)
        except (WebSocketDisconnect, RuntimeError):
            return

    @app.websocket("/api/preview/{camera}")
    async def preview_stream(ws: WebSocket, camera: str) -> None:
        await ws.accept()
        period = 1.0 / daemon.config.api.preview_fps
        try:
            while True:
                try:
                    jpeg = await run_in_threadpool(daemon.preview_jpeg, camera)
                except NoWork:
                    jpeg = None
                except UsageError as exc:
                    await ws.close(code=1008, reason=str(exc)[:120])
                    return
                if jpeg is not None:
                    await ws.send_bytes(jpeg)
                await asyncio.sleep(period)
        except (WebSocketDisconnect, RuntimeError):
            with contextlib.suppress(Exception):
                await ws.close()
            return

    return app
