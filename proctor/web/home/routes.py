"""The home page: what this station is, and where each kind of user goes."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from proctor.web.deps import OptionalUser
from proctor.web.nav import nav_for
from proctor.web.templating import render

page_router = APIRouter()


@page_router.get("/")
def home(request: Request, who: OptionalUser) -> Response:
    areas = [item for item in nav_for(who) if item.path != "/api/docs"]
    return render(request, "home/home.html", {"areas": areas})
