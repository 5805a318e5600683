"""The policy page and its JSON: ``/leaderboard/{id}/policies/{label}`` and
``/api/leaderboard/{id}/policies/{label}`` (``?vs=LABEL`` compares with
another policy instead of the reference). The label is the policy's name
once the campaign is released and its submitter opted in to the public board
(the reference: always), its arm label otherwise (``proctor.scheduler.naming``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import HTMLResponse

from proctor.web.deps import DbId, OptionalUser, ResultsDep, SessionDep
from proctor.web.errors import error_responses
from proctor.web.leaderboard import caching
from proctor.web.leaderboard.board import open_board, parse_stream
from proctor.web.leaderboard.episodes import episode_list
from proctor.web.leaderboard.format import FORMATS
from proctor.web.leaderboard.public_pages import public_page
from proctor.web.leaderboard.routes import StreamQuery
from proctor.web.policies.behaviour import tags_version
from proctor.web.policies.matched import CompareOut, compare_view
from proctor.web.policies.view import PolicyOut, policy_view
from proctor.web.templating import render

api_router = APIRouter(tags=["leaderboard"], responses=error_responses(404, 422))
page_router = APIRouter()

Label = Annotated[str, Path(max_length=200, description="the policy's label in this leaderboard")]
VsQuery = Annotated[
    str | None, Query(max_length=200, description="compare with this policy (default: reference)")
]


@api_router.get(
    "/leaderboard/{campaign_id}/policies/{label:path}",
    summary="One policy's curves and scores in a campaign's leaderboard",
    response_model=PolicyOut,
)
def get_policy(
    campaign_id: DbId,
    label: Label,
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    stream: StreamQuery = None,
    vs: VsQuery = None,
) -> Response:
    board = open_board(session, campaign_id, parse_stream(stream), who, results=results)
    public = not board.blinded and who is None
    tags = tags_version(session, campaign_id)
    etag = caching.etag_for(
        "policy", board.meta.id, board.meta.data_version, board.cache_key(), label, vs, tags
    )
    hit = caching.conditional(request, etag, public=public)
    if hit is not None:
        return hit
    key = ("policy-json", board.meta.id, board.cache_key(), label, vs, tags)
    body = results.get(key)
    if body is None:
        body = results.put(key, policy_view(session, board, label, vs).model_dump_json().encode())
    return Response(
        body, media_type="application/json", headers=caching.cache_headers(public=public, etag=etag)
    )


@page_router.get("/leaderboard/{campaign_id}/policies/{label:path}", response_class=HTMLResponse)
def policy_page(
    campaign_id: DbId,
    label: Label,
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    stream: StreamQuery = None,
    vs: VsQuery = None,
) -> Response:
    page = public_page(
        "policy-page",
        request,
        session,
        who,
        campaign_id,
        stream,
        extra=tags_version(session, campaign_id),
    )
    if page.hit is not None:
        return page.hit
    board = open_board(session, campaign_id, parse_stream(stream), who, results=results)
    view = policy_view(session, board, label, vs)
    episodes = episode_list(session, board, policy=label, obj=None, offset=0, limit=50)
    chart = {
        "label": view.label,
        "comparator": view.comparator,
        "reference": view.reference_label,
        "tau": view.tau_s,
        "objects": [
            {
                "object": o.object,
                "km": o.km,
                "comparator_km": o.comparator_km,
                "pp": o.pp,
                "qq": o.qq,
                "sweep": o.tau_sweep,
            }
            for o in view.per_object
        ],
        "sweep": view.tau_sweep,
        "failure_modes": {
            k: (v.model_dump() if v else None) for k, v in view.failure_modes.items()
        },
    }
    response = render(
        request,
        "policies/policy.html",
        {**FORMATS, "board": board, "view": view, "episodes": episodes, "chart": chart},
        headers=page.headers(),
    )
    return page.keep(response)


PolicyQuery = Annotated[str, Query(min_length=1, max_length=200, description="a policy's label")]


@api_router.get(
    "/leaderboard/{campaign_id}/compare",
    summary="Two policies side by side on matched episodes (same object and configuration)",
    response_model=CompareOut,
)
def get_compare(
    campaign_id: DbId,
    a: PolicyQuery,
    b: PolicyQuery,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    stream: StreamQuery = None,
) -> CompareOut:
    board = open_board(session, campaign_id, parse_stream(stream), who, results=results)
    return compare_view(session, board, a, b)


@page_router.get("/leaderboard/{campaign_id}/compare", response_class=HTMLResponse)
def compare_page(
    campaign_id: DbId,
    a: PolicyQuery,
    b: PolicyQuery,
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    stream: StreamQuery = None,
) -> Response:
    board = open_board(session, campaign_id, parse_stream(stream), who, results=results)
    view = compare_view(session, board, a, b)
    return render(
        request,
        "policies/compare.html",
        {**FORMATS, "board": board, "view": view, "data": view.model_dump(mode="json")},
        headers={"cache-control": "private, no-cache"},
    )
