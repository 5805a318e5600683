"""The admin's campaign pages: what `proctor campaign status` and
/api/campaigns/{id} say, on a page, with the arms blinded until release."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from proctor.core.db.models import Policy
from proctor.core.domain import Role
from tests.web.conftest import Web, login
from tests.web.html_tree import parse
from tests.web.leaderboard_data import SeededCampaign, seed_campaign


@pytest.fixture
def closed(web: Web) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(s, released=False, episodes_per_cell=3, seed=4)


def admin_client(web: Web) -> TestClient:
    web.add_user("ada", Role.admin)
    c = web.client()
    login(c, "ada")
    return c


def test_only_admins_see_the_campaign_pages(web: Web, closed: SeededCampaign) -> None:
    c = web.client()
    assert c.get("/campaigns").status_code == 303  # sign in first
    web.add_user("rev", Role.reviewer, Role.operator, Role.submitter)
    login(c, "rev")
    assert c.get("/campaigns").status_code == 403
    assert c.get(f"/campaigns/{closed.campaign_id}").status_code == 403


def test_the_list_and_the_campaign_say_what_the_api_says(web: Web, closed: SeededCampaign) -> None:
    c = admin_client(web)
    api = c.get(f"/api/campaigns/{closed.campaign_id}").json()
    listing = c.get("/campaigns")
    assert listing.status_code == 200
    href = f"/campaigns/{closed.campaign_id}"
    row = next(
        r
        for r in parse(listing.text).find_all("tr")
        if any(a.get("href") == href for a in r.find_all("a"))
    )
    text = row.text()
    assert api["name"] in text and api["status"] in text
    assert f"{api['done']} / {api['slots']}" in text

    page = c.get(f"/campaigns/{closed.campaign_id}")
    assert page.status_code == 200
    html = page.text
    assert f"{api['done']} of {api['slots']} episodes done" in html
    if api["commitment"]:
        assert api["commitment"] in html
    cells = parse(html).find(id="cell-table").find_all("tr")[1:]
    assert len(cells) == len({cell["arm"] for cell in api["cells"]})
    for cell in api["cells"]:
        assert f"{cell['done']} / {cell['target']}" in html
    # blinded until release: no policy's name is on the page
    with web.db() as s:
        names = list(s.scalars(sa.select(Policy.name)))
    assert names and not [n for n in names if n in html]
    assert "blinded labels" in html
    assert c.get("/campaigns/999999").status_code == 404
