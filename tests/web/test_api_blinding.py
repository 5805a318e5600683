"""Blinding, end to end: before a campaign is released, nothing the web app
serves names its policies — not the HTML, the JSON, the URLs in them, the
response headers or the error messages; not to the public, not to staff,
and not in an admin's preview. Checked by requesting every GET route the app
has (API and pages) as every kind of caller and searching each response for
every policy name, owner, endpoint URL, checkpoint hash and description.

The same search after release finds the names: the test can fail.

A name is not all that tells policies apart: before release, operators and
reviewers never see how the policy spoke to the station (dialect, image
size, session flag: the ``policy_connected`` event, the manifest's
``policy`` block) or its call timing (latency figures, the per-step latency
column), and never the simulated cell's ground truth; admins see all of it,
and so does everyone after release (except the ground truth: admins only).

After release a policy is named only if its submitter opted in to the public
board (the reference always is): a withheld one keeps its arm label, with
the note "identity withheld by the submitter", everywhere the public and the
staff look — while its owner and admins still see its name.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa

from proctor.core.db.models import (
    AnalysisSnapshot,
    Artifact,
    Campaign,
    Episode,
    EpisodeEvent,
    RunnerServer,
    Submission,
    User,
    UserRole,
)
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    ArtifactKind,
    CampaignStatus,
    Role,
    RunnerFailure,
    RunnerStatus,
    Side,
)
from proctor.web.app import api_routes
from tests.web.conftest import Web, login, page_csrf
from tests.web.leaderboard_data import ALL_STREAMS, SeededCampaign, seed_campaign
from tests.web.recordings import RecordingSpec, attach_recording

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
    # the runner servers of submitted checkpoints, by policy (as /submit lists them)
    "/admin/runners",
)


# what a Positronic policy declared: the only one of its dialect in a campaign, with an
# odd image size chosen as a beacon, is singled out by these (security [M6])
POLICY_INFO = {
    "dialect": "positronic_v1",
    "action_space": None,
    "image_size": [3719, 2843],
    "n_external_cameras": 1,
    "needs_wrist_camera": True,
    "needs_session_id": True,
    "action_fps": 29.97,
}
POLICY_MANIFEST = {
    **POLICY_INFO,
    "calls": 77,
    "latency_p50_s": 0.0831,
    "latency_p99_s": 0.1977,
    "images_resized": 10,
    "images_resized_ahead": 9,
}
POLICY_CONNECTED = "policy answered (positronic_v1, named by each reply)"
# the safety envelope's record of an intervention may quote the command as the policy
# asked for it, its action space included (issue 15 item 3); its reasons are withheld too
ENVELOPE_MESSAGE = "clamped joint_velocity [2.9, 0, 0, 0, 0, 0, 0] to the tool-speed cap"
ENVELOPE_REASON = "joint_velocity_norm"
ENVELOPE_MANIFEST = {
    "interventions": 1,
    "by_reason": {ENVELOPE_REASON: 1},
    "limits": {"tool_speed_m_s": 0.25},
}
GROUND_TRUTH = {
    "format": "proctor.sim_ground_truth/1",
    "placements_s": [2.0417, 6.0333, 9.5121],
    "final": {"placed": 3},
}
# none of these may reach an operator or a reviewer before release
DESCRIBES_POLICY = (
    "positronic_v1",
    "image_size",
    "needs_session_id",
    "named by each reply",
    "latency_p50_s",
    "latency_p99_s",
    "policy_latency_s",
    "policy/latency",
    "Policy latency",
    "proctor.sim_ground_truth",
    "joint_velocity",
)
# ...and these an admin finds (so the search can fail)
ADMIN_FINDS = (
    "positronic_v1",
    "image_size",
    "needs_session_id",
    "named by each reply",
    "latency_p50_s",
    "policy_latency_s",
    "policy/latency",
    "Policy latency",
    "proctor.sim_ground_truth",
    "clamped joint_velocity",
    ENVELOPE_REASON,
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def blinded(web: Web, tmp_path: Path) -> tuple[SeededCampaign, str, dict[str, str]]:
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=31, streams=ALL_STREAMS)
    uid = seeded.episode_uids[1]
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        s.add(
            EpisodeEvent(
                episode_id=ep.id,
                kind="policy_connected",
                message=POLICY_CONNECTED,
                details=POLICY_INFO,
            )
        )
        s.add(
            EpisodeEvent(
                episode_id=ep.id,
                t_s=1.5,
                kind="envelope",
                message=ENVELOPE_MESSAGE,
                details={"reason": ENVELOPE_REASON, "requested": [2.9, 0, 0, 0, 0, 0, 0]},
            )
        )
        ep.envelope_interventions = 1
    archived = attach_recording(
        sessions=web.app.state.web.session_factory,
        store=web.app.state.web.store,
        uid=uid,
        spool=tmp_path / "spool",
        spec=SPEC,
        extra_manifest={"policy": POLICY_MANIFEST, "envelope": ENVELOPE_MANIFEST},
        ground_truth=GROUND_TRUTH,
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
    web: Web,
    seeded: SeededCampaign,
    uid: str,
    shas: dict[str, str],
    labels: list[str],
    roles: dict[str, Role | None] = ROLES,
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
        f"/api/episodes/{uid}/telemetry?columns=policy_latency_s,ee_z",
        f"/api/artifacts/{shas['video:exterior']}?download=true",
    ]
    assert len(paths) > 25
    responses = []
    for who, role in roles.items():
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
    # a runner server of one arm's submission, failed (what a runner host writes):
    # its host, url and failure are the admins' and the submitter's alone
    runner_secrets = ["runner-host-7.internal", "ws://10.9.8.7:18555", "CUDA out of memory"]
    with web.db() as s:
        sub_id = s.scalar(
            sa.select(Submission.id).where(Submission.policy_id == seeded.identities[1].policy_id)
        )
        s.add(
            RunnerServer(
                submission_id=sub_id,
                status=RunnerStatus.failed,
                host=runner_secrets[0],
                url=runner_secrets[1],
                dialect="openpi",
                failure=RunnerFailure.out_of_memory,
                fault=RunnerFailure.out_of_memory.fault,
                message=runner_secrets[2],
                diagnostics={"output_tail": [runner_secrets[2]]},
            )
        )
    # the .rrd a reviewer downloads is built from the recording alone
    responses = _crawl(web, seeded, uid, shas, arms)
    not_admin = [x for x in responses if x[0] != "admin"]
    runner_leaks = _search(not_admin, runner_secrets)
    assert runner_leaks == [], "\n".join(runner_leaks)
    statuses = {(who, path): r.status_code for who, path, r in responses}
    assert statuses[("anonymous", f"/api/leaderboard/{seeded.campaign_id}")] == 404
    assert statuses[("reviewer", f"/api/episodes/{uid}")] == 200
    assert statuses[("reviewer", f"/api/episodes/{uid}/rrd")] == 200
    assert statuses[("admin", f"/leaderboard/{seeded.campaign_id}")] == 200
    assert statuses[("submitter", f"/api/episodes/{uid}")] == 404
    leaks = _search(responses, seeded.secrets())
    assert leaks == [], "\n".join(leaks)
    # nor what describes the policy, to operators and reviewers; admins see it
    staff = [x for x in responses if x[0] in ("operator", "reviewer")]
    described = _search(staff, list(DESCRIBES_POLICY))
    assert described == [], "\n".join(described)
    admin = [x for x in responses if x[0] == "admin"]
    assert [m for m in ADMIN_FINDS if not _search(admin, [m])] == []
    # the envelope's interventions stay visible to the staff, without what they quote
    by = {(who, path): r for who, path, r in responses}
    seen = by[("reviewer", f"/api/episodes/{uid}")].json()
    assert seen["envelope_interventions"] == 1
    (event,) = [e for e in seen["events"] if e["kind"] == "envelope"]
    assert (event["message"], event["reason"], event["t_s"]) == (
        "the safety envelope intervened",
        None,
        1.5,
    )
    manifest = by[("reviewer", f"/api/artifacts/{shas['manifest']}")].json()
    assert manifest["envelope"] == {"interventions": 1, "limits": {"tool_speed_m_s": 0.25}}
    # the ground truth is an admin's alone
    truth = f"/api/artifacts/{shas['ground_truth']}"
    assert [statuses[(who, truth)] for who in ("operator", "reviewer", "admin")] == [404, 404, 200]
    # the staff's telemetry still has everything else
    assert statuses[("reviewer", f"/api/episodes/{uid}/telemetry?max_points=20000")] == 200
    # the .rrd a reviewer downloaded (searched above, bytes and all) was built once; the
    # admin's, with the policy's timing, is a second one
    with web.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        rrds = s.scalars(
            sa.select(Artifact).where(
                Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.rrd
            )
        ).all()
    assert sorted(bool((a.details or {}).get("redacted")) for a in rrds) == [False, True]

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
    # the policy's description and timing are everyone's after release; the ground truth is not
    released = [
        ("anonymous", path, c.get(path))
        for path in (
            f"/api/artifacts/{shas['manifest']}",
            f"/api/episodes/{uid}/telemetry?max_points=20000",
            f"/episodes/{uid}",
        )
    ]
    # (the manifest's policy block, and the policy_connected event on the page)
    assert len({line.split(" -> ")[0] for line in _search(released, ["positronic_v1"])}) == 2
    assert _search(released, ["policy_latency_s"]) and _search(released, ["Policy latency"])
    assert c.get(f"/api/artifacts/{shas['ground_truth']}").status_code == 404


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


WITHHELD = "identity withheld by the submitter"


def _get_json(web: Web, path: str, headers: dict[str, str] | None = None) -> Any:
    r = web.client().get(path, headers=headers or {})
    assert r.status_code == 200, (path, r.status_code, r.text[:300])
    return r.json()


def test_a_withheld_identity_stays_hidden_after_release(web: Web, tmp_path: Path) -> None:
    tag = "w" + secrets.token_hex(3)
    ref, swift, steady, slow = (
        f"human-ref-{tag}",
        f"swift-vla-{tag}",
        f"steady-act-{tag}",
        f"slow-dp-{tag}",
    )
    with web.db() as s:
        seeded = seed_campaign(
            s,
            released=True,
            episodes_per_cell=2,
            seed=53,
            streams=ALL_STREAMS,
            tag=tag,
            opted_in={steady},  # swift and slow have not opted in; the reference needs not
        )
    cid = seeded.campaign_id
    uid = seeded.episode_uids[1]
    assert seeded.episode_policy[uid] == swift
    archived = attach_recording(
        sessions=web.app.state.web.session_factory,
        store=web.app.state.web.store,
        uid=uid,
        spool=tmp_path / "spool",
        spec=SPEC,
    )
    by_name = {i.name: i for i in seeded.identities}
    withheld = [by_name[swift], by_name[slow]]
    hidden = [x for i in withheld for x in i.secrets()]

    # the public board: the reference and the opted-in policy by name, the others by arm
    board = _get_json(web, f"/api/leaderboard/{cid}")
    rows = {r["label"]: r for r in board["rows"]}
    arms = sorted(label for label in rows if label.startswith("arm "))
    assert set(rows) == {ref, steady, *arms} and len(arms) == 2
    assert board["identities_withheld"] == 2 and not board["blinded"]
    for label, row in rows.items():
        assert row["identity_withheld"] == (label in arms)
        assert row["note"] == (WITHHELD if label in arms else None)
        assert row["name"] == (None if label in arms else label)
    r = web.client().get(f"/api/episodes/{uid}")
    # it names the policy or not as the opt-in says now: cached briefly, like the board
    assert r.status_code == 200 and r.headers["cache-control"] == "public, max-age=30"
    explorer = r.json()
    assert explorer["policy"] is None and explorer["arm"] in arms
    assert explorer["identity_withheld"] and explorer["note"] == WITHHELD
    swift_arm = explorer["arm"]
    assert explorer["links"]["policy"] == f"/leaderboard/{cid}/policies/{quote(swift_arm)}"
    policy = _get_json(web, f"/api/leaderboard/{cid}/policies/{quote(swift_arm)}")
    assert policy["identity"] is None and policy["identity_withheld"]
    assert policy["note"] == WITHHELD
    listing = _get_json(web, f"/api/leaderboard/{cid}/episodes?policy={quote(swift_arm)}")
    assert listing["note"] == WITHHELD and {e["policy"] for e in listing["episodes"]} == {swift_arm}
    assert all(e["identity_withheld"] for e in listing["episodes"])
    page = web.client().get(f"/leaderboard/{cid}/policies/{quote(swift_arm)}").text
    assert WITHHELD in page
    assert "identity withheld" in web.client().get(f"/episodes/{uid}").text

    # every GET route, as everyone but the owner and the admins: the withheld
    # names, owners, descriptions, endpoints and checkpoints appear nowhere
    labels = [ref, steady, *arms]
    public_roles = {k: v for k, v in ROLES.items() if k != "admin"}
    responses = _crawl(web, seeded, uid, archived.shas, labels, public_roles)
    responses += [
        ("anonymous", path, web.client().get(path))
        for path in (
            f"/leaderboard/{cid}/policies/{quote(steady)}?vs={quote(swift_arm)}",
            f"/api/leaderboard/{cid}/policies/{quote(ref)}?vs={quote(swift_arm)}",
            f"/leaderboard/{cid}/episodes?policy={quote(swift_arm)}&object=spoons",
            # built by a signed-in user's request during the crawl: now served to all
            f"/api/episodes/{uid}/rrd",
        )
    ]
    leaks = _search(responses, hidden)
    assert leaks == [], "\n".join(leaks)
    assert _search(responses, [i.endpoint_url for i in seeded.identities]) == []
    # ... while the same search finds the named ones (so it can fail)
    anonymous = {path: r for who, path, r in responses if who == "anonymous"}
    for path in (f"/api/leaderboard/{cid}", f"/leaderboard/{cid}", f"/api/campaigns/{cid}"):
        assert ref in anonymous[path].text and steady in anonymous[path].text, path
    steady_page = anonymous[f"/leaderboard/{cid}/policies/{quote(steady)}"].text
    assert f"Lab of {steady}" in steady_page and "private-data-" in steady_page
    statuses = {(who, path): r.status_code for who, path, r in responses}
    # anonymous requests get the .rrd only once a signed-in user's has built it
    assert [
        r.status_code
        for who, path, r in responses
        if (who, path) == ("anonymous", f"/api/episodes/{uid}/rrd")
    ] == [401, 200]
    assert statuses[("reviewer", f"/api/episodes/{uid}")] == 200

    # a withheld name is answered like a made-up one
    made_up = web.client().get(f"/api/leaderboard/{cid}/policies/zz-not-a-policy")
    probe = web.client().get(f"/api/leaderboard/{cid}/policies/{quote(swift)}")
    assert (probe.status_code, probe.json()) == (made_up.status_code, made_up.json())

    # its owner sees its name (and no other withheld one); admins see every name
    owner = by_name[swift].owner
    with web.db() as s:
        owner_id = s.scalar(sa.select(User.id).where(User.username == owner))
        s.add(UserRole(user_id=owner_id, role=Role.submitter))
    mine = bearer(web.token(owner, ("submitter",)))
    board = _get_json(web, f"/api/leaderboard/{cid}", mine)
    named = {r["label"]: r["name"] for r in board["rows"]}
    assert named == {
        ref: ref,
        steady: steady,
        swift_arm: swift,
        **{a: None for a in arms if a != swift_arm},
    }
    assert _get_json(web, f"/api/episodes/{uid}", mine)["policy"] == swift
    identity = _get_json(web, f"/api/leaderboard/{cid}/policies/{quote(swift_arm)}", mine)[
        "identity"
    ]
    assert identity["name"] == swift and identity["public"] is False
    web.add_user("root", Role.admin)
    root = bearer(web.token("root", ("admin",)))
    board = _get_json(web, f"/api/leaderboard/{cid}", root)
    assert {r["name"] for r in board["rows"]} == {ref, steady, swift, slow}
    assert {r["label"] for r in board["rows"]} == set(labels)  # the labels stay the public's

    # opting in after the release names it at once (no stale cached page), opting out hides it
    anon = web.client()
    before = anon.get(f"/leaderboard/{cid}")
    assert before.status_code == 200 and swift not in before.text
    policy_id = by_name[swift].policy_id
    for choice, shown in (("public", True), ("private", False)):
        r = web.client().patch(
            f"/api/submissions/policies/{policy_id}", json={"visibility": choice}, headers=mine
        )
        assert r.status_code == 200, r.text
        page = anon.get(f"/leaderboard/{cid}", headers={"if-none-match": before.headers["etag"]})
        assert page.status_code == 200  # a new version, not "304 not modified"
        assert (swift in page.text) == shown and (f"Lab of {swift}" in page.text) is False
        board = _get_json(web, f"/api/leaderboard/{cid}")
        assert (swift in {r["label"] for r in board["rows"]}) == shown
        assert (_get_json(web, f"/api/episodes/{uid}")["policy"] == swift) == shown
        page_of = anon.get(f"/leaderboard/{cid}/policies/{quote(swift)}")
        assert page_of.status_code == (200 if shown else 404)
        if shown:
            assert f"Lab of {swift}" in page_of.text
        before = page


# where a policy's label may stand in a result: the fields that hold names
_NAME_FIELDS = (
    re.compile(r"^protocol\.reference$"),
    re.compile(r"^policies\[\d+\]\.policy$"),
    re.compile(r"^pairs\[\d+\]\.(a|b|winner)$"),
    re.compile(r"^letters(_completion)?\.<key>$"),
    re.compile(r"^matrix\.policies\[\d+\]$"),
    re.compile(r"^matrix\.winner\[\d+\]\[\d+\]$"),
    re.compile(r"^excluded\[\d+\]\.policy$"),
    re.compile(r"^letters_per_object\[\d+\]\.letters\.<key>$"),
    re.compile(r"^rankings\[\d+\]\.policies\[\d+\]\.policy$"),
)


def _where(value: Any, text: str, path: str = "") -> list[str]:
    """The paths in a JSON value where ``text`` occurs (in a string or a key)."""
    found = []
    if isinstance(value, dict):
        for k, v in value.items():
            if text in k:
                found.append(f"{path}.<key>".lstrip("."))
            found += _where(v, text, f"{path}.{k}".lstrip("."))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _where(v, text, f"{path}[{i}]")
    elif isinstance(value, str) and text in value:
        found.append(path)
    return found


def _names_at_name_fields(result: dict[str, Any]) -> set[str]:
    """Every string in the fields of a result that hold policy names."""
    out = {result["protocol"].get("reference")}
    out |= {p["policy"] for p in result["policies"]}
    out |= {q[k] for q in result["pairs"] for k in ("a", "b", "winner")}
    out |= {k for key in ("letters", "letters_completion") for k in result[key]}
    out |= set(result["matrix"]["policies"]) | {w for r in result["matrix"]["winner"] for w in r}
    out |= {e["policy"] for e in result["excluded"]}
    out |= {k for x in result.get("letters_per_object", []) for k in x["letters"]}
    out |= {q["policy"] for r in result.get("rankings", []) for q in r["policies"]}
    return {x for x in out if x is not None}


def _keys(value: Any, skip: tuple[str, ...] = ("letters", "letters_completion")) -> set[str]:
    if isinstance(value, dict):
        return {k for k in value} | {
            x for k, v in value.items() if k not in skip for x in _keys(v, skip)
        }
    if isinstance(value, list):
        return {x for v in value for x in _keys(v, skip)}
    return set()


def test_names_that_look_like_parts_of_the_result_are_relabelled_only_where_names_are(
    web: Web, tmp_path: Path
) -> None:
    """Withheld policies named like a key of the result ("policy",
    "estimate"), an object ("spoons") and a word of its notes ("common"):
    the public board still renders, every number stays, and no label lands
    on a key, an object or a word — where it would tell which name it hides
    (such names are refused at registration now; these rows predate that)."""
    from proctor.analysis.synthetic import PolicyModel
    from proctor.web.snapshots.service import read_result

    tag = "c" + secrets.token_hex(3)
    ref, steady = f"human-ref-{tag}", f"steady-act-{tag}"
    speeds = {"spoons": 1.0, "towels": 1.4}
    withheld = ["policy", "estimate", "spoons", "common"]
    models = [
        PolicyModel(ref, 2.5, sigma=0.35, frailty_shape=12.0, p_drop=0.0, p_lost=0.0,
                    p_safety=0.0, object_speed=speeds, reference=True),
        PolicyModel(steady, 9.0, p_drop=0.05, p_safety=0.01, object_speed=speeds),
        *(PolicyModel(n, 6.0 + 2 * i, object_speed=speeds) for i, n in enumerate(withheld)),
    ]  # fmt: skip
    with web.db() as s:
        seeded = seed_campaign(
            s,
            released=True,
            episodes_per_cell=2,
            seed=59,
            tag=tag,
            models=models,
            opted_in={steady},
            # "policy" and "estimate" share no object: a note names them both
            skip={("policy", "towels"), ("estimate", "spoons")},
        )
        meta_id = s.scalar(
            sa.select(sa.func.max(AnalysisSnapshot.id)).where(
                AnalysisSnapshot.campaign_id == seeded.campaign_id
            )
        )
        raw = read_result(s, meta_id)
    cid = seeded.campaign_id
    assert any(
        n.endswith(" were run on no common object: not compared") and "policy" in n
        for n in raw["notes"]
    ), raw["notes"]

    c = web.client()
    # the home board (this is the newest release), the board, its JSON and snapshot
    for path in ("/leaderboard", f"/leaderboard/{cid}", f"/api/leaderboard/{cid}"):
        assert c.get(path).status_code == 200, path
    board = _get_json(web, f"/api/leaderboard/{cid}")
    rows = {r["label"]: r for r in board["rows"]}
    arms = sorted(label for label in rows if label.startswith("arm "))
    assert set(rows) == {ref, steady, *arms} and len(arms) == len(withheld)
    assert board["objects"] == ["spoons", "towels"]
    for label, row in rows.items():
        assert row["name"] == (None if label in arms else label)
        assert isinstance(row["rmst"]["estimate"], float), label
        assert isinstance(row["completion"]["estimate"], float), label
        for page in (
            f"/leaderboard/{cid}/policies/{quote(label, safe='')}",
            f"/api/leaderboard/{cid}/policies/{quote(label, safe='')}",
            f"/leaderboard/{cid}/episodes?policy={quote(label, safe='')}",
        ):
            assert c.get(page).status_code == 200, page
    for name in withheld:  # a withheld name is answered like a made-up one
        assert c.get(f"/api/leaderboard/{cid}/policies/{name}").status_code == 404

    public = _get_json(web, f"/api/leaderboard/{cid}/snapshot")
    # keys, objects and the shape of the result are untouched ...
    assert _keys(public) == _keys(raw)
    assert public["objects"] == raw["objects"]
    assert [len(p["per_object"]) for p in public["policies"]] == [
        len(p["per_object"]) for p in raw["policies"]
    ]
    # ... a label stands only where a name stood, and no withheld name stands there
    for label in arms:
        strays = [
            p
            for p in _where(public, label)
            if not any(f.match(p) for f in _NAME_FIELDS) and not p.startswith("notes[")
        ]
        assert strays == [], (label, strays)
    at_name_fields = _names_at_name_fields(public)
    assert at_name_fields == {ref, steady, *arms}, at_name_fields
    # the note about the two withheld policies names their labels; the others are as written
    relabelled = [n for n in public["notes"] if n not in raw["notes"]]
    assert len(relabelled) == 1, relabelled
    pair = relabelled[0].removesuffix(" were run on no common object: not compared")
    assert pair != relabelled[0] and set(pair.split(" and ")) <= set(arms), relabelled
    assert len(public["notes"]) == len(raw["notes"])

    # the crawl: no withheld owner, description, endpoint or checkpoint anywhere
    by_name = {i.name: i for i in seeded.identities}
    secrets_of = [x for n in withheld for x in by_name[n].secrets() if x != n]
    uid = seeded.episode_uids[0]
    archived = attach_recording(
        sessions=web.app.state.web.session_factory,
        store=web.app.state.web.store,
        uid=uid,
        spool=tmp_path / "spool",
        spec=SPEC,
    )
    responses = _crawl(
        web,
        seeded,
        uid,
        archived.shas,
        [ref, steady, *arms],
        {"anonymous": None, "reviewer": Role.reviewer},
    )
    leaks = _search(responses, secrets_of)
    assert leaks == [], "\n".join(leaks)


def test_naming_the_arms_takes_a_post_with_the_pages_csrf_token(web: Web) -> None:
    """Naming a campaign's arms writes an audit row in the caller's name, so
    it must be a request another site cannot make a signed-in admin's browser
    send: not a GET (a link, an <img>: the Lax cookie goes along), not a POST
    without the page's CSRF token (a cross-site form)."""
    with web.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=61)
    cid = seeded.campaign_id
    names = {i.name for i in seeded.identities}
    web.add_user("root", Role.admin)
    browser = web.client()
    assert login(browser, "root").status_code == 303

    navigated = browser.get(f"/api/campaigns/{cid}?identities=true")
    assert navigated.status_code == 422, navigated.text
    assert navigated.json()["detail"][0]["loc"][-1] == "identities"
    forged = browser.post(f"/api/campaigns/{cid}/identities")
    assert forged.status_code == 403 and "CSRF" in forged.json()["detail"]
    for r in (navigated, forged):
        assert not any(n in r.text for n in names)
    assert web.audit("campaign.status_identified") == []

    # the admin's own page sends its token: the arms are named, and it is audited
    csrf = page_csrf(browser)
    named = browser.post(f"/api/campaigns/{cid}/identities", headers={"X-CSRF-Token": csrf})
    assert named.status_code == 200, named.text
    assert {cell["arm"] for cell in named.json()["cells"]} == names
    [(_, actor, target_type, target_id, _)] = web.audit("campaign.status_identified")
    assert (actor, target_type, target_id) == ("root", "campaign", str(cid))


class _SpellsATeam:
    """A policy server that passes the handshake, then answers a map whose only
    key is a message to the staff (security [H3])."""

    TEXT = "TEAM sub1 -- policy sub1-evil -- hi operator!"

    def metadata(self) -> dict[str, Any]:
        return {"action_space": "cartesian_velocity"}

    def new_session(self) -> _SpellsATeam:
        return self

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {self.TEXT: 1}

    def reset(self, message: dict[str, Any]) -> None:
        pass


def test_a_policy_server_cannot_write_to_the_staff(web: Web, tmp_path: Path) -> None:
    """A real episode on the simulated cell against a hostile server: what the
    operator and the reviewer read of it (explorer JSON and page, .rrd) does
    not carry the server's words."""
    from proctor.core.work import Work
    from proctor.policywire.serving.openpi import PolicyServer
    from tests.station.conftest import sim_config, sim_runner

    state = web.app.state.web
    with PolicyServer(_SpellsATeam()) as server:
        work = Work(
            run_code="R-EVIL02",
            object_name="towels",
            items=1,
            per_item_cap_s=2.0,
            tote_side=Side.left,
            camera_side=Side.right,
            policy_url=server.url,
            sim_seed=5,
        )
        with sim_runner(state.session_factory, state.store, tmp_path, sim_config()) as runner:
            uid = runner.arm(work)
            runner.start(background=False)
    markers = ["TEAM", "sub1", "evil", "hi operator"]
    responses = []
    for who, role in (("op1", Role.operator), ("rev1", Role.reviewer)):
        web.add_user(who, role)
        headers = bearer(web.token(who, (role.value,)))
        for path in (f"/api/episodes/{uid}", f"/episodes/{uid}", f"/api/episodes/{uid}/rrd"):
            r = web.client().get(path, headers=headers)
            assert r.status_code == 200, (who, path, r.status_code)
            responses.append((who, path, r))
    explorer = responses[0][2].json()
    assert explorer["outcome_reason"].startswith("malformed policy reply: reply has no 'actions'")
    assert _search(responses, markers) == []


def test_the_station_api_names_no_policy(web: Web) -> None:
    """What a station host receives over the station API (hello, every claim
    of a campaign, abandon and episode replies, errors) names no policy, owner,
    endpoint or description; the same search finds them where an admin looks."""
    from proctor.core.audit import Actor
    from proctor.scheduler import service
    from tests.scheduler import builders

    api = "/api/station/v1"
    with web.db() as s:
        w = builders.world(s, 2)
        for p in w.arms:
            p.description = f"private notes of {p.name}"
        c = service.create_campaign(s, protocol=builders.protocol(w), actor=Actor(label="t"))
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        _, token = builders.enrolled_station(s, "cell-bl")
        campaign_id = c.id
    hidden = [p.name for p in w.arms] + [f"private notes of {p.name}" for p in w.arms]
    hidden += [u.username for u in w.owners.values()]
    hidden += [sub.endpoint_url for sub in w.submissions.values() if sub.endpoint_url]
    station = bearer(token)
    client = web.client()
    hello = {
        "station": "cell-bl",
        "profile": "sim",
        "layout_hash": "0" * 64,
        "software_version": "t",
        "station_time": "2031-05-04T09:00:00Z",
    }
    responses = [
        ("station", "POST /hello", client.post(f"{api}/hello", json=hello, headers=station))
    ]
    for n in range(40):
        r = client.post(
            f"{api}/claims",
            json={"campaign": campaign_id},
            headers={**station, "Idempotency-Key": f"claim:{n}"},
        )
        responses.append(("station", f"POST /claims #{n}", r))
        work = r.json()["work"]
        if work is None:
            break
        if n == 0:
            r = client.post(
                f"{api}/claims/{work['run_code']}/abandon",
                json={"reason": "unreachable"},
                headers={**station, "Idempotency-Key": "abandon:0"},
            )
            responses.append(("station", "POST abandon", r))
            continue
        items = work["items"]
        body = {
            "uid": f"uidbl{n:04d}",
            "rev": 1,
            "run_code": work["run_code"],
            "object": work["object"],
            "items": items,
            "budget_s": items * work["per_item_cap_s"],
            "tote_side": work["tote_side"],
            "camera_side": work["camera_side"],
            "state": "closed",
            "outcome": "success",
            "placed": items,
            "lost": 0,
            "dropped": 0,
        }
        # a refusal first: the episode's object is not the run's
        bad = client.put(
            f"{api}/episodes/x{body['uid']}",
            json={**body, "uid": f"x{body['uid']}", "object": "anvils"},
            headers=station,
        )
        responses.append(("station", "PUT bad episode", bad))
        r = client.put(f"{api}/episodes/{body['uid']}", json=body, headers=station)
        responses.append(("station", "PUT episode", r))
    claims = [r for _, what, r in responses if what.startswith("POST /claims")]
    assert len(claims) > 10 and claims[-1].json()["work"] is None  # it ran them all
    assert {r.status_code for _, _, r in responses} <= {200, 422}
    leaks = _search(responses, hidden)
    assert leaks == [], "\n".join(leaks)
    # the same search finds the names where an admin looks (so it can fail)
    web.add_user("root-st", Role.admin)
    admin = client.get("/api/users", headers=bearer(web.token("root-st", ("admin",))))
    assert _search([("admin", "/api/users", admin)], [w.policies[0].name])
