"""Schemathesis against the portal's operations, as a submitter who owns a
policy, a checkpoint, an endpoint submission and an unfinished upload (the
app-wide fuzz test covers them anonymously and as an admin, who mostly get
401/403/404 before any input is looked at). No generated request may get a
5xx, and what was valid before the fuzzing still is after it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from tests.web.conftest import Web
from tests.web.submissions_support import (
    begin,
    good_checkpoint,
    portal_app,
    submitter,
    upload,
)


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


def test_submitter_requests_never_get_a_server_error(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    ckpt = upload(c, h, good_checkpoint()).json()
    c.post(
        "/api/submissions/endpoints",
        json={"policy_name": "acme-server", "url": "ws://127.0.0.1:9"},
        headers=h,
    )
    open_upload = begin(c, h, good_checkpoint("other")).json()["id"]

    schema = schemathesis.openapi.from_asgi("/api/openapi.json", portal.app)
    operations = [
        op
        for op in (result.ok() for result in schema.get_all_operations())
        if "submissions" in (op.definition.raw.get("tags") or [])
    ]
    labels = {op.label for op in operations}
    assert {
        "POST /api/uploads",
        "PUT /api/uploads/{upload_id}",
        "POST /api/uploads/{upload_id}/complete",
        "POST /api/submissions/endpoints",
        "PATCH /api/submissions/policies/{policy_id}",
        "POST /api/submissions/{submission_id}/check",
    } <= labels
    for operation in operations:

        @settings(
            max_examples=15,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            case.call_and_validate(headers=h, checks=[not_a_server_error])

        call()
    # the data the fuzzing did not destroy is still served
    r = c.get(f"/api/submissions/{ckpt['id']}", headers=h)
    assert r.status_code == 200 and r.json()["checkpoint_sha256"] == ckpt["checkpoint_sha256"]
    assert c.get(f"/api/uploads/{open_upload}", headers=h).status_code in (200, 404)
