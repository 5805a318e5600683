"""Placeholder pages: each says which issue will fill it.

``create_app`` registers a placeholder only for a path no real route serves,
so a page that lands takes over its path without touching this file (delete
its entry here when it does, to keep the list honest). A placeholder answers
501 Not Implemented, so nothing mistakes it for the real page.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response

from proctor.domain import Role
from web.deps import OptionalUser, require_role
from web.templating import render


@dataclass(frozen=True)
class Placeholder:
    path: str
    title: str
    issue: int
    what: str
    roles: tuple[Role, ...] = ()  # empty: public


# none pending: every page in the navigation is built (the mechanism stays for the
# next page that lands in the navigation before its issue is done)
PLACEHOLDERS: tuple[Placeholder, ...] = ()


def _page(p: Placeholder) -> Callable[..., Response]:
    def show(request: Request, who: OptionalUser) -> Response:
        return render(request, "placeholders/placeholder.html", {"page": p}, status_code=501)

    show.__name__ = f"placeholder_{p.path.strip('/').replace('/', '_')}"
    return show


def placeholder_router(taken: Iterable[str]) -> APIRouter:
    """A router with a page for each placeholder whose path is still free."""
    taken_paths = set(taken)
    router = APIRouter()
    for p in PLACEHOLDERS:
        if p.path in taken_paths:
            continue
        deps = [require_role(*p.roles)] if p.roles else []
        router.add_api_route(p.path, _page(p), methods=["GET"], dependencies=deps)
    return router
