"""The policy page's behavioural breakdown equals a hand count: tags laid on
a seeded campaign's episodes by a fixed pattern (one retracted, one on
another policy), and the page's shares, tag counts and Wilson intervals
checked against numbers worked out by hand."""

from __future__ import annotations

from urllib.parse import quote

import pytest
import sqlalchemy as sa

from proctor.annotator.review import Reviewer
from proctor.annotator.tags import retract_tag, tag_failure
from proctor.core.db.models import Assignment, Episode, ObjectType, Policy
from proctor.core.domain import LabelStream, Role
from proctor.web.snapshots import service
from tests.web.conftest import Web
from tests.web.html_tree import parse
from tests.web.leaderboard_data import SeededCampaign, seed_campaign

ME = Reviewer(label="test-reviewer")


@pytest.fixture
def released(web: Web) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(s, released=True, episodes_per_cell=5, seed=23)


def _episodes(web: Web, cid: int, policy: str) -> dict[str, list[tuple[str, float]]]:
    """object -> [(uid, duration)] of the policy's episodes, by id."""
    with web.db() as s:
        rows = s.execute(
            sa.select(ObjectType.name, Episode.uid, Episode.clock_end_s - Episode.clock_start_s)
            .join(Assignment, Episode.assignment_id == Assignment.id)
            .join(Policy, Policy.id == Assignment.policy_id)
            .join(ObjectType, ObjectType.id == Episode.object_type_id)
            .where(Episode.campaign_id == cid, Policy.name == policy)
            .order_by(Episode.id)
        ).all()
    out: dict[str, list[tuple[str, float]]] = {}
    for obj, uid, duration in rows:
        out.setdefault(obj, []).append((uid, float(duration)))
    return out


def test_the_breakdown_equals_a_hand_count(web: Web, released: SeededCampaign) -> None:
    cid = released.campaign_id
    with web.db() as s:
        result = service.latest_row(s, campaign_id=cid, stream=LabelStream.auto_and_reviewed).result
    p = result["policies"][2]
    label = p["policy"]
    assert not result["excluded"]  # every seeded episode counts: n is the cell's size
    eps = _episodes(web, cid, label)
    a, b = p["per_object"][0]["object"], p["per_object"][1]["object"]
    assert len(eps[a]) == len(eps[b]) == 5
    other = result["policies"][3]["policy"]
    (other_uid, other_d) = _episodes(web, cid, other)[a][0]
    # the campaign is released: a person who tags its episodes is an admin
    person = Reviewer(user_id=web.add_user("rita-behaviour", Role.admin), admin=True)
    with web.db() as s:

        def tag(uid: str, d: float, mode: str, frac: float) -> int:
            return tag_failure(s, uid=uid, mode=mode, t_s=d * frac, reviewer=ME).id

        (a0, d0), (a1, d1), (a2, d2) = eps[a][:3]
        tag(a0, d0, "missed_grasp", 0.2)
        tag(a0, d0, "missed_grasp", 0.6)  # twice in one episode: one episode, two tags
        tag(a0, d0, "stall", 0.5)
        tag(a1, d1, "missed_grasp", 0.3)
        gone = tag(a2, d2, "slip_in_transit", 0.4)
        retract_tag(s, uid=a2, tag_id=gone, reviewer=ME, note="not a slip")
        (b0, e0) = eps[b][0]
        # a person's tag: b0 is reviewed; the software reviewer's tags above
        # count in the shares but review nothing
        tag_failure(s, uid=b0, mode="collision", t_s=e0 * 0.1, reviewer=person)
        # a person's tag that is later withdrawn still means someone looked
        (b1, e1) = eps[b][1]
        wrong = tag_failure(s, uid=b1, mode="stall", t_s=e1 * 0.5, reviewer=person).id
        retract_tag(s, uid=b1, tag_id=wrong, reviewer=person, note="it was moving")
        tag(other_uid, other_d, "missed_grasp", 0.5)  # another policy's: not counted here

    body = web.client().get(f"/api/leaderboard/{cid}/policies/{quote(label, safe='')}").json()
    cells = {(c["object"], c["mode"]): c for c in body["behaviour"]}
    # by hand: object a, missed grasp in 2 of 5 episodes (3 tags); stall 1 of 5; the
    # retracted slip counts nowhere; object b: one collision
    expect = {
        (a, "missed_grasp"): (2, 5, 3),
        (a, "stall"): (1, 5, 1),
        (a, "slip_in_transit"): (0, 5, 0),
        (a, "collision"): (0, 5, 0),
        (b, "collision"): (1, 5, 1),
        (b, "missed_grasp"): (0, 5, 0),
    }
    for key, (k, n, tags) in expect.items():
        c = cells[key]
        assert (c["episodes_with"], c["episodes"], c["tags"]) == (k, n, tags), key
    # Wilson 95 % for 2/5 and 1/5, worked by hand: [0.1176, 0.7693], [0.0362, 0.6245]
    share = cells[(a, "missed_grasp")]["share"]
    assert share["estimate"] == pytest.approx(0.4)
    assert (share["lo"], share["hi"]) == (
        pytest.approx(0.1176, abs=1e-4),
        pytest.approx(0.7693, abs=1e-4),
    )
    share = cells[(a, "stall")]["share"]
    assert (share["lo"], share["hi"]) == (
        pytest.approx(0.0362, abs=1e-4),
        pytest.approx(0.6245, abs=1e-4),
    )
    moments = [(m["uid"], m["mode"]) for m in body["tagged_moments"]]
    assert sorted(moments) == sorted(
        [
            (a0, "missed_grasp"),
            (a0, "missed_grasp"),
            (a0, "stall"),
            (a1, "missed_grasp"),
            (b0, "collision"),
        ]
    )
    assert all(m["explorer"].startswith(f"/episodes/{m['uid']}?t=") for m in body["tagged_moments"])
    # how many of the counted episodes a person reviewed: b0 and b1 of object b
    assert body["behaviour_reviewed"] == {"episodes": 10, "reviewed": 2}
    assert {c["reviewed"] for c in body["behaviour"] if c["object"] == a} == {0}
    assert {c["reviewed"] for c in body["behaviour"] if c["object"] == b} == {2}

    # the page shows the same counts, one row per mode that any episode carries
    html = web.client().get(f"/leaderboard/{cid}/policies/{quote(label, safe='')}").text
    table = parse(html).find("table", data_testid="behaviour")
    rows = {tr.get("data-mode"): tr for tr in table.find_all("tr", data_mode=True)}
    assert set(rows) == {"missed_grasp", "stall", "collision"}
    td = rows["missed_grasp"].find("td", data_object=a)
    assert (td.get("data-with"), td.get("data-episodes"), td.get("data-tags")) == ("2", "5", "3")
    assert "40" in td.text()
    said = parse(html).find("p", data_testid="behaviour-reviewed")
    assert "2 of 10" in said.text() and "lower bound" in said.text()
    row = table.find("tr", data_reviewed_row=True)
    shown = {td.get("data-object"): td.text() for td in row.find_all("td")}
    assert shown[a] == "0 of 5" and shown[b] == "2 of 5"
