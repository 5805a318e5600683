"""The web app: ``create_app(settings)`` builds it; nothing happens at import.

Domains are folders ``proctor/web/<domain>/`` whose ``routes.py`` defines
``api_router`` (JSON, mounted under ``/api``, documented in OpenAPI) and/or
``page_router`` (HTML pages, not in OpenAPI). They are listed explicitly in
``DOMAINS`` below, in the order their routes are matched. What one process
serves is its surface (``settings.web.surface``, a key of ``SURFACES``): the
whole server, or a station host's operator console alone. A domain's
templates live in ``proctor/web/<domain>/templates/`` (rendered as
``"<domain>/<file>.html"``) and its static files in ``proctor/web/<domain>/static/``
(served at ``/static/<domain>/...``). See ``proctor/web/README.md``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.staticfiles import StaticFiles
from sqlalchemy.pool import NullPool, QueuePool

from proctor import __version__
from proctor.core import netguard
from proctor.core.artifacts import open_store
from proctor.core.db.engine import make_engine, make_session_factory
from proctor.core.db.types import utcnow
from proctor.core.settings import Settings
from proctor.scheduler.gateway import GatewayConfig, gateway_router
from proctor.scheduler.station_sweeps import StationSweep
from proctor.web.accounts import routes as accounts
from proctor.web.artifacts import routes as artifacts
from proctor.web.artifacts.service import ArtifactCache
from proctor.web.auth.passwords import Passwords
from proctor.web.auth.sessions import SessionCookieMiddleware, resolve_secret_key
from proctor.web.auth.throttle import ThrottlePolicy
from proctor.web.campaigns import api as campaigns
from proctor.web.campaigns import routes as campaign_pages
from proctor.web.console import routes as console
from proctor.web.errors import install_error_handlers
from proctor.web.explorer import routes as explorer
from proctor.web.explorer.export import EpisodeLocks
from proctor.web.home import routes as home
from proctor.web.leaderboard import routes as leaderboard
from proctor.web.limits import engine_options, install_limits, size_worker_threads
from proctor.web.middleware import SecurityHeadersMiddleware
from proctor.web.policies import routes as policies
from proctor.web.review import routes as review
from proctor.web.shared_cache import GenerationWatcher, LocalCommits, SharedCacheMiddleware
from proctor.web.snapshots import routes as snapshots
from proctor.web.snapshots.service import ResultCache
from proctor.web.snapshots.subset_work import SubsetWork
from proctor.web.snapshots.worker import WORKER_KEY, SnapshotWorker
from proctor.web.startup import recover
from proctor.web.state import AppState, Clock
from proctor.web.stationapi import routes as stationapi
from proctor.web.stations import routes as stations
from proctor.web.submissions import routes as submissions
from proctor.web.submissions.queue import WORKERS_KEY, ConformanceWorkers
from proctor.web.system import routes as system
from proctor.web.templating import SHARED_STATIC, make_templates, static_fingerprint

log = logging.getLogger(__name__)

# Every domain whose routes the app serves, in matching order. Add yours here.
DOMAINS: tuple[ModuleType, ...] = (
    system,
    accounts,
    home,
    campaigns,
    campaign_pages,
    artifacts,
    console,
    leaderboard,
    policies,
    explorer,
    review,
    snapshots,
    stations,
    stationapi,
    submissions,
)


@dataclass(frozen=True)
class Mount:
    """One domain as a surface serves it: ``routers`` name the routes module's
    routers to include, in this order, those it defines (``api_router`` under
    ``/api``, in OpenAPI; any other one as pages, outside it)."""

    module: ModuleType
    # the routers to include, each of which the module must define; None: all
    # of the usual ones it defines (sign-in and sign-out are accounts' own
    # router, for the surfaces that serve them without the rest of the domain)
    routers: tuple[str, ...] | None = None


ALL_ROUTERS = ("api_router", "sign_in_router", "page_router")


@dataclass(frozen=True)
class Surface:
    """What one kind of host serves and runs. Whatever is not mounted answers 404."""

    mounts: tuple[Mount, ...]
    # the blinded policy gateway (ws://<host>/policy/<handle>)
    gateway: bool
    # leaderboard recomputation after a write (proctor.web.snapshots.worker)
    snapshot_worker: bool
    # lapsed claims and abandoned uploads (proctor.scheduler.station_sweeps)
    station_sweep: bool


# keyed by settings.web.surface
SURFACES: Mapping[str, Surface] = {
    # everything: the server that campaigns, stations and the public reach
    "server": Surface(
        mounts=tuple(Mount(m) for m in DOMAINS),
        gateway=True,
        snapshot_worker=True,
        station_sweep=True,
    ),
    # a station host (deploy/station/console.toml): its operators sign in to the
    # console over the host's own database; no campaign, station API or public page
    # lives there, so none is served
    "station_console": Surface(
        mounts=(
            Mount(system),
            Mount(accounts, ("sign_in_router",)),
            Mount(console, ("api_router", "page_router", "landing_router")),
        ),
        gateway=False,
        snapshot_worker=False,
        station_sweep=False,
    ),
}

OPENAPI_TAGS = [
    {"name": "system", "description": "Health of the server and its database."},
    {
        "name": "station",
        "description": "The station API (v1), for station hosts with their own token "
        "(`Authorization: Bearer pst_…`): register and heartbeat, claim blinded runs, "
        "report episodes, upload artifacts. Nothing in it names a policy.",
    },
    {"name": "accounts", "description": "Users, roles, API tokens, the audit log."},
    {"name": "campaigns", "description": "Campaigns, their sealed allocation, unblinding."},
    {
        "name": "recordings",
        "description": "Episode recordings: artifact bytes (with Range), frame tables, "
        "telemetry. Public once the campaign is released; staff only before.",
    },
    {
        "name": "leaderboard",
        "description": "Leaderboards read from stored snapshots: released campaigns are "
        "public; unreleased ones are admin previews with blinded arm labels.",
    },
    {
        "name": "snapshots",
        "description": "Admin: recompute leaderboard snapshots now or in the background.",
    },
    {
        "name": "review",
        "description": "The review queue and the reviewer's decisions on detected placements "
        "(reviewers; flagged counts: admins). Every decision is an append-only record.",
    },
    {
        "name": "stations",
        "description": "Admin: stations' credentials for the policy gateway (enrol, rotate, "
        "revoke); a token is shown once, only its hash is stored.",
    },
    {
        "name": "submissions",
        "description": "The submitter portal: resumable checkpoint uploads, endpoint "
        "registration, conformance reports, campaign progress and private results.",
    },
]


def _domain_name(routes_module: ModuleType) -> str:
    # web.<domain>.routes -> <domain>
    return routes_module.__name__.split(".")[-2]


def _domain_dir(routes_module: ModuleType) -> Path:
    assert routes_module.__file__ is not None
    return Path(routes_module.__file__).resolve().parent


def api_routes(app: FastAPI) -> list[Any]:
    """Every FastAPI route the app serves, with the path, methods and
    dependency tree it is served with (included routers flattened:
    FastAPI >= 0.16x keeps them nested in ``app.routes``)."""
    return [rc for rc in iter_route_contexts(app.routes) if isinstance(rc.original_route, APIRoute)]


def _include_routes(app: FastAPI, surface: Surface, settings: Settings) -> None:
    for mount in surface.mounts:
        wanted = mount.routers or ALL_ROUTERS
        names = [n for n in wanted if getattr(mount.module, n, None) is not None]
        # a router named by hand and missing is a typo whose routes would 404
        missing = sorted(set(mount.routers or ()) - set(names))
        if missing:
            raise RuntimeError(f"{mount.module.__name__} does not define {missing}")
        if not names:
            raise RuntimeError(f"{mount.module.__name__} defines none of {wanted}")
        for name in names:
            router = getattr(mount.module, name)
            if name == "api_router":
                app.include_router(router, prefix="/api")
            else:
                app.include_router(router, include_in_schema=False)
    # the OpenAPI spec describes the tags of what is served, no other
    tags = {t for r in api_routes(app) for t in r.original_route.tags}
    app.openapi_tags = [t for t in OPENAPI_TAGS if t["name"] in tags]
    if not surface.gateway:
        return
    web = app.state.web
    # the blinded policy gateway: ws://<server>/policy/<handle> (proctor/scheduler/gateway.py)
    app.include_router(
        gateway_router(
            GatewayConfig(
                session_factory=web.session_factory,
                encryption_key=settings.encryption_key,
                allow_private_endpoints=netguard.private_endpoints_allowed(settings),
                trust_station_header=settings.scheduler.trust_station_header,
            )
        )
    )


def create_app(
    settings: Settings,
    *,
    clock: Clock = utcnow,
    throttle: ThrottlePolicy | None = None,
) -> FastAPI:
    """Build the app for ``settings``. ``clock`` is the time source for
    sessions, tokens and throttling (tests pass a controllable one)."""
    secret_key = resolve_secret_key(settings)
    surface = SURFACES[settings.web.surface]
    domains = {_domain_name(m.module): _domain_dir(m.module) for m in surface.mounts}
    static_dirs = [SHARED_STATIC, *(d / "static" for d in domains.values())]
    static_version = static_fingerprint([d for d in static_dirs if d.is_dir()])

    engine = make_engine(settings.db_url, **engine_options(settings.web))
    # /api/health's own way in: a connection opened for each check, so that it
    # answers (and tells the truth about the database) when the pool is taken
    health_engine = make_engine(settings.db_url, poolclass=NullPool)
    # what this app keeps in memory is its own (proctor.web.state): the after-commit
    # hooks of its sessions find its worker and its child processes in the
    # sessions' info, and its writing commits are counted for its shared cache
    session_factory = make_session_factory(engine)
    snapshot_worker = SnapshotWorker(session_factory)
    if not surface.snapshot_worker:
        # closed from the start: nothing it is asked for is queued, no thread starts
        snapshot_worker.close()
    conformance_workers = ConformanceWorkers(session_factory)
    session_factory.configure(info={WORKER_KEY: snapshot_worker, WORKERS_KEY: conformance_workers})
    local_commits = LocalCommits()
    local_commits.count_commits_of(session_factory)
    # the shared cache's own way in, one connection: it reads one row twice a
    # second and must not wait behind requests for the pool
    watcher = GenerationWatcher(
        make_engine(settings.db_url, poolclass=QueuePool, pool_size=1, max_overflow=0),
        check_s=settings.web.cache_check_s,
        commits=local_commits,
    )

    store = open_store(
        settings.artifacts_location, public_endpoint=settings.artifacts_public_endpoint
    )
    # lapsed claims and abandoned uploads, swept when no station calls
    # (proctor.scheduler.station_sweeps)
    station_sweep = StationSweep(session_factory, store, settings.scheduler, clock)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        size_worker_threads(settings.web)
        # repair what a crash left (proctor.web.startup) before the first request
        await run_in_threadpool(recover, app.state.web)
        if surface.station_sweep:
            station_sweep.start()
        yield
        # a pass under way ends before the engine it uses is disposed
        await run_in_threadpool(station_sweep.close)
        # this app's worker only; its conformance checks run on (proctor.web.submissions.queue)
        snapshot_worker.close()
        engine.dispose()
        watcher.engine.dispose()

    app = FastAPI(
        title="Proctor",
        version=__version__,
        description="Blinded, statistically honest evaluation of robot policies. "
        "Authenticate scripts with an API token (`Authorization: Bearer prt_…`); "
        "create one on your account page or with `proctor user token create`.",
        openapi_url="/api/openapi.json",
        docs_url=None,
        redoc_url=None,
        openapi_tags=OPENAPI_TAGS,
        lifespan=lifespan,
    )
    app.state.web = AppState(
        settings=settings,
        engine=engine,
        health_engine=health_engine,
        session_factory=session_factory,
        store=store,
        station_sweep=station_sweep,
        templates=make_templates(domains, static_version),
        passwords=Passwords.for_settings(settings),
        secret_key=secret_key,
        clock=clock,
        throttle=throttle or ThrottlePolicy(),
        static_version=static_version,
        results=ResultCache(),
        subsets=SubsetWork(
            permits=settings.web.subset_analyses, capacity=settings.web.subset_cache_entries
        ),
        artifact_cache=ArtifactCache(),
        rrd_locks=EpisodeLocks(),
        snapshot_worker=snapshot_worker,
        local_commits=local_commits,
        conformance_workers=conformance_workers,
        # health's two threads of its own (proctor.web.system.routes)
        health_threads=anyio.CapacityLimiter(2),
    )

    _include_routes(app, surface, settings)
    # a domain's own static files first: the shared mount would swallow their paths
    for name, directory in domains.items():
        if (directory / "static").is_dir():
            app.mount(f"/static/{name}", StaticFiles(directory=directory / "static"))
    app.mount("/static", StaticFiles(directory=SHARED_STATIC), name="static")

    # what the layout links to: only pages this surface serves (proctor.web.templating)
    app.state.web.served_paths = frozenset(
        rc.path for rc in iter_route_contexts(app.routes) if rc.path is not None
    )
    install_error_handlers(app)
    web = settings.web
    # served over HTTPS: secure (and __Host- named) cookies, and HSTS
    https = web.secure_cookies if web.secure_cookies is not None else settings.env == "prod"
    app.add_middleware(
        SessionCookieMiddleware,
        secret_key=secret_key,
        secure=https,
        max_age_s=web.session_max_hours * 3600,
    )
    install_limits(app, web)
    app.add_middleware(SecurityHeadersMiddleware, hsts=https)
    # outermost: it answers from what the layers inside produced, headers included
    app.add_middleware(SharedCacheMiddleware, seconds=web.shared_cache_s, watcher=watcher)
    return app
