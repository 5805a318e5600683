"""Blinding, end to end: before a campaign is released, nothing the web app
serves names its policies — not the HTML, the JSON, the URLs in them, the
response headers or the error messages; not to the public, not to staff,
and not in an admin's preview. Checked by requesting every GET route the app
has (API and pages) as every kind of caller and searching each response for
every policy name, owner, endpoint URL, checkpoint hash and description.

The same search after release finds the names: the test can fail.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from proctor.db.models import Artifact, Campaign, Episode
from proctor.db.types import utcnow
from proctor.domain import ArtifactKind, CampaignStatus, Role
from tests.web.conftest import Web
from tests.web.leaderboard_data import ALL_STREAMS, SeededCampaign, seed_campaign
from tests.web.recordings import RecordingSpec, attach_recording
from web.app import api_routes

SPEC = RecordingSpec(duration_s=130.0, fps=2, width=160, height=120, telemetry_hz=20.0)
ROLES = {
    "anonymous": None,
    "reviewer": Role.reviewer,
    "operator": Role.operator,
    "submitter": Role.submitter,
    "admin": Role.admin,
}
# admin tools whose job is to name people or policies (user management, the
# audit log, managing submitted policies): not views of results
ADMIN_IDENTITY_TOOLS = (
    "/api/users",
    "/api/audit",
    "/admin/users",
    "/api/me",
    "/account",
    "/api/submissions",
    "/submit",
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def blinded(web: Web, tmp_path: Path) -> tuple[SeededCampaign, str, dict[str, str]]:
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=31, streams=ALL_STREAMS)
    uid = seeded.episode_uids[1]
    archived = attach_recording(
        sessions=web.app.state.web.session_factory,
        store=web.app.state.web.store,
        uid=uid,
        spool=tmp_path / "spool",
        spec=SPEC,
    )
    return seeded, uid, archived.shas


def _paths(web: Web, values: dict[str, list[str]]) -> list[str]:
    """Every GET route with its path parameters filled from ``values``
    (routes with parameters we cannot fill are skipped)."""
    out: list[str] = []
    for route in api_routes(web.app):
        if "GET" not in (route.methods or ()):
            continue
        names = re.findall(r"\{([^}:]+)(?::[^}]+)?\}", route.path)
        if any(n not in values for n in names):
            continue
        paths = [route.path]
        for n in names:
            paths = [re.sub(r"\{" + n + r"(?::[^}]+)?\}", v, p) for p in paths for v in values[n]]
        out.extend(paths)
    return out


def _search(responses: list[tuple[str, str, Any]], secrets: list[str]) -> list[str]:
    leaks = []
    for who, path, r in responses:
        haystack = (
            r.text
            if "text" in r.headers.get("content-type", "")
            or "json" in r.headers.get("content-type", "")
            else r.content.decode("latin-1")
        )
        headers = "\n".join(f"{k}: {v}" for k, v in r.headers.items())
        for secret in secrets:
            for where, text in (("body", haystack), ("headers", headers)):
                if secret in text:
                    leaks.append(
                        f"{who} GET {path} -> {r.status_code}: {where} contains {secret!r}"
                    )
    return leaks


def _crawl(
    web: Web, seeded: SeededCampaign, uid: str, shas: dict[str, str], labels: list[str]
) -> list[tuple[str, str, Any]]:
    values = {
        "campaign_id": [str(seeded.campaign_id)],
        "uid": [uid],
        "sha256": list(shas.values()),
        "camera": ["exterior", "wrist"],
        "label": [quote(x, safe="") for x in labels],
    }
    paths = _paths(web, values)
    paths += [
        f"/api/leaderboard/{seeded.campaign_id}?stream=reviewed_only",
        f"/api/leaderboard/{seeded.campaign_id}/episodes?object=spoons",
        f"/leaderboard/{seeded.campaign_id}/episodes?object=spoons",
        f"/api/episodes/{uid}/telemetry?max_points=20000",
        f"/api/artifacts/{shas['video:exterior']}?download=true",
    ]
    assert len(paths) > 25
    responses = []
    for who, role in ROLES.items():
        c = web.client()
        headers = {}
        if role is not None:
            web.add_user(who, role)
            headers = bearer(web.token(who, (role.value,)))
        for path in paths:
            if who == "admin" and path.startswith(ADMIN_IDENTITY_TOOLS):
                continue
            r = c.get(path, headers=headers)
            # 503: the console with no station to relay to; never an unhandled error
            assert r.status_code != 500, (who, path, r.text[:300])
            responses.append((who, path, r))
    return responses


def test_nothing_names_a_policy_before_release(web: Web, blinded) -> None:
    seeded, uid, shas = blinded
    # the staff can work with the episode; the public cannot see it
    c = web.client()
    assert c.get(f"/api/episodes/{uid}").status_code == 404
    web.add_user("root-probe", Role.admin)
    admin = bearer(web.token("root-probe", ("admin",)))
    arms = [
        r["label"]
        for r in c.get(f"/api/leaderboard/{seeded.campaign_id}", headers=admin).json()["rows"]
    ]
    assert len(arms) == len(seeded.identities) and all(a.startswith("arm ") for a in arms)
    # the .rrd a reviewer downloads is built from the recording alone
    responses = _crawl(web, seeded, uid, shas, arms)
    statuses = {(who, path): r.status_code for who, path, r in responses}
    assert statuses[("anonymous", f"/api/leaderboard/{seeded.campaign_id}")] == 404
    assert statuses[("reviewer", f"/api/episodes/{uid}")] == 200
    assert statuses[("reviewer", f"/api/episodes/{uid}/rrd")] == 200
    assert statuses[("admin", f"/leaderboard/{seeded.campaign_id}")] == 200
    assert statuses[("submitter", f"/api/episodes/{uid}")] == 404
    leaks = _search(responses, seeded.secrets())
    assert leaks == [], "\n".join(leaks)
    # the .rrd a reviewer downloaded (searched above, bytes and all) was built once
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        n_rrd = s.scalar(
            sa.select(sa.func.count())
            .select_from(Artifact)
            .where(Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.rrd)
        )
    assert n_rrd == 1

    # released: the same search finds the names (so the search can fail)
    with web.db() as s:
        c = s.get(Campaign, seeded.campaign_id)
        c.status = CampaignStatus.released
        c.released_at = utcnow()
    names = [i.name for i in seeded.identities]
    c = web.client()
    public = [
        ("anonymous", path, c.get(path))
        for path in (
            f"/leaderboard/{seeded.campaign_id}",
            f"/api/leaderboard/{seeded.campaign_id}",
            f"/api/episodes/{uid}",
            f"/leaderboard/{seeded.campaign_id}/policies/{quote(names[1], safe='')}",
        )
    ]
    found = _search(public, names)
    assert len({line.split(" -> ")[0] for line in found}) == 4, found
    assert _search(public, [f"Lab of {names[1]}"]), "the released policy page names its owner"
    # endpoint URLs stay private even after release
    assert _search(public, [i.endpoint_url for i in seeded.identities]) == []


def test_probing_a_name_is_answered_like_a_made_up_one(web: Web) -> None:
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=37)
    web.add_user("root", Role.admin)
    for headers in ({}, bearer(web.token("root", ("admin",)))):
        c = web.client()
        made_up = c.get(
            f"/api/leaderboard/{seeded.campaign_id}/policies/zz-not-a-policy", headers=headers
        )
        for ident in seeded.identities:
            probe = c.get(
                f"/api/leaderboard/{seeded.campaign_id}/policies/{quote(ident.name, safe='')}",
                headers=headers,
            )
            assert (probe.status_code, probe.json()) == (made_up.status_code, made_up.json())
            episodes = c.get(
                f"/api/leaderboard/{seeded.campaign_id}/episodes",
                params={"policy": ident.name},
                headers=headers,
            )
            episodes_made_up = c.get(
                f"/api/leaderboard/{seeded.campaign_id}/episodes",
                params={"policy": "zz"},
                headers=headers,
            )
            assert (episodes.status_code, episodes.json()) == (
                episodes_made_up.status_code,
                episodes_made_up.json(),
            )
