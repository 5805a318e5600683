"""Everything found by name goes through one registry shape
(``proctor.core.registry.Registry``), and each set of names is listed once or
held equal here to every other place that must list it:

* dialects: ``EndpointDialect`` is the list (the client face's ``MODULES`` and
  the command runner's ``dialect`` are built from it); the database's CHECK
  constraint, fixed in a migration, must say the same;
* frameworks: the manifest's sections' tags (``RUNNER_FRAMEWORKS``) are the
  list ``FRAMEWORKS`` is built from; a framework module registered under any
  other name is caught here;
* profiles: ``StationProfile`` is the list (``tests/station/test_profile_names.py``).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import types
from pathlib import Path

import pytest
import sqlalchemy as sa

from proctor.core.db import migrate
from proctor.core.db.engine import make_engine
from proctor.core.domain import EndpointDialect
from proctor.core.errors import ConfigError
from proctor.core.registry import Registry
from proctor.policywire import dialects
from proctor.policywire.wire import units
from proctor.runner import frameworks
from proctor.runner.frameworks import FRAMEWORKS
from proctor.runner.manifest import RUNNER_FRAMEWORKS, ManifestError, validate_manifest
from proctor.runner.sandbox.limits import LIMIT_BACKENDS
from proctor.station.drivers.arm.base import ARMS


def _import_every_module(package: types.ModuleType) -> None:
    """Import every module of ``package``: whatever registers itself has."""
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")


# --- the shape ---------------------------------------------------------------


def test_a_built_in_module_is_imported_on_the_first_get_only() -> None:
    registry: Registry[type] = Registry("toy", {"json": "json", "here": None})
    registry.add("here", int)
    # the module did not register "json": the error names it
    with pytest.raises(ValueError, match="toy module json did not register 'json'"):
        registry.get("json")
    assert registry.get("here") is int


def test_names_are_the_built_ins_in_order_then_the_run_time_ones_sorted() -> None:
    registry: Registry[int] = Registry("toy", dict.fromkeys(("zeta", "alpha")))
    registry.add("zeta", 1)
    registry.add("alpha", 2)
    registry.add("mu", 3)
    registry.add("beta", 4)
    assert registry.names() == ["zeta", "alpha", "beta", "mu"]
    assert list(registry) == registry.names() and len(registry) == 4 and "mu" in registry


def test_unregister_forgets_run_time_entries_and_keeps_built_ins() -> None:
    registry: Registry[int] = Registry("toy", {"kept": None})
    registry.add("kept", 1)
    registry.add("toy", 2)
    registry.unregister("toy")
    registry.unregister("kept")
    assert registry.names() == ["kept"] and registry.get("kept") == 1
    with pytest.raises(ValueError, match="toy 'toy' is not one of kept"):
        registry.get("toy")


def test_an_unknown_name_raises_the_roles_error_naming_every_known_one() -> None:
    with pytest.raises(ConfigError, match="arm driver 'ur5' is not one of sim, franky"):
        ARMS.get("ur5")
    with pytest.raises(ValueError, match="dialect 'smoke_signals' is not one of openpi, roboarena"):
        dialects.get("smoke_signals")
    with pytest.raises(ValueError, match="action_units 'furlongs' is not one of si, droid"):
        units.get("furlongs")
    with pytest.raises(ValueError, match=re.escape("runner.framework 'jax' is not one of lerobot")):
        FRAMEWORKS.get("jax")


def test_a_missing_library_reads_as_what_to_install() -> None:
    registry: Registry[type] = Registry(
        "toy", {"absent": "proctor.no_such_module"}, error=ConfigError
    )
    with pytest.raises(ConfigError, match="toy 'absent' is not available in this installation"):
        registry.get("absent")


# --- names listed once -------------------------------------------------------


def test_the_dialects_are_the_endpoint_dialects_and_every_module_registers_one() -> None:
    _import_every_module(dialects)
    # a dialect module registered under a name EndpointDialect lacks would show
    # here as a run-time name; a name EndpointDialect has and no module
    # registers fails in ``get``
    assert dialects.names() == [d.value for d in EndpointDialect]
    assert [dialects.get(d).name for d in EndpointDialect] == list(EndpointDialect)


def _command_manifest(dialect: str) -> dict[str, object]:
    return {
        "name": "toy policy",
        "runner": {"framework": "command", "command": ["serve", "{port}"], "dialect": dialect},
        "policy": {"action_space": "joint_position", "chunk_length": 8},
    }


def test_the_command_runner_speaks_exactly_the_stored_dialects() -> None:
    for dialect in EndpointDialect:
        assert validate_manifest(_command_manifest(dialect.value)).runner.serves == dialect
    with pytest.raises(ManifestError, match="'smoke_signals' is not one of openpi, roboarena"):
        validate_manifest(_command_manifest("smoke_signals"))


def test_the_databases_check_constraint_allows_exactly_the_endpoint_dialects(
    tmp_path: Path,
) -> None:
    # the constraint is fixed by the migrations: a new dialect needs one that
    # widens it, and this fails until it is written
    url = f"sqlite:///{tmp_path / 'dialects.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            sql = conn.execute(
                sa.text(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'submissions'"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    found = re.search(r"endpoint_dialect IN \(([^)]*)\)", sql)
    assert found, sql
    allowed = [v.strip().strip("'") for v in found.group(1).split(",")]
    assert sorted(allowed) == sorted(d.value for d in EndpointDialect)


def test_the_frameworks_are_the_manifests_sections_and_every_module_registers_one() -> None:
    _import_every_module(frameworks)
    assert FRAMEWORKS.names() == list(RUNNER_FRAMEWORKS) == ["lerobot", "openpi", "command"]
    assert [FRAMEWORKS.get(name).name for name in RUNNER_FRAMEWORKS] == list(RUNNER_FRAMEWORKS)


def test_the_limit_backends_and_units_each_register_every_declared_name() -> None:
    # both define their entries beside the registry: one defined and not
    # declared would be listed after the declared ones, as if run-time
    assert LIMIT_BACKENDS.names() == list(LIMIT_BACKENDS.modules)
    assert units.names() == list(units._units.modules)
    assert [LIMIT_BACKENDS.get(name).name for name in LIMIT_BACKENDS] == LIMIT_BACKENDS.names()
    assert [units.get(name).name for name in units.names()] == ["si", "droid"]
