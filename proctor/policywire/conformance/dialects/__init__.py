"""Each dialect's conformance face, registered under the dialect's name.

Like the client faces (``proctor.policywire.dialects``), a module registers
its ``DialectChecks`` with ``@register`` when it is imported, and ``get``
imports the module on demand. A dialect that claims the "conformance" face
(``Dialect.faces``) has one here: tests/policywire/test_dialects.py holds that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proctor.core.registry import Registry

if TYPE_CHECKING:
    from proctor.policywire.conformance.dialects.base import DialectChecks
    from proctor.policywire.conformance.state import CheckState

# name → the module that registers its checks (imported when first asked for)
MODULES: dict[str, str] = {
    "openpi": "proctor.policywire.conformance.dialects.openpi",
    "roboarena": "proctor.policywire.conformance.dialects.roboarena",
    "positronic_v1": "proctor.policywire.conformance.dialects.positronic_v1",
}

_checks: Registry[DialectChecks] = Registry("dialect conformance checks", MODULES)
register = _checks.register_instance
unregister = _checks.unregister
get = _checks.get


def of(check: CheckState) -> DialectChecks:
    """The checks of the dialect a check speaks (``CheckState.wire``)."""
    return get(check.wire.name)
