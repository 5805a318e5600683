"""Registering an endpoint with the action units it selects: kept in the
submission's manifest among its wire settings, used by the conformance job,
offered by the form, and refused by name where it is not a convention or the
dialect's commands are positions. The server is ``test_droid_units``'s
hand-written DROID server, whose metadata names its action space and says
nothing about units (so SI unless the endpoint selects otherwise)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from proctor.core.db.models import Submission
from proctor.core.domain import Role
from tests.station.droid_support import droid_server, joint_chunk
from tests.web.conftest import Web, login, page_csrf
from tests.web.submissions_support import portal_app, register_and_check, submitter

NAMED = {"action_space": "joint_velocity", "action_horizon": 10}


def _actions(obs: dict[str, Any], n: int) -> np.ndarray:
    return joint_chunk([0.3, -0.2, 0, 0, 0, 0, 0.1])


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


def _body(url: str, **kw: Any) -> dict[str, Any]:
    return {"policy_name": "acme-droid", "url": url, "dialect": "openpi", **kw}


def _finding(out: dict[str, Any], check: str) -> dict[str, Any]:
    findings = out["conformance_report"]["findings"]
    return next(f for f in findings if f["check"] == check)


def test_the_selection_is_stored_and_the_check_reads_the_actions_in_it(portal: Web) -> None:
    with droid_server(NAMED, _actions) as server:
        out = register_and_check(portal, _body(server.url, action_units="droid"))
    with portal.db() as s:
        row = s.get(Submission, out["id"])
        assert row is not None and row.manifest["wire"] == {"action_units": "droid"}
    assert out["conformance_status"] == "passed", out["conformance_report"]["summary"]
    assert _finding(out, "station_sends")["details"]["action_units"] == "droid"
    units = _finding(out, "action_units")
    assert units["details"]["action_units"] == "droid"
    assert "DROID's normalised joint velocities" in units["message"]


def test_without_a_selection_the_check_reads_the_metadatas_units(portal: Web) -> None:
    with droid_server(NAMED, _actions) as server:
        out = register_and_check(portal, _body(server.url))
    with portal.db() as s:
        row = s.get(Submission, out["id"])
        assert row is not None and "wire" not in row.manifest
    assert _finding(out, "station_sends")["details"]["action_units"] == "si"


def test_a_selection_the_metadata_contradicts_fails_the_check(portal: Web) -> None:
    with droid_server({**NAMED, "action_units": "si"}, _actions) as server:
        out = register_and_check(portal, _body(server.url, action_units="droid"))
    assert out["conformance_status"] == "failed"
    conflict = _finding(out, "action_units_conflict")
    assert conflict["status"] == "failed"
    assert "either select 'si' or nothing for the endpoint" in conflict["message"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"action_units": "rad/s"}, "must be one of si, droid"),
        (
            {"dialect": "positronic_v1", "action_units": "si"},
            "the positronic_v1 dialect's commands are positions",
        ),
    ],
)
def test_the_selection_is_refused_by_name(
    portal: Web, change: dict[str, Any], message: str
) -> None:
    r = portal.client().post(
        "/api/submissions/endpoints",
        json=_body("ws://127.0.0.1:9", **change),
        headers=submitter(portal),
    )
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"][-1] == "action_units"
    assert detail["msg"].startswith(message), detail["msg"]


def test_the_form_offers_and_keeps_the_selection(portal: Web) -> None:
    portal.add_user("ada", Role.submitter)
    c = portal.client()
    login(c, "ada")
    page = c.get("/submit").text
    assert '<select id="action_units" name="action_units">' in page
    assert '<option value="droid">droid: DROID' in page
    csrf = page_csrf(c, "/submit")
    form = {"csrf_token": csrf, "policy_name": "acme-form", "url": "ws://127.0.0.1:9"}
    r = c.post("/submit/endpoints", data={**form, "action_units": "mps"})
    assert r.status_code == 422
    assert "must be one of si, droid" in r.text
    r = c.post("/submit/endpoints", data={**form, "action_units": "droid"})
    assert r.status_code == 303, r.text
    with portal.db() as s:
        manifests = [
            m for m in s.scalars(sa.select(Submission.manifest)) if m["name"] == "acme-form"
        ]
        assert [m["wire"] for m in manifests] == [{"action_units": "droid"}]
