"""The console-only surface (``web.surface = "station_console"``) of a station host.

It serves the operator console, sign-in and sign-out, health and the docs of
what it serves; every other route of the server answers 404 there, and no
background work of the server (the station sweep, the snapshot worker) runs.
The default surface, ``server``, serves every domain in ``DOMAINS`` as before.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import get_args

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import iter_route_contexts
from starlette.routing import Mount as StarletteMount
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from proctor.core.domain import Role
from proctor.core.settings import Settings, WebSettings, load_settings
from proctor.web.app import ALL_ROUTERS, DOMAINS, SURFACES, create_app
from tests.browser import LiveServer
from tests.web.conftest import Web, login, page_csrf, web_app

SECRET = "test-secret-key-" + "x" * 32
STATIC_RE = re.compile(r'(?:src|href)="(/static/[^"?]+)')


def _settings(web_db_url: str, tmp_path: Path, surface: str) -> Settings:
    return load_settings(
        env="test",
        data_dir=tmp_path,
        database_url=web_db_url,
        secret_key=SECRET,
        web={"surface": surface},
    )


@pytest.fixture
def console_host(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    settings = _settings(web_db_url, tmp_path, "station_console")
    yield from web_app(settings)


def _served(app: FastAPI) -> set[tuple[str, str]]:
    """(method, path) of every route; WebSockets as method "WS"."""
    found = set()
    for rc in iter_route_contexts(app.routes):
        if isinstance(rc.original_route, StarletteMount) or rc.path is None:
            continue
        for method in rc.methods or {"WS"}:
            if method != "HEAD":
                found.add((method, rc.path))
    return found


def _concrete(path: str) -> str:
    # any value will do: the console host must not route the path at all
    return re.sub(r"\{[^}]+\}", "1", path)


def test_every_surface_named_by_the_setting_is_registered() -> None:
    assert set(SURFACES) == set(get_args(WebSettings.model_fields["surface"].annotation))


def test_the_server_surface_serves_every_router_of_every_domain(
    web_db_url: str, tmp_path: Path
) -> None:
    """The default serves what it served before the surfaces: each domain's
    routers in ``DOMAINS`` order, the gateway, and its background work."""
    server = SURFACES["server"]
    assert [m.module for m in server.mounts] == list(DOMAINS)
    assert server.gateway and server.snapshot_worker and server.station_sweep
    expected = {("GET", "/api/openapi.json"), ("WS", "/policy/{handle}")}
    for module in DOMAINS:
        routers = {n: r for n, r in vars(module).items() if isinstance(r, APIRouter)}
        assert set(routers) - {"landing_router"} <= set(
            next(m.routers or ALL_ROUTERS for m in server.mounts if m.module is module)
        )
        for name, router in routers.items():
            if name == "landing_router":  # the console host's `/`, not the server's
                continue
            prefix = "/api" if name == "api_router" else ""
            for rc in iter_route_contexts(router.routes):
                for method in (rc.methods or {"WS"}) - {"HEAD"}:
                    expected.add((method, prefix + str(rc.path)))
    app = create_app(_settings(web_db_url, tmp_path, "server"))
    try:
        assert _served(app) == expected
        assert app.state.web.snapshot_worker.closed is False
    finally:
        app.state.web.engine.dispose()


def test_a_local_operator_signs_in_and_drives_the_console_on_the_console_host(
    console_host: Web,
) -> None:
    console_host.add_user("alice", Role.operator)
    client = console_host.client()
    landing = client.get("/")
    assert landing.status_code == 303 and landing.headers["location"] == "/console"
    assert login(client, "alice", next="/console").headers["location"] == "/console"
    page = client.get("/console")
    assert page.status_code == 200
    assets = set(STATIC_RE.findall(page.text))
    assert {"/static/console/console.js", "/static/css/proctor.css"} <= assets
    for asset in assets:
        assert client.get(asset).status_code == 200, asset
    # the layout links to nothing this host does not serve
    assert 'href="/leaderboard"' not in page.text and 'href="/account"' not in page.text
    # no station daemon listens here: the console says so
    status = client.get("/api/console/status")
    assert status.status_code == 200 and status.json()["state"] == "offline"
    csrf = {"x-csrf-token": page_csrf(client, "/console")}
    # an action is relayed (and finds no station), not refused by the surface
    heartbeat = client.post("/api/console/heartbeat", headers=csrf)
    assert heartbeat.status_code == 503 and "station is not answering" in heartbeat.text
    out = client.post("/logout", data={"csrf_token": csrf["x-csrf-token"]})
    assert out.status_code == 303
    assert client.get("/api/console/status").status_code == 401
    assert client.get("/api/health").status_code == 200


def test_every_other_route_of_the_server_answers_404_on_the_console_host(
    console_host: Web, web_db_url: str, tmp_path: Path
) -> None:
    server = create_app(_settings(web_db_url, tmp_path / "server", "server"))
    try:
        missing = _served(server) - _served(console_host.app)
        static = [
            rc.path
            for rc in iter_route_contexts(server.routes)
            if isinstance(rc.original_route, StarletteMount) and rc.path != "/static"
        ]
    finally:
        server.state.web.engine.dispose()
    console_host.add_user("root", Role.admin, Role.operator)
    client = console_host.client()
    login(client, "root")
    csrf = page_csrf(client, "/console")
    # the whole of the leaderboard, explorer, submissions, admin, station API
    assert len(missing) > 90
    answers = {}
    for method, path in sorted(missing - {("WS", "/policy/{handle}")}):
        if method == "WS":
            with pytest.raises(WebSocketDisconnect), client.websocket_connect(_concrete(path)):
                pass
            continue
        r = client.request(method, _concrete(path), headers={"x-csrf-token": csrf})
        answers[(method, path)] = r.status_code
    assert {k: v for k, v in answers.items() if v != 404} == {}
    # another domain's static files are not served either
    assert [p for p in static if p != "/static/console"]
    for prefix in static:
        if prefix != "/static/console":
            assert client.get(f"{prefix}/anything.js").status_code == 404, prefix


@pytest.mark.parametrize(
    "path",
    [
        "/leaderboard",
        "/api/leaderboard",
        "/submit",
        "/admin/users",
        "/admin/runners",
        "/campaigns",
        "/review",
        "/account",
        "/api/me",
        "/episodes/E-1",
        "/api/episodes/E-1",
    ],
)
def test_the_servers_pages_and_apis_are_not_found(console_host: Web, path: str) -> None:
    assert console_host.client().get(path).status_code == 404


def test_the_station_api_and_the_gateway_are_not_served(console_host: Web) -> None:
    client = console_host.client()
    assert client.post("/api/station/v1/hello", json={}).status_code == 404
    # the router's "no such route", as for an HTTP path: not the gateway's refusal (403)
    for path in ("/policy/abc", "/no/such/socket"):
        with pytest.raises(WebSocketDenialResponse) as denied, client.websocket_connect(path):
            pass
        assert denied.value.status_code == 404, path
        assert denied.value.json() == {"detail": "Not Found"}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_an_unknown_websocket_path_is_404_over_the_wire(
    start_live_server: Callable[..., LiveServer],
) -> None:
    """Under uvicorn, whose close before accepting is a 403: the console host's
    unknown WebSocket paths answer the handshake 404, its own socket is there."""
    server = start_live_server(web={"surface": "station_console"})
    ws_base = server.base_url.replace("http://", "ws://", 1)
    errors = _Records()
    server_log = logging.getLogger("uvicorn.error")
    server_log.addHandler(errors)
    try:
        for path in ("/policy/abc", "/no/such/socket"):
            with pytest.raises(InvalidStatus) as refused:
                connect(ws_base + path, open_timeout=10).close()
            assert refused.value.response.status_code == 404, path
            assert refused.value.response.body == b'{"detail":"Not Found"}'
    finally:
        server_log.removeHandler(errors)
    # uvicorn's spurious "returned without completing handshake" is not logged
    assert [r.getMessage() for r in errors.records if r.levelno >= logging.ERROR] == []
    # a path the console serves is not "not found": it refuses a stranger (403)
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_base + "/api/console/events", open_timeout=10).close()
    assert refused.value.response.status_code == 403


def test_no_background_work_of_the_server_runs_on_the_console_host(console_host: Web) -> None:
    with console_host.client():  # the lifespan: start-up ran
        names = {t.name for t in threading.enumerate()}
        assert "station-sweep" not in names
        assert console_host.app.state.web.snapshot_worker.closed
        console_host.app.state.web.snapshot_worker.request(1)
        assert "snapshot-worker" not in {t.name for t in threading.enumerate()}


def test_the_console_hosts_openapi_lists_only_what_it_serves(console_host: Web) -> None:
    spec = console_host.client().get("/api/openapi.json").json()
    served = {p for _, p in _served(console_host.app) if p.startswith("/api/")}
    assert set(spec["paths"]) <= served
    assert {p for p in spec["paths"] if not p.startswith("/api/console/")} == {"/api/health"}
    assert [t["name"] for t in spec.get("tags", [])] == ["system"]


def test_a_router_named_by_hand_that_a_domain_lacks_is_refused_at_start(
    web_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in a surface's router names would silently 404 those routes:
    building the app says which name the module lacks instead."""
    from proctor.web.app import Mount, Surface
    from proctor.web.console import routes as console
    from proctor.web.system import routes as system

    typo = Surface(
        mounts=(Mount(system), Mount(console, ("api_router", "landing_routr"))),
        gateway=False,
        snapshot_worker=False,
        station_sweep=False,
    )
    monkeypatch.setitem(SURFACES, "station_console", typo)  # type: ignore[index]
    with pytest.raises(RuntimeError, match=r"console\.routes does not define \['landing_routr'\]"):
        create_app(_settings(web_db_url, tmp_path, "station_console"))
