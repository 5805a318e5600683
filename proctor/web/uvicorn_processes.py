"""How ``proctor serve`` runs the app under uvicorn: how many processes,
which proxies it believes, and how long a connection may take to send a
request's header.

With ``--workers N`` (``web.workers``) uvicorn binds the socket once and
starts N processes that share it; each builds its own app through
``app_from_environment`` from the same config file (passed on in
``PROCTOR_CONFIG``) and ``PROCTOR_*`` environment as the command. Each
process has its own pool, request limit, hashing slots and caches; the
caches stay correct across processes through the database's cache
generation (``proctor.web.shared_cache``, ``proctor.core.db.generation``).

uvicorn has no header-read timeout: a client that opens connections and
trickles a header line now and then keeps each socket (and a file
descriptor) for as long as it likes. ``HeaderDeadlineProtocol`` is
uvicorn's httptools protocol with one addition: a request's header must be
complete ``web.header_timeout_s`` after the connection opened (for the
first request) or after the request's first byte (for later ones on a
kept-alive connection), and may not exceed ``MAX_HEADER_BYTES``; otherwise
the connection is closed. Behind ``deploy/nginx`` nginx's own
``client_header_timeout`` applies first.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proctor.core.settings import Settings

log = logging.getLogger(__name__)

# the request line and headers together; nginx's default large_client_header_buffers
# (4 × 8 KiB) is smaller, and no browser or script of ours comes near it
MAX_HEADER_BYTES = 64 * 1024


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose request header
    does not arrive whole in time (or is too large). The time is the uvicorn
    config's ``header_timeout_s`` (set by ``uvicorn_config``): a module-level
    class and a config attribute, not a class made per timeout, because
    worker processes receive both pickled."""

    header_timeout_s: float = 5.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.header_timeout_s = getattr(self.config, "header_timeout_s", self.header_timeout_s)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._awaiting_header = True
        super().connection_made(transport)
        self._start_header_clock()

    def _start_header_clock(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(
                self.header_timeout_s, self._header_too_slow
            )

    def _stop_header_clock(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_too_slow(self) -> None:
        self._header_deadline = None
        if self._awaiting_header and not self.transport.is_closing():
            log.info(
                "closed a connection from %s: no complete request header within %.0f s",
                self.client[0] if self.client else "?",
                self.header_timeout_s,
            )
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        waiting = self._awaiting_header
        super().data_received(data)
        # counted only while the header is still incomplete after this data, so
        # that a body arriving with the header's end is not counted as header
        if waiting and self._awaiting_header and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES:
                self._stop_header_clock()
                self.send_400_response("Request header too large")

    def on_message_begin(self) -> None:
        # a later request on a kept-alive connection: its header gets the full time
        self._awaiting_header = True
        self._header_bytes = 0
        self._start_header_clock()
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._awaiting_header = False
        self._stop_header_clock()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_clock()
        super().connection_lost(exc)


APP_FACTORY = "proctor.web.uvicorn_processes:app_from_environment"


def app_from_environment() -> Any:
    """The app of one ``proctor serve --workers N`` process: the settings the
    command read (config file from ``PROCTOR_CONFIG``, then ``PROCTOR_*``)."""
    from proctor.core.settings import load_settings
    from proctor.web.app import create_app
    from proctor.web.templating import compile_all

    config = os.environ.get("PROCTOR_CONFIG")
    app = create_app(load_settings(Path(config) if config else None))
    compile_all(app.state.web.templates)
    return app


def uvicorn_config(
    app: Any, settings: Settings, *, host: str, port: int, workers: int = 1
) -> uvicorn.Config:
    """The uvicorn configuration ``proctor serve`` runs ``app`` with (an app,
    or with ``workers`` > 1 the import string of a factory)."""
    web = settings.web
    proxies = list(web.trusted_proxies)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        workers=workers,
        factory=isinstance(app, str),
        http=HeaderDeadlineProtocol,
        # X-Forwarded-For/-Proto only from the configured proxies: uvicorn's own
        # default believes any process on loopback, which could then claim any
        # client address (login throttling counts failures by address)
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or [],
        log_level="info",
    )
    config.header_timeout_s = web.header_timeout_s  # type: ignore[attr-defined]
    return config
