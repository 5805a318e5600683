"""Reading a policy server through its dialect: its metadata into a
``ServerInfo``, the dialect a ``ServerInfo`` was read by, the cameras and
public settings that dialect adds, the header an API key travels in.

These sit above the dialect registry so that the wire vocabulary
(``proctor.policywire.wire.spec``), which every dialect builds on, never
imports the dialects: a ``ServerInfo`` names its dialect, and whoever needs
the dialect's behaviour asks here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proctor.core.domain import EndpointDialect
from proctor.policywire import dialects
from proctor.policywire.dialects.base import Dialect
from proctor.policywire.wire import units
from proctor.policywire.wire.spec import (
    ProtocolError,
    ServerInfo,
    UnitsConflict,
    check_exterior_numbering,
    parse_action_units,
)


def dialect_of(info: ServerInfo) -> Dialect:
    """The dialect module's ``Dialect`` a server's metadata was read by."""
    return dialects.get(info.dialect)


def cameras(info: ServerInfo) -> tuple[str, ...]:
    """The cameras a session with this server needs."""
    return dialect_of(info).cameras(info)


def public_info(info: ServerInfo) -> dict[str, Any]:
    """What the station may show and record of a server's settings: the
    common ones and its dialect's own (never anything that names the policy)."""
    return info.public() | dialect_of(info).public(info)


def parse_metadata(
    metadata: Any,
    *,
    dialect: EndpointDialect | str | None,
    default_image_size: tuple[int, int],
    n_cameras_available: int = 1,
    exterior_numbering: int | None = None,
    action_units: str | None = None,
) -> ServerInfo:
    """A server's metadata, read by its dialect (None: the dialect is detected
    from the metadata, ``dialects.detect``). ``exterior_numbering``: where the
    endpoint numbers its exterior cameras from (None: ``keys.EXTERIOR_FIRST_INDEX``);
    a wire setting of the endpoint's, never something the server says.
    ``action_units``: the convention the endpoint selects (``select_action_units``)."""
    if not isinstance(metadata, dict):
        raise ProtocolError(f"server metadata must be a map, got {type(metadata).__name__}")
    wire = dialects.get(dialect) if dialect is not None else dialects.detect(metadata)
    info = wire.parse_metadata(
        metadata, default_image_size=default_image_size, n_cameras_available=n_cameras_available
    )
    info = select_action_units(info, metadata, action_units)
    if exterior_numbering is None:
        return info
    return replace(info, exterior_first_index=check_exterior_numbering(exterior_numbering))


def select_action_units(info: ServerInfo, metadata: Any, selected: str | None) -> ServerInfo:
    """``info`` with the action units the endpoint selects (None: as the metadata
    reads). The selection replaces the dialect's default where the metadata
    declares nothing; a declaration that differs is a ``UnitsConflict``. A
    dialect whose replies are positions only has no units to select."""
    if selected is None or not dialect_of(info).velocity_actions:
        return info
    chosen = units.check(selected)
    # a declaration is a registered name (anything else is refused there)
    declared = parse_action_units(metadata, default=chosen)
    if declared != chosen:
        raise UnitsConflict(chosen, declared)
    return replace(info, action_units=chosen)


def auth_headers(dialect: EndpointDialect | str | None, api_key: str | None) -> dict[str, str]:
    """The header carrying a policy server's API key, as its dialect's own client
    sends it: ``Api-Key <key>`` (openpi, RoboArena), ``Bearer <key>`` (Positronic).
    None (detected on connect): the scheme of the dialects detection chooses from."""
    return dialects.get_or_detected(dialect).auth_headers(api_key)
