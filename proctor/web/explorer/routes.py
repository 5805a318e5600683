"""The run explorer: ``/episodes/{uid}`` (the page), ``/api/episodes/{uid}``
(everything it shows) and ``/api/episodes/{uid}/rrd`` (the recording for the
Rerun viewer). Frame tables, telemetry and video bytes come from the
recordings API (``proctor.web.artifacts``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import HTMLResponse

from proctor.core.recording import keys
from proctor.web.artifacts.access import visible_episode
from proctor.web.artifacts.responses import serve_artifact
from proctor.web.artifacts.service import VisibleArtifact
from proctor.web.auth.identity import NotSignedIn
from proctor.web.deps import AppStateDep, OptionalUser, SessionDep, StoreDep
from proctor.web.errors import error_responses
from proctor.web.explorer.export import cached_rrd, episode_rrd
from proctor.web.explorer.service import EpisodeOut, episode_bundle
from proctor.web.leaderboard.caching import PUBLIC_MAX_AGE_S
from proctor.web.leaderboard.format import FORMATS
from proctor.web.leaderboard.public_pages import anonymous
from proctor.web.templating import render

api_router = APIRouter(tags=["recordings"], responses=error_responses(401, 404, 422))
page_router = APIRouter()
SHARED_PAGE = {
    "cache-control": f"public, max-age={PUBLIC_MAX_AGE_S}",
    "vary": "cookie, authorization",
}
# samples per telemetry column the page asks for: about two per pixel of a wide plot
TELEMETRY_POINTS = 2400

EpisodeUid = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="the episode's uid")]


@api_router.get("/episodes/{uid}", summary="One episode: what the run explorer shows")
def get_episode(
    uid: EpisodeUid, session: SessionDep, who: OptionalUser, response: Response
) -> EpisodeOut:
    episode, access = visible_episode(session, uid, who)
    # whether it names the policy follows its submitter's opt-in, which may change:
    # cached as briefly as the leaderboard, not as long as the recorded bytes
    response.headers["cache-control"] = (
        f"public, max-age={PUBLIC_MAX_AGE_S}"
        if who is None and access.public
        else "private, no-cache"
    )
    return episode_bundle(session, episode, access, who)


@api_router.get(
    "/episodes/{uid}/rrd",
    summary="The episode's recording as a Rerun .rrd file (built on a signed-in user's "
    "first request; a built one is served to everyone who may see the episode)",
    response_class=Response,
    responses={200: {"content": {"application/x-rerun": {}}, "description": "the .rrd file"}},
)
def get_rrd(
    uid: EpisodeUid,
    request: Request,
    session: SessionDep,
    store: StoreDep,
    who: OptionalUser,
    app: AppStateDep,
) -> Response:
    episode, access = visible_episode(session, uid, who)
    if who is None:
        # building one takes up to seconds of CPU and stores 4–9 MB: only for a
        # signed-in user (anyone with an account), so that anonymous requests
        # cannot make the server build every episode's; a built one is served to all
        built = cached_rrd(session, episode, redacted=access.redacted)
        if built is None or not store.exists(built.sha256):
            raise NotSignedIn(
                "this episode's .rrd has not been built yet: sign in to have it built "
                "(once built, it is served to everyone who may see the episode)"
            )
    # a sync route: runs in the thread pool
    row = episode_rrd(
        session,
        store,
        episode,
        locks=app.rrd_locks,
        tables=app.artifact_cache.tables,
        redacted=access.redacted,
    )
    return serve_artifact(request, store, VisibleArtifact(row, episode, access), download=True)


@page_router.get("/episodes/{uid}", response_class=HTMLResponse)
def explorer_page(
    uid: EpisodeUid, request: Request, session: SessionDep, who: OptionalUser
) -> Response:
    episode, access = visible_episode(session, uid, who)
    bundle = episode_bundle(session, episode, access, who)
    # a released episode seen by nobody signed in is the same page for everyone:
    # public for as long as the JSON, so the shared cache (proctor.web.shared_cache) answers
    # the next anonymous visitors from memory instead of ~12 queries and a render
    shared = access.public and anonymous(request, who)
    return render(
        request,
        "explorer/episode.html",
        {
            **FORMATS,
            "e": bundle,
            "data": bundle.model_dump(mode="json"),
            "telemetry_points": TELEMETRY_POINTS,
            "envelope_kind": keys.ENVELOPE_EVENT,
            # withheld from operators and reviewers before release (proctor.web.artifacts.redaction)
            "policy_timing": not access.redacted,
        },
        headers=SHARED_PAGE if shared else {"cache-control": "private, no-cache"},
    )
