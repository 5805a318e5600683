"""The operator console in headless Chromium (issue 6 acceptance): the real
app under uvicorn, a real station daemon on the simulated cell running in
real time (so there is time to press Stop), a scripted demo policy over the
real protocol. Start, stop, safety stop, the keyboard shortcuts (Space is
the safety stop, whatever has focus), and the post-rollout form with
validation errors and then a valid save. Every request the page makes stays
on loopback (``tests/browser.py``)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from proctor.core.db.models import Episode
from proctor.core.domain import EpisodeState, Outcome, Role
from proctor.station.daemon import StationDaemon
from proctor.station.episode_runner import RunnerState
from tests.browser import LiveServer, sign_in
from tests.web.console_support import (
    adhoc_source,
    demo_policies,
    running_station,
)
from tests.web.console_support import live_server as live_server  # the fixture
from tests.web.console_support import station_sock as station_sock  # the fixture

pytestmark = pytest.mark.browser


@pytest.fixture
def station(
    live_server: LiveServer, station_sock: socket.socket, tmp_path: Path
) -> Iterator[StationDaemon]:
    with (
        demo_policies("reference") as (server,),
        running_station(
            sock=station_sock,
            db_url=live_server.settings.db_url,
            artifacts=live_server.settings.artifacts_location,
            spool=tmp_path / "spool",
            key_file=live_server.settings.station_key_path,
            source=adhoc_source(server.url, items=3, cap_s=30.0),
            clock="monotonic",
        ) as daemon,
    ):
        yield daemon


def _state(page: Any) -> str:
    return str(page.get_attribute("#console", "data-state"))


def _wait_state(page: Any, state: str, timeout_ms: int = 30_000) -> None:
    page.wait_for_selector(f'#console[data-state="{state}"]', state="attached", timeout=timeout_ms)


def _until(page: Any, script: str, timeout_s: float = 20.0) -> None:
    """Poll a JavaScript expression until it is true. (``wait_for_function``
    evaluates strings in the page, which its Content-Security-Policy forbids;
    ``evaluate`` goes through the DevTools protocol.)"""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(script):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {script}")
        page.wait_for_timeout(50)


def _episode(live: LiveServer, run_code: str) -> Episode:
    with live.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.run_code == run_code))
        assert ep is not None
        s.expunge(ep)
        return ep


def _fill_log(page: Any, placed: str, lost: str, dropped: str, outcome: str) -> None:
    page.fill("#log-placed", placed)
    page.fill("#log-lost", lost)
    page.fill("#log-dropped", dropped)
    page.check(f"#outcome-{outcome}")


def test_start_stop_safety_stop_and_the_post_rollout_form(
    live_server: LiveServer, station: StationDaemon, page: Any
) -> None:
    operator_id = live_server.add_user("olga", Role.operator)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    sign_in(page, "olga")
    page.goto("/console")
    _wait_state(page, "idle")
    assert page.locator("#station-state").text_content() == "idle"
    assert page.is_disabled("#btn-start") and page.is_disabled("#btn-stop")
    assert not page.is_disabled("#btn-safety")  # never disabled

    # N: the next run, and the scene to set out
    page.keyboard.press("n")
    _wait_state(page, "armed")
    assert not page.is_visible("#btn-gripper")  # never while a run is armed or running
    run_code = page.locator("#run-code").inner_text()
    assert run_code.startswith("X-")
    assert page.locator("#run-items").inner_text() == "3"
    assert page.locator("#run-object").inner_text() == "spoons"
    assert page.locator("#run-tote").inner_text() == "left"
    assert page.locator("#run-camera").inner_text() == "right"
    assert "opposite" in page.locator("#run-relation").inner_text()
    layout = page.locator("#layout-picture")
    assert layout.get_attribute("data-config") == "tote-left-camera-right"
    _until(page, "document.getElementById('layout-picture').naturalWidth > 0")
    _until(page, "document.getElementById('reference-photo').naturalWidth === 160")
    assert page.locator("#reference-photo").get_attribute("data-run") == run_code
    assert page.locator("#countdown").inner_text() == "01:30.0"
    # live view: frames keep arriving from both cameras
    for camera in ("exterior", "wrist"):
        _until(page, f"Number(document.getElementById('live-{camera}').dataset.frames || 0) >= 3")
        assert page.is_hidden(f"#no-signal-{camera}")

    # Start (a click); the countdown runs
    page.click("#btn-start")
    _wait_state(page, "running")
    _until(page, "document.getElementById('countdown').textContent < '01:30.0'")
    first = page.locator("#countdown").inner_text()
    page.wait_for_timeout(300)
    assert page.locator("#countdown").inner_text() < first

    # X: operator stop, then the post-rollout form
    page.keyboard.press("x")
    _wait_state(page, "awaiting_log")
    assert page.is_visible("#log-panel")
    assert page.locator("#log-run-code").inner_text() == run_code
    assert page.locator("#log-proposed").inner_text() == "operator stop"
    assert page.is_checked("#outcome-operator_stop")

    # validation errors next to the fields, and nothing sent
    page.click("#log-save")
    for name in ("placed", "lost", "dropped"):
        assert page.locator(f"#{name}-error").inner_text() == "required"
        assert page.get_attribute(f"#log-{name}", "aria-invalid") == "true"
    _fill_log(page, "3", "1", "0", "operator_stop")
    page.click("#log-save")
    assert (
        page.locator("#counts-error").inner_text()
        == "3 + 1 + 0 = 4 is more than the 3 items set out"
    )
    assert page.is_hidden("#placed-error")
    _fill_log(page, "1", "0", "1", "success")
    page.click("#log-save")
    assert "'success' means all 3 items were handled" in page.locator("#outcome-error").inner_text()
    assert not any(u.endswith("/api/console/log") for u in posts)
    assert station.runner.state == RunnerState.awaiting_log
    assert _episode(live_server, run_code).state == EpisodeState.awaiting_log

    # a valid save closes the episode
    _fill_log(page, "1", "0", "1", "operator_stop")
    page.fill("#log-notes", "one spoon slid under the tote")
    page.click("#log-save")
    _wait_state(page, "idle")
    assert page.is_hidden("#log-panel")
    assert f"Run {run_code} closed" in page.locator("#action-message").inner_text()
    ep = _episode(live_server, run_code)
    assert ep.state == EpisodeState.closed and ep.operator_id == operator_id
    assert (ep.placed, ep.lost, ep.dropped, ep.outcome) == (1, 0, 1, Outcome.operator_stop)
    assert ep.operator_notes == "one spoon slid under the tote"

    # the page beats all along (the station's console-link deadman), and shows
    # the robot's own mode
    _until(page, "Number(document.body.dataset.heartbeats || 0) >= 3")
    assert page.locator("#robot-mode").inner_text() == "robot: idle"

    # Space when nothing runs: still a safety stop — the arm is latched until
    # the operator recovers it (nothing moves on recover)
    page.keyboard.press("Space")
    _until(page, "!document.getElementById('arm-error').hidden")
    assert "safety stop pressed while idle" in page.locator("#arm-error").inner_text()
    assert page.is_disabled("#btn-next") and page.is_disabled("#btn-home")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#btn-recover")
    _until(page, "document.getElementById('arm-error').hidden")

    # nothing homed after the episode (Next run stays off until the arm is home):
    # the operator homes, confirming the cell clear in a dialog that names the
    # station and the gripper
    if not station.runner.cell.arm.at_home():
        assert page.is_disabled("#btn-next")
    page.click("#btn-home")
    assert page.is_visible("#home-dialog")
    assert "cell-console" in page.locator("#home-station").inner_text()
    assert "gripper" in page.locator("#home-dialog").inner_text()
    page.click("#home-confirm")  # not confirmed: the dialog stays, nothing is sent
    assert page.is_visible("#home-dialog")
    assert not any(u.endswith("/api/console/home") for u in posts)
    page.check("#home-cell-clear")
    page.click("#home-confirm")
    _until(page, "document.getElementById('notice').textContent.includes('arm homed')")
    assert any(u.endswith("/api/console/home") for u in posts)
    assert station.runner.cell.arm.at_home()

    # next run (click), start (S), then Space with a button focused: the safety
    # stop, not a click on that button
    page.click("#btn-next")
    _wait_state(page, "armed")
    second = page.locator("#run-code").inner_text()
    assert second != run_code
    page.keyboard.press("s")
    _wait_state(page, "running")
    assert not page.is_disabled("#btn-stop")
    page.focus("#btn-stop")  # Space on a focused button would normally click it
    page.keyboard.press("Space")
    _wait_state(page, "awaiting_log")
    assert any(u.endswith("/api/console/safety-stop") for u in posts)
    assert page.locator("#log-proposed").inner_text() == "safety stop"
    assert page.is_visible("#arm-error") and page.is_visible("#btn-recover")
    assert page.is_disabled("#btn-next")

    # Space while typing notes with the arm standing still is just a space
    page.fill("#log-notes", "")
    page.type("#log-notes", "arm hit the wall")
    assert page.input_value("#log-notes") == "arm hit the wall"
    assert sum(u.endswith("/api/console/safety-stop") for u in posts) == 2

    # the server is the authority: a log whose client-side checks were bypassed
    # (here: tampered with on the way) is refused, the server's message shown
    # next to the field it names, and the episode stays open
    def tamper(route: Any) -> None:
        body = json.loads(route.request.post_data)
        route.continue_(post_data=json.dumps({**body, "placed": 7}))

    page.route("**/api/console/log", tamper)
    _fill_log(page, "0", "0", "0", "safety")
    page.click("#log-save")
    _until(page, "!document.getElementById('counts-error').hidden")
    assert page.locator("#counts-error").inner_text() == (
        "7 + 0 + 0 = 7 is more than the 3 items set out"
    )
    assert _episode(live_server, second).state == EpisodeState.awaiting_log
    page.unroute("**/api/console/log", tamper)
    page.click("#log-save")
    _wait_state(page, "idle")
    assert _episode(live_server, second).outcome == Outcome.safety

    # the arm must be recovered before the next run
    assert page.is_visible("#btn-recover") and page.is_disabled("#btn-next")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#btn-recover")
    _until(page, "document.getElementById('arm-error').hidden")
    assert station.runner.arm_error is None
    # recover left the gripper alone; activating it is the operator's own, confirmed step
    activations = station.cell.gripper.activations  # type: ignore[attr-defined]
    assert page.is_visible("#btn-gripper") and not page.is_visible("#camera-health")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#btn-gripper")
    _until(page, "document.getElementById('notice').textContent === 'gripper activated'")
    assert station.cell.gripper.activations == activations + 1  # type: ignore[attr-defined]

    page.click("#btn-home")
    page.check("#home-cell-clear")
    page.click("#home-confirm")
    _until(page, "document.getElementById('notice').textContent.includes('arm homed')")
    assert not page.is_disabled("#btn-next")

    # the console's link drops mid-episode (its heartbeats stop arriving): the
    # station stops the episode by itself, naming the lost console
    page.click("#btn-next")
    _wait_state(page, "armed")
    page.click("#btn-start")
    _wait_state(page, "running")
    page.route("**/api/console/heartbeat", lambda route: route.abort())
    _wait_state(page, "awaiting_log", timeout_ms=20_000)
    assert page.locator("#log-proposed").inner_text() == "operator stop"
    assert "console link lost" in page.locator("#log-reason").inner_text()

    assert page.page_errors == []


def test_a_skipped_run_is_told_once_and_a_station_gone_has_no_green_dot(
    live_server: LiveServer, station_sock: socket.socket, tmp_path: Path, page: Any
) -> None:
    """The policy's server is down: Next run skips the run, and the operator
    reads that once (the station's notice), not also as a red error with the
    same words. Then the station itself stops: OFFLINE, and the dot beside it
    is not green (the console server still answers; the station does not)."""
    from tests.web.console_support import closed_port_url

    live_server.add_user("olga", Role.operator)
    dead_policy = closed_port_url().replace("http://", "ws://")
    with running_station(
        sock=station_sock,
        db_url=live_server.settings.db_url,
        artifacts=live_server.settings.artifacts_location,
        spool=tmp_path / "spool",
        key_file=live_server.settings.station_key_path,
        source=adhoc_source(dead_policy, items=3, cap_s=30.0),
        clock="monotonic",
    ):
        sign_in(page, "olga")
        page.goto("/console")
        _wait_state(page, "idle")
        _until(page, "document.getElementById('link-state').classList.contains('up')")
        with page.expect_response(
            lambda r: r.request.method == "POST" and r.url.endswith("/next")
        ) as answered:
            page.click("#btn-next")
        assert answered.value.status == 503  # the pre-flight failed: the run was skipped
        # the page handles that answer, then shows the station's notice
        _until(page, "!document.getElementById('notice').hidden")
        assert "skipped" in page.locator("#notice").inner_text()
        assert page.is_hidden("#action-message"), page.locator("#action-message").inner_text()
        assert _state(page) == "idle"
    _wait_state(page, "offline")
    assert page.locator("#station-state").inner_text().lower() == "offline"
    _until(page, "!document.getElementById('link-state').classList.contains('up')")
    assert "not answering" in str(page.get_attribute("#link-state", "title"))
    assert page.page_errors == []
