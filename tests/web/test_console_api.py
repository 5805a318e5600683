"""The operator console over HTTP and WebSocket (Starlette's TestClient into
the real app), talking to a real station daemon on the simulated cell that
serves its local API on a loopback port, on both databases.

The station's socket is bound before the app is built (its URL goes into the
settings) but only listens once a test asks for ``station``: until then the
console sees a station that refuses connections, i.e. one that is down."""

from __future__ import annotations

import io
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from PIL import Image
from starlette.websockets import WebSocketDisconnect

from proctor.core.artifacts import open_store
from proctor.core.db import make_engine, make_session_factory
from proctor.core.db.models import Episode, EpisodeEvent
from proctor.core.domain import EpisodeState, Outcome, Role, Side
from proctor.core.settings import Settings, load_settings
from proctor.core.station_key import ensure_station_key
from proctor.station.daemon import StationDaemon
from proctor.web.app import api_routes
from proctor.web.console.photos import find_photo, register_photo
from proctor.web.console.view import ConsoleStatus, public_status
from tests.web.conftest import Web, login, page_csrf
from tests.web.console_support import (
    adhoc_source,
    demo_policies,
    running_station,
    sock_url,
    wait_for,
)
from tests.web.console_support import station_sock as station_sock  # the fixture


@pytest.fixture
def web_settings(web_db_url: str, tmp_path: Path, station_sock: socket.socket) -> Settings:
    """The conftest's settings, pointed at this test's station, on a host whose
    daemon has run before: its station key file is there (the daemon made it)."""
    settings = load_settings(
        env="test",
        data_dir=tmp_path,
        database_url=web_db_url,
        secret_key="test-secret-key-" + "x" * 32,
        web={"station_url": sock_url(station_sock)},
    )
    ensure_station_key(settings.station_key_path)
    return settings


@pytest.fixture
def station_clock() -> str:
    """The simulated cell's clock: virtual (as fast as it computes) unless a test
    needs real time — to stop a run at a known moment (a stop that lands late
    on a virtual clock finds the arm deep in a tote, or the run already over)."""
    return "virtual"


@pytest.fixture
def station(
    web: Web, station_sock: socket.socket, tmp_path: Path, station_clock: str
) -> Iterator[StationDaemon]:
    with (
        demo_policies("reference") as (server,),
        running_station(
            sock=station_sock,
            db_url=web.settings.db_url,
            artifacts=web.settings.artifacts_location,
            spool=tmp_path / "spool",
            key_file=web.settings.station_key_path,
            source=adhoc_source(server.url, items=4, cap_s=20.0),
            clock=station_clock,
        ) as daemon,
    ):
        yield daemon


class Operator:
    """A signed-in operator's client: JSON calls with the page's CSRF token."""

    def __init__(self, web: Web, username: str = "olga") -> None:
        self.id = web.add_user(username, Role.operator)
        self.client = web.client()
        assert login(self.client, username).status_code == 303
        self.csrf = page_csrf(self.client, "/console")

    def get(self, path: str) -> Any:
        return self.client.get(path)

    def post(self, path: str, body: Any = None) -> Any:
        return self.client.post(path, json=body, headers={"x-csrf-token": self.csrf})

    def status(self) -> dict[str, Any]:
        r = self.get("/api/console/status")
        assert r.status_code == 200, r.text
        return r.json()

    def wait_state(self, state: str, timeout: float = 60.0) -> dict[str, Any]:
        return wait_for(
            lambda: (s := self.status())["state"] == state and s,
            timeout,
            f"the station to be {state}",
        )


def _fields(detail: Any) -> dict[str, str]:
    assert isinstance(detail, list), detail
    return {str(e["loc"][-1]): e["msg"] for e in detail}


def _episode(web: Web, uid: str) -> Episode:
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        assert ep is not None
        s.expunge(ep)
        return ep


# -- who may use it -------------------------------------------------------------------------


def test_only_operators_get_the_console(web: Web) -> None:
    anonymous = web.client()
    r = anonymous.get("/console")
    assert r.status_code == 303 and r.headers["location"].startswith("/login?next=%2Fconsole")
    assert anonymous.get("/api/console/status").status_code == 401
    assert anonymous.post("/api/console/safety-stop").status_code == 401
    with (
        pytest.raises(WebSocketDisconnect) as refused,
        anonymous.websocket_connect("/api/console/events"),
    ):
        pass
    assert refused.value.code == 1008

    for username, roles in (("sam", (Role.submitter,)), ("root", (Role.admin,))):
        web.add_user(username, *roles)
        c = web.client()
        login(c, username)
        assert c.get("/console").status_code == 403
        assert c.get("/api/console/status").status_code == 403
        with pytest.raises(WebSocketDisconnect), c.websocket_connect("/api/console/events"):
            pass

    op = Operator(web)
    page = op.get("/console")
    assert page.status_code == 200
    assert "SAFETY STOP" in page.text and 'name="csrf-token"' in page.text
    # the page says what the button is: a software stop, not the safety function
    note = " ".join(page.text.split("software-stop-note", 1)[1].split("</p>", 1)[0].split())
    assert "software stop" in note and "enabling device and emergency stop" in note
    assert "Content-Security-Policy" in page.headers or "content-security-policy" in page.headers
    # a write without the page's CSRF token is refused
    assert op.client.post("/api/console/stop").status_code == 403
    # a page on another site cannot open the live feed with the operator's cookie
    with (
        pytest.raises(WebSocketDisconnect),
        op.client.websocket_connect(
            "/api/console/events", headers={"origin": "http://evil.example"}
        ),
    ):
        pass
    # an operator-scoped API token works for scripts, WebSocket included
    token = web.token("olga", ("operator",))
    bearer = {"Authorization": f"Bearer {token}"}
    script = web.client()
    assert script.get("/api/console/status", headers=bearer).status_code == 200
    with script.websocket_connect("/api/console/events", headers=bearer) as ws:
        assert json.loads(ws.receive_text())["state"] == "offline"


def test_a_station_that_is_down_is_reported_not_hidden(web: Web) -> None:
    op = Operator(web)
    status = op.status()
    url = web.settings.web.station_url
    assert status["state"] == "offline"
    assert url in status["detail"] and "connection refused" in status["detail"]
    for action in ("next", "start", "stop", "safety-stop"):
        r = op.post(f"/api/console/{action}")
        assert r.status_code == 503, action
        assert r.json()["detail"].startswith(f"the station is not answering at {url}")
    with op.client.websocket_connect("/api/console/events") as ws:
        frame = json.loads(ws.receive_text())
    assert frame["state"] == "offline" and url in frame["detail"]
    assert op.get("/console").status_code == 200


def test_a_key_file_the_console_cannot_use_shows_the_station_offline_naming_it(
    web: Web,
) -> None:
    """The console reads the host's station key on every call: without it (the
    daemon never started here) or with a key file others can read, it calls
    nothing and says which file is wrong, on the status, the actions and the feed."""
    op = Operator(web)
    key_file = web.settings.station_key_path
    key_file.chmod(0o644)
    status = op.status()
    assert status["state"] == "offline", status
    assert f"station key file {key_file}: mode 0644" in status["detail"]
    assert op.post("/api/console/next").status_code == 503
    key_file.unlink()
    missing = op.post("/api/console/next")
    assert missing.status_code == 503
    assert missing.json()["detail"].startswith(
        f"the station is not answering at {web.settings.web.station_url} "
        f"(no station key file {key_file} yet)"
    )
    with op.client.websocket_connect("/api/console/events") as ws:
        frame = json.loads(ws.receive_text())
    assert frame["state"] == "offline" and str(key_file) in frame["detail"]


def test_a_live_feed_ends_when_its_sign_in_does(web: Web, monkeypatch: pytest.MonkeyPatch) -> None:
    from proctor.web.console import routes

    monkeypatch.setattr(routes, "RECHECK_S", 0.1)
    op = Operator(web)
    with op.client.websocket_connect("/api/console/events") as ws:
        assert json.loads(ws.receive_text())["state"] == "offline"
        web.clock.advance(minutes=web.settings.web.session_idle_minutes + 1)
        with pytest.raises(WebSocketDisconnect):
            for _ in range(20):
                ws.receive_text()  # offline frames until the feed is closed
    # and a new feed is refused: the session has expired
    with pytest.raises(WebSocketDisconnect), op.client.websocket_connect("/api/console/events"):
        pass


# -- a rollout -------------------------------------------------------------------------------


def test_a_rollout_and_the_server_side_checks_of_its_log(web: Web, station: StationDaemon) -> None:
    op = Operator(web)
    assert op.status()["state"] == "idle"
    armed = op.post("/api/console/next")
    assert armed.status_code == 200, armed.text
    s = armed.json()
    assert s["state"] == "armed"
    work = s["work"]
    assert work["run_code"].startswith("X-") and work["object"] == "spoons"
    assert (work["items"], work["tote_side"], work["camera_side"]) == (4, "left", "right")
    assert work["budget_s"] == 80.0
    # only the whitelisted fields, nothing the station might add later
    assert set(s) <= set(ConsoleStatus.model_fields)
    assert set(work) == {
        "run_code", "object", "items", "per_item_cap_s", "budget_s", "tote_side", "camera_side",
    }  # fmt: skip

    photo = op.get("/api/console/reference/exterior")
    assert photo.status_code == 200 and photo.headers["content-type"] == "image/jpeg"
    assert photo.headers["cache-control"] == "no-store"
    assert Image.open(io.BytesIO(photo.content)).size == (160, 120)
    with op.client.websocket_connect("/api/console/preview/wrist") as ws:
        frame = ws.receive_bytes()
    assert frame[:2] == b"\xff\xd8" and Image.open(io.BytesIO(frame)).size == (160, 120)

    with op.client.websocket_connect("/api/console/events") as ws:
        assert json.loads(ws.receive_text())["state"] == "armed"
        assert op.post("/api/console/start").json()["state"] == "running"
        seen = set()
        while "awaiting_log" not in seen:
            frame = json.loads(ws.receive_text())
            assert set(frame) <= set(ConsoleStatus.model_fields)
            seen.add(frame["state"])
            if frame["state"] == "running" and frame["remaining_s"] is not None:
                # the countdown: budget − elapsed, on the station's clock
                assert frame["remaining_s"] == pytest.approx(80.0 - frame["elapsed_s"], abs=1e-2)
    s = op.status()
    assert s["state"] == "awaiting_log" and s["proposed_outcome"] in {o.value for o in Outcome}
    uid = s["episode"]

    bad: list[tuple[dict[str, Any], str, str]] = [
        ({"placed": -1, "lost": 0, "dropped": 0, "outcome": "success"}, "placed", "0"),
        ({"placed": "two", "lost": 0, "dropped": 0, "outcome": "success"}, "placed", "integer"),
        ({"placed": 1, "lost": 0, "dropped": 0, "outcome": "won"}, "outcome", "success"),
        ({"placed": 1, "lost": 0, "outcome": "ran_out_of_time"}, "dropped", "required"),
        (
            {"placed": 1, "lost": 0, "dropped": 0, "outcome": "system", "notes": "x" * 4001},
            "notes",
            "4000",
        ),
        # the checks only the station can make: they come back naming the field
        (
            {"placed": 3, "lost": 1, "dropped": 1, "outcome": "ran_out_of_time"},
            "placed + lost + dropped",
            "3 + 1 + 1 = 5 is more than the 4 items set out",
        ),
        (
            {"placed": 2, "lost": 0, "dropped": 1, "outcome": "success"},
            "outcome",
            "'success' means all 4 items were handled",
        ),
    ]
    for body, field, words in bad:
        r = op.post("/api/console/log", body)
        assert r.status_code == 422, (body, r.text)
        errors = _fields(r.json()["detail"])
        assert field in errors and words in errors[field], (body, errors)
    # nothing was written: the episode still waits for its log
    assert _episode(web, uid).state == EpisodeState.awaiting_log
    assert op.status()["state"] == "awaiting_log"

    ok = op.post(
        "/api/console/log",
        {"placed": 3, "lost": 0, "dropped": 1, "outcome": "ran_out_of_time", "notes": "tidy"},
    )
    assert ok.status_code == 200, ok.text
    assert ok.json()["state"] == "idle"
    ep = _episode(web, uid)
    assert ep.state == EpisodeState.closed
    assert (ep.placed, ep.lost, ep.dropped, ep.outcome) == (3, 0, 1, Outcome.ran_out_of_time)
    assert ep.operator_notes == "tidy" and ep.operator_id == op.id
    with web.db() as session:
        kinds = session.scalars(
            sa.select(EpisodeEvent.kind).where(EpisodeEvent.episode_id == ep.id)
        ).all()
    assert kinds.count("operator_log") == 1

    # a closed episode is not edited here: a second log is refused, and there is no
    # route that could change it (corrections go through the review log)
    again = op.post(
        "/api/console/log", {"placed": 4, "lost": 0, "dropped": 0, "outcome": "success"}
    )
    assert again.status_code == 409 and "awaiting" in again.json()["detail"]
    assert _episode(web, uid).placed == 3
    console_routes = [r for r in api_routes(web.app) if r.path.startswith("/api/console")]
    assert {m for r in console_routes for m in r.methods or ()} <= {"GET", "POST", "HEAD"}
    assert {r.path for r in console_routes if "POST" in (r.methods or ())} == {
        f"/api/console/{a}"
        for a in (
            "next",
            "start",
            "stop",
            "safety-stop",
            "recover",
            "gripper/activate",
            "disarm",
            "log",
            "home",
            "heartbeat",
        )
    }


@pytest.mark.parametrize("station_clock", ["monotonic"])
def test_stop_safety_stop_and_recovery(web: Web, station: StationDaemon) -> None:
    op = Operator(web)
    # nothing to stop yet: a clear refusal, not an error page
    idle = op.post("/api/console/stop")
    assert idle.status_code == 409 and "nothing to stop" in idle.json()["detail"]
    assert op.post("/api/console/start").status_code == 409

    op.post("/api/console/next")
    assert op.post("/api/console/start").json()["state"] == "running"
    assert op.post("/api/console/stop").status_code == 200
    s = op.wait_state("awaiting_log")
    assert s["proposed_outcome"] == "operator_stop"
    # the next run waits for this one's log
    assert op.post("/api/console/next").status_code == 409
    log = {"placed": 0, "lost": 0, "dropped": 0, "outcome": "operator_stop"}
    assert op.post("/api/console/log", log).status_code == 200
    # nothing homed after the episode: the operator homes, the cell confirmed clear
    assert op.post("/api/console/home", {"cell_clear": True}).json()["state"] == "idle"

    op.post("/api/console/next")
    assert op.post("/api/console/start").json()["state"] == "running"
    r = op.post("/api/console/safety-stop")
    assert r.status_code == 200, r.text
    s = op.wait_state("awaiting_log")
    assert s["proposed_outcome"] == "safety" and s["arm_error"]
    assert _episode(web, s["episode"]).state == EpisodeState.awaiting_log
    assert op.post("/api/console/log", {**log, "outcome": "safety"}).json()["state"] == "idle"
    # the arm stays in error until the operator recovers it explicitly
    refused = op.post("/api/console/next")
    assert refused.status_code == 409 and "recover" in refused.json()["detail"]
    recovered = op.post("/api/console/recover")
    assert recovered.status_code == 200 and recovered.json()["arm_error"] is None
    # recover moves nothing: a run waits for the operator's homing (the stop came
    # early, so the arm may still stand within the home tolerance)
    if recovered.json()["at_home"] is False:
        refused = op.post("/api/console/next")
        assert refused.status_code == 409 and "home it first" in refused.json()["detail"]
    homed = op.post("/api/console/home", {"cell_clear": True, "open_gripper": True})
    assert homed.status_code == 200 and homed.json()["robot_mode"] == "idle"
    # the gripper: its own explicit action, relayed; each camera's health is shown
    activated = op.post("/api/console/gripper/activate")
    assert activated.status_code == 200 and activated.json()["notice"]["message"] == (
        "gripper activated"
    )
    assert activated.json()["cameras"]["wrist"]["health"]["state"] == "ok"
    assert op.post("/api/console/next").json()["state"] == "armed"
    assert op.post("/api/console/gripper/activate").status_code == 409
    disarmed = op.post("/api/console/disarm")
    assert disarmed.json()["state"] == "awaiting_log"


def test_unknown_cameras_are_refused(web: Web, station: StationDaemon) -> None:
    op = Operator(web)
    assert op.get("/api/console/reference/Thermal!").status_code == 404
    op.post("/api/console/next")
    r = op.get("/api/console/reference/thermal")
    assert r.status_code == 422 and "thermal" in json.dumps(r.json()["detail"])
    with op.client.websocket_connect("/api/console/preview/thermal") as ws:
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_bytes()
    assert closed.value.code == 1008


# -- reference photos for cells that render none ---------------------------------------------


def _image(path: Path, color: tuple[int, int, int], fmt: str = "JPEG") -> Path:
    Image.new("RGB", (64, 48), color).save(path, format=fmt)
    return path


def test_a_registered_photo_stands_in_when_the_station_renders_none(
    web: Web, station: StationDaemon, tmp_path: Path
) -> None:
    op = Operator(web)
    op.post("/api/console/next")
    # a real cell renders nothing: take the simulated cell's rendering away
    station._reference = None
    r = op.get("/api/console/reference/exterior")
    assert r.status_code == 404
    assert "no reference photo of spoons with the tote left and the camera right" in r.text

    store = web.app.state.web.store
    with web.db() as s:
        register_photo(
            s, store=store, path=_image(tmp_path / "any.jpg", (9, 9, 9)), object_name="spoons"
        )
        exact = register_photo(
            s,
            store=store,
            path=_image(tmp_path / "lr.png", (200, 10, 10), "PNG"),
            object_name="spoons",
            tote_side=Side.left,
            camera_side=Side.right,
        ).sha256
        register_photo(
            s,
            store=store,
            path=_image(tmp_path / "rr.jpg", (10, 200, 10)),
            object_name="spoons",
            tote_side=Side.right,
            camera_side=Side.right,
        )
    r = op.get("/api/console/reference/exterior")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert store.read_bytes(exact) == r.content


def test_photo_matching_and_registration_errors(
    db_session: Any, artifact_store: Any, tmp_path: Path
) -> None:
    from proctor.core.errors import UsageError

    def find(tote: Side, camera_side: Side, camera: str = "exterior") -> Any:
        return find_photo(
            db_session, object_name="cups", tote_side=tote, camera_side=camera_side, camera=camera
        )

    assert find(Side.left, Side.left) is None
    generic = register_photo(
        db_session,
        store=artifact_store,
        path=_image(tmp_path / "g.jpg", (1, 2, 3)),
        object_name="cups",
    )
    wrist_only = register_photo(
        db_session,
        store=artifact_store,
        path=_image(tmp_path / "w.jpg", (4, 5, 6)),
        object_name="cups",
        tote_side=Side.left,
        camera_side=Side.left,
        camera="wrist",
    )
    assert find(Side.left, Side.left).sha256 == generic.sha256
    assert find(Side.left, Side.left, "wrist").sha256 == wrist_only.sha256
    assert find(Side.right, Side.left, "wrist").sha256 == generic.sha256

    not_image = tmp_path / "notes.txt"
    not_image.write_text("hello")
    with pytest.raises(UsageError, match="is not an image"):
        register_photo(db_session, store=artifact_store, path=not_image, object_name="cups")
    with pytest.raises(UsageError, match="cannot read"):
        register_photo(
            db_session, store=artifact_store, path=tmp_path / "nope.jpg", object_name="cups"
        )
    gif = tmp_path / "x.gif"
    Image.new("RGB", (4, 4)).save(gif, format="GIF")
    with pytest.raises(UsageError, match="use JPEG, PNG or WebP"):
        register_photo(db_session, store=artifact_store, path=gif, object_name="cups")


# -- the whitelist ------------------------------------------------------------------------------


def test_the_status_whitelist_drops_what_it_does_not_name() -> None:
    raw = {
        "state": "armed",
        "station": "cell-a",
        "policy_url": "ws://secret.example/policy",
        "work": {
            "run_code": "R-7F3K",
            "object": "spoons",
            "items": 8,
            "per_item_cap_s": 30.0,
            "budget_s": 240.0,
            "tote_side": "left",
            "camera_side": "right",
            "policy": "secret-vla",
        },
        "notice": {"level": "info", "message": "ok", "owner": "someone"},
        "cameras": {
            "exterior": {
                "width": 640, "height": 480, "fps": 30, "serial": "123",
                "health": {"state": "reconnecting", "error": "USB gone", "stalls": 3},
            }
        },
    }  # fmt: skip
    text = public_status(raw).model_dump_json()
    for word in ("secret", "policy", "owner", "serial", "123"):
        assert word not in text, word
    assert "R-7F3K" in text
    health = public_status(raw).cameras["exterior"].health
    assert health is not None and (health.state, health.error) == ("reconnecting", "USB gone")
    with pytest.raises(ValueError, match="did not validate"):
        public_status({"state": "exploded"})


def test_photos_are_registered_from_the_command_line(
    web_db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from proctor.cli import main

    for key in list(os.environ):
        if key.startswith("PROCTOR_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PROCTOR_ENV", "test")
    monkeypatch.setenv("PROCTOR_DATABASE_URL", web_db_url)
    monkeypatch.setenv("PROCTOR_ARTIFACTS", str(tmp_path / "artifacts"))

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(["console", "photo", *args])
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    scene = _image(tmp_path / "scene.jpg", (30, 60, 90))
    code, out, _ = run(
        "add", str(scene), "--object", "spoons", "--tote", "left", "--camera-side", "right"
    )
    assert code == 0 and "registered for spoons, tote left, camera right" in out
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"not a picture")
    code, _, err = run("add", str(junk), "--object", "spoons")
    assert code == 2 and err.strip() == f"error: photo: {junk} is not an image"
    code, _, err = run("add", str(scene), "--object", "spoons", "--tote", "up")
    assert code == 2 and "--tote" in err
    code, out, _ = run("list")
    assert code == 0 and "spoons" in out and "left" in out

    engine = make_engine(web_db_url)
    try:
        with make_session_factory(engine)() as session:
            photo = find_photo(
                session,
                object_name="spoons",
                tote_side=Side.left,
                camera_side=Side.right,
                camera="wrist",
            )
    finally:
        engine.dispose()
    assert photo is not None and photo.media_type == "image/jpeg"
    assert open_store(str(tmp_path / "artifacts")).read_bytes(photo.sha256) == scene.read_bytes()
