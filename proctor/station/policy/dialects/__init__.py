"""The policy wire dialects, one module each, behind a registry keyed by name.

Everything that differs between wires lives in the dialect's module: how an
endpoint's URL is normalised, the scheme its key is sent with, how its
metadata is read (and whether it can be recognised from the metadata alone),
the cameras it needs and the keys its observation carries, its session
(handshake, request framing, reply decoding, the end of a session), and its
part of the conformance check. The rest of the station asks the dialect (or
the ``Reply`` it decoded) and never compares dialect names.

Like the drivers (``proctor/station/drivers/registry.py``), a dialect registers
itself with ``@register`` when its module is imported, and ``get`` imports
the module on demand. Adding a dialect is one module plus its tests: write
a ``Dialect`` subclass (``proctor/station/policy/dialects/base.py``), register it,
and name its module in ``MODULES`` (and in ``proctor.core.domain.EndpointDialect``
for it to be stored with a submission).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proctor.station.policy.dialects.base import Dialect

# name → the module that registers it (imported when first asked for)
MODULES: dict[str, str] = {
    "openpi": "proctor.station.policy.dialects.openpi",
    "roboarena": "proctor.station.policy.dialects.roboarena",
    "positronic_v1": "proctor.station.policy.dialects.positronic_v1",
}

_dialects: dict[str, Dialect] = {}


def register(cls: type[Dialect]) -> type[Dialect]:
    """Class decorator: make ``cls`` the dialect called ``cls.name``."""
    _dialects[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    """Forget a dialect registered at run time (tests register toy ones)."""
    if name not in MODULES:
        _dialects.pop(name, None)


def names() -> list[str]:
    """Every dialect the station speaks, the built-in ones first."""
    return list(MODULES) + sorted(set(_dialects) - set(MODULES))


def get(name: str) -> Dialect:
    """The dialect called ``name`` (a ``str`` or an ``EndpointDialect``)."""
    key = str(name)
    if key not in _dialects:
        module = MODULES.get(key)
        if module is None:
            raise ValueError(f"dialect '{key}' is not one of {', '.join(names())}")
        importlib.import_module(module)
        if key not in _dialects:
            raise ValueError(f"dialect module {module} did not register '{key}'")
    return _dialects[key]


def get_or_detected(name: str | None) -> Dialect:
    """The dialect called ``name``; None: the one whose handshake a server whose
    dialect is detected from its metadata gets (the first detectable one)."""
    if name is not None:
        return get(name)
    return _detectable()[-1]


def detect(metadata: Mapping[Any, Any]) -> Dialect:
    """The dialect a server speaks, judged from its metadata (when none is
    named): the first detectable dialect, by ``detect_rank``, that claims it;
    the last one is the fallback, whatever the metadata holds."""
    ordered = _detectable()
    for dialect in ordered[:-1]:
        if dialect.claims(metadata):
            return dialect
    return ordered[-1]


def _detectable() -> list[Dialect]:
    found = [get(name) for name in names()]
    ordered = sorted((d for d in found if d.detect_rank is not None), key=_rank)
    if not ordered:
        raise ValueError("no dialect can be detected from metadata")
    return ordered


def _rank(dialect: Dialect) -> int:
    assert dialect.detect_rank is not None
    return dialect.detect_rank


def choices_text() -> str:
    """The dialect names as a help text lists them: "a, b or c"."""
    all_names = names()
    return ", ".join(all_names[:-1]) + " or " + all_names[-1]
