"""The leaderboard filtered by a scene factor: ``?tote_side=left``,
``?camera_side=right``, ``?object_tag=deformable``, ``?station=NAME`` (any
together). The campaign's episodes under the board's label stream are
filtered (``proctor.analysis.subsets``) and scored afresh with the campaign's
protocol — every interval recomputed on the kept episodes — then labelled
like the snapshot (blinding and opt-ins as on the full board). The result is
kept in the app's result cache under the snapshot it was asked beside, so it
is computed once per snapshot and filter."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import Depends, HTTPException, Query, status

from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import data_version, to_json
from proctor.analysis.store import campaign_protocol, code_version, load_episodes
from proctor.analysis.subsets import FILTERS, MAX_VALUE, Subset, filter_table
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Campaign
from proctor.core.errors import UsageError
from proctor.scheduler.naming import blind_result, campaign_naming
from proctor.web.leaderboard.board import Board
from proctor.web.snapshots.service import ResultCache


def _q(what: str) -> object:
    return Query(max_length=MAX_VALUE, description=f"only the episodes {what}")


def subset_query(
    tote_side: Annotated[str | None, _q("with the tote on this side")] = None,
    camera_side: Annotated[str | None, _q("with the external camera on this side")] = None,
    object_tag: Annotated[str | None, _q("whose object carries this tag")] = None,
    station: Annotated[str | None, _q("recorded at this station")] = None,
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
        return Subset.of(given)
    except ValueError as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc)) from None


SubsetDep = Annotated[Subset, Depends(subset_query)]


def filtered_board(
    session: ProctorSession, board: Board, subset: Subset, results: ResultCache
) -> Board:
    """``board`` with its result recomputed on the subset's episodes."""
    if not subset:
        return board
    key = ("subset", board.meta.id, board.naming_key, subset.conditions)
    result = results.get(key)
    if result is None:
        campaign = session.get(Campaign, board.campaign.id)
        assert campaign is not None
        table = filter_table(
            load_episodes(session, campaign_id=campaign.id, stream=board.stream), subset
        )
        if not table.episodes:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND, f"no episode of this campaign has {subset.describe()}"
            )
        try:
            lb = analyze(table, campaign_protocol(campaign))
        except (ValueError, UsageError) as exc:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_CONTENT, f"{subset.describe()}: {exc}"
            ) from None
        raw = to_json(
            lb,
            code_version=code_version(),
            data_version=data_version(table),
            extra_protocol={
                "label_stream": board.stream.value,
                "campaign_id": campaign.id,
                "subset": dict(subset.conditions),
            },
        )
        result = results.put(key, blind_result(raw, campaign_naming(session, campaign).labels()))
    return replace(board, result=result)
