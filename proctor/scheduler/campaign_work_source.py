"""The station's work, from a campaign's allocation (``proctor.core.work.WorkSource``),
read and written in the campaign database directly.

A station anywhere does not use this: it holds no database credentials and
talks to the server over the station API (``proctor.station.uplink``, an
``[uplink]`` section in its config). This source is for a station on the
server's own host, where the database is local anyway, and for the
scheduler's and gateway's tests, which drive claims with no HTTP server in
between (``docs/architecture.md``, Stations anywhere).

Plugged into the station daemon by its config, so the station never imports
the scheduler::

    [work]
    source = "proctor.scheduler.campaign_work_source:campaign_work_source"
    options = { campaign = "spring-2026", station = "cell-a", gateway = "ws://server:8000" }

The station's ``site`` and ``cell_profile`` (top-level keys of its config,
handed over by the daemon) are validated and written to its row on every
start, so a campaign that accepts some cell profiles only sees what the
station declares now.

Each call is its own transaction on the campaign database (the one in the
station's Proctor settings, or ``database_url``): ``claim`` commits the claim
before returning it, so a crash after it resumes the same run on restart.
What the station receives is a ``Work`` whose policy URL is the gateway URL
of an opaque handle; nothing in it names the policy. The one exception is the
human reference registered as a ``teleop`` submission: its URL is the teleop
server on the station host's own loopback, which the station connects to
directly (the server cannot reach it, and never connects to loopback).

The station proves itself to the gateway with its token, which the station
host holds in its environment (``PROCTOR_STATION_TOKEN``; an admin issues it
with ``proctor station enrol``), never in the config file. Without one it
sends only its id, which the gateway accepts only where the server's
settings trust it (``scheduler.trust_station_header``, a development set-up).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session, sessionmaker

from proctor.core import station_credentials
from proctor.core.audit import Actor
from proctor.core.db.engine import (
    ProctorSession,
    make_engine,
    make_session_factory,
    session_scope,
)
from proctor.core.db.models import Episode, Station
from proctor.core.domain import CampaignStatus, Outcome
from proctor.core.errors import Forbidden, UsageError
from proctor.core.labels import label_problem
from proctor.core.work import Work
from proctor.scheduler import claims
from proctor.scheduler.gateway import gateway_url, station_headers, station_id_headers
from proctor.scheduler.service import get_campaign


class CampaignWorkSource:
    def __init__(
        self,
        *,
        session_factory: sessionmaker[ProctorSession],
        campaign: int | str,
        station: str,
        gateway: str,
        free_protocol_faults: int = claims.FREE_PROTOCOL_FAULTS,
        site: str | None = None,
        cell_profile: str | None = None,
        station_token: str | None = None,
    ) -> None:
        for field, value in (("site", site), ("cell_profile", cell_profile)):
            problem = None if value is None else label_problem(value)
            if problem is not None:
                raise UsageError(f"{field}: {problem}")
        if not gateway.startswith(("ws://", "wss://", "http://", "https://")):
            raise UsageError(f"gateway: '{gateway}' must be the server's ws:// or http:// origin")
        self._factory = session_factory
        self._gateway = gateway
        self._free_protocol_faults = free_protocol_faults
        with session_scope(self._factory) as session:
            self.campaign_id = get_campaign(session, campaign).id
            self.station_id = _station_id(session, station, site=site, cell_profile=cell_profile)
            if station_token is not None:
                _check_token(session, station_token, station_id=self.station_id, name=station)
        self._station_name = station
        self._token = station_token

    def claim(self) -> Work | None:
        with session_scope(self._factory) as session:
            if self._token is not None:
                # revoked or past its rotation window since start: the gateway would
                # refuse every run, and each refusal would skip a slot; claim nothing
                _check_token(
                    session, self._token, station_id=self.station_id, name=self._station_name
                )
            status = get_campaign(session, self.campaign_id).status
            if status in (CampaignStatus.closed, CampaignStatus.released):
                return None
            claim = claims.claim_next(
                session, campaign_id=self.campaign_id, station_id=self.station_id
            )
        if claim is None:
            return None
        if claim.teleop_url is not None:
            # the human reference is served on this host (proctor station teleop): the
            # gateway never relays it, and the server never connects to a loopback address
            url, headers = claim.teleop_url, {}
        else:
            url = gateway_url(self._gateway, claim.endpoint_handle)
            # which station this is, for the gateway's binding of the handle to its claim
            headers = (
                station_headers(self._token)
                if self._token is not None
                else station_id_headers(self.station_id)
            )
        return Work(
            run_code=claim.run_code,
            object_name=claim.object_name,
            items=claim.items,
            per_item_cap_s=claim.per_item_cap_s,
            tote_side=claim.tote_side,
            camera_side=claim.camera_side,
            policy_url=url,
            sim_seed=claim.scene_seed,
            prompt=claim.prompt,
            dialect=claim.dialect,
            exterior_numbering=claim.exterior_numbering,
            action_units=claim.action_units,
            campaign_id=claim.campaign_id,
            policy_headers=headers,
            latency_budget=claim.latency_budget,
        )

    def completed(self, work: Work, *, episode_uid: str, outcome: Outcome) -> None:
        with session_scope(self._factory) as session:
            episode_id = session.scalar(sa.select(Episode.id).where(Episode.uid == episode_uid))
            if episode_id is None:
                raise UsageError(f"episode_uid: no episode {episode_uid!r}")
            claims.complete(
                session,
                run_code=work.run_code,
                episode_id=episode_id,
                station_id=self.station_id,
                free_protocol_faults=self._free_protocol_faults,
            )

    def abandoned(self, work: Work, *, reason: str) -> None:
        with session_scope(self._factory) as session:
            claims.report_preflight_failure(
                session,
                run_code=work.run_code,
                station_id=self.station_id,
                reason=reason,
                actor=Actor(label=f"station:{self._station_name}"),
            )


def _station_id(session: Session, name: str, *, site: str | None, cell_profile: str | None) -> int:
    """The station's row, registered on first use; its site and cell profile
    are what its config declares now (an undeclared one is cleared, so a
    station cannot keep a profile it no longer claims to be)."""
    station = session.scalar(sa.select(Station).where(Station.name == name))
    if station is None:
        station = Station(name=name)
        session.add(station)
    station.site, station.cell_profile = site, cell_profile
    session.flush()
    return station.id


def _check_token(session: Session, token: str, *, station_id: int, name: str) -> None:
    """A token that is not a live one of this station's is said at once (at
    start, before each claim), not as refused connections that skip runs."""
    live = station_credentials.live_token(session, token)
    if live is None or live.station_id != station_id:
        raise Forbidden(
            f"{station_credentials.TOKEN_ENV}: not a live token of station '{name}' "
            f"(an admin enrols it: proctor station enrol {name})"
        )


def campaign_work_source(
    *,
    campaign: int | str,
    station: str,
    gateway: str,
    database_url: str | None = None,
    site: str | None = None,
    cell_profile: str | None = None,
) -> CampaignWorkSource:
    """The factory the station config names (``[work] options`` are its arguments)."""
    from proctor.core.settings import load_settings

    settings = load_settings()
    factory = make_session_factory(make_engine(database_url or settings.db_url))
    return CampaignWorkSource(
        session_factory=factory,
        campaign=campaign,
        station=station,
        gateway=gateway,
        free_protocol_faults=settings.scheduler.free_protocol_faults,
        site=site,
        cell_profile=cell_profile,
        station_token=station_credentials.token_from_environment(),
    )
