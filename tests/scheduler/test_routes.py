"""The campaigns API through the real web app (``proctor.web.app.create_app``:
middleware, API tokens, role checks, error handlers), on both databases."""

from __future__ import annotations

import secrets
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from proctor.core.db.models import AuditLog, Policy
from proctor.core.domain import Role, Visibility
from proctor.core.settings import load_settings
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect


@dataclass
class Api:
    client: TestClient
    db: CommittedDb
    tokens: dict[str, str]

    def as_(self, who: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}


@pytest.fixture
def api(committed_db: CommittedDb, tmp_path: Path) -> Iterator[Api]:
    from proctor.web.accounts import service as accounts
    from proctor.web.app import create_app

    settings = load_settings(
        env="test",
        data_dir=tmp_path,
        database_url=committed_db.url,
        secret_key="scheduler-tests-" + "k" * 32,
    )
    app = create_app(settings)
    tokens = {}
    tag = secrets.token_hex(3)
    with committed_db.session() as s:
        for who, role in (("admin", Role.admin), ("operator", Role.operator)):
            user = accounts.create_user(
                session=s,
                passwords=app.state.web.passwords,
                username=f"{who}-{tag}",
                password=None,
                roles=[role],
                actor=accounts.Actor(label="test"),
                now=app.state.web.clock(),
            )
            _, tokens[who] = accounts.create_token(
                session=s,
                user=user,
                name="t",
                scopes=(role.value,),
                expires_in_days=None,
                allowed_roles=list(Role),
                actor=accounts.Actor(label="test"),
                now=app.state.web.clock(),
            )
    with TestClient(app) as client:
        yield Api(client, committed_db, tokens)
    app.state.web.engine.dispose()


def _body(w: builders.World, **kw: object) -> dict[str, object]:
    body: dict[str, object] = {
        "name": f"api-{secrets.token_hex(4)}",
        "items_per_episode": 4,
        "per_item_cap_s": 30,
        "tau_s": 60,
        "episodes_per_cell": 2,
        "reference": w.reference.name,
        "policies": [p.name for p in w.policies],
        "objects": [o.name for o in w.objects],
    }
    return body | kw


def test_campaign_lifecycle_over_the_api(api: Api) -> None:
    with api.db.session() as s:
        w = builders.world(s, 2)
    names = {p.name for p in w.arms}
    c = api.client

    # writes are the admin's
    assert c.post("/api/campaigns", json=_body(w)).status_code == 401
    assert c.post("/api/campaigns", json=_body(w), headers=api.as_("operator")).status_code == 403
    bad = c.post("/api/campaigns", json=_body(w, items_per_episode=0), headers=api.as_("admin"))
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == [
        "body",
        "items_per_episode",
    ]
    unknown = c.post("/api/campaigns", json=_body(w, objects=["nope"]), headers=api.as_("admin"))
    assert unknown.status_code == 422
    assert "objects[0]: no object type named 'nope'" in unknown.json()["detail"]

    for nul in ({"name": "a\x00b"}, {"objects": ["x\x00"]}, {"extra": {"k": "\x00"}}):
        refused = c.post("/api/campaigns", json=_body(w, **nul), headers=api.as_("admin"))
        assert refused.status_code == 422 and "NUL" in refused.text  # not a 500 on PostgreSQL

    created = c.post("/api/campaigns", json=_body(w), headers=api.as_("admin"))
    assert created.status_code == 201, created.text
    cid = created.json()["id"]
    assert created.json()["status"] == "draft"

    started = c.post(f"/api/campaigns/{cid}/start", headers=api.as_("admin"))
    assert started.status_code == 200 and len(started.json()["commitment"]) == 64
    again = c.post(f"/api/campaigns/{cid}/start", headers=api.as_("admin"))
    assert again.status_code == 409 and "is running" in again.json()["detail"]

    # unreleased: invisible to everyone but admins, and blinded for them by default
    assert c.get(f"/api/campaigns/{cid}", headers=api.as_("operator")).status_code == 404
    assert c.get(f"/api/campaigns/{cid}").status_code == 404
    assert cid not in [x["id"] for x in c.get("/api/campaigns").json()]
    status = c.get(f"/api/campaigns/{cid}", headers=api.as_("admin"))
    assert status.status_code == 200 and status.json()["slots"] == 3 * 2 * 2
    assert not any(n in status.text for n in names)
    # naming the arms is an audited write: a POST (a GET that did it would let
    # any page an admin visits unblind in their name), for admins only
    stale = c.get(f"/api/campaigns/{cid}?identities=true", headers=api.as_("admin"))
    assert stale.status_code == 422 and stale.json()["detail"][0]["loc"] == ["body", "identities"]
    assert not any(n in stale.text for n in names)
    assert c.post(f"/api/campaigns/{cid}/identities").status_code == 401
    assert (
        c.post(f"/api/campaigns/{cid}/identities", headers=api.as_("operator")).status_code == 403
    )
    named = c.post(f"/api/campaigns/{cid}/identities", headers=api.as_("admin"))
    assert named.status_code == 200 and {cell["arm"] for cell in named.json()["cells"]} == names

    assert c.get(f"/api/campaigns/{cid}/reveal", headers=api.as_("admin")).status_code == 409
    closed = c.post(f"/api/campaigns/{cid}/close", headers=api.as_("admin"))
    assert closed.status_code == 200
    seed = closed.json()["seed"]
    revealed = c.get(f"/api/campaigns/{cid}/reveal", headers=api.as_("admin")).json()
    assert revealed["verified"] and revealed["seed"] == seed and revealed["slots_checked"] == 12

    body = {"reason": "data audit", "run_codes": []}
    assert (
        c.post(f"/api/campaigns/{cid}/unblind", json=body, headers=api.as_("operator")).status_code
        == 403
    )
    runs = c.post(f"/api/campaigns/{cid}/unblind", json=body, headers=api.as_("admin"))
    assert runs.status_code == 200 and {r["policy"] for r in runs.json()} == names
    empty = c.post(f"/api/campaigns/{cid}/unblind", json={"reason": ""}, headers=api.as_("admin"))
    assert empty.status_code == 422
    nul = c.post(
        f"/api/campaigns/{cid}/unblind", json={"reason": "x\x00"}, headers=api.as_("admin")
    )
    assert nul.status_code == 422

    released = c.post(f"/api/campaigns/{cid}/release", headers=api.as_("admin"))
    assert released.status_code == 200 and released.json()["status"] == "released"
    # released: a policy is named only if its submitter opted in to the public
    # board (the reference: always); admins still see every name
    public = c.get(f"/api/campaigns/{cid}")
    arms = {x["arm"] for x in public.json()["cells"]}
    assert public.status_code == 200 and len(arms) == len(names)
    assert arms & names == {w.reference.name}
    admin_view = c.get(f"/api/campaigns/{cid}", headers=api.as_("admin"))
    assert {x["arm"] for x in admin_view.json()["cells"]} == names
    with api.db.session() as s:
        opted = s.get(Policy, w.policies[0].id)
        assert opted is not None
        opted.visibility = Visibility.public
    arms = {x["arm"] for x in c.get(f"/api/campaigns/{cid}").json()["cells"]}
    assert arms & names == {w.reference.name, w.policies[0].name} and len(arms) == len(names)
    assert c.get(f"/api/campaigns/{cid}/reveal").json()["verified"]
    assert cid in [x["id"] for x in c.get("/api/campaigns").json()]
    assert c.get("/api/campaigns/999999", headers=api.as_("admin")).status_code == 404

    with api.db.session() as s:
        actions = s.scalars(
            sa.select(AuditLog.action)
            .where(AuditLog.target_type == "campaign", AuditLog.target_id == str(cid))
            .order_by(AuditLog.id)
        ).all()
    assert actions == [
        "campaign.create",
        "campaign.start",
        "campaign.status_identified",
        "campaign.close",
        "campaign.unblind",
        "campaign.release",
    ]


def test_the_web_app_serves_the_gateway(api: Api) -> None:
    with pytest.raises(WebSocketDisconnect) as exc:
        with api.client.websocket_connect(f"/policy/{'x' * 32}"):
            pass
    assert exc.value.code == 1008  # refused before the handshake completes


def test_a_campaigns_cell_profiles_over_the_api(api: Api) -> None:
    with api.db.session() as s:
        w = builders.world(s, 1)
    c, admin = api.client, api.as_("admin")
    bad = c.post("/api/campaigns", json=_body(w, cell_profiles=["Droid FR3"]), headers=admin)
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == [
        "body",
        "cell_profiles",
        0,
    ]
    twice = c.post("/api/campaigns", json=_body(w, cell_profiles=["a", "a"]), headers=admin)
    assert twice.status_code == 422
    assert "cell_profiles[1]: 'a' is already listed at cell_profiles[0]" in twice.json()["detail"]
    made = c.post("/api/campaigns", json=_body(w, cell_profiles=["ur5", "fr3"]), headers=admin)
    assert made.status_code == 201, made.text
    status = c.get(f"/api/campaigns/{made.json()['id']}", headers=admin).json()
    assert status["cell_profiles"] == ["fr3", "ur5"]
    anyone = c.post("/api/campaigns", json=_body(w), headers=admin).json()["id"]
    assert c.get(f"/api/campaigns/{anyone}", headers=admin).json()["cell_profiles"] is None
