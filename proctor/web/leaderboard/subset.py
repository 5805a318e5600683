"""The leaderboard filtered by a scene factor: ``?tote_side=left``,
``?camera_side=right``, ``?object_tag=deformable``, ``?station=NAME`` (any
together). The campaign's episodes under the board's label stream are
filtered (``proctor.analysis.subsets``) and scored afresh with the campaign's
protocol — every interval recomputed on the kept episodes — then labelled
like the snapshot (blinding and opt-ins as on the full board).

What it costs whom (security review round three, [N2]):

* every value is checked against the campaign's levels first (a few indexed
  queries): an unknown station or tag, or a side that is not one, is refused
  naming the field before any episode is loaded;
* one documented factor at one level (``proctor.analysis.subsets.DOCUMENTED``)
  is read from the results stored with the snapshot — that is all an
  anonymous caller may ask for; anything else is 401 for them;
* a signed-in caller's other filters are computed under the app's few
  permits (``proctor.web.snapshots.subset_work``: 503 when busy) and kept in
  its own cache, apart from the public pages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, HTTPException, Query, Request, status

from proctor.analysis.snapshot import migrate, read_snapshot
from proctor.analysis.store import (
    EmptySubset,
    campaign_protocol,
    has_subsets,
    load_episodes,
    subset_result,
)
from proctor.analysis.subsets import DOCUMENTED, FILTERS, MAX_VALUE, Subset
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import AnalysisSubsetResult, Campaign, Episode, ObjectType, Station
from proctor.core.domain import Side
from proctor.scheduler.naming import blind_result, campaign_naming
from proctor.web.auth.identity import NotSignedIn, Principal
from proctor.web.auth.sessions import SESSION_COOKIE_NAMES
from proctor.web.leaderboard.board import Board
from proctor.web.snapshots.subset_work import SubsetWork


def _q(what: str) -> object:
    return Query(max_length=MAX_VALUE, description=f"only the episodes {what}")


def _credentials(request: Request) -> bool:
    """Whether the request carries any (a session cookie or an Authorization
    header): without, the caller is anonymous, known without a query."""
    return "authorization" in request.headers or any(
        name in request.cookies for name in SESSION_COOKIE_NAMES
    )


# async, and the first parameter of the routes that take it: a filter the
# public may not ask for is refused on the event loop, before any worker
# thread, database session or sign-in lookup is spent on it
async def subset_query(
    request: Request,
    tote_side: Annotated[str | None, _q("with the tote on this side")] = None,
    camera_side: Annotated[str | None, _q("with the external camera on this side")] = None,
    object_tag: Annotated[str | None, _q("whose object carries this tag")] = None,
    station: Annotated[str | None, _q("recorded at this station (signed-in callers)")] = None,
) -> Subset:
    given = {
        "tote_side": tote_side,
        "camera_side": camera_side,
        "object_tag": object_tag,
        "station": station,
    }
    # the page's form sends an empty value for "all"
    given = {k: (v if v else None) for k, v in given.items()}
    assert set(given) == set(FILTERS)
    try:
        subset = Subset.of(given)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None
    for name in ("tote_side", "camera_side"):
        value = dict(subset.conditions).get(name)
        if value is not None and (why := _side(value)) is not None:
            raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"{name} = {value}: {why}")
    if subset and subset.documented_level is None and not _credentials(request):
        raise NotSignedIn(anonymous_refusal(subset))
    return subset


SubsetDep = Annotated[Subset, Depends(subset_query)]


async def get_subset_work(request: Request) -> SubsetWork:
    return request.app.state.web.subsets


SubsetWorkDep = Annotated[SubsetWork, Depends(get_subset_work)]


# ------------------------------------------------- the campaign's levels, cheaply


def _side(value: str) -> str | None:
    if value in {s.value for s in Side}:
        return None
    return f"not a side ({', '.join(s.value for s in Side)})"


def _station(session: ProctorSession, campaign_id: int, value: str) -> str | None:
    found = session.scalar(
        sa.select(Episode.id)
        .join(Station, Episode.station_id == Station.id)
        .where(Episode.campaign_id == campaign_id, Station.name == value)
        .limit(1)
    )
    return None if found is not None else "no episode of this campaign was recorded there"


def _object_tag(session: ProctorSession, campaign_id: int, value: str) -> str | None:
    objects = sa.select(Episode.object_type_id).where(Episode.campaign_id == campaign_id)
    tags = session.scalars(sa.select(ObjectType.tags).where(ObjectType.id.in_(objects)))
    return None if any(value in (t or ()) for t in tags) else "no object of this campaign has it"


# a factor -> why a value is not one of the campaign's levels (None: it is),
# and the status that says so: outside the factor's domain is bad input (422),
# a well-formed name the campaign lacks is not found (404)
CHECKS: dict[str, tuple[Callable[[ProctorSession, int, str], str | None], int]] = {
    "tote_side": (lambda _s, _c, v: _side(v), status.HTTP_422_UNPROCESSABLE_CONTENT),
    "camera_side": (lambda _s, _c, v: _side(v), status.HTTP_422_UNPROCESSABLE_CONTENT),
    "station": (_station, status.HTTP_404_NOT_FOUND),
    "object_tag": (_object_tag, status.HTTP_404_NOT_FOUND),
}
assert set(CHECKS) == set(FILTERS)


def check_levels(session: ProctorSession, campaign_id: int, subset: Subset) -> None:
    """Refuse, naming the field, a value that is not a level of the campaign."""
    for name, value in subset.conditions:
        check, code = CHECKS[name]
        why = check(session, campaign_id, value)
        if why is not None:
            raise HTTPException(code, f"{name} = {value}: {why}")


# ------------------------------------------------- the filtered board


def anonymous_refusal(subset: Subset) -> str:
    others = [name for name, _ in subset.conditions if name not in DOCUMENTED]
    what = f"filtering by {', '.join(others)}" if others else "combining filters"
    return (
        f"{what} needs a signed-in user; anyone may filter by one of "
        f"{', '.join(DOCUMENTED)} at a time"
    )


def _stored(session: ProctorSession, board: Board, subset: Subset) -> dict[str, Any] | None:
    """The documented level's result stored with the board's snapshot, or None
    when the snapshot has none stored (scored before they were)."""
    level = subset.documented_level
    assert level is not None
    row = session.execute(
        sa.select(AnalysisSubsetResult.result, AnalysisSubsetResult.message).where(
            AnalysisSubsetResult.snapshot_id == board.meta.id,
            AnalysisSubsetResult.factor == level[0],
            AnalysisSubsetResult.level == level[1],
        )
    ).first()
    if row is None:
        if not has_subsets(session, board.meta.id):
            return None
        # every level the episodes have was stored: this one has none
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no episode of this campaign has {subset.describe()}"
        )
    if row.result is None:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, row.message)
    return row.result


def _compute(session: ProctorSession, board: Board, subset: Subset) -> dict[str, Any]:
    campaign = session.get(Campaign, board.campaign.id)
    assert campaign is not None
    table = load_episodes(session, campaign_id=campaign.id, stream=board.stream)
    try:
        return subset_result(
            table,
            subset,
            campaign_protocol(campaign),
            stream=board.stream,
            campaign_id=campaign.id,
        )
    except EmptySubset as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None


def filtered_board(
    session: ProctorSession,
    board: Board,
    subset: Subset,
    who: Principal | None,
    work: SubsetWork,
) -> Board:
    """``board`` with its result on the subset's episodes."""
    if not subset:
        return board
    check_levels(session, board.campaign.id, subset)
    if who is None and subset.documented_level is None:
        raise NotSignedIn(anonymous_refusal(subset))
    key = ("subset", board.meta.id, board.naming_key, subset.conditions)
    cached = work.cache.get(key)
    if cached is None:
        raw = _stored(session, board, subset) if subset.documented_level else None
        if raw is None:
            # a signed-in caller's filter, or a documented level of a snapshot
            # scored before levels were stored (few: they fit the cache)
            raw = work.run(lambda: _compute(session, board, subset))
        campaign = session.get(Campaign, board.campaign.id)
        assert campaign is not None
        labelled = migrate(blind_result(raw, campaign_naming(session, campaign).labels()))
        cached = work.cache.put(key, (labelled, read_snapshot(labelled)))
    result, typed = cached
    return replace(board, result=result, snapshot=typed)
