"""Registering an endpoint with its wire settings: an openpi URL may carry a
path (vLLM-Omni's ``/v1/realtime/robot/openpi``), the exterior camera
numbering is kept in the submission's manifest and the conformance job uses
it, and a dialect whose keys number no camera refuses it by name."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proctor.core.db.models import Submission
from tests.policywire.field_servers import VLLM_PATH, FieldServer, vllm_handler
from tests.policywire.field_servers import field_server as field_server  # the fixture
from tests.web.conftest import Web
from tests.web.submissions_support import portal_app, register_and_check, submitter


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


def _body(url: str, **kw: Any) -> dict[str, Any]:
    return {"policy_name": "acme-robot", "url": url, "dialect": "openpi", **kw}


def test_an_openpi_endpoint_behind_a_path_is_checked_with_its_numbering(
    portal: Web, field_server: Callable[..., FieldServer]
) -> None:
    server = field_server(vllm_handler, path=VLLM_PATH)
    out = register_and_check(portal, _body(server.url, exterior_numbering=0))
    assert out["endpoint_url"] == server.url  # the path is kept
    with portal.db() as s:
        row = s.get(Submission, out["id"])
        assert row is not None and row.manifest["wire"] == {"exterior_numbering": 0}
    report = out["conformance_report"]
    assert out["conformance_status"] == "passed", report["summary"]
    numbering = next(f for f in report["findings"] if f["check"] == "exterior_numbering")
    assert numbering["status"] == "passed"
    assert numbering["details"]["station_sends"] == "observation/exterior_image_0_left"


def test_the_default_numbering_fails_that_server_and_says_what_to_change(
    portal: Web, field_server: Callable[..., FieldServer]
) -> None:
    server = field_server(vllm_handler, path=VLLM_PATH)
    out = register_and_check(portal, _body(server.url))
    with portal.db() as s:
        row = s.get(Submission, out["id"])
        assert row is not None and "wire" not in row.manifest
    assert out["conformance_status"] == "failed"
    numbering = next(
        f for f in out["conformance_report"]["findings"] if f["check"] == "exterior_numbering"
    )
    assert numbering["status"] == "failed"
    assert "Register the endpoint again with exterior_numbering = 0" in numbering["message"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"dialect": "positronic_v1", "exterior_numbering": 0},
            "the positronic_v1 dialect names its cameras rather than numbering them",
        ),
        ({"exterior_numbering": 2}, "Input should be less than or equal to 1"),
    ],
)
def test_the_numbering_is_refused_by_name(
    portal: Web, change: dict[str, Any], message: str
) -> None:
    r = portal.client().post(
        "/api/submissions/endpoints",
        json=_body("ws://127.0.0.1:9", **change),
        headers=submitter(portal),
    )
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"][-1] == "exterior_numbering"
    assert detail["msg"].startswith(message), detail["msg"]
