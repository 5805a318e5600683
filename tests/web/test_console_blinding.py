"""Blinding, end to end (issue 6 acceptance): nothing the operator console
or the station's local API sends names a policy, its owner, its endpoint or
its checkpoint.

The whole chain is real and on loopback: the web app under uvicorn (console,
campaigns API, policy gateway), a station daemon on the simulated cell
serving its local API, a campaign created and started through the admin API
with endpoint submissions for scripted demo policies, each a real policy
server reached only through the gateway. The policy servers even announce
who they are in their metadata (openpi metadata is free-form, and a real
server may well do so), so the identity really does reach the station.

Three runs go by — an operator stop and a run given up before it starts,
driven through the console, and a safety stop with the arm's recovery,
straight through the station API — plus the error paths (a policy whose endpoint is down and
is skipped, wrong states, bad logs, unknown cameras, no work left). Every
request URL, response header and body, WebSocket handshake and frame of the
console and the station API is recorded and searched for every needle.

The search is shown to bite: the same function finds every needle in what
an admin may see (the unblind answer, the user list, the checkpoint
download) and in what the policy servers send upstream of the gateway.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import httpx
import pytest
import sqlalchemy as sa
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from proctor.core import station_credentials
from proctor.core.audit import Actor
from proctor.core.db import make_engine, make_session_factory, session_scope
from proctor.core.db.models import Artifact, Episode, ObjectType, Policy, Submission, User
from proctor.core.domain import (
    ArtifactKind,
    ConformanceStatus,
    EndpointDialect,
    EpisodeState,
    PolicyKind,
    Role,
    SubmissionKind,
)
from proctor.core.station_key import HEADER, ensure_station_key
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.scheduler.campaign_work_source import CampaignWorkSource
from tests.browser import DEFAULT_PASSWORD, LiveServer
from tests.web.console_support import bind_loopback, running_station, sock_url, wait_for

CSRF_FORM = re.compile(r'name="csrf_token" value="([^"]+)"')
CSRF_META = re.compile(r'name="csrf-token" content="([^"]+)"')


# -- recording everything that comes back -----------------------------------------------------


@dataclass
class Capture:
    """Everything one side sent back: (where, bytes) pairs."""

    label: str
    items: list[tuple[str, bytes]] = field(default_factory=list)
    frames: int = 0

    def add(self, where: str, data: bytes | str) -> None:
        self.items.append((where, data.encode() if isinstance(data, str) else data))

    def url(self, url: str) -> None:
        self.add(f"URL {url}", url)
        self.add(f"URL (decoded) {url}", unquote(url))

    def http(self, r: httpx.Response) -> httpx.Response:
        where = f"{r.request.method} {r.request.url.path} → {r.status_code}"
        self.url(str(r.request.url))
        self.add(f"{where} headers", "\n".join(f"{k}: {v}" for k, v in r.headers.multi_items()))
        self.add(f"{where} body", r.content)
        return r

    def ws_open(self, url: str, ws: ClientConnection) -> None:
        self.url(url)
        assert ws.response is not None
        headers = "\n".join(f"{k}: {v}" for k, v in ws.response.headers.raw_items())
        self.add(f"WS {url} handshake headers", headers)

    def frame(self, url: str, data: bytes | str) -> None:
        self.frames += 1
        self.add(f"WS {url} frame", data)


def variants(needle: str) -> set[bytes]:
    """How a needle could be written into a response: as is, percent-encoded,
    JSON-escaped; compared case-insensitively."""
    forms = {needle, quote(needle, safe=""), quote(needle), needle.replace("/", "\\/")}
    return {f.lower().encode() for f in forms}


def search(needles: dict[str, list[str]], capture: Capture) -> list[str]:
    hits = []
    for where, blob in capture.items:
        low = blob.lower()
        for kind, values in needles.items():
            for needle in values:
                if any(v in low for v in variants(needle)):
                    hits.append(f"{capture.label}: {kind} {needle!r} in {where}")
    return hits


class Client:
    """An HTTP client whose every response goes into a capture."""

    def __init__(self, base: str, capture: Capture, headers: dict[str, str] | None = None) -> None:
        self.base = base
        self.capture = capture
        self.http = httpx.Client(base_url=base, headers=headers, follow_redirects=False, timeout=60)
        self.csrf = ""

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.capture.http(self.http.get(path, **kw))

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        headers = {"x-csrf-token": self.csrf} if self.csrf else {}
        return self.capture.http(self.http.post(path, json=body, headers=headers, **kw))

    def sign_in(self, username: str) -> None:
        page = self.get("/login")
        token = CSRF_FORM.search(page.text)
        assert token is not None
        data = {"username": username, "password": DEFAULT_PASSWORD, "csrf_token": token.group(1)}
        r = self.capture.http(self.http.post("/login", data=data))
        assert r.status_code == 303, r.text
        meta = CSRF_META.search(self.get("/").text)
        assert meta is not None
        self.csrf = meta.group(1)

    def ws_headers(self) -> dict[str, str]:
        cookie = "; ".join(f"{k}={v}" for k, v in self.http.cookies.items())
        return {"Cookie": cookie, "Origin": self.base} if cookie else {}

    def close(self) -> None:
        self.http.close()


class OpenPage:
    """The console page's heartbeat while it is open: every half second, as
    ``console.js`` sends it. Without it the station's deadman (2 s) ends a
    running episode whenever the test's own requests are slow, as they are
    on a loaded machine."""

    def __init__(self, client: Client, period_s: float = 0.5) -> None:
        self.client = client
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-page", daemon=True)

    def __enter__(self) -> OpenPage:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            with suppress(httpx.HTTPError):  # the next beat tries again, as the page does
                self.client.post("/api/console/heartbeat")
            self._stop.wait(self.period_s)


class Tap:
    """A WebSocket read to the end on a thread, every frame captured."""

    def __init__(self, capture: Capture, url: str, headers: dict[str, str]) -> None:
        self.capture = capture
        self.url = url
        self.states: list[str] = []
        self._connection = connect(url, additional_headers=headers, open_timeout=10, max_size=None)
        self.ws = self._connection.__enter__()
        capture.ws_open(url, self.ws)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for message in self.ws:
                self.capture.frame(self.url, message)
                if isinstance(message, str):
                    self.states.append(json.loads(message).get("state", ""))
        except ConnectionClosed:
            pass

    def close(self) -> None:
        self._connection.__exit__(None, None, None)
        self.thread.join(10)


def ws_url(http_base: str, path: str) -> str:
    return "ws://" + http_base.removeprefix("http://") + path


# -- the policies and who they are ---------------------------------------------------------------


class Announcing:
    """A demo policy whose metadata names itself, its owner, endpoint and checkpoint."""

    def __init__(self, inner: DemoPolicy) -> None:
        self.inner = inner
        self.identity: dict[str, str] = {}

    def metadata(self) -> dict[str, Any]:
        return {**self.inner.metadata(), **self.identity}

    def new_session(self) -> Any:
        return self.inner.new_session()


@dataclass
class Arm:
    name: str
    kind: PolicyKind
    profile: str
    owner: str = ""
    owner_display: str = ""
    owner_email: str = ""
    endpoint: str = ""
    checkpoint: str = ""
    server: PolicyServer | None = None


def register(live: LiveServer, arms: list[Arm]) -> None:
    """Owners, policies, an earlier checkpoint submission (stored, with its
    hash) and the endpoint submission the campaign evaluates."""
    store = live.app.state.web.store
    with live.db() as s:
        s.add(ObjectType(name="spoons", display_name="Spoons", prompt="put the spoons away"))
        for arm in arms:
            owner = User(username=arm.owner, display_name=arm.owner_display, email=arm.owner_email)
            s.add(owner)
            s.flush()
            policy = Policy(name=arm.name, kind=arm.kind, owner_id=owner.id)
            s.add(policy)
            s.flush()
            blob = store.put_bytes(f"weights of {arm.name} {secrets.token_hex(16)}".encode())
            arm.checkpoint = blob.sha256
            art = Artifact(
                kind=ArtifactKind.checkpoint,
                uri=blob.uri,
                sha256=blob.sha256,
                size_bytes=blob.size_bytes,
                media_type="application/octet-stream",
            )
            s.add(art)
            s.flush()
            s.add(
                Submission(
                    policy_id=policy.id,
                    kind=SubmissionKind.checkpoint,
                    checkpoint_artifact_id=art.id,
                    checkpoint_sha256=blob.sha256,
                    conformance_status=ConformanceStatus.passed,
                )
            )
            s.add(
                Submission(
                    policy_id=policy.id,
                    kind=SubmissionKind.endpoint,
                    endpoint_url=arm.endpoint,
                    endpoint_dialect=EndpointDialect.openpi,
                    conformance_status=ConformanceStatus.passed,
                )
            )


@pytest.fixture
def arms() -> Iterator[list[Arm]]:
    tag = secrets.token_hex(3)
    specs = [
        ("human-ref", PolicyKind.reference, "reference"),
        ("vla-alpha", PolicyKind.policy, "balanced"),
        ("vla-beta", PolicyKind.policy, "steady"),
        ("vla-gamma", PolicyKind.policy, "swift"),  # its endpoint will be down
    ]
    out = []
    try:
        for i, (base, kind, profile) in enumerate(specs):
            arm = Arm(f"{base}-{tag}", kind, profile)
            arm.owner = f"owner-{base}-{tag}"
            arm.owner_display = f"Dr {base.title()} {tag}"
            arm.owner_email = f"{base}.{tag}@lab.example"
            announcing = Announcing(DemoPolicy(profile, seed=i))
            arm.server = PolicyServer(announcing).start()
            arm.endpoint = f"{arm.server.url}/{arm.name}/infer"
            out.append(arm)
        yield out
    finally:
        for arm in out:
            if arm.server is not None:
                arm.server.stop()


def _announce(arms: list[Arm]) -> None:
    for arm in arms:
        assert arm.server is not None
        arm.server.policy.identity = {  # type: ignore[attr-defined]
            "model": arm.name,
            "owner": arm.owner,
            "contact": arm.owner_email,
            "endpoint": arm.endpoint,
            "checkpoint_sha256": arm.checkpoint,
        }


# -- the test ---------------------------------------------------------------------------------


def _wait_state(get_status: Callable[[], dict[str, Any]], state: str) -> dict[str, Any]:
    return wait_for(lambda: (s := get_status())["state"] == state and s, 60, f"state {state}")


def _arm_next(post: Callable[[], httpx.Response], skipped: list[str]) -> httpx.Response:
    """Ask for the next run; a run whose policy is down is skipped (503)."""
    for _ in range(4):
        r = post()
        if r.status_code == 200:
            return r
        assert r.status_code == 503, r.text
        skipped.append(r.json()["detail"])
    raise AssertionError(f"no run armed after 4 tries: {skipped}")


def test_nothing_the_console_or_the_station_api_sends_names_a_policy(
    start_live_server: Callable[..., LiveServer],
    web_db_url: str,
    arms: list[Arm],
    tmp_path: Path,
) -> None:
    station_sock = bind_loopback()
    live = start_live_server(database_url=web_db_url, web={"station_url": sock_url(station_sock)})
    register(live, arms)
    _announce(arms)
    live.add_user("root", Role.admin)
    operator_id = live.add_user("olga", Role.operator)

    needles = {
        "policy name": [a.name for a in arms],
        "owner": [a.owner for a in arms]
        + [a.owner_display for a in arms]
        + [a.owner_email for a in arms],
        "endpoint": [a.endpoint for a in arms] + [a.endpoint.split("//", 1)[1] for a in arms],
        "checkpoint": [a.checkpoint for a in arms],
    }
    for kind, values in needles.items():
        assert values and all(len(v) >= 12 for v in values), (kind, values)

    admin_cap, upstream_cap = Capture("admin"), Capture("upstream")
    console_cap, station_cap = Capture("console"), Capture("station API")
    admin = Client(live.base_url, admin_cap)
    admin.sign_in("root")

    # positive control, part 1: what each policy server sends upstream of the gateway
    for arm in arms:
        with connect(arm.endpoint, open_timeout=5, max_size=None) as ws:
            upstream_cap.ws_open(arm.endpoint, ws)
            upstream_cap.frame(arm.endpoint, ws.recv(timeout=5))
    # ... then the last arm's endpoint goes down: its runs fail their pre-flight
    dead = arms[-1]
    assert dead.server is not None
    dead.server.stop()
    dead.server = None

    # the campaign, through the admin API
    created = admin.post(
        "/api/campaigns",
        {
            "name": f"blind-{secrets.token_hex(3)}",
            "items_per_episode": 2,
            "per_item_cap_s": 20.0,
            "tau_s": 40.0,
            "episodes_per_cell": 1,
            "reference": arms[0].name,
            "policies": [a.name for a in arms[1:]],
            "objects": ["spoons"],
        },
    )
    assert created.status_code == 201, created.text
    campaign_id = created.json()["id"]
    started = admin.post(f"/api/campaigns/{campaign_id}/start")
    assert started.status_code == 200 and started.json()["slots"] == 4, started.text

    engine = make_engine(web_db_url)
    sessions = make_session_factory(engine)
    with session_scope(sessions) as s:
        # enrolled as an admin enrols a station: the gateway wants its token
        token = station_credentials.enrol(
            s, name="cell-blind", profile="sim", actor=Actor(label="test-admin")
        ).token
    source = CampaignWorkSource(
        session_factory=sessions,
        campaign=campaign_id,
        station="cell-blind",
        gateway=live.base_url,
        station_token=token,
    )
    console = Client(live.base_url, console_cap)
    # the station's own API is called as the console calls it: with the host's key
    station_key = {HEADER: ensure_station_key(live.settings.station_key_path)}
    station_api = Client(sock_url(station_sock), station_cap, station_key)
    taps: list[Tap] = []
    skipped: list[str] = []
    try:
        with (
            running_station(
                sock=station_sock,
                db_url=web_db_url,
                artifacts=live.settings.artifacts_location,
                spool=tmp_path / "spool",
                key_file=live.settings.station_key_path,
                source=source,
                name="cell-blind",
                clock="monotonic",  # real time: each stop lands at a known moment
            ),
            ExitStack() as stack,
        ):
            console.sign_in("olga")
            stack.enter_context(OpenPage(console))  # the operator has the page open
            for path in (
                "/console",
                "/static/console/console.js",
                "/static/console/console.css",
                "/static/js/proctor.js",
                *(
                    f"/static/console/layouts/tote-{t}-camera-{c}.svg"
                    for t in ("left", "right")
                    for c in ("left", "right")
                ),
            ):
                assert console.get(path).status_code == 200, path
            headers = console.ws_headers()
            taps += [
                Tap(console_cap, ws_url(live.base_url, "/api/console/events"), headers),
                Tap(console_cap, ws_url(live.base_url, "/api/console/preview/exterior"), headers),
                Tap(console_cap, ws_url(live.base_url, "/api/console/preview/wrist"), headers),
                Tap(station_cap, ws_url(station_api.base, "/api/events"), station_key),
                Tap(station_cap, ws_url(station_api.base, "/api/preview/exterior"), station_key),
            ]

            def console_status() -> dict[str, Any]:
                r = console.get("/api/console/status")
                assert r.status_code == 200
                return r.json()

            def station_status() -> dict[str, Any]:
                return station_api.get("/api/status").json()

            # 1. through the console: arm, start, an operator stop, the log
            assert console.post("/api/console/start").status_code == 409
            s = _arm_next(lambda: console.post("/api/console/next"), skipped).json()
            assert s["state"] == "armed" and s["work"]["items"] == 2
            for camera in ("exterior", "wrist"):
                assert console.get(f"/api/console/reference/{camera}").status_code == 200
            assert console.get("/api/console/reference/thermal").status_code == 422
            assert console.post("/api/console/start").status_code == 200
            wait_for(lambda: console_status().get("remaining_s") is not None, 30, "the countdown")
            assert console.post("/api/console/stop").status_code == 200
            s = _wait_state(console_status, "awaiting_log")
            assert s["proposed_outcome"] == "operator_stop"
            bad = console.post(
                "/api/console/log", {"placed": 3, "lost": 0, "dropped": 0, "outcome": "success"}
            )
            assert bad.status_code == 422
            assert console.post("/api/console/log", {"placed": "x"}).status_code == 422
            ok = console.post(
                "/api/console/log",
                {"placed": 1, "lost": 0, "dropped": 0, "outcome": "operator_stop", "notes": "ok"},
            )
            assert ok.status_code == 200, ok.text
            first_uid = s["episode"]
            # nothing homes on its own: the operator homes, the cell confirmed clear
            unconfirmed = console.post("/api/console/home", {"cell_clear": False})
            assert unconfirmed.status_code == 422, unconfirmed.text
            homed = console.post("/api/console/home", {"cell_clear": True, "open_gripper": True})
            assert homed.status_code == 200, homed.text
            assert homed.json()["robot_mode"] == "idle"
            assert console.post("/api/console/heartbeat").json() == {"ok": True}

            # 2. straight through the station API, with a safety stop and the recovery
            assert station_api.post("/api/start").status_code == 409
            _arm_next(lambda: station_api.post("/api/next"), skipped)
            assert station_api.get("/api/reference/exterior").status_code == 200
            assert station_api.get("/api/preview/wrist").status_code == 200
            assert station_api.get("/api/preview/thermal").status_code == 422
            assert station_api.post("/api/start").status_code == 200
            assert station_api.post("/api/safety-stop").status_code == 200
            s = _wait_state(station_status, "awaiting_log")
            assert s["proposed_outcome"] == "safety"
            assert station_api.post("/api/next").status_code == 409
            assert station_api.post("/api/log", {"placed": 9}).status_code == 422
            assert station_api.post("/api/log", [1, 2]).status_code == 422
            done = station_api.post(
                "/api/log", {"placed": 0, "lost": 0, "dropped": 0, "outcome": "safety"}
            )
            assert done.status_code == 200, done.text
            assert station_api.post("/api/recover").status_code == 200
            assert station_api.post("/api/home", {"cell_clear": True}).status_code == 200

            # 3. through the console again: a run given up before it starts
            _arm_next(lambda: console.post("/api/console/next"), skipped)
            assert console.post("/api/console/disarm").status_code == 200
            _wait_state(console_status, "awaiting_log")
            assert console.post("/api/console/next").status_code == 409
            saved = console.post(
                "/api/console/log",
                {"placed": 0, "lost": 0, "dropped": 0, "outcome": "operator_stop"},
            )
            assert saved.status_code == 200

            # nothing left to run (a skipped run waits before it is tried again); the
            # down policy's run may come last, and is skipped here then
            last = console.post("/api/console/next")
            if last.status_code == 503:
                skipped.append(last.json()["detail"])
                last = console.post("/api/console/next")
            assert last.status_code == 404, last.text
            assert station_api.post("/api/next").status_code == 404
            console_status()
            station_status()
            # an operator may not fetch a checkpoint at all (the request itself names
            # the hash, so it stays out of the capture)
            for arm in arms:
                assert console.http.get(f"/api/artifacts/{arm.checkpoint}").status_code == 404
            time.sleep(0.5)  # a few more preview frames on every feed
    finally:
        for tap in taps:
            tap.close()
        console.close()
        station_api.close()
        engine.dispose()

    # the chain really ran: three episodes closed, the down policy's run skipped,
    # every feed delivered frames, the operator's id on the logs
    assert len(skipped) == 1, skipped
    with live.db() as s:
        episodes = s.scalars(sa.select(Episode).where(Episode.campaign_id == campaign_id)).all()
        assert sorted(e.state for e in episodes) == [EpisodeState.closed] * 3
        first = next(e for e in episodes if e.uid == first_uid)
        assert first.operator_id == operator_id
    assert all(tap.capture.frames for tap in taps)
    assert {"armed", "running", "awaiting_log", "idle"} <= set(taps[0].states)

    # positive control, part 2: what only an admin may see
    unblinded = admin.post(
        f"/api/campaigns/{campaign_id}/unblind", {"reason": "blinding test: positive control"}
    )
    assert unblinded.status_code == 200, unblinded.text
    assert admin.get("/api/users").status_code == 200
    for arm in arms:
        download = admin.get(f"/api/artifacts/{arm.checkpoint}")
        assert download.status_code == 200 and arm.checkpoint in download.headers["etag"]
    admin.close()

    control = search(needles, admin_cap) + search(needles, upstream_cap)
    for kind, values in needles.items():
        for value in values:
            assert any(f"{kind} {value!r}" in hit for hit in control), (
                f"the search cannot find {kind} {value!r} even where it is shown"
            )
    admin_only = search(needles, admin_cap)
    for arm in arms:
        for value in (arm.name, arm.owner, arm.owner_email, arm.checkpoint):
            assert any(repr(value) in hit for hit in admin_only), value

    # the test proper: nowhere in what the console and the station API sent
    assert console_cap.items and station_cap.items
    assert search(needles, console_cap) == []
    assert search(needles, station_cap) == []
