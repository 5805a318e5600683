"""The board of an adaptive campaign says which pairs resolved early and
which policy stopped, and the drift sentinels' tests — in the JSON and on
the page, under blinded labels in an admin's preview."""

from __future__ import annotations

import secrets

import sqlalchemy as sa

from proctor.analysis.store import recompute
from proctor.core.db.models import Assignment, Campaign, Policy
from proctor.core.domain import LabelStream, PolicyKind, Role
from tests.web.conftest import Web
from tests.web.html_tree import parse
from tests.web.leaderboard_data import default_models, seed_campaign

STREAM = LabelStream.auto_and_reviewed


def _adaptive(web: Web, *, released: bool) -> tuple[int, dict[int, str]]:
    tag = secrets.token_hex(3)
    with web.db() as s:
        # the reference and a slow policy: their one pair resolves, the slow one stops
        models = [m for m in default_models(tag) if m.name.startswith(("human-ref", "slow-dp"))]
        seeded = seed_campaign(
            s, released=released, episodes_per_cell=8, seed=3, compute=False, models=models, tag=tag
        )
        c = s.get(Campaign, seeded.campaign_id)
        ids = [i.policy_id for i in seeded.identities]
        kinds = dict(s.execute(sa.select(Policy.id, Policy.kind).where(Policy.id.in_(ids))).all())
        ref = next(p for p in ids if kinds[p] == PolicyKind.reference)
        rule = {"rule": "stop-resolved-v1", "alpha": 0.05, "lag_blocks": 1, "sentinels": [ref]}
        objects = sorted(
            set(
                s.scalars(
                    sa.select(Assignment.object_type_id).where(Assignment.campaign_id == c.id)
                )
            )
        )
        c.allocation_protocol = {"policies": sorted(ids), "objects": objects, "adaptive": rule}
        c.allocation_rule = {"sentinels": [ref], "adaptive": None}
        s.flush()
        recompute(s, campaign_id=c.id, streams=(STREAM,))
        return c.id, {i.policy_id: i.name for i in seeded.identities}


def test_the_board_shows_early_stops_and_drift(web: Web) -> None:
    cid, names = _adaptive(web, released=True)
    names_by_kind = {"slow": next(n for n in names.values() if n.startswith("slow-dp"))}
    board = web.client().get(f"/api/leaderboard/{cid}").json()
    stops = board["early_stops"]
    assert stops["rule"] == "stop-resolved-v1" and stops["pairs"]
    assert [s["policy"] for s in stops["stopped"]] == [names_by_kind["slow"]] and all(
        s["no_slots_from_block"] == s["after_block"] + 2 for s in stops["stopped"]
    )
    assert board["drift"] and board["drift"][0]["trend"] is not None
    html = parse(web.client().get(f"/leaderboard/{cid}").text)
    section = html.find("section", id="early-stops")
    shown = {li.get("data-stopped") for li in section.find_all("li", data_stopped=True)}
    assert shown == {s["policy"] for s in stops["stopped"]}
    rows = section.find_all("tr", data_pair=True)
    assert len(rows) == len(stops["pairs"])
    drift = html.find("section", id="drift")
    assert drift.find_all("li", data_drift=True)
    # the object-stratified tests (docs/methods.md §12), and the plain word
    # that a quiet sentinel is no certificate
    assert board["drift"][0]["trend"]["test"].startswith("seasonal Kendall")
    assert board["drift"][0]["certifies_no_drift"] is False
    assert "seasonal Kendall" in drift.text() and "van Elteren" in drift.text()
    assert 'No sentinel certifies "no drift"' in drift.find(data_testid="no-certificate").text()


def test_an_unreleased_boards_stops_are_blinded(web: Web) -> None:
    cid, names = _adaptive(web, released=False)
    web.add_user("root-adaptive", Role.admin)
    admin = {"Authorization": f"Bearer {web.token('root-adaptive', ('admin',))}"}
    board = web.client().get(f"/api/leaderboard/{cid}", headers=admin).json()
    assert board["blinded"] is True
    text = str(board["early_stops"]) + str(board["drift"])
    snapshot = web.client().get(f"/api/leaderboard/{cid}/snapshot", headers=admin).json()
    text += str(snapshot["early_stops"]) + str(snapshot["drift"])
    assert board["early_stops"]["pairs"]
    for name in names.values():
        assert name not in text
