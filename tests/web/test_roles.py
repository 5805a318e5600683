"""Role boundaries on the real routes, the admin's user management, and the
access-check helper for owned resources."""

from __future__ import annotations

import re
from typing import Any

import pytest
import sqlalchemy as sa

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Policy
from proctor.core.domain import Role
from proctor.core.errors import NotFound
from proctor.web.app import api_routes
from proctor.web.auth.access import check_owner_access, owner_filter
from proctor.web.auth.identity import Principal, user_roles
from tests import factories
from tests.web.conftest import Web, login, page_csrf

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


def test_the_public_cannot_write_anything(web: Web) -> None:
    """Every write route, API and page, refuses an anonymous caller."""
    web.add_user("root", Role.admin)  # so that id 1 exists
    c = web.client()
    c.get("/login")  # an anonymous session with a CSRF token: still no writes
    checked = 0
    for route in api_routes(web.app):
        for method in route.methods & UNSAFE:
            if route.path == "/login":
                continue
            r = c.request(method, _concrete(route.path), json={})
            if route.path == "/logout":
                assert r.status_code == 403, route.path  # no CSRF token
                continue
            assert (
                r.status_code == 401
                if route.path.startswith("/api/")
                else r.status_code
                in (
                    401,
                    403,
                )
            ), (method, route.path, r.status_code)
            checked += 1
    assert checked >= 12


def test_an_operator_cannot_reach_admin_routes(web: Web) -> None:
    web.add_user("op", Role.operator)
    uid = web.add_user("other", Role.submitter)
    token = web.token("op", ("operator",))
    c = web.client()
    calls: list[tuple[str, str, Any]] = [
        ("GET", "/api/users", None),
        ("POST", "/api/users", {"username": "mallory", "roles": ["admin"]}),
        ("GET", f"/api/users/{uid}", None),
        ("PATCH", f"/api/users/{uid}", {"is_active": False}),
        ("PUT", f"/api/users/{uid}/roles", {"roles": ["admin"]}),
        ("GET", f"/api/users/{uid}/tokens", None),
        ("GET", "/api/audit", None),
    ]
    for method, path, body in calls:
        r = c.request(method, path, json=body, headers=bearer(token))
        assert r.status_code == 403, (method, path)
        assert r.json() == {"detail": "this needs the admin role"}
    # and the pages, signed in
    login(c, "op")
    assert c.get("/admin/users").status_code == 403
    csrf = page_csrf(c)
    r = c.post(f"/admin/users/{uid}/roles", data={"csrf_token": csrf, "roles": "admin"})
    assert r.status_code == 403 and "this needs the admin role" in r.text
    assert web.audit("user.roles") == []


def test_an_admin_manages_users_and_every_change_is_audited(web: Web) -> None:
    root = web.add_user("root", Role.admin)
    admin = web.token("root", ("admin",))
    c = web.client()
    r = c.post(
        "/api/users",
        json={
            "username": "Ada.Lovelace",
            "display_name": "Ada",
            "email": "ada@example.org",
            "password": "analytical engine",
            "roles": ["submitter"],
        },
        headers=bearer(admin),
    )
    assert r.status_code == 201
    ada = r.json()
    assert ada["username"] == "ada.lovelace" and ada["roles"] == ["submitter"]
    uid = ada["id"]
    r = c.put(
        f"/api/users/{uid}/roles", json={"roles": ["reviewer", "submitter"]}, headers=bearer(admin)
    )
    assert r.json()["roles"] == ["reviewer", "submitter"]
    assert (
        c.patch(f"/api/users/{uid}", json={"is_active": False}, headers=bearer(admin)).json()[
            "is_active"
        ]
        is False
    )
    assert c.patch(f"/api/users/{uid}", json={"is_active": True}, headers=bearer(admin)).json()[
        "is_active"
    ]
    assert login(web.client(), "ada.lovelace", "analytical engine").status_code == 303
    assert web.audit("user.roles") == [
        (root, "", "user", str(uid), {"before": ["submitter"], "after": ["reviewer", "submitter"]})
    ]
    assert [a[3] for a in web.audit("user.deactivate")] == [str(uid)]
    assert [a[3] for a in web.audit("user.activate")] == [str(uid)]
    created = web.audit("user.create")
    assert created[-1][4] == {
        "username": "ada.lovelace",
        "roles": ["submitter"],
        "has_password": True,
    }
    audit = c.get("/api/audit", params={"action": "user.roles"}, headers=bearer(admin)).json()
    assert [a["details"]["after"] for a in audit] == [["reviewer", "submitter"]]


def test_user_creation_refuses_bad_and_duplicate_input(web: Web) -> None:
    web.add_user("root", Role.admin)
    admin = web.token("root", ("admin",))
    c = web.client()
    dup = c.post("/api/users", json={"username": "ROOT"}, headers=bearer(admin))
    assert dup.status_code == 409 and dup.json() == {"detail": "username 'root' is already taken"}
    weak = c.post(
        "/api/users", json={"username": "weak", "password": "weak"}, headers=bearer(admin)
    )
    assert weak.status_code == 422
    assert weak.json()["detail"][0]["loc"] == ["body", "password"]
    same = c.post(
        "/api/users",
        json={"username": "samesame12", "password": "samesame12"},
        headers=bearer(admin),
    )
    assert same.status_code == 422 and same.json()["detail"][0]["msg"] == "must not be the username"
    for body, field in [
        ({"username": "x"}, "username"),
        ({"username": "ok-name", "email": "not an email"}, "email"),
        ({"username": "ok-name", "roles": ["overlord"]}, "roles"),
        ({"username": "ok-name", "display_name": "bad\x00name"}, "display_name"),
        ({"username": "ok-name", "surprise": 1}, "surprise"),
    ]:
        r = c.post("/api/users", json=body, headers=bearer(admin))
        assert r.status_code == 422, body
        assert r.json()["detail"][0]["loc"][:2] == ["body", field], r.json()
    with web.db() as s:
        assert s.scalar(sa.text("SELECT count(*) FROM users")) == 1  # nothing half-made


def test_the_last_admin_cannot_be_demoted_or_deactivated(web: Web) -> None:
    root = web.add_user("root", Role.admin)
    admin = web.token("root", ("admin",))
    c = web.client()
    for method, path, body in [
        ("PUT", f"/api/users/{root}/roles", {"roles": ["operator"]}),
        ("PATCH", f"/api/users/{root}", {"is_active": False}),
    ]:
        r = c.request(method, path, json=body, headers=bearer(admin))
        assert r.status_code == 409
        assert "last active admin" in r.json()["detail"]
    assert web.audit("user.roles") == [] and web.audit("user.deactivate") == []
    # with a second active admin it is allowed, and takes effect at once
    web.add_user("second", Role.admin)
    r = c.put(f"/api/users/{root}/roles", json={"roles": ["operator"]}, headers=bearer(admin))
    assert r.status_code == 200 and r.json()["roles"] == ["operator"]
    assert c.get("/api/users", headers=bearer(admin)).status_code == 403


def test_a_role_change_applies_to_the_open_session_at_once(web: Web) -> None:
    web.add_user("root", Role.admin)
    uid = web.add_user("ada", Role.operator)
    c = web.client()
    login(c, "ada")
    assert c.get("/admin/users").status_code == 403
    admin = web.token("root", ("admin",))
    web.client().put(f"/api/users/{uid}/roles", json={"roles": ["admin"]}, headers=bearer(admin))
    assert c.get("/admin/users").status_code == 200


# -- the access-check helper, on both databases ----------------------------------


def _principal(session: ProctorSession, username: str, *roles: Role) -> Principal:
    user = factories.user(session, username, *roles)
    return Principal(user=user, roles=user_roles(user), via="session")


def test_owner_access_check(db_session: ProctorSession) -> None:
    ada = _principal(db_session, "ada", Role.submitter)
    bob = _principal(db_session, "bob", Role.submitter)
    root = _principal(db_session, "root", Role.admin)
    reviewer = _principal(db_session, "rev", Role.reviewer)
    policy = factories.policy(db_session)
    policy.owner_id = ada.id
    db_session.flush()

    check_owner_access(ada, policy.owner_id, what="policy")  # the owner
    check_owner_access(root, policy.owner_id, what="policy")  # an admin
    for outsider in (bob, reviewer, None):
        with pytest.raises(NotFound) as caught:
            check_owner_access(outsider, policy.owner_id, what="policy")
        assert caught.value.http_status == 404 and str(caught.value) == "policy not found"
    # a route may name other privileged roles
    check_owner_access(reviewer, policy.owner_id, privileged=(Role.reviewer,))
    # an unowned resource belongs to nobody but the privileged
    with pytest.raises(NotFound):
        check_owner_access(ada, None)


def test_owner_filter_narrows_queries(db_session: ProctorSession) -> None:
    ada = _principal(db_session, "ada", Role.submitter)
    bob = _principal(db_session, "bob", Role.submitter)
    root = _principal(db_session, "root", Role.admin)
    mine = factories.policy(db_session, "ada-policy")
    theirs = factories.policy(db_session, "bob-policy")
    mine.owner_id, theirs.owner_id = ada.id, bob.id
    db_session.flush()

    def visible(who: Principal | None) -> set[str]:
        q = sa.select(Policy.name).where(owner_filter(who, Policy.owner_id))
        return set(db_session.scalars(q))

    assert visible(ada) == {"ada-policy"}
    assert visible(bob) == {"bob-policy"}
    assert visible(root) >= {"ada-policy", "bob-policy"}
    assert visible(None) == set()
