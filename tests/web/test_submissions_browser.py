"""The submitter portal in headless Chromium: a checkpoint uploaded in
chunks with its progress shown (paused and resumed on the way, hashed by
the page itself), then its page; an endpoint registered through the form,
its check run by a worker, and the report appearing on its own."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from proctor.core.artifacts import open_store
from proctor.core.db.models import Submission
from proctor.core.domain import Role
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.web.submissions import worker
from tests.browser import LiveServer, sign_in
from tests.web.submissions_support import ENCRYPTION_KEY, good_checkpoint, noise, sha

pytestmark = pytest.mark.browser

LIMIT = 1 << 20  # the page then sends 64 KiB per request


@pytest.fixture
def live_server(start_live_server: Callable[..., LiveServer]) -> LiveServer:
    server = start_live_server(
        encryption_key=ENCRYPTION_KEY,
        submissions={"max_upload_bytes": LIMIT, "conformance_dispatch": "worker"},
    )
    server.add_user("ada", Role.submitter)
    return server


@pytest.fixture
def policy_url() -> Iterator[str]:
    server = PolicyServer(DemoPolicy("reference")).start()
    yield server.url
    server.stop()


def test_upload_with_progress_pause_and_resume_then_the_report(
    page: Any, live_server: LiveServer, tmp_path: Any
) -> None:
    data = good_checkpoint("browser-policy", weights=noise(600_000, seed=5))
    assert 8 * 64 * 1024 < len(data) < LIMIT
    puts: list[str] = []

    def slow_put(route: Any) -> None:
        puts.append(route.request.url)
        time.sleep(0.1)  # slow enough to watch the bar move
        route.continue_()

    page.route(re.compile(r".*/api/uploads/[0-9a-f]{32}\?offset=\d+$"), slow_put)
    sign_in(page, "ada")
    page.goto("/submit")
    page.set_input_files(
        "#checkpoint-file",
        files=[{"name": "browser.tar.gz", "mimeType": "application/gzip", "buffer": data}],
    )
    page.click("#upload-start")
    # the bar moves, and the text says how far it is
    page.wait_for_function(
        "() => { const p = document.getElementById('upload-progress');"
        " return p.value > 20 && p.value < 90; }"
    )
    assert re.match(
        r"Uploading browser\.tar\.gz: [\d.]+ KiB of [\d.]+ KiB", page.inner_text("#upload-text")
    )
    # pause half way, then resume: the page finds the unfinished upload and goes on
    page.click("#upload-pause")
    page.wait_for_function(
        "() => document.getElementById('upload-text').textContent.startsWith('Paused')"
    )
    paused_at = len(puts)
    page.set_input_files(
        "#checkpoint-file",
        files=[{"name": "browser.tar.gz", "mimeType": "application/gzip", "buffer": data}],
    )
    page.click("#upload-start")
    page.wait_for_url(re.compile(r".*/submit/submissions/\d+$"), timeout=60_000)
    offsets = [int(u.rsplit("=", 1)[1]) for u in puts]
    assert offsets[0] == 0 and paused_at < len(puts)
    assert offsets[paused_at] > 0, "the resumed upload started again from the beginning"
    assert len(set(offsets)) >= 8  # many chunks, none sent twice in a row at the same place
    # the page's own SHA-256 agreed with the server's, and the report is shown
    assert page.inner_text("dl.facts").count(sha(data)) == 1
    # the hash wraps inside its card on a phone-sized screen, never past its edge
    page.set_viewport_size({"width": 400, "height": 800})
    rights = page.eval_on_selector(
        "dl.facts", "dl => [...dl.querySelectorAll('dd')].map(d => d.getBoundingClientRect().right)"
    )
    assert max(rights) <= 400, rights
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    summary = page.inner_text("[data-testid=report-summary]")
    assert summary.startswith("Stored and inspected.")
    assert page.get_attribute("[data-testid=conformance-report]", "data-verdict") == "pending"
    store = open_store(live_server.settings.artifacts_location)
    assert store.read_bytes(sha(data)) == data
    assert page.page_errors == []


def test_an_endpoint_registered_in_the_form_gets_its_report(
    page: Any, live_server: LiveServer, policy_url: str
) -> None:
    sign_in(page, "ada")
    page.goto("/submit")
    page.fill("#policy_name", "browser-server")
    page.fill("#url", policy_url)
    page.select_option("#dialect", "roboarena")
    page.select_option("#action_space", "cartesian_position")
    page.fill("#chunk_length", "4")
    page.check("input[name=deterministic]")
    page.click("[data-testid=endpoint-form] button[type=submit]")
    page.wait_for_url(re.compile(r".*/submit/submissions/\d+$"))
    assert page.get_attribute("[data-testid=conformance-report]", "data-checking") == "true"
    assert "A check is queued" in page.inner_text("[data-testid=checking]")
    # a worker (here: this test, never the web server) runs it; the page notices by itself
    state = live_server.app.state.web
    outcomes = worker.work(state.session_factory, live_server.settings)
    assert [o.verdict for o in outcomes] == ["passed"]
    page.wait_for_function(
        "() => document.querySelector('[data-testid=conformance-report]').dataset.verdict"
        " === 'passed'",
        timeout=30_000,
    )
    assert page.inner_text("[data-testid=report-summary]") == (
        "Passed: the station can run your policy."
    )
    checks = page.eval_on_selector_all(
        "li.finding", "items => items.map(i => [i.dataset.check, i.dataset.status])"
    )
    assert ["determinism", "passed"] in checks and ["chunk_length", "passed"] in checks
    with live_server.db() as s:
        (sub,) = s.scalars(sa.select(Submission)).all()
        assert sub.endpoint_url == policy_url
    assert page.page_errors == []
