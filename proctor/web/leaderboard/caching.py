"""Conditional responses for pages and JSON built from stored snapshots.

A snapshot never changes, so (snapshot id, view, audience) identifies a
response. Public views (released campaigns, nobody signed in) may be cached
by browsers and proxies for a short while and revalidated with ETags;
anything a signed-in person sees (their name in the page, an admin preview)
is private.
"""

from __future__ import annotations

import hashlib

from fastapi import Request, Response

from proctor.web.auth.identity import Principal

PUBLIC_MAX_AGE_S = 30


def etag_for(*parts: object) -> str:
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:32]
    return f'W/"{digest}"'


def cache_headers(*, public: bool, etag: str) -> dict[str, str]:
    return {
        "etag": etag,
        "cache-control": (f"public, max-age={PUBLIC_MAX_AGE_S}" if public else "private, no-cache"),
        "vary": "cookie, authorization",
    }


def not_modified(request: Request, etag: str) -> bool:
    header = request.headers.get("if-none-match")
    if not header:
        return False
    return etag in {t.strip() for t in header.split(",")} or header.strip() == "*"


def audience(who: Principal | None) -> str:
    return "public" if who is None else f"user-{who.id}"


def conditional(request: Request, etag: str, *, public: bool) -> Response | None:
    """A 304 when the client already holds this version, else None."""
    if not_modified(request, etag):
        return Response(status_code=304, headers=cache_headers(public=public, etag=etag))
    return None
