"""The policy wire dialects, one module each, behind a registry keyed by name.

Everything that differs between wires lives in the dialect's module: how an
endpoint's URL is normalised, the scheme its key is sent with, how its
metadata is read (and whether it can be recognised from the metadata alone),
the cameras it needs and the keys its observation carries, its session
(handshake, request framing, reply decoding, the end of a session). Its
other faces live above it, registered under the same name: its part of the
conformance check in ``proctor/policywire/conformance/dialects/`` and its
server in ``proctor/policywire/serving/dialects.py`` (``Dialect.faces`` names
those it has; a test holds every claim). The station asks the dialect (or the
``Reply`` it decoded) and never compares dialect names.

The registry is a ``proctor.core.registry.Registry``, the shape the drivers
and every other name-keyed choice use: a dialect registers itself with
``@register`` when its module is imported, and ``get`` imports the module on
demand. The names are ``proctor.core.domain.EndpointDialect``'s (what a
submission stores), each in the module named after it (``MODULES``). Adding a
dialect (``docs/architecture.md``, "How to add") starts with its client face:
write a ``Dialect`` subclass (``proctor/policywire/dialects/base.py``) in
``dialects/<name>.py``, register it, and add ``<name>`` to ``EndpointDialect``
(tests/proctor/test_registries.py holds the other places that list it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from proctor.core.domain import EndpointDialect
from proctor.core.registry import Registry

if TYPE_CHECKING:
    from proctor.policywire.dialects.base import Dialect

# name → the module that registers it (imported when first asked for)
MODULES: dict[str, str] = {
    d.value: f"proctor.policywire.dialects.{d.value}" for d in EndpointDialect
}

_dialects: Registry[Dialect] = Registry("dialect", MODULES)


def register(cls: type[Dialect]) -> type[Dialect]:
    """Class decorator: make ``cls`` the dialect called ``cls.name``."""
    return _dialects.register_instance(cls)


def unregister(name: str) -> None:
    """Forget a dialect registered at run time (tests register toy ones)."""
    _dialects.unregister(name)


def names() -> list[str]:
    """Every dialect the station speaks, the built-in ones first."""
    return _dialects.names()


def get(name: str) -> Dialect:
    """The dialect called ``name`` (a ``str`` or an ``EndpointDialect``)."""
    return _dialects.get(name)


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
