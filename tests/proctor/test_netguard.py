"""The address policy for submitters' policy servers (proctor/core/netguard.py):
which addresses are public, resolving once, and connecting to the judged
address without following redirects."""

from __future__ import annotations

import http.server
import ipaddress
import threading
from collections.abc import Iterator

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.server import ServerConnection, serve

from proctor.core import netguard
from proctor.core.settings import load_settings
from tests.loopback import ScriptedResolver, TcpWitness, redirecting_server

# IPv6 literals that carry a loopback or private IPv4 address, with what they carry
CARRIERS_OF_PRIVATE = {
    "64:ff9b::7f00:1": "127.0.0.1",  # NAT64 (RFC 6052)
    "64:ff9b::a9fe:a9fe": "169.254.169.254",  # NAT64 to the cloud metadata service
    "2002:7f00:1::": "127.0.0.1",  # 6to4
    "2002:a00:1::": "10.0.0.1",  # 6to4
    "2001:0:4136:e378:8000:63bf:80ff:fffe": "127.0.0.1",  # Teredo client 127.0.0.1
    "2001:0:4136:e378:8000:63bf:f5ff:fffe": "10.0.0.1",  # Teredo client 10.0.0.1
    "::ffff:127.0.0.1": "127.0.0.1",  # IPv4-mapped
    "::7f00:1": "127.0.0.1",  # IPv4-compatible
    "::ffff:0:7f00:1": "127.0.0.1",  # IPv4-translated (RFC 6145)
    "::ffff:0:a9fe:a9fe": "169.254.169.254",  # IPv4-translated to the metadata service
}
# IPv6 ranges that are not public though Python 3.11's is_global says they are
NOT_GLOBAL = (
    "fec0::1",  # site-local, deprecated (RFC 3879)
    "3fff::1",  # documentation (RFC 9637)
    "3fff:fff:ffff::1",  # the same /20's far end
    "5f00::1",  # SRv6 segment identifiers (RFC 9602)
)


@pytest.mark.parametrize("literal", sorted(CARRIERS_OF_PRIVATE))
def test_an_ipv6_address_carrying_a_private_ipv4_is_not_public(literal: str) -> None:
    ip = ipaddress.IPv6Address(literal)
    carried = {str(a) for a in netguard.embedded_ipv4(ip)}
    assert CARRIERS_OF_PRIVATE[literal] in carried
    assert not netguard.is_public(ip)


@pytest.mark.parametrize("literal", sorted(CARRIERS_OF_PRIVATE))
def test_carrier_literals_are_refused_where_private_endpoints_are_not_allowed(
    literal: str,
) -> None:
    with pytest.raises(netguard.AddressRefused, match="non-public address"):
        netguard.pin(f"ws://[{literal}]:5432/", allow_private=False)
    # where they are allowed, the address is kept, marked not public
    pinned = netguard.pin(f"ws://[{literal}]:5432/", allow_private=True)
    assert not pinned.public and pinned.port == 5432


@pytest.mark.parametrize("literal", NOT_GLOBAL)
def test_ranges_python_calls_global_that_are_not_public_are_refused(literal: str) -> None:
    assert not netguard.is_public(ipaddress.IPv6Address(literal))
    with pytest.raises(netguard.AddressRefused, match="non-public address"):
        netguard.pin(f"ws://[{literal}]:8000/", allow_private=False)


def test_carriers_of_a_public_ipv4_and_the_local_use_nat64_prefix() -> None:
    public = (
        "64:ff9b::808:808",
        "2002:808:808::",
        "::ffff:8.8.8.8",
        "::ffff:0:808:808",
        "8.8.8.8",
        "2606:4700::1",
        "3fff:1000::1",  # just past RFC 9637's /20
    )
    assert all(netguard.is_public(ipaddress.ip_address(a)) for a in public)
    # RFC 8215's local-use prefix: where the IPv4 address sits depends on the site
    assert not netguard.is_public(ipaddress.ip_address("64:ff9b:1::808:808"))
    assert not netguard.is_public(ipaddress.ip_address("ff02::1"))  # multicast


def test_private_endpoints_are_allowed_only_in_tests_unless_configured() -> None:
    from proctor.web.submissions import endpoints

    # what registration asks: dev no longer lets submitters register loopback servers
    assert not endpoints.private_endpoints_allowed(load_settings(env="dev"))
    assert netguard.private_endpoints_allowed(load_settings(env="test"))
    assert not netguard.private_endpoints_allowed(load_settings(env="dev"))
    assert not netguard.private_endpoints_allowed(load_settings(env="prod", secret_key="k" * 40))
    assert netguard.private_endpoints_allowed(
        load_settings(env="dev", submissions={"allow_private_endpoints": True})
    )
    assert not netguard.private_endpoints_allowed(
        load_settings(env="test", submissions={"allow_private_endpoints": False})
    )


def test_the_host_is_resolved_once_and_every_answer_judged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolver = ScriptedResolver("policy.example.test", ["127.0.0.1"]).install(monkeypatch)
    with pytest.raises(netguard.AddressRefused, match=r"127\.0\.0\.1"):
        netguard.pin("wss://policy.example.test/", allow_private=False)
    pinned = netguard.pin("wss://policy.example.test/", allow_private=True)
    assert resolver.calls == 2
    assert pinned.host == "policy.example.test" and pinned.port == 443
    assert [s[0] for _f, s in pinned.addresses] == ["127.0.0.1"]


def test_a_websocket_connection_goes_to_the_pinned_address_under_its_own_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever the name resolves to later, the connection goes to the address
    that was judged, and the server sees the URL's host name in the Host header."""
    hosts: list[str] = []

    def handler(ws: ServerConnection) -> None:
        assert ws.request is not None
        hosts.append(ws.request.headers["Host"])
        ws.send("hello")

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.socket.getsockname()[1]
        url = f"ws://policy.example.test:{port}/"
        ScriptedResolver("policy.example.test", ["127.0.0.1"]).install(monkeypatch)
        pinned = netguard.pin(url, allow_private=True)
        # the name no longer resolves: a connection that looked it up again would fail
        ScriptedResolver("policy.example.test", [""]).install(monkeypatch)
        with netguard.connect_websocket(url, pinned=pinned, open_timeout=5) as ws:
            assert ws.recv(timeout=5) == "hello"
        server.shutdown()
        thread.join(5)
    assert hosts == [f"policy.example.test:{port}"]


def test_a_websocket_redirect_is_a_failed_handshake() -> None:
    with TcpWitness() as target, redirecting_server(f"ws://127.0.0.1:{target.port}/") as url:
        with pytest.raises(InvalidStatus) as exc:
            netguard.connect_websocket(url, pinned=None, open_timeout=5)
        assert exc.value.response.status_code == 302
        pinned = netguard.pin(url, allow_private=True)
        with pytest.raises(InvalidStatus):
            netguard.connect_websocket(url, pinned=pinned, open_timeout=5)
    assert target.connections == 0


class _Redirect(http.server.BaseHTTPRequestHandler):
    location = ""

    def do_GET(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_redirect() -> Iterator[tuple[str, TcpWitness]]:
    with TcpWitness() as target:
        handler = type("R", (_Redirect,), {"location": f"http://127.0.0.1:{target.port}/x"})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/api/v1/models", target
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)


def test_an_http_redirect_is_an_answer_not_followed(
    http_redirect: tuple[str, TcpWitness],
) -> None:
    url, target = http_redirect
    pinned = netguard.pin(url, allow_private=True)
    answer = netguard.http_get(url, pinned=pinned, headers={}, timeout_s=5, max_bytes=1000)
    assert answer.status == 302
    assert target.connections == 0


def test_the_demo_allows_private_endpoints_explicitly() -> None:
    """``proctor demo`` serves its policies on loopback: it turns private
    endpoints on for itself (dev's default is off), and says so when a config
    file turned them off."""
    from proctor.core.errors import ProctorError
    from proctor.demo.run import _with_loopback_policies

    demo = _with_loopback_policies(load_settings(env="dev"))
    assert netguard.private_endpoints_allowed(demo)
    with pytest.raises(ProctorError, match="allow_private_endpoints is false"):
        _with_loopback_policies(
            load_settings(env="dev", submissions={"allow_private_endpoints": False})
        )
