"""One error hierarchy, one way to answer it over HTTP.

Every ``ProctorError`` carries its HTTP status (and, for bad input, its
field as an attribute); the web app and the station API answer each the same
way. Both run here under uvicorn on 127.0.0.1, with routes that raise.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI

from proctor.core.episode_record import LogRejected
from proctor.core.errors import (
    AppendOnlyViolation,
    Conflict,
    FieldError,
    Forbidden,
    IntegrityError,
    NotAvailableYet,
    NotFound,
    ProctorError,
    UsageError,
)
from proctor.scheduler.service import CampaignNotFound, CampaignStateError
from proctor.station import console_api as station_api
from proctor.station.daemon import NoWork
from proctor.station.episode_runner import PolicyUnreachable, RunnerBusy
from proctor.station.episodes import WrongState
from proctor.web.auth.passwords import PasswordsBusy
from proctor.web.errors import install_error_handlers
from tests.browser import serve_app

ROOT = Path(__file__).resolve().parents[2]

# (the exception, its status, its field, what clients are told)
CASES: list[tuple[ProctorError, int, str | None, str]] = [
    (NotFound("policy not found"), 404, None, "policy not found"),
    (Forbidden("this needs the admin role"), 403, None, "this needs the admin role"),
    (Conflict("username: taken"), 409, None, "username: taken"),
    (FieldError("name", "at most 64 characters"), 422, "name", "name: at most 64 characters"),
    # a colon in the message is not a field: only FieldError names one
    (UsageError("episode 7: no telemetry recorded"), 422, None, "episode 7: no telemetry recorded"),
    (ProctorError("refused"), 400, None, "refused"),
    (NotAvailableYet("not yet"), 501, None, "not yet"),
    (AppendOnlyViolation("audit rows are append-only"), 409, None, "audit rows are append-only"),
    (IntegrityError("sha256 mismatch"), 500, None, "sha256 mismatch"),
    # the message names the campaign; clients learn only that there is none
    (CampaignNotFound("no campaign named 'x'"), 404, None, "campaign not found"),
    (CampaignStateError("campaign 3: is draft"), 409, None, "campaign 3: is draft"),
    (NoWork("no work"), 404, None, "no work"),
    (RunnerBusy("busy"), 409, None, "busy"),
    (WrongState("station is idle"), 409, None, "station is idle"),
    (PolicyUnreachable("policy: refused"), 503, None, "policy: refused"),
    (LogRejected("placed + lost + dropped", "3 > 2"), 422, "placed + lost + dropped", ""),
    (PasswordsBusy(), 503, None, ""),
]


def _raising_app(install: Any) -> FastAPI:
    app = FastAPI()
    install(app)

    @app.get("/api/raise/{i}")
    def raise_case(i: int) -> None:
        raise CASES[i][0]

    return app


def _web(app: FastAPI) -> None:
    install_error_handlers(app)


def _station(app: FastAPI) -> None:
    app.add_exception_handler(ProctorError, station_api.proctor_error)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with (
        serve_app(_raising_app(_web), cast(Any, None)) as web,
        serve_app(_raising_app(_station), cast(Any, None)) as station,
    ):
        yield {"web": web.base_url, "station": station.base_url}


@pytest.mark.parametrize("i", range(len(CASES)), ids=[type(c[0]).__name__ for c in CASES])
def test_each_error_is_answered_with_its_status_and_field(servers: dict[str, str], i: int) -> None:
    exc, status, field, told = CASES[i]
    told = told or str(exc)

    web = httpx.get(f"{servers['web']}/api/raise/{i}")
    assert web.status_code == status
    if field is None:
        assert web.json() == {"detail": told}
    else:
        # the same shape as FastAPI's own validation errors
        assert web.json() == {
            "detail": [{"loc": ["body", field], "msg": exc.field_message(), "type": "value_error"}]
        }

    station = httpx.get(f"{servers['station']}/api/raise/{i}")
    assert station.status_code == status
    expected: dict[str, Any] = {"detail": told}
    if field is not None:
        expected["field"] = field
    assert station.json() == expected


def test_a_busy_password_check_says_when_to_come_back(servers: dict[str, str]) -> None:
    i = next(n for n, case in enumerate(CASES) if isinstance(case[0], PasswordsBusy))
    for base in servers.values():
        r = httpx.get(f"{base}/api/raise/{i}")
        assert r.status_code == 503
        assert r.headers["retry-after"] == str(PasswordsBusy.retry_after_s)


def test_the_field_is_an_attribute_not_parsed_from_the_message() -> None:
    exc = FieldError("notes", "must be text: got 3")
    assert exc.field == "notes" and exc.field_message() == "must be text: got 3"
    assert str(exc) == "notes: must be text: got 3"  # the CLI's one line, as before
    assert UsageError("a: b").field is None


def test_not_found_forbidden_conflict_and_field_error_are_defined_once() -> None:
    """The kernel's classes are the only ones: no service or web module
    defines its own (they used to, two or three times each)."""
    names = {"NotFound", "Forbidden", "Conflict", "FieldError"}
    defined: list[str] = []
    for pkg in ("proctor",):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            defined += [
                f"{path.relative_to(ROOT)}::{node.name}"
                for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef) and node.name in names
            ]
    assert sorted(defined) == [f"proctor/core/errors.py::{n}" for n in sorted(names)]
