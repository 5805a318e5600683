"""Registering a submitter-hosted policy server: its URL, dialect and key.

Pure checks (``check_url``, ``check_dialect``, and ``check_endpoint``, which
runs both and gives a Positronic endpoint its session path, the URL that is
stored and that the worker and the gateway connect to) plus the network policy
(``proctor.core.netguard``, shared with the worker and the gateway): unless the
settings allow private endpoints (tests and ``proctor demo``), an endpoint may
not resolve to loopback, private, link-local or otherwise reserved addresses,
nor to an IPv6 address carrying one — the conformance worker and the gateway
connect to it from inside our network, and a submitter must not be able to make
them knock on our own services.

The one exception is the human reference's teleop server (``check_teleop_url``),
which an admin registers: it is on each station host's own loopback, the
station connects to it itself, and nothing on the server ever does, so the
address rule that protects the server's network does not apply to it. It must
be a loopback address, so that it cannot point the stations anywhere else.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from proctor.core import netguard
from proctor.core.domain import EndpointDialect
from proctor.core.settings import Settings
from proctor.policywire import dialects
from proctor.policywire.wire import units
from proctor.policywire.wire.spec import (
    MANIFEST_ACTION_UNITS,
    MANIFEST_EXTERIOR_NUMBERING,
    check_exterior_numbering,
)

MAX_URL = 512
SUPPORTED_DIALECTS = tuple(EndpointDialect)


class EndpointProblem(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_url(url: str) -> str:
    """A ws:// or wss:// URL with a host, no credentials, no fragment."""
    text = url.strip()
    if not text:
        raise EndpointProblem("url", "is required")
    if len(text) > MAX_URL:
        raise EndpointProblem("url", f"is longer than {MAX_URL} characters")
    if any(ord(c) < 33 or c == "\x7f" for c in text):
        raise EndpointProblem("url", "contains spaces or control characters")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError as exc:
        raise EndpointProblem("url", f"is not a valid URL ({exc})") from None
    if parts.scheme not in ("ws", "wss"):
        raise EndpointProblem(
            "url",
            f"must be a WebSocket URL (ws:// or wss://), not {parts.scheme or 'no'} scheme",
        )
    if not parts.hostname:
        raise EndpointProblem("url", "names no host")
    if parts.username is not None or parts.password is not None:
        raise EndpointProblem(
            "url", "must not carry credentials; give the API key in its own field (kept encrypted)"
        )
    if parts.fragment:
        raise EndpointProblem("url", "must not have a #fragment")
    if port == 0:
        raise EndpointProblem("url", "port 0 is not a port a server listens on")
    return text


def check_dialect(value: str | EndpointDialect) -> EndpointDialect:
    try:
        dialect = EndpointDialect(value)
    except ValueError:
        raise EndpointProblem(
            "dialect", f"'{value}' is not one of {', '.join(d.value for d in SUPPORTED_DIALECTS)}"
        ) from None
    return dialect


def endpoint_url(url: str, dialect: EndpointDialect | None) -> str:
    """The URL to connect to: a Positronic endpoint given as ``ws(s)://host[:port]``
    gets its session path (``/api/v1/session``); a path naming a model is kept,
    any other path is refused. Other dialects' URLs are used as given."""
    wire = dialects.get_or_detected(dialect)
    if wire.url_path_text is None:
        return url
    try:
        normalised = wire.dial_url(url)
    except ValueError as exc:
        raise EndpointProblem("url", str(exc)) from None
    if len(normalised) > MAX_URL:
        raise EndpointProblem(
            "url", f"is longer than {MAX_URL} characters with {wire.url_path_text}"
        )
    return normalised


def check_wire_options(
    dialect: EndpointDialect, *, exterior_numbering: int | None, action_units: str | None = None
) -> dict[str, Any]:
    """The endpoint's wire settings as its manifest keeps them (empty: the defaults).
    The exterior camera numbering applies to dialects whose keys number cameras,
    the action units to dialects whose replies may be velocities."""
    wire: dict[str, Any] = {}
    if exterior_numbering is not None:
        wire[MANIFEST_EXTERIOR_NUMBERING] = _numbering(dialect, exterior_numbering)
    if action_units is not None:
        wire[MANIFEST_ACTION_UNITS] = _action_units(dialect, action_units)
    return wire


def _numbering(dialect: EndpointDialect, value: int) -> int:
    try:
        checked = check_exterior_numbering(value)
    except ValueError as exc:
        raise EndpointProblem("exterior_numbering", str(exc).split(": ", 1)[-1]) from None
    if not dialects.get(dialect).numbers_exterior_cameras:
        raise EndpointProblem(
            "exterior_numbering",
            f"the {dialect.value} dialect names its cameras rather than numbering them; "
            "leave it out",
        )
    return checked


def _action_units(dialect: EndpointDialect, value: str) -> str:
    try:
        checked = units.check(value)
    except ValueError as exc:
        raise EndpointProblem(MANIFEST_ACTION_UNITS, str(exc).split(": ", 1)[-1]) from None
    if not dialects.get(dialect).velocity_actions:
        raise EndpointProblem(
            MANIFEST_ACTION_UNITS,
            f"the {dialect.value} dialect's commands are positions, which have no units to "
            "select; leave it out",
        )
    return checked


def check_endpoint(url: str, dialect: str | EndpointDialect) -> tuple[str, EndpointDialect]:
    """``check_url`` and ``check_dialect``, then the URL as it is stored."""
    checked = check_url(url)
    chosen = check_dialect(dialect)
    return endpoint_url(checked, chosen), chosen


def private_endpoints_allowed(settings: Settings) -> bool:
    return netguard.private_endpoints_allowed(settings)


def check_reachable_publicly(url: str, settings: Settings) -> None:
    """Refuse (unless allowed) a URL whose host is or resolves to a
    non-public address (``proctor.core.netguard``). DNS can change after this
    check: the worker and the gateway resolve and judge again, and connect
    to the address they judged."""
    if private_endpoints_allowed(settings):
        return
    try:
        netguard.pin(url, allow_private=False)
    except netguard.AddressRefused as exc:
        raise EndpointProblem("url", str(exc)) from None


def check_teleop_url(url: str) -> str:
    """The human reference's teleop server (``proctor station teleop``): a
    ``ws://`` URL on the station host's own loopback (``localhost``,
    127.0.0.0/8 or ``::1``). Each station connects to it on its own host; a
    URL naming another host would send every station's reference episodes
    somewhere nobody serves the operator's input."""
    text = check_url(url)
    parts = urlsplit(text)
    host = parts.hostname or ""
    if host.lower() != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise EndpointProblem(
                "url",
                f"'{host}' is not a loopback address: the teleop server runs on each "
                "station host and is reached there (ws://127.0.0.1:8010 by default)",
            )
    if parts.scheme != "ws":
        # the teleop server speaks plain WebSocket on loopback; TLS there protects nothing
        raise EndpointProblem("url", "must be ws:// (the teleop server serves no TLS)")
    return text
