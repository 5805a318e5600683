"""Schemathesis against the OpenAPI spec: generated requests to every API
operation, anonymous and as an admin with a token, must never get a 5xx.

Hypothesis runs derandomized (the same examples every run) with a bounded
number of examples per operation, so the suite stays fast and repeatable.
Schemathesis' own pytest integration (``from_fixture``) does not run under
pytest 9 (it reads a private ``_nodeid``), so the test drives each
operation's Hypothesis strategy itself.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from proctor.domain import Role
from tests.web.conftest import Web


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def _fuzz(web: Web, headers: dict[str, str], examples: int) -> list[str]:
    schema = schemathesis.openapi.from_asgi("/api/openapi.json", web.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 14
    for operation in operations:

        @_settings(examples)
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=[not_a_server_error])

        call()
    return [op.label for op in operations]


@pytest.fixture
def populated(web: Web) -> Web:
    web.add_user("root", Role.admin)
    web.add_user("ada", Role.submitter)
    web.token("ada", ("submitter",))
    return web


def test_anonymous_requests_never_get_a_server_error(populated: Web) -> None:
    # most answers are 401 before any input is looked at: fewer examples do
    labels = _fuzz(populated, {}, examples=6)
    assert "POST /api/users" in labels and "GET /api/health" in labels


def test_admin_requests_never_get_a_server_error(populated: Web) -> None:
    token = populated.token("root", ("admin",))
    _fuzz(populated, {"Authorization": f"Bearer {token}"}, examples=20)
