"""The public's fast path for result pages: an anonymous visitor of a
released campaign gets the page rendered once per snapshot.

One query says which snapshot is current; the page is then answered from
the ETag (304) or from the app's result cache, and only rendered when
neither has it. Signed-in visitors never share a page: what they see
depends on who they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request, Response
from fastapi.responses import HTMLResponse

from proctor.core.db.engine import ProctorSession
from proctor.web.auth.identity import Principal
from proctor.web.auth.sessions import SESSION_COOKIE_NAMES
from proctor.web.leaderboard import caching
from proctor.web.leaderboard.board import board_version, parse_stream
from proctor.web.snapshots.service import ResultCache


def anonymous(request: Request, who: Principal | None) -> bool:
    """Nobody signed in and no session (so no flash messages): the page is
    the same for everyone who asks."""
    return who is None and not any(name in request.cookies for name in SESSION_COOKIE_NAMES)


@dataclass(frozen=True)
class PublicPage:
    """A page's place in the public cache: ``key`` is None when the page
    must not be shared; ``hit`` is the answer when it was already there."""

    key: tuple[object, ...] | None = None
    etag: str | None = None
    hit: Response | None = None
    cache: ResultCache | None = None  # the app's, where a kept page goes

    def headers(self) -> dict[str, str] | None:
        return caching.cache_headers(public=True, etag=self.etag) if self.etag else None

    def keep(self, response: Response) -> Response:
        """Remember a freshly rendered page for the next anonymous visitor."""
        if self.key is not None and self.cache is not None and response.status_code == 200:
            self.cache.put(self.key, response.body)
        return response


def public_page(
    kind: str,
    request: Request,
    session: ProctorSession,
    who: Principal | None,
    campaign_id: int,
    stream: str | None,
    extra: tuple[object, ...] = (),
    cache: ResultCache | None = None,
) -> PublicPage:
    """``extra``: what else the page shows that the snapshot does not version;
    ``cache``: where the page is kept, if not the app's result cache (a filtered
    board's, so that filters never evict the public pages)."""
    if not anonymous(request, who):
        return PublicPage()
    version = board_version(session, campaign_id, parse_stream(stream))
    if version is None or not version.released:
        return PublicPage()
    app = request.app.state.web
    key = (
        kind,
        *version.key(),
        *extra,
        request.url.path,
        request.url.query,
        app.static_version,
    )
    etag = caching.etag_for(*key)
    kept = cache if cache is not None else app.results
    hit = caching.conditional(request, etag, public=True)
    if hit is None:
        cached = kept.get(key)
        if cached is not None:
            hit = HTMLResponse(cached, headers=caching.cache_headers(public=True, etag=etag))
    return PublicPage(key, etag, hit, kept)
