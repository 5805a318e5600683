"""Where a submitter's policy server may be, and how we connect to one.

The conformance worker and the policy gateway connect to URLs that
submitters chose, from inside our network. This module is the one address
policy for registration (``proctor/web/submissions/endpoints.py``), the worker
(``proctor/web/submissions/worker.py`` → ``proctor/policywire/conformance/``) and the
gateway (``proctor/scheduler/gateway.py``):

* **Resolve once, judge every address, connect to a judged one.** ``pin``
  resolves the host and judges every address it resolves to; the
  connection then goes to one of those addresses (``open_socket``), with
  the URL's own host name in the ``Host`` header and as the TLS server
  name. A name that points elsewhere by the time we connect (DNS
  rebinding) cannot move the connection.
* **An IPv6 address carrying an IPv4 address is judged by it too.**
  IPv4-mapped, IPv4-translated (RFC 6145) and IPv4-compatible addresses,
  NAT64 (RFC 6052), 6to4 (RFC 3056) and Teredo (RFC 4380) addresses reach
  the IPv4 address they carry through a translator or relay, and Python's
  ``is_global`` calls several of them global whatever they carry. A few
  ranges it calls global are not public either (site-local, RFC 9637's
  documentation prefix, SRv6 segment identifiers).
* **Redirects are never followed.** A WebSocket server answering the
  handshake with 3xx fails the handshake (websockets follows redirects by
  default, to any host); the HTTP requests here never follow them either.
  A redirect would lead to a host nobody judged.

Whether private addresses are allowed at all is the deployment's choice
(``submissions.allow_private_endpoints``, see ``private_endpoints_allowed``).
"""

from __future__ import annotations

import asyncio
import http.client
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, IPv6Network
from typing import Any
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection as AsyncClientConnection
from websockets.asyncio.client import connect as async_connect
from websockets.sync.client import ClientConnection as SyncClientConnection
from websockets.sync.client import reconnect as sync_connect

from proctor.core.settings import Settings

IPAddress = IPv4Address | IPv6Address

DEFAULT_PORTS = {"ws": 80, "http": 80, "wss": 443, "https": 443}


class AddressRefused(ValueError):
    """The host does not resolve, or resolves to an address we do not
    connect to; the message is written to the submitter."""


def _low32(ip: IPv6Address) -> tuple[IPv4Address, ...]:
    return (IPv4Address(int(ip) & 0xFFFF_FFFF),)


def _sixtofour(ip: IPv6Address) -> tuple[IPv4Address, ...]:
    return (ip.sixtofour,) if ip.sixtofour is not None else ()


def _teredo(ip: IPv6Address) -> tuple[IPv4Address, ...]:
    # the Teredo server and the client's own (de-obfuscated) address: a relay
    # delivers to the client's address, the server takes part in setting it up
    return ip.teredo if ip.teredo is not None else ()


# IPv6 ranges whose addresses carry an IPv4 address that a translator or a
# relay delivers to, and how to read it out
_CARRIERS: tuple[tuple[IPv6Network, Callable[[IPv6Address], tuple[IPv4Address, ...]]], ...] = (
    (IPv6Network("::ffff:0:0/96"), _low32),  # IPv4-mapped (RFC 4291 §2.5.5.2)
    (IPv6Network("::ffff:0:0:0/96"), _low32),  # IPv4-translated, SIIT (RFC 6145 §2.1)
    (IPv6Network("::/96"), _low32),  # IPv4-compatible, deprecated (RFC 4291 §2.5.5.1)
    (IPv6Network("64:ff9b::/96"), _low32),  # NAT64 well-known prefix (RFC 6052 §2.1)
    (IPv6Network("2002::/16"), _sixtofour),  # 6to4 (RFC 3056)
    (IPv6Network("2001::/32"), _teredo),  # Teredo (RFC 4380)
)
# RFC 8215's local-use NAT64 prefix: where the IPv4 address sits in it depends on
# the prefix length a site chose, so what such an address reaches cannot be judged
_UNJUDGEABLE = (IPv6Network("64:ff9b:1::/48"),)
# ranges that are not public unicast but that Python's ``is_global`` (3.11)
# calls global: the deprecated site-local prefix (RFC 3879: routers may still
# route it inside a site), the documentation prefix RFC 9637 added, and SRv6
# segment identifiers (RFC 9602), which steer packets inside an operator's domain
_NOT_GLOBAL = (IPv6Network("fec0::/10"), IPv6Network("3fff::/20"), IPv6Network("5f00::/16"))


def embedded_ipv4(ip: IPv6Address) -> tuple[IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries (none for a plain one)."""
    return tuple(v4 for net, read in _CARRIERS if ip in net for v4 in read(ip))


def parse_address(text: str) -> IPAddress:
    """An address as the resolver gives it (an IPv6 scope ``%eth0`` dropped)."""
    return ipaddress.ip_address(text.split("%", 1)[0])


def is_public(ip: IPAddress) -> bool:
    """Whether ``ip`` is a public unicast address and everything it carries is too."""
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        # how a dual-stack resolver may give an IPv4 address: judged as that address
        ip = ip.ipv4_mapped
    if ip.is_multicast or not ip.is_global:
        return False
    if isinstance(ip, IPv6Address):
        if any(ip in net for net in _UNJUDGEABLE + _NOT_GLOBAL):
            return False
        return all(is_public(v4) for v4 in embedded_ipv4(ip))
    return True


def private_endpoints_allowed(settings: Settings) -> bool:
    """Whether policy servers may be on loopback or private networks: only
    where the settings say so, or in tests (``proctor demo`` says so, since it
    serves its policies on loopback). Everywhere else a submitter could use
    our worker and gateway to knock on the server's own network."""
    allowed = settings.submissions.allow_private_endpoints
    return allowed if allowed is not None else settings.env == "test"


@dataclass(frozen=True)
class Pinned:
    """A host resolved once and judged: connect to these addresses only."""

    host: str
    port: int
    # (family, sockaddr) in the resolver's order, as socket.connect takes them
    addresses: tuple[tuple[int, tuple[Any, ...]], ...]
    # every address is public (False: at least one is loopback, private, …)
    public: bool


def host_and_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    port = parts.port or DEFAULT_PORTS.get(parts.scheme, 80)
    return parts.hostname or "", port


def pin(url: str, *, allow_private: bool) -> Pinned:
    """Resolve ``url``'s host once and judge every address; refuse (unless
    ``allow_private``) when any of them is not public."""
    host, port = host_and_port(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise AddressRefused(f"the host '{host}' does not resolve") from None
    addresses: list[tuple[int, tuple[Any, ...]]] = []
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and (family, sockaddr) not in addresses:
            addresses.append((family, sockaddr))
    if not addresses:
        raise AddressRefused(f"the host '{host}' does not resolve")
    private = sorted({str(s[0]) for _f, s in addresses if not is_public(parse_address(str(s[0])))})
    if private and not allow_private:
        raise AddressRefused(
            f"'{host}' resolves to a non-public address ({', '.join(private)}); policy "
            "servers must be reachable on the public internet (a dry run against a server "
            "on this machine or network: set PROCTOR_SUBMISSIONS__ALLOW_PRIVATE_ENDPOINTS=true "
            "on a server nobody else uses)"
        )
    return Pinned(host=host, port=port, addresses=tuple(addresses), public=not private)


async def pin_async(url: str, *, allow_private: bool) -> Pinned:
    """``pin`` without blocking the event loop."""
    return await asyncio.to_thread(pin, url, allow_private=allow_private)


class _Deadline:
    def __init__(self, timeout_s: float | None) -> None:
        self._end = None if timeout_s is None else time.monotonic() + timeout_s

    def left(self) -> float | None:
        if self._end is None:
            return None
        left = self._end - time.monotonic()
        if left <= 0:
            raise TimeoutError("timed out connecting")
        return left


def _open(pinned: Pinned, deadline: _Deadline) -> socket.socket:
    failure: OSError = OSError(f"no address to connect to for {pinned.host}")
    for family, sockaddr in pinned.addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(deadline.left())
            sock.connect(sockaddr)
        except OSError as exc:  # TimeoutError included
            sock.close()
            failure = exc
            continue
        sock.settimeout(None)
        return sock
    raise failure


def open_socket(pinned: Pinned, timeout_s: float | None) -> socket.socket:
    """A TCP connection to the first of the pinned addresses that accepts one."""
    return _open(pinned, _Deadline(timeout_s))


async def _open_async(pinned: Pinned, deadline: _Deadline) -> socket.socket:
    loop = asyncio.get_running_loop()
    failure: OSError = OSError(f"no address to connect to for {pinned.host}")
    for family, sockaddr in pinned.addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, sockaddr), deadline.left())
        except OSError as exc:  # TimeoutError included
            sock.close()
            failure = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise failure


# websockets' sync connect() is a function over this class; entering it is what
# connect(...).__enter__() does, with no legacy-API warning pending
class _SyncNoRedirects(sync_connect):
    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc  # a 3xx answer is a failed handshake (InvalidStatus)


class _AsyncNoRedirects(async_connect):
    def process_redirect(self, exc: Exception) -> Exception | str:
        return exc  # a 3xx answer is a failed handshake (InvalidStatus)


def connect_websocket(
    url: str, *, pinned: Pinned | None, open_timeout: float | None, **kwargs: Any
) -> SyncClientConnection:
    """websockets' sync ``connect`` (entered), refusing redirects, to a pinned
    address when one is given (else the host as the resolver answers now)."""
    deadline = _Deadline(open_timeout)
    sock = _open(pinned, deadline) if pinned is not None else None
    try:
        return _SyncNoRedirects(url, sock=sock, open_timeout=deadline.left(), **kwargs).__enter__()
    except BaseException:
        if sock is not None:
            sock.close()
        raise


async def connect_websocket_async(
    url: str, *, pinned: Pinned | None, open_timeout: float | None, **kwargs: Any
) -> AsyncClientConnection:
    """websockets' asyncio ``connect``, as ``connect_websocket`` does."""
    deadline = _Deadline(open_timeout)
    if pinned is not None:
        kwargs["sock"] = await _open_async(pinned, deadline)
    try:
        return await _AsyncNoRedirects(url, open_timeout=deadline.left(), **kwargs)
    except BaseException:
        if pinned is not None:
            kwargs["sock"].close()
        raise


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes


def http_get(
    url: str,
    *,
    pinned: Pinned | None,
    headers: dict[str, str],
    timeout_s: float,
    max_bytes: int,
    method: str = "GET",
) -> HttpAnswer:
    """GET ``url`` (http:// or https://; or ``method``, sent without a body)
    from the pinned address; a redirect
    is an answer like any other, never followed, and no environment proxy is
    used. Raises OSError or http.client.HTTPException when no answer came."""
    parts = urlsplit(url)
    host, port = host_and_port(url)
    secure = parts.scheme == "https"
    deadline = _Deadline(timeout_s)
    conn = (http.client.HTTPSConnection if secure else http.client.HTTPConnection)(
        host, port, timeout=timeout_s
    )
    try:
        if pinned is not None:
            sock = _open(pinned, deadline)
            sock.settimeout(deadline.left())
            if secure:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            conn.sock = sock  # http.client connects only when it has no socket
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.request(method, path, headers=headers)
        response = conn.getresponse()
        return HttpAnswer(response.status, response.read(max_bytes))
    finally:
        conn.close()
