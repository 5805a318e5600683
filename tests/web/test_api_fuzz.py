"""Schemathesis against the OpenAPI spec: generated requests must never get
a 5xx.

* The accounts and system operations (this folder's), on both databases,
  anonymously and as an admin with a token.
* Every operation the app serves (other domains' too), as an admin, on
  SQLite: the whole-spec check of issue 9's acceptance, kept smaller so that
  the suite stays fast as the API grows.

Hypothesis runs derandomized (the same examples every run). Schemathesis'
own pytest integration (``from_fixture``) does not run under pytest 9 (it
reads a private ``_nodeid``), so the test drives each operation's
Hypothesis strategy itself.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from proctor.core.domain import Role
from tests.web.conftest import Web

OWN_TAGS = {"accounts", "system"}


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def _operations(web: Web, tags: Iterable[str] | None = None) -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # other domains' duplicate operation ids
        schema = schemathesis.openapi.from_asgi("/api/openapi.json", web.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    if tags is not None:
        wanted = set(tags)
        operations = [op for op in operations if wanted & set(op.tags or ())]
    return operations


def _fuzz(operations: list[Any], headers: dict[str, str], examples: int) -> dict[str, set[int]]:
    """Each operation's answers' status codes, by its label."""
    seen: dict[str, set[int]] = {}
    for operation in operations:

        @_settings(examples)
        @given(case=operation.as_strategy())
        def call(case: Any) -> None:
            r = case.call_and_validate(headers=headers, checks=[not_a_server_error])
            seen.setdefault(case.operation.label, set()).add(r.status_code)

        call()
    return seen


@pytest.fixture
def populated(web: Web) -> Web:
    web.add_user("root", Role.admin)
    web.add_user("ada", Role.submitter)
    web.token("ada", ("submitter",))
    return web


def _admin(web: Web) -> dict[str, str]:
    return {"Authorization": f"Bearer {web.token('root', ('admin',))}"}


def test_own_operations_anonymous(populated: Web) -> None:
    operations = _operations(populated, OWN_TAGS)
    labels = {op.label for op in operations}
    assert {"POST /api/users", "DELETE /api/tokens/{token_id}", "GET /api/health"} <= labels
    # most answers are 401 before any input is looked at: fewer examples do
    _fuzz(operations, {}, examples=5)


def test_own_operations_as_admin(populated: Web) -> None:
    _fuzz(_operations(populated, OWN_TAGS), _admin(populated), examples=15)


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_every_operation_as_admin(populated: Web) -> None:
    operations = _operations(populated)
    assert len(operations) > len(_operations(populated, OWN_TAGS))
    _fuzz(operations, _admin(populated), examples=5)


def test_station_operations_with_a_station_token(web: Web) -> None:
    """The station API, as an enrolled station with a claim to work on: its
    own token gets past the door, so the generated bodies reach the service
    (an admin's token, above, is refused at the door: a user is no station)."""
    from proctor.core.audit import Actor
    from proctor.scheduler import claims, service
    from tests.scheduler import builders

    with web.db() as s:
        w = builders.world(s, 1)
        c = service.create_campaign(s, protocol=builders.protocol(w), actor=Actor(label="t"))
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        station, token = builders.enrolled_station(s, "cell-a")
        claims.claim_next(s, campaign_id=c.id, station_id=station.id)
    operations = _operations(web, {"station"})
    labels = {op.label for op in operations}
    assert {"POST /api/station/v1/hello", "PUT /api/station/v1/episodes/{uid}"} <= labels
    seen = _fuzz(operations, {"Authorization": f"Bearer {token}"}, examples=25)
    # the spec now declares the station's bearer scheme, so schemathesis may
    # send an Authorization of its own: the token given here must be the one
    # that arrives, so that every operation's bodies get past the door
    assert set(seen) == labels
    assert all(codes - {401} for codes in seen.values()), seen
