"""Registering a submitter-hosted policy server: its URL, dialect and key.

Pure checks (``check_url``, ``check_dialect``, and ``check_endpoint``, which
runs both and gives a Positronic endpoint its session path, the URL that is
stored and that the worker and the gateway connect to) plus the network policy:
outside dev and test, an endpoint may not resolve to loopback, private,
link-local or otherwise reserved addresses — the conformance worker and the
gateway connect to it from inside our network, and a submitter must not be
able to make them knock on our own services.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

from proctor.domain import EndpointDialect
from proctor.settings import Settings
from station.policy import positronic

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
    if dialect != EndpointDialect.positronic_v1:
        return url
    try:
        normalised = positronic.session_url(url)
    except ValueError as exc:
        raise EndpointProblem("url", str(exc)) from None
    if len(normalised) > MAX_URL:
        raise EndpointProblem(
            "url", f"is longer than {MAX_URL} characters with Positronic's session path"
        )
    return normalised


def check_endpoint(url: str, dialect: str | EndpointDialect) -> tuple[str, EndpointDialect]:
    """``check_url`` and ``check_dialect``, then the URL as it is stored."""
    checked = check_url(url)
    chosen = check_dialect(dialect)
    return endpoint_url(checked, chosen), chosen


def private_endpoints_allowed(settings: Settings) -> bool:
    allowed = settings.submissions.allow_private_endpoints
    return allowed if allowed is not None else settings.env != "prod"


def _is_private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def check_reachable_publicly(url: str, settings: Settings) -> None:
    """Refuse (unless allowed) a URL whose host is or resolves to a
    non-public address. DNS can change after this check: the worker checks
    again before it connects."""
    if private_endpoints_allowed(settings):
        return
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise EndpointProblem("url", f"the host '{host}' does not resolve") from None
    private = sorted({i[4][0] for i in infos if _is_private(str(i[4][0]))})
    if private:
        raise EndpointProblem(
            "url",
            f"'{host}' resolves to a non-public address ({', '.join(private)}); policy "
            "servers must be reachable on the public internet",
        )
