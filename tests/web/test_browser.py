"""The pages in headless Chromium (Debian chromium + Playwright), against the
real app under uvicorn on loopback. Any request that would leave
127.0.0.1/localhost fails the test (``tests/browser.py``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proctor.core.domain import Role
from tests.browser import LiveServer, sign_in

pytestmark = pytest.mark.browser

CONTROLS = "main button, main select, main input:not([type=checkbox]):not([type=hidden])"


def test_sign_in_and_create_a_token(live_server: LiveServer, page: Any) -> None:
    live_server.add_user("ada", Role.submitter, Role.operator)
    sign_in(page, "ada")
    assert page.url == live_server.base_url + "/"
    assert page.locator(".who-name").inner_text() == "ada"

    page.goto("/account")
    page.fill("#token-name", "nightly upload")
    page.check("input[name=scopes][value=submitter]")
    page.select_option("#token-expiry", "30")
    page.click("text=Create token")
    token = page.locator("#new-token").inner_text().strip()
    assert token.startswith("prt_")
    assert page.get_by_text("only time it is shown").is_visible()

    # the token works for a script, with the scope that was ticked
    me = httpx.get(f"{live_server.base_url}/api/me", headers={"Authorization": f"Bearer {token}"})
    assert me.status_code == 200
    assert me.json()["username"] == "ada" and me.json()["effective_roles"] == ["submitter"]

    # back on the account page it is listed by prefix only, and can be revoked
    page.goto("/account")
    row = page.locator("#token-table tbody tr").first
    assert token[:12] in row.inner_text() and token not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("text=Revoke").click()
    page.wait_for_url("**/account")
    assert "revoked" in page.locator("#token-table tbody tr").first.inner_text()
    gone = httpx.get(f"{live_server.base_url}/api/me", headers={"Authorization": f"Bearer {token}"})
    assert gone.status_code == 401

    assert page.page_errors == []
    assert page.network_guard.seen and not page.network_guard.offenders


def test_wrong_password_shows_the_message(live_server: LiveServer, page: Any) -> None:
    live_server.add_user("ada")
    sign_in(page, "ada", "not the password")
    assert page.locator("#login-error").inner_text() == "Wrong username or password."
    assert page.input_value("#username") == "ada"


def test_api_docs_render_from_local_files(live_server: LiveServer, page: Any) -> None:
    page.goto("/api/docs")
    page.wait_for_selector(".opblock", timeout=15_000)
    assert page.locator(".opblock").count() >= 10
    assert "/api/me/tokens" in page.content()
    assert page.page_errors == []


def test_pages_fit_laptop_and_tablet_screens(live_server: LiveServer, page: Any) -> None:
    live_server.add_user("root", *Role)
    sign_in(page, "root")
    for width, height in [(1366, 768), (768, 1024)]:  # a laptop, a tablet at the robot
        page.set_viewport_size({"width": width, "height": height})
        for path in ["/", "/account", "/admin/users", "/leaderboard"]:
            page.goto(path)
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {width}px"
            # every control is big enough to hit with a finger
            small = page.evaluate(
                f"""[...document.querySelectorAll('{CONTROLS}')]
                   .filter(e => e.offsetParent !== null && e.getBoundingClientRect().height < 32)
                   .map(e => e.outerHTML.slice(0, 80))"""
            )
            assert small == [], (path, width, small)


def test_the_guard_blocks_requests_that_leave_localhost(page: Any) -> None:
    """The fixture's promise, checked: a page that reaches for another host is
    stopped before anything is sent, and recorded."""
    page.set_content('<img src="http://example.invalid/pixel.png">')
    page.wait_for_timeout(200)
    assert page.network_guard.offenders == ["http://example.invalid/pixel.png"]
    page.network_guard.offenders.clear()  # so that this test itself passes
