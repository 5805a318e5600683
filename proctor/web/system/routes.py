"""Health and the interactive API documentation (served from local files)."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

import anyio
import anyio.to_thread
import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from proctor import __version__
from proctor.core.db import migrate
from proctor.web.state import AppState
from proctor.web.templating import render

api_router = APIRouter(tags=["system"])
page_router = APIRouter()


class Health(BaseModel):
    status: Literal["ok", "degraded", "unavailable"]
    version: str
    database: Literal["ok", "unreachable"]
    # the database's schema revision and the one this code expects
    schema_revision: str | None
    schema_head: str | None
    detail: str = ""


@api_router.get(
    "/health",
    response_model=Health,
    summary="Is the server up, and its database reachable and current",
    responses={503: {"model": Health, "description": "database unreachable"}},
)
async def health(request: Request) -> Response:
    # no dependency: a sync one (proctor.web.deps.get_app_state) would need a worker thread
    app: AppState = request.app.state.web
    head = schema_head()
    try:
        # threads and a connection of its own (not the pool): it must answer while
        # the requests have every pooled connection and every worker thread
        # (proctor/web/limits.py)
        revision = await anyio.to_thread.run_sync(
            _schema_revision, app.health_engine, limiter=app.health_threads
        )
    except sa.exc.SQLAlchemyError as exc:
        body = Health(
            status="unavailable",
            version=__version__,
            database="unreachable",
            schema_revision=None,
            schema_head=head,
            detail=f"database unreachable ({type(exc).__name__})",
        )
        return JSONResponse(body.model_dump(), status_code=503)
    current = revision == head
    body = Health(
        status="ok" if current else "degraded",
        version=__version__,
        database="ok",
        schema_revision=revision,
        schema_head=head,
        detail=""
        if current
        else "the database schema is not at this code's revision: run `proctor db upgrade`",
    )
    return JSONResponse(body.model_dump())


def _schema_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
        return MigrationContext.configure(conn).get_current_revision()


@lru_cache(maxsize=1)
def schema_head() -> str | None:
    return migrate.head()


@page_router.get("/api/docs")
def api_docs(request: Request) -> Response:
    return render(request, "system/api_docs.html", {})
