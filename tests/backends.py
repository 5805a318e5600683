"""Which backends a test runs on, declared at collection instead of skipped at
run time: ``pytest -ra`` then lists no routine skips, and the reason sits on
the decorator.

Every ``db_session``/``backend`` test runs on each backend selected with
``PROCTOR_TEST_BACKENDS`` (``tests/conftest.py``). A test whose subject does
not depend on the database (a wire dialect, the control loop's pacing) runs
on one backend; a test of one backend's own behaviour runs only there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from tests.conftest import BACKENDS

# SQLite when it is selected: no server to create a database on
PRIMARY = "sqlite" if "sqlite" in BACKENDS else BACKENDS[0]


def once(fixture: str = "backend") -> pytest.MarkDecorator:
    """For a test whose subject does not depend on the database: run it on
    the primary backend only."""
    return pytest.mark.parametrize(fixture, [PRIMARY], indirect=True)


def only_on(name: str, fixture: str = "backend") -> pytest.MarkDecorator:
    """For a test of one backend's own behaviour (PostgreSQL's ``SKIP LOCKED``,
    SQLite's serialized writers); not collected when that backend is not
    selected."""
    return pytest.mark.parametrize(fixture, [b for b in BACKENDS if b == name], indirect=True)


def cases_on_backends(
    cases: Sequence[tuple[Any, ...]], everywhere: Iterable[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """Each case on the primary backend, and the ``everywhere`` cases (a
    sample that shows the database changes nothing) on every other backend
    too: parametrize ``(*names, "backend")`` with ``indirect=["backend"]``."""
    sample = list(everywhere)
    assert all(c in cases for c in sample), "every sampled case must be one of the cases"
    others = [b for b in BACKENDS if b != PRIMARY]
    return [(*c, PRIMARY) for c in cases] + [(*c, b) for b in others for c in sample]
