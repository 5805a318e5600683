"""The admin's campaign page flags a drifting sentinel (docs/methods.md
§12) with the episodes involved, under the arm labels of the page."""

from __future__ import annotations

import sqlalchemy as sa

from proctor.analysis.store import recompute
from proctor.core.db.models import Assignment, Episode, Policy
from proctor.core.domain import LabelStream, PolicyKind, Role
from tests.web.conftest import Web, login
from tests.web.html_tree import parse
from tests.web.leaderboard_data import seed_campaign


def _slowing_reference(web: Web) -> tuple[int, str, list[str]]:
    """A campaign whose reference idles longer and longer after its last
    item (a tiring operator): its throughput falls over the campaign."""
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=10, seed=5, compute=False)
        ref = s.scalar(
            sa.select(Policy.id).where(
                Policy.id.in_([i.policy_id for i in seeded.identities]),
                Policy.kind == PolicyKind.reference,
            )
        )
        eps = s.scalars(
            sa.select(Episode)
            .join(Assignment, Episode.assignment_id == Assignment.id)
            .where(Assignment.campaign_id == seeded.campaign_id, Assignment.policy_id == ref)
            .order_by(Episode.started_at)
        ).all()
        for i, e in enumerate(eps):
            assert e.clock_start_s is not None and e.clock_end_s is not None
            e.clock_end_s = e.clock_start_s + (e.clock_end_s - e.clock_start_s) * (
                1 + 3 * i / len(eps)
            )
        s.flush()
        recompute(s, campaign_id=seeded.campaign_id, streams=(LabelStream.auto_and_reviewed,))
        name = s.get(Policy, ref).name
        return seeded.campaign_id, name, [e.uid for e in eps]


def test_a_drifting_reference_is_flagged_with_its_episodes(web: Web) -> None:
    cid, ref_name, uids = _slowing_reference(web)
    web.add_user("ada-drift", Role.admin)
    c = web.client()
    login(c, "ada-drift")
    html = c.get(f"/campaigns/{cid}").text
    assert ref_name not in html  # blinded until release
    section = parse(html).find("section", id="sentinels")
    flagged = section.find_all("div", data_flagged="true")
    assert len(flagged) == 1
    shown = [code.get("data-episode") for code in flagged[0].find_all("code")]
    assert shown == uids
    assert "slower over time" in flagged[0].text()
    assert "seasonal Kendall, objects as seasons" in flagged[0].text()
    assert "not been shown free of drift" in section.find(data_testid="no-certificate").text()
