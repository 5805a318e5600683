"""Multi-site campaigns: stations declare a site and a cell profile; a campaign
that lists the cell profiles it accepts hands runs only to those stations."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import sqlalchemy as sa

from proctor.core.db.models import Assignment, Campaign, Station
from proctor.core.domain import AssignmentStatus
from proctor.core.errors import ConfigError, UsageError
from proctor.scheduler import service
from proctor.scheduler.campaign_work_source import CampaignWorkSource
from proctor.scheduler.claims import ProfileNotAccepted
from proctor.scheduler.service import Actor
from proctor.station.config import load_station_config
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb


def _campaign(db: CommittedDb, **kw: object) -> int:
    with db.session() as s:
        w = builders.world(s, 2, objects=("spoons",))
        c = service.create_campaign(s, protocol=builders.protocol(w, **kw), actor=Actor(label="t"))
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        return c.id


def _source(db: CommittedDb, cid: int, **kw: str | None) -> CampaignWorkSource:
    return CampaignWorkSource(
        session_factory=db.factory,
        campaign=cid,
        station=f"cell-{secrets.token_hex(3)}",
        gateway="ws://gw",
        **kw,  # type: ignore[arg-type]
    )


def test_a_station_of_an_unaccepted_profile_gets_no_run(committed_db: CommittedDb) -> None:
    cid = _campaign(committed_db, cell_profiles=["droid-fr3"])
    aloha = _source(committed_db, cid, site="lab-a", cell_profile="aloha")
    with pytest.raises(ProfileNotAccepted) as err:
        aloha.claim()
    # the reason names the station's profile and what the campaign accepts
    assert "'aloha'" in str(err.value) and "'droid-fr3'" in str(err.value)
    undeclared = _source(committed_db, cid)
    with pytest.raises(ProfileNotAccepted, match="no cell profile"):
        undeclared.claim()
    with committed_db.session() as s:
        claimed = s.scalar(
            sa.select(sa.func.count())
            .select_from(Assignment)
            .where(Assignment.campaign_id == cid, Assignment.status != AssignmentStatus.pending)
        )
    assert claimed == 0


def test_a_campaign_with_two_profiles_hands_runs_to_both(committed_db: CommittedDb) -> None:
    cid = _campaign(committed_db, cell_profiles=["droid-fr3", "droid-ur5"], episodes_per_cell=2)
    fr3 = _source(committed_db, cid, site="lab-a", cell_profile="droid-fr3")
    ur5 = _source(committed_db, cid, site="lab-b", cell_profile="droid-ur5")
    other = _source(committed_db, cid, site="lab-c", cell_profile="aloha")
    got = {fr3.station_id: 0, ur5.station_id: 0}
    for source in (fr3, ur5, fr3, ur5):
        work = source.claim()
        assert work is not None
        got[source.station_id] += 1
        with committed_db.session() as s:
            a = s.scalars(sa.select(Assignment).where(Assignment.run_code == work.run_code)).one()
            assert a.station_id == source.station_id
            # hand it back so the next claim is a fresh one
            a.status, a.station_id, a.claimed_at = AssignmentStatus.done, a.station_id, a.claimed_at
    assert got == {fr3.station_id: 2, ur5.station_id: 2}
    with pytest.raises(ProfileNotAccepted):
        other.claim()
    with committed_db.session() as s:
        stored = s.get(Campaign, cid)
        assert stored is not None and stored.cell_profiles == ["droid-fr3", "droid-ur5"]
        row = s.get(Station, ur5.station_id)
        assert row is not None and (row.site, row.cell_profile) == ("lab-b", "droid-ur5")


def test_a_campaign_without_profiles_takes_any_station(committed_db: CommittedDb) -> None:
    cid = _campaign(committed_db)
    assert _source(committed_db, cid, cell_profile="aloha").claim() is not None
    assert _source(committed_db, cid).claim() is not None


def test_the_station_row_follows_what_its_config_declares(committed_db: CommittedDb) -> None:
    cid = _campaign(committed_db)
    name = f"cell-{secrets.token_hex(3)}"
    kw = {"session_factory": committed_db.factory, "campaign": cid, "station": name}
    CampaignWorkSource(gateway="ws://gw", site="lab-a", cell_profile="droid-fr3", **kw)  # type: ignore[arg-type]
    CampaignWorkSource(gateway="ws://gw", site="lab-b", **kw)  # type: ignore[arg-type]
    with committed_db.session() as s:
        row = s.scalars(sa.select(Station).where(Station.name == name)).one()
        assert (row.site, row.cell_profile) == ("lab-b", None)


@pytest.mark.parametrize("field", ["site", "cell_profile"])
@pytest.mark.parametrize("bad", ["", "Lab A", "<b>x</b>", "x" * 65, "-lead"])
def test_the_work_source_refuses_a_bad_label_naming_the_field(
    committed_db: CommittedDb, field: str, bad: str
) -> None:
    cid = _campaign(committed_db)
    with pytest.raises(UsageError, match=f"^{field}: "):
        _source(committed_db, cid, **{field: bad})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "cell_profiles: List should have at least 1 item"),
        (["droid", "Droid Two"], "cell_profiles[1]: Value error"),
        (["droid", "droid"], "cell_profiles[1]: 'droid' is already listed at cell_profiles[0]"),
        ("droid", "cell_profiles: Input should be a valid list"),
    ],
)
def test_the_protocol_field_is_validated(
    committed_db: CommittedDb, value: object, message: str
) -> None:
    with committed_db.session() as s:
        w = builders.world(s, 1, objects=("spoons",))
    with pytest.raises(UsageError) as err:
        builders.protocol(w, cell_profiles=value)
    assert message in str(err.value)


def test_the_station_config_validates_and_hands_over_site_and_profile(tmp_path: Path) -> None:
    cfg = load_station_config(None, site="lab-a", cell_profile="droid-fr3")
    assert (cfg.site, cfg.cell_profile) == ("lab-a", "droid-fr3")
    with pytest.raises(ConfigError, match="cell_profile: Value error"):
        load_station_config(None, cell_profile="DROID FR3")
    with pytest.raises(ConfigError, match="site: Value error"):
        load_station_config(None, site="")


def _daemon(db: CommittedDb, cid: int, tmp_path: Path, **config: object):  # type: ignore[no-untyped-def]
    from proctor.core.artifacts import open_store
    from proctor.station.daemon import StationDaemon

    name = f"cell-{secrets.token_hex(3)}"
    options = {"campaign": cid, "station": name, "gateway": "ws://gw", "database_url": db.url}
    options.update(config.pop("options", {}))  # type: ignore[call-overload]
    cfg = load_station_config(
        None,
        name=name,
        cameras={
            "exterior": {"width": 96, "height": 72, "fps": 5},
            "wrist": {"width": 96, "height": 72, "fps": 5},
        },
        sim={"clock": "virtual"},
        work={
            "source": "proctor.scheduler.campaign_work_source:campaign_work_source",
            "options": options,
        },
        **config,
    )
    return StationDaemon(
        cfg,
        "sim",
        sessions=db.factory,
        store=open_store(str(tmp_path / "artifacts")),
        spool_root=tmp_path / "spool",
    )


def test_the_daemon_registers_its_configs_site_and_profile(
    committed_db: CommittedDb, tmp_path: Path
) -> None:
    cid = _campaign(committed_db, cell_profiles=["droid-fr3"])
    daemon = _daemon(committed_db, cid, tmp_path, site="lab-a", cell_profile="aloha")
    with committed_db.session() as s:
        row = s.scalars(sa.select(Station).where(Station.name == daemon.config.name)).one()
        assert (row.site, row.cell_profile) == ("lab-a", "aloha")
    # the daemon's next run comes from this source: the operator is told why
    with pytest.raises(ProfileNotAccepted, match="accepts only stations of cell profile"):
        daemon.source.claim()


def test_work_options_contradicting_the_config_are_refused(
    committed_db: CommittedDb, tmp_path: Path
) -> None:
    cid = _campaign(committed_db)
    with pytest.raises(ConfigError, match=r"^work\.options\.site: 'lab-b' contradicts"):
        _daemon(committed_db, cid, tmp_path, site="lab-a", options={"site": "lab-b"})
