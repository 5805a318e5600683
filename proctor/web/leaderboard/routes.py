"""The leaderboard pages and their JSON API.

Pages: ``/leaderboard`` (the newest released campaign, and the others),
``/leaderboard/{id}`` and ``/leaderboard/{id}/episodes``. API:
``/api/leaderboard``, ``/api/leaderboard/{id}``,
``/api/leaderboard/{id}/snapshot`` (the analysis result as stored) and
``/api/leaderboard/{id}/episodes``. Unreleased campaigns: 404 to everyone
but admins, who get a blinded preview.
"""

from __future__ import annotations

from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel

from proctor.analysis.metrics import board_metrics
from proctor.analysis.snapshot import SCHEMA
from proctor.analysis.subsets import DOCUMENTED, Subset
from proctor.core.db.models import AnalysisSubsetResult, Episode, Station
from proctor.web.deps import DbId, OptionalUser, ResultsDep, SessionDep
from proctor.web.errors import error_responses
from proctor.web.leaderboard import caching
from proctor.web.leaderboard.board import (
    Board,
    board_version,
    listed_campaigns,
    open_board,
    parse_stream,
)
from proctor.web.leaderboard.episodes import MAX_PAGE, EpisodeListOut, episode_list
from proctor.web.leaderboard.format import FORMATS
from proctor.web.leaderboard.public_pages import public_page
from proctor.web.leaderboard.schemas import CampaignOut, LeaderboardOut, leaderboard_view
from proctor.web.leaderboard.subset import SubsetDep, SubsetWorkDep, filtered_board
from proctor.web.snapshots.service import ResultCache
from proctor.web.snapshots.subset_work import SubsetWork
from proctor.web.templating import render

api_router = APIRouter(tags=["leaderboard"], responses=error_responses(404, 422))
page_router = APIRouter()

StreamQuery = Annotated[
    str | None,
    Query(
        description="label stream: auto_and_reviewed (default), reviewed_only or detector_only",
        max_length=32,
    ),
]
LabelQuery = Annotated[str | None, Query(max_length=200, description="a policy's label")]
ObjectQuery = Annotated[str | None, Query(max_length=64, description="an object type's name")]


class CampaignListItem(CampaignOut):
    links: dict[str, str]


def _listing(session: SessionDep, who: OptionalUser) -> list[CampaignListItem]:
    return [
        CampaignListItem(
            **CampaignOut.of(c).model_dump(),
            links={"page": f"/leaderboard/{c.id}", "api": f"/api/leaderboard/{c.id}"},
        )
        for c in listed_campaigns(session, who)
    ]


@api_router.get("/leaderboard", summary="Campaigns with a leaderboard (released; admins: all)")
def list_leaderboards(session: SessionDep, who: OptionalUser) -> list[CampaignListItem]:
    return _listing(session, who)


def _view(
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    campaign_id: int,
    stream: str | None,
    results: ResultCache,
    subset: Subset | None = None,
    work: SubsetWork | None = None,
) -> tuple[Board, LeaderboardOut, str, bool]:
    board = open_board(session, campaign_id, parse_stream(stream), who, results=results)
    if subset:
        assert work is not None
        board = filtered_board(session, board, subset, who, work)
        # a filtered board's views live in the subsets' own cache: no number of
        # filters evicts the public pages (security review round three, [N2])
        results = work.cache
    public = not board.blinded and who is None
    etag = caching.etag_for(
        "leaderboard",
        # the response's shape: a client holding an older one revalidates to the new
        SCHEMA,
        board.meta.id,
        board.meta.data_version,
        board.cache_key(),
        request.url.path,
        request.url.query,
    )
    view = caching_view(board, results, subset)
    return board, view, etag, public


def caching_view(
    board: Board, results: ResultCache, subset: Subset | None = None
) -> LeaderboardOut:
    conditions = subset.conditions if subset else ()
    key = ("leaderboard-view", board.meta.id, board.cache_key(), board.stream, conditions)
    view = results.get(key)
    if view is None:
        view = results.put(key, leaderboard_view(board))
    return view


@api_router.get(
    "/leaderboard/{campaign_id}",
    summary="A campaign's leaderboard, from its latest snapshot",
    response_model=LeaderboardOut,
    responses={304: {"description": "not modified (If-None-Match)"}},
)
def get_leaderboard(
    campaign_id: DbId,
    subset: SubsetDep,
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    work: SubsetWorkDep,
    stream: StreamQuery = None,
) -> Response:
    if who is None and not subset:  # the public's fast path: one query says which snapshot
        version = board_version(session, campaign_id, parse_stream(stream))
        if version is not None and version.released:
            key = ("leaderboard-json-public", SCHEMA, *version.key(), stream)
            etag = caching.etag_for(*key)
            hit = caching.conditional(request, etag, public=True)
            if hit is not None:
                return hit
            cached = results.get(key)
            if cached is not None:
                return Response(
                    cached,
                    media_type="application/json",
                    headers=caching.cache_headers(public=True, etag=etag),
                )
            _, view, _, _ = _view(request, session, who, campaign_id, stream, results)
            body = results.put(key, view.model_dump_json().encode())
            return Response(
                body,
                media_type="application/json",
                headers=caching.cache_headers(public=True, etag=etag),
            )
    board, view, etag, public = _view(
        request, session, who, campaign_id, stream, results, subset, work
    )
    hit = caching.conditional(request, etag, public=public)
    if hit is not None:
        return hit
    key = ("leaderboard-json", view.snapshot.id, board.cache_key(), subset.conditions)
    kept = work.cache if subset else results
    body = kept.get(key)
    if body is None:
        body = kept.put(key, view.model_dump_json().encode())
    return Response(
        body, media_type="application/json", headers=caching.cache_headers(public=public, etag=etag)
    )


class SnapshotResult(BaseModel):
    """The analysis result JSON as stored, brought to schema ``proctor.analysis/3`` (see
    proctor/analysis/README.md), with arm labels in place of every name the public may
    not see (all of them in a preview; after release, those not opted in)."""

    model_config = {"extra": "allow"}


@api_router.get(
    "/leaderboard/{campaign_id}/snapshot",
    summary="The stored analysis result behind a leaderboard (every curve and interval)",
    response_model=SnapshotResult,
)
def get_snapshot_result(
    campaign_id: DbId,
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    stream: StreamQuery = None,
) -> Response:
    board = open_board(session, campaign_id, parse_stream(stream), who, results=results)
    public = not board.blinded and who is None
    etag = caching.etag_for(
        "snapshot", SCHEMA, board.meta.id, board.meta.data_version, board.blinded, board.naming_key
    )
    hit = caching.conditional(request, etag, public=public)
    if hit is not None:
        return hit
    return JSONResponse(board.result, headers=caching.cache_headers(public=public, etag=etag))


@api_router.get(
    "/leaderboard/{campaign_id}/episodes",
    summary="The episodes behind a leaderboard number (by policy label and object)",
)
def get_episodes(
    campaign_id: DbId,
    session: SessionDep,
    who: OptionalUser,
    response: Response,
    results: ResultsDep,
    stream: StreamQuery = None,
    policy: LabelQuery = None,
    object: ObjectQuery = None,
    offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 200,
) -> EpisodeListOut:
    board = open_board(session, campaign_id, parse_stream(stream), who, results=results)
    response.headers["cache-control"] = "private, no-cache" if board.blinded else "no-cache"
    return episode_list(session, board, policy=policy, obj=object, offset=offset, limit=limit)


# ---------------------------------------------------------------------- pages


def _page(
    request: Request, name: str, context: dict[str, Any], *, etag: str | None, public: bool
) -> Response:
    if etag is not None:
        hit = caching.conditional(request, etag, public=public)
        if hit is not None:
            return hit
    headers = caching.cache_headers(public=public, etag=etag) if etag else None
    return render(request, name, {**FORMATS, **context}, headers=headers)


@page_router.get("/leaderboard", response_class=HTMLResponse)
def leaderboard_home(
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    stream: StreamQuery = None,
) -> Response:
    campaigns = listed_campaigns(session, who)
    if not campaigns:
        return render(request, "leaderboard/empty.html", {})
    return leaderboard_page(
        campaigns[0].id,
        Subset(()),
        request,
        session,
        who,
        results,
        work=request.app.state.web.subsets,
        stream=stream,
    )


@page_router.get("/leaderboard/{campaign_id}", response_class=HTMLResponse)
def leaderboard_page(
    campaign_id: DbId,
    subset: SubsetDep,
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    work: SubsetWorkDep,
    stream: StreamQuery = None,
) -> Response:
    page = public_page(
        "leaderboard-page",
        request,
        session,
        who,
        campaign_id,
        stream,
        cache=work.cache if subset else None,
    )
    if page.hit is not None:
        return page.hit
    board, view, etag, public = _view(
        request, session, who, campaign_id, stream, results, subset, work
    )
    page_etag = caching.etag_for(etag, caching.audience(who), request.app.state.web.static_version)
    hrts = [iv for r in view.rows if (iv := r.metric("hrt")) is not None]
    hrt_max = max([iv.hi or iv.estimate or 0 for iv in hrts] + [100.0])
    # the chart's two choices; the reference's own HRT (null) has no bar
    chart = {name: _chart_bars(view, name) for name in ("hrt", "rmst")}
    labels = [r.label for r in view.rows]
    verdicts = {(p.a, p.b): p for p in view.pairs}
    response = _page(
        request,
        "leaderboard/board.html",
        {
            "view": view,
            "board": board,
            "campaigns": listed_campaigns(session, who),
            "hrt_max": hrt_max,
            "metrics": board_metrics(),
            "chart": chart,
            "labels": labels,
            "verdicts": verdicts,
            "subset": subset,
            "filters": _filter_choices(session, board, who),
            "one_at_a_time": who is None,
        },
        etag=page.etag or page_etag,
        public=public,
    )
    return page.keep(response)


def _filter_choices(session: SessionDep, board: Board, who: OptionalUser) -> dict[str, list[str]]:
    """The values the page offers to filter by: to everyone, the documented
    levels stored with the snapshot (those the result has, for a snapshot
    scored before they were stored); signed-in callers also the stations."""
    r = board.snapshot
    # configurations read "tote=<side> camera=<side>" (proctor.analysis.episodes)
    parts = [dict(w.split("=", 1) for w in c.split()) for c in r.configurations]
    choices = {
        "tote_side": sorted({p["tote"] for p in parts if "tote" in p}),
        "camera_side": sorted({p["camera"] for p in parts if "camera" in p}),
        "object_tag": sorted({t for o in r.objects for t in o.tags}),
    }
    stored = session.execute(
        sa.select(AnalysisSubsetResult.factor, AnalysisSubsetResult.level)
        .where(
            AnalysisSubsetResult.snapshot_id == board.meta.id,
            AnalysisSubsetResult.result.is_not(None),
        )
        .order_by(AnalysisSubsetResult.factor, AnalysisSubsetResult.level)
    ).all()
    if stored:
        choices = {name: [lv for f, lv in stored if f == name] for name in DOCUMENTED}
    if who is not None:
        choices["station"] = _stations(session, board.campaign.id)
    return choices


def _stations(session: SessionDep, campaign_id: int) -> list[str]:
    return sorted(
        session.scalars(
            sa.select(Station.name)
            .join(Episode, Episode.station_id == Station.id)
            .where(Episode.campaign_id == campaign_id)
            .distinct()
        )
    )


@page_router.get("/leaderboard/{campaign_id}/episodes", response_class=HTMLResponse)
def episodes_page(
    campaign_id: DbId,
    request: Request,
    session: SessionDep,
    who: OptionalUser,
    results: ResultsDep,
    stream: StreamQuery = None,
    policy: LabelQuery = None,
    object: ObjectQuery = None,
    offset: Annotated[int, Query(ge=0, le=10**6)] = 0,
) -> Response:
    board = open_board(session, campaign_id, parse_stream(stream), who, results=results)
    listing = episode_list(session, board, policy=policy, obj=object, offset=offset, limit=200)
    cell = None
    if policy is not None and object is not None:
        p = board.policy(policy)
        cell = next((o for o in p.per_object if o.object == object), None)
    return render(
        request,
        "leaderboard/episodes.html",
        {**FORMATS, "board": board, "listing": listing, "cell": cell},
    )


def _chart_bars(view: LeaderboardOut, name: str) -> list[dict[str, Any]]:
    return [
        {
            "label": r.label,
            "est": iv.estimate,
            "lo": iv.lo,
            "hi": iv.hi,
            "href": r.links.policy,
            "reference": r.reference,
        }
        for r in view.rows
        if (iv := r.metric(name)) is not None
    ]
