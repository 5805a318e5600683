"""The campaign-backed WorkSource, loaded the way the station daemon loads it
(``proctor.station.work_source.load_work_source``), on both databases."""

from __future__ import annotations

import secrets
from collections import defaultdict

import pytest
import sqlalchemy as sa

from proctor.core import station_credentials
from proctor.core.db.models import Assignment, Episode, EpisodeEvent, Station
from proctor.core.domain import AssignmentStatus, EpisodeState, Outcome
from proctor.core.episode_record import FAULT_POLICY_PROTOCOL
from proctor.core.errors import ConfigError, Forbidden, UsageError
from proctor.core.work import Work, WorkSource
from proctor.scheduler import service
from proctor.scheduler.campaign_work_source import CampaignWorkSource
from proctor.scheduler.service import Actor, CampaignStateError
from proctor.station.work_source import load_work_source
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb


def _campaign(db: CommittedDb, *, start: bool = True, **kw: object):
    with db.session() as s:
        w = builders.world(s, 2, objects=("spoons",))
        c = service.create_campaign(s, protocol=builders.protocol(w, **kw), actor=Actor(label="t"))
        if start:
            service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        return w, c.id, c.name


def _episode(db: CommittedDb, work: Work, outcome: Outcome) -> str:
    uid = secrets.token_hex(8)
    with db.session() as s:
        obj = s.scalars(
            sa.select(Assignment.object_type_id).where(Assignment.run_code == work.run_code)
        ).one()
        s.add(
            Episode(
                uid=uid,
                object_type_id=obj,
                items=work.items,
                budget_s=work.budget_s,
                tote_side=work.tote_side,
                camera_side=work.camera_side,
                state=EpisodeState.closed,
                outcome=outcome,
                placed=work.items if outcome != Outcome.system else None,
                lost=0 if outcome != Outcome.system else None,
                dropped=0 if outcome != Outcome.system else None,
            )
        )
    return uid


def test_the_station_loads_it_and_runs_a_campaign(
    committed_db: CommittedDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    w, cid, name = _campaign(committed_db, episodes_per_cell=3)
    station_name = f"cell-{secrets.token_hex(3)}"
    with committed_db.session() as s:
        _, token = builders.enrolled_station(s, station_name)
    # the token is in the station host's environment, never in its config
    monkeypatch.setenv("PROCTOR_STATION_TOKEN", token)
    source = load_work_source(
        "proctor.scheduler.campaign_work_source:campaign_work_source",
        {
            "campaign": name,
            "station": station_name,
            "gateway": "http://proctor.lab:8000",
            "database_url": committed_db.url,
        },
    )
    assert isinstance(source, WorkSource) and isinstance(source, CampaignWorkSource)
    secrets_ = [p.name for p in w.arms] + [s.endpoint_url for s in w.submissions.values()]

    scenes: dict[int, set[int]] = defaultdict(set)
    seen = []
    while (work := source.claim()) is not None:
        with committed_db.session() as s:
            a = s.scalars(sa.select(Assignment).where(Assignment.run_code == work.run_code)).one()
            assert work.policy_url == f"ws://proctor.lab:8000/policy/{a.endpoint_handle}"
            # the station proves itself to the gateway, which relays only for the claimant
            assert work.policy_headers == {"Authorization": f"Bearer {token}"}
            assert (work.object_name, work.tote_side, work.camera_side) == (
                w.objects[0].name,
                a.tote_side,
                a.camera_side,
            )
            scenes[a.block_index].add(work.sim_seed)
        shown = repr(work) + repr(work.public_view())
        assert not any(x in shown for x in secrets_) and "/policy/" not in shown
        assert work.prompt == "put the spoons" and work.campaign_id == cid
        source.completed(
            work, episode_uid=_episode(committed_db, work, Outcome.success), outcome=Outcome.success
        )
        seen.append(work.run_code)
    assert len(seen) == 3 * 3
    # one initial scene per block, different scenes for different blocks
    assert all(len(v) == 1 for v in scenes.values())
    assert len({next(iter(v)) for v in scenes.values()}) == len(scenes)
    with committed_db.session() as s:
        assert s.scalar(sa.select(Station.id).where(Station.name == station_name)) is not None
    with committed_db.session() as s:
        report = service.campaign_status(s, campaign=cid)
    assert report.done == 9 and report.blocks_complete == 3


def test_a_station_without_its_own_token_is_told_at_start(
    committed_db: CommittedDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another station's token, a revoked one or a malformed value is a set-up
    mistake, said when the work source loads; with no token at all the station
    sends only its id, which the gateway trusts only where the server says so."""
    _, _, name = _campaign(committed_db, episodes_per_cell=1)
    mine, other = f"cell-{secrets.token_hex(3)}", f"cell-{secrets.token_hex(3)}"
    with committed_db.session() as s:
        builders.enrolled_station(s, mine)
        _, others_token = builders.enrolled_station(s, other)
    options = {
        "campaign": name,
        "station": mine,
        "gateway": "ws://gw",
        "database_url": committed_db.url,
    }
    factory = "proctor.scheduler.campaign_work_source:campaign_work_source"
    monkeypatch.setenv("PROCTOR_STATION_TOKEN", others_token)
    with pytest.raises(
        Forbidden, match=f"PROCTOR_STATION_TOKEN: not a live token of station '{mine}'"
    ):
        load_work_source(factory, options)
    monkeypatch.setenv("PROCTOR_STATION_TOKEN", "hunter2")
    with pytest.raises(UsageError, match="PROCTOR_STATION_TOKEN: not a station token"):
        load_work_source(factory, options)
    monkeypatch.delenv("PROCTOR_STATION_TOKEN")
    work = load_work_source(factory, options).claim()
    assert work is not None and list(work.policy_headers) == ["X-Proctor-Station"]


def test_a_config_naming_the_sources_old_module_still_loads(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The campaign source's module was renamed; a station config written
    before names the old one, and the station starts and says what to change."""
    with caplog.at_level("WARNING"), pytest.raises(TypeError, match="campaign"):
        # no options: the factory is found (and then refuses to be called without them)
        load_work_source("proctor.scheduler.work_source:campaign_work_source", {})
    assert "proctor.scheduler.work_source is now proctor.scheduler.campaign_work_source" in (
        caplog.text
    )
    with pytest.raises(ConfigError, match=r"cannot import proctor\.scheduler\.nowhere"):
        load_work_source("proctor.scheduler.nowhere:campaign_work_source", {})


def test_a_station_whose_token_was_revoked_claims_nothing_more(
    committed_db: CommittedDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Revoked while the station runs: the gateway would refuse each run, and
    each refusal would skip a slot; the work source refuses to claim instead."""
    _, cid, name = _campaign(committed_db, episodes_per_cell=1)
    station = f"cell-{secrets.token_hex(3)}"
    with committed_db.session() as s:
        _, token = builders.enrolled_station(s, station)
    monkeypatch.setenv("PROCTOR_STATION_TOKEN", token)
    source = load_work_source(
        "proctor.scheduler.campaign_work_source:campaign_work_source",
        {
            "campaign": name,
            "station": station,
            "gateway": "ws://gw",
            "database_url": committed_db.url,
        },
    )
    first = source.claim()
    assert first is not None
    source.abandoned(first, reason="pre-flight: gateway closed 1013")  # hand it back
    with committed_db.session() as s:
        station_credentials.revoke(s, name=station, actor=Actor(label="t"))
    with pytest.raises(Forbidden, match="not a live token"):
        source.claim()
    with committed_db.session() as s:
        held = s.scalar(
            sa.select(sa.func.count())
            .select_from(Assignment)
            .where(Assignment.campaign_id == cid, Assignment.status == AssignmentStatus.claimed)
        )
    assert held == 0


def test_abandoned_work_is_skipped_and_rescheduled(committed_db: CommittedDb) -> None:
    _, cid, _ = _campaign(committed_db, episodes_per_cell=1)
    source = CampaignWorkSource(
        session_factory=committed_db.factory, campaign=cid, station="cell-x", gateway="ws://gw"
    )
    work = source.claim()
    assert work is not None
    source.abandoned(work, reason="pre-flight: gateway closed 1013")
    with committed_db.session() as s:
        statuses = dict(
            s.execute(
                sa.select(Assignment.run_code, Assignment.status).where(
                    Assignment.campaign_id == cid
                )
            ).all()
        )
    assert statuses[work.run_code] == AssignmentStatus.skipped
    assert list(statuses.values()).count(AssignmentStatus.pending) == 3  # 2 + the replacement
    nxt = source.claim()
    assert nxt is not None and nxt.run_code != work.run_code

    system_uid = _episode(committed_db, nxt, Outcome.system)
    source.completed(nxt, episode_uid=system_uid, outcome=Outcome.system)
    with committed_db.session() as s:
        assert (
            s.scalar(sa.select(Assignment.status).where(Assignment.run_code == nxt.run_code))
            == AssignmentStatus.requeued
        )


def test_campaign_states(committed_db: CommittedDb) -> None:
    _, cid, _ = _campaign(committed_db, start=False)
    source = CampaignWorkSource(
        session_factory=committed_db.factory, campaign=cid, station="cell-y", gateway="ws://gw"
    )
    with pytest.raises(CampaignStateError, match="is draft"):
        source.claim()
    with committed_db.session() as s:
        service.start_campaign(s, campaign=cid, actor=Actor(label="t"))
        service.close_campaign(s, campaign=cid, actor=Actor(label="t"))
    assert source.claim() is None  # a closed campaign has nothing more to run
    with pytest.raises(UsageError, match="gateway"):
        CampaignWorkSource(
            session_factory=committed_db.factory, campaign=cid, station="s", gateway="gw:80"
        )


def test_the_free_protocol_faults_setting_reaches_the_completion(
    committed_db: CommittedDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PROCTOR_SCHEDULER__FREE_PROTOCOL_FAULTS=0``: a policy's first protocol
    failure is already charged to it (the default lets three go)."""
    monkeypatch.setenv("PROCTOR_SCHEDULER__FREE_PROTOCOL_FAULTS", "0")
    _, _, name = _campaign(committed_db, episodes_per_cell=1)
    source = load_work_source(
        "proctor.scheduler.campaign_work_source:campaign_work_source",
        {
            "campaign": name,
            "station": "cell-pf",
            "gateway": "ws://gw",
            "database_url": committed_db.url,
        },
    )
    work = source.claim()
    assert work is not None
    uid = _episode(committed_db, work, Outcome.system)
    with committed_db.session() as s:
        ep = s.scalars(sa.select(Episode).where(Episode.uid == uid)).one()
        ep.placed, ep.lost, ep.dropped = 0, 0, 0
        s.add(
            EpisodeEvent(
                episode_id=ep.id,
                kind="system_fault",
                message="malformed policy reply",
                details={"fault": FAULT_POLICY_PROTOCOL},
            )
        )
    source.completed(work, episode_uid=uid, outcome=Outcome.system)
    with committed_db.session() as s:
        status = s.scalar(sa.select(Assignment.status).where(Assignment.run_code == work.run_code))
        outcome = s.scalar(sa.select(Episode.outcome).where(Episode.uid == uid))
    assert (status, outcome) == (AssignmentStatus.done, Outcome.safety)


def test_a_protocols_latency_budget_reaches_the_stations_work(committed_db: CommittedDb) -> None:
    _, cid, _ = _campaign(
        committed_db, episodes_per_cell=1, latency_budget={"budget_ms": 250, "tolerance": 3}
    )
    source = CampaignWorkSource(
        session_factory=committed_db.factory, campaign=cid, station="cell-lat", gateway="ws://gw"
    )
    work = source.claim()
    assert work is not None and work.latency_budget is not None
    assert (work.latency_budget.budget_ms, work.latency_budget.tolerance) == (250.0, 3)
    # without one, latency is measured and never enforced
    _, other, _ = _campaign(committed_db, episodes_per_cell=1)
    plain = CampaignWorkSource(
        session_factory=committed_db.factory, campaign=other, station="cell-lat2", gateway="ws://gw"
    )
    unbounded = plain.claim()
    assert unbounded is not None and unbounded.latency_budget is None


@pytest.mark.parametrize(
    ("budget", "field"),
    [
        ({"budget_ms": 0}, "latency_budget.budget_ms"),
        ({"budget_ms": 100, "tolerance": -1}, "latency_budget.tolerance"),
        ({"budget_ms": 100, "slack": 1}, "latency_budget.slack"),
    ],
)
def test_a_bad_latency_budget_is_refused_naming_its_field(budget: dict, field: str) -> None:
    from proctor.scheduler.protocol import parse_protocol

    data = {
        "name": "c",
        "items_per_episode": 2,
        "per_item_cap_s": 30,
        "tau_s": 60,
        "episodes_per_cell": 1,
        "reference": "human",
        "policies": ["p"],
        "objects": ["spoons"],
        "latency_budget": budget,
    }
    with pytest.raises(UsageError, match=field.replace(".", r"\.")):
        parse_protocol(data)
