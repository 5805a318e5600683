"""An endpoint's wire settings reach the station with its claim: the exterior
camera numbering a submitter chose travels like the dialect (a setting of the
protocol), and the claim still names no policy."""

from __future__ import annotations

import secrets

import sqlalchemy as sa

from proctor.core.db.models import Assignment, Submission
from proctor.scheduler import service
from proctor.scheduler.service import Actor
from proctor.station.work_source import load_work_source
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb


def test_the_claim_carries_the_endpoints_exterior_numbering(committed_db: CommittedDb) -> None:
    with committed_db.session() as s:
        w = builders.world(s, 2, objects=("spoons",))
        chosen = next(iter(w.submissions.values()))
        row = s.get(Submission, chosen.id)
        assert row is not None
        row.manifest = {**(row.manifest or {}), "wire": {"exterior_numbering": 0}}
        c = service.create_campaign(
            s, protocol=builders.protocol(w, episodes_per_cell=1), actor=Actor(label="t")
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        name, chosen_id = c.name, chosen.id
    source = load_work_source(
        "proctor.scheduler.campaign_work_source:campaign_work_source",
        {
            "campaign": name,
            "station": f"cell-{secrets.token_hex(3)}",
            "gateway": "http://proctor.lab:8000",
            "database_url": committed_db.url,
        },
    )
    numbering: dict[bool, set[int | None]] = {True: set(), False: set()}
    while (work := source.claim()) is not None:
        with committed_db.session() as s:
            sub_id = s.scalars(
                sa.select(Assignment.submission_id).where(Assignment.run_code == work.run_code)
            ).one()
        numbering[sub_id == chosen_id].add(work.exterior_numbering)
        source.abandoned(work, reason="not run in this test")
    assert numbering == {True: {0}, False: {None}}


def test_the_claim_carries_the_selected_action_units(committed_db: CommittedDb) -> None:
    """An endpoint's selection (its manifest's wire settings) and a checkpoint's
    (its policy.toml's [policy], as the manifest keeps it; written here on an
    endpoint's row, since a checkpoint's claim also waits for a ready runner
    server) reach the station's Work; the others' Work selects nothing."""
    with committed_db.session() as s:
        w = builders.world(s, 2, objects=("spoons",))
        endpoint, from_toml = (
            s.get(Submission, sub.id) for sub in list(w.submissions.values())[1:]
        )
        assert endpoint is not None and from_toml is not None
        endpoint.manifest = {**(endpoint.manifest or {}), "wire": {"action_units": "droid"}}
        from_toml.manifest = {**(from_toml.manifest or {}), "policy": {"action_units": "si"}}
        c = service.create_campaign(
            s, protocol=builders.protocol(w, episodes_per_cell=1), actor=Actor(label="t")
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        name, chosen = c.name, {endpoint.id: "droid", from_toml.id: "si"}
    source = load_work_source(
        "proctor.scheduler.campaign_work_source:campaign_work_source",
        {
            "campaign": name,
            "station": f"cell-{secrets.token_hex(3)}",
            "gateway": "http://proctor.lab:8000",
            "database_url": committed_db.url,
        },
    )
    seen: dict[str | None, set[str | None]] = {}
    while (work := source.claim()) is not None:
        with committed_db.session() as s:
            sub_id = s.scalars(
                sa.select(Assignment.submission_id).where(Assignment.run_code == work.run_code)
            ).one()
        seen.setdefault(chosen.get(sub_id), set()).add(work.action_units)
        source.abandoned(work, reason="not run in this test")
    assert seen == {"droid": {"droid"}, "si": {"si"}, None: {None}}
