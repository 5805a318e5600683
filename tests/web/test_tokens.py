"""API tokens: shown once, stored hashed, scoped, expiring, revocable."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

import sqlalchemy as sa

from proctor.core.db.models import ApiToken
from proctor.core.domain import Role
from proctor.web.auth.identity import Principal
from proctor.web.deps import require_role
from tests.web.conftest import PASSWORD, Web, login, page_csrf


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def add_operator_route(web: Web) -> str:
    """An operator-only route of the test's own, so that the check does not
    depend on which operator pages other issues have built."""

    def operator_only(who: Annotated[Principal, require_role(Role.operator)]) -> dict[str, str]:
        return {"operator": who.username}

    web.app.add_api_route("/api/test-operator-only", operator_only)
    return "/api/test-operator-only"


def test_a_token_is_shown_once_and_only_its_hash_is_stored(web: Web) -> None:
    web.add_user("ada", Role.submitter)
    c = web.client()
    login(c, "ada")
    r = c.post(
        "/api/me/tokens",
        json={"name": "ci upload", "scopes": ["submitter"], "expires_in_days": 30},
        headers={"X-CSRF-Token": page_csrf(c)},
    )
    assert r.status_code == 201
    assert r.headers["cache-control"] == "no-store"
    created = r.json()
    token = created["token"]
    assert token.startswith("prt_") and len(token) >= 40
    assert created["prefix"] == token[:12] and created["status"] == "active"
    listed = c.get("/api/me/tokens").json()
    assert [t["id"] for t in listed] == [created["id"]]
    assert "token" not in listed[0] and token not in c.get("/api/me/tokens").text
    assert token not in c.get("/account").text
    with web.db() as s:
        row = s.get(ApiToken, created["id"])
        assert row is not None
        stored = [str(v) for v in (row.name, row.prefix, row.token_hash, row.scopes)]
        assert token not in " ".join(stored) and len(row.token_hash) == 64
    assert [a[4]["scopes"] for a in web.audit("token.create")] == [["submitter"]]


def test_a_token_authenticates_and_records_its_use(web: Web) -> None:
    web.add_user("ada", Role.submitter, Role.operator)
    token = web.token("ada", ("submitter",))
    c = web.client()
    me = c.get("/api/me", headers=bearer(token)).json()
    assert me["authenticated_via"] == "token"
    assert me["roles"] == ["operator", "submitter"]
    assert me["effective_roles"] == ["submitter"]  # the scope narrows the roles
    with web.db() as s:
        (row,) = s.scalars(sa.select(ApiToken))
        first_use = row.last_used_at
        assert first_use == web.clock()
    web.clock.advance(seconds=30)
    c.get("/api/me", headers=bearer(token))
    with web.db() as s:
        assert s.scalars(sa.select(ApiToken.last_used_at)).one() == first_use  # < 1 min
    web.clock.advance(minutes=2)
    c.get("/api/me/tokens", headers=bearer(token))
    with web.db() as s:
        assert s.scalars(sa.select(ApiToken.last_used_at)).one() == web.clock()


def test_a_failed_request_still_records_the_token_use(web: Web) -> None:
    web.add_user("ada")
    token = web.token("ada")
    assert web.client().get("/api/tokens/999", headers=bearer(token)).status_code == 404
    with web.db() as s:
        assert s.scalars(sa.select(ApiToken.last_used_at)).one() == web.clock()


def test_revoked_tokens_stop_working_at_once(web: Web) -> None:
    uid = web.add_user("ada", Role.submitter)
    token = web.token("ada", ("submitter",))
    c = web.client()
    (listed,) = c.get("/api/me/tokens", headers=bearer(token)).json()
    r = c.delete(f"/api/tokens/{listed['id']}", headers=bearer(token))
    assert r.status_code == 200 and r.json()["status"] == "revoked"
    again = c.get("/api/me", headers=bearer(token))
    assert again.status_code == 401 and again.json() == {"detail": "API token revoked"}
    assert again.headers["www-authenticate"] == "Bearer"
    assert [(a[0], a[2], a[4]["user_id"]) for a in web.audit("token.revoke")] == [
        (uid, "api_token", uid)
    ]


def test_tokens_expire(web: Web) -> None:
    web.add_user("ada")
    token = web.token("ada", expires_in_days=1)
    c = web.client()
    web.clock.advance(days=1, seconds=-1)
    assert c.get("/api/me", headers=bearer(token)).status_code == 200
    web.clock.advance(seconds=1)
    r = c.get("/api/me", headers=bearer(token))
    assert r.status_code == 401 and r.json() == {"detail": "API token expired"}
    # and the owner sees it as expired
    login(c, "ada")
    (listed,) = c.get("/api/me/tokens").json()
    assert listed["status"] == "expired"


def test_unknown_and_malformed_tokens_are_refused(web: Web) -> None:
    c = web.client()
    for value in ["prt_" + "A" * 43, "nonsense", "x" * 5000]:
        r = c.get("/api/me", headers=bearer(value))
        assert r.status_code == 401 and r.json() == {"detail": "invalid API token"}


def test_a_read_only_token_cannot_write(web: Web) -> None:
    web.add_user("root", Role.admin)
    token = web.token("root", ("admin", "read-only"))
    c = web.client()
    assert c.get("/api/users", headers=bearer(token)).status_code == 200
    r = c.post("/api/users", json={"username": "eve"}, headers=bearer(token))
    assert r.status_code == 403 and r.json() == {"detail": "this API token is read-only"}
    r = c.post("/api/me/tokens", json={"name": "escalate"}, headers=bearer(token))
    assert r.status_code == 403


def test_a_token_acts_only_in_its_scoped_roles(web: Web) -> None:
    web.add_user("root", Role.admin, Role.operator)
    narrow = web.token("root", ("operator",))
    operator_route = add_operator_route(web)
    c = web.client()
    r = c.get("/api/users", headers=bearer(narrow))
    assert r.status_code == 403
    assert r.json() == {"detail": "this API token's scopes do not include the admin role"}
    assert c.get(operator_route, headers=bearer(narrow)).json() == {"operator": "root"}
    # a token with no scope identifies its user and nothing more
    identity = web.token("root")
    assert c.get("/api/me", headers=bearer(identity)).json()["effective_roles"] == []
    assert c.get("/api/users", headers=bearer(identity)).status_code == 403


def test_a_role_taken_away_leaves_the_token_too(web: Web) -> None:
    web.add_user("root", Role.admin)
    uid = web.add_user("ada", Role.operator)
    token = web.token("ada", ("operator",))
    admin = web.token("root", ("admin",))
    operator_route = add_operator_route(web)
    c = web.client()
    assert c.get(operator_route, headers=bearer(token)).status_code == 200
    r = c.put(f"/api/users/{uid}/roles", json={"roles": []}, headers=bearer(admin))
    assert r.status_code == 200
    r = c.get(operator_route, headers=bearer(token))
    assert r.status_code == 403 and r.json() == {"detail": "this needs the operator role"}


def test_nobody_grants_a_token_a_role_they_cannot_use(web: Web) -> None:
    web.add_user("sub", Role.submitter)
    token = web.token("sub", ("submitter",))
    r = web.client().post(
        "/api/me/tokens", json={"name": "x", "scopes": ["admin"]}, headers=bearer(token)
    )
    assert r.status_code == 422
    assert r.json()["detail"] == [
        {
            "loc": ["body", "scopes"],
            "msg": "you cannot grant the 'admin' role to a token",
            "type": "value_error",
        }
    ]
    # a token cannot hand on a role outside its own scopes either
    web.add_user("both", Role.submitter, Role.reviewer)
    narrow = web.token("both", ("submitter",))
    r = web.client().post(
        "/api/me/tokens", json={"name": "x", "scopes": ["reviewer"]}, headers=bearer(narrow)
    )
    assert r.status_code == 422


def test_a_deactivated_users_tokens_stop_working(web: Web) -> None:
    web.add_user("root", Role.admin)
    uid = web.add_user("ada", Role.submitter)
    token = web.token("ada", ("submitter",))
    admin = web.token("root", ("admin",))
    c = web.client()
    assert (
        c.patch(f"/api/users/{uid}", json={"is_active": False}, headers=bearer(admin)).json()[
            "is_active"
        ]
        is False
    )
    r = c.get("/api/me", headers=bearer(token))
    assert r.status_code == 401 and r.json() == {"detail": "account deactivated"}


def test_a_submitter_cannot_see_or_revoke_anothers_token(web: Web) -> None:
    """The owned-resource access check: someone else's token is a 404."""
    web.add_user("ada", Role.submitter)
    web.add_user("bob", Role.submitter)
    web.add_user("root", Role.admin)
    ada_token = web.token("ada", ("submitter",))
    bob_token = web.token("bob", ("submitter",))
    c = web.client()
    (bobs,) = c.get("/api/me/tokens", headers=bearer(bob_token)).json()
    for method in ("GET", "DELETE"):
        r = c.request(method, f"/api/tokens/{bobs['id']}", headers=bearer(ada_token))
        assert r.status_code == 404 and r.json() == {"detail": "token not found"}
    # the same answer as for a token that does not exist
    assert c.get("/api/tokens/424242", headers=bearer(ada_token)).json() == {
        "detail": "token not found"
    }
    assert c.get("/api/me", headers=bearer(bob_token)).status_code == 200  # still active
    # the page route uses the same check
    login(c, "ada")
    page = c.post(f"/account/tokens/{bobs['id']}/revoke", data={"csrf_token": page_csrf(c)})
    assert page.status_code == 404
    assert c.get("/api/me", headers=bearer(bob_token)).status_code == 200
    # an admin may see and revoke it
    admin = web.token("root", ("admin",))
    assert c.get(f"/api/tokens/{bobs['id']}", headers=bearer(admin)).status_code == 200
    assert c.delete(f"/api/tokens/{bobs['id']}", headers=bearer(admin)).status_code == 200
    assert c.get("/api/me", headers=bearer(bob_token)).status_code == 401


# -- minting from a session, expiry, resets ----------------------------------------


def test_minting_a_token_from_a_session_needs_a_recent_sign_in(web: Web) -> None:
    """A session is not enough to create a lasting credential: a cookie left
    on a shared machine (or copied) must not turn into a token."""
    web.add_user("ada", Role.submitter)
    c = web.client()
    login(c, "ada")
    minutes = web.settings.web.token_reauth_minutes
    web.clock.advance(minutes=minutes, seconds=1)  # well inside the idle timeout
    csrf = page_csrf(c)
    stale = c.post("/api/me/tokens", json={"name": "ci"}, headers={"X-CSRF-Token": csrf})
    assert stale.status_code == 403
    assert "recent sign-in" in stale.json()["detail"]
    page = c.post(
        "/account/tokens", data={"csrf_token": csrf, "name": "ci", "expires_in_days": "30"}
    )
    assert page.status_code == 422 and "recent sign-in" in page.text
    assert web.audit("token.create") == []
    # signing in again opens the window
    login(c, "ada")
    fresh = c.post("/api/me/tokens", json={"name": "ci"}, headers={"X-CSRF-Token": page_csrf(c)})
    assert fresh.status_code == 201


def test_tokens_made_on_the_api_or_the_pages_expire_by_default(web: Web) -> None:
    web.add_user("ada", Role.submitter)
    c = web.client()
    login(c, "ada")
    days = web.settings.web.token_expiry_days
    assert days == 90
    r = c.post("/api/me/tokens", json={"name": "ci"}, headers={"X-CSRF-Token": page_csrf(c)})
    assert r.status_code == 201
    expires = datetime.fromisoformat(r.json()["expires_at"])
    assert expires == web.clock() + timedelta(days=days)
    explicit_null = c.post(
        "/api/me/tokens",
        json={"name": "ci2", "expires_in_days": None},
        headers={"X-CSRF-Token": page_csrf(c)},
    )
    assert explicit_null.status_code == 201 and explicit_null.json()["expires_at"] is not None
    # the page offers no "never" any more, and refuses it if sent
    page = c.get("/account").text
    assert "never (revoke it yourself)" not in page
    never = c.post(
        "/account/tokens", data={"csrf_token": page_csrf(c), "name": "x", "expires_in_days": ""}
    )
    assert never.status_code == 422 and "choose one of the offered lifetimes" in never.text
    with web.db() as s:
        assert s.scalar(sa.select(sa.func.count()).where(ApiToken.expires_at.is_(None))) == 0


def test_an_admin_password_reset_revokes_the_users_tokens(web: Web) -> None:
    web.add_user("root", Role.admin)
    uid = web.add_user("ada", Role.submitter)
    by_api, by_page = web.token("ada"), web.token("ada")
    c = web.client()
    assert c.get("/api/me", headers=bearer(by_api)).status_code == 200
    root = web.client()
    login(root, "root")
    r = root.patch(
        f"/api/users/{uid}",
        json={"password": "a fresh passphrase"},
        headers={"X-CSRF-Token": page_csrf(root)},
    )
    assert r.status_code == 200
    for token in (by_api, by_page):
        refused = c.get("/api/me", headers=bearer(token))
        assert refused.status_code == 401 and refused.json() == {"detail": "API token revoked"}
    (reset,) = web.audit("user.password")
    assert reset[4] == {"reset": True, "tokens_revoked": 2}
    # the page's reset does the same
    again = web.token("ada")
    r = root.post(
        f"/admin/users/{uid}/password",
        data={"csrf_token": page_csrf(root), "password": "another passphrase"},
    )
    assert r.status_code == 303
    assert c.get("/api/me", headers=bearer(again)).status_code == 401


def test_changing_ones_own_password_keeps_ones_tokens(web: Web) -> None:
    web.add_user("ada", Role.submitter)
    token = web.token("ada")
    c = web.client()
    login(c, "ada")
    r = c.post(
        "/account/password",
        data={
            "csrf_token": page_csrf(c),
            "current_password": PASSWORD,
            "new_password": "a much better passphrase",
            "confirm_password": "a much better passphrase",
        },
    )
    assert r.status_code == 303
    assert web.client().get("/api/me", headers=bearer(token)).status_code == 200
    (changed,) = web.audit("user.password")
    assert changed[4] == {"reset": False, "tokens_revoked": 0}


def test_a_token_made_by_a_token_never_outlives_it(web: Web) -> None:
    web.add_user("ada", Role.submitter)
    short = web.token("ada", ("submitter",), expires_in_days=2)
    c = web.client()
    for body in ({"name": "longer"}, {"name": "much longer", "expires_in_days": 3650}):
        r = c.post("/api/me/tokens", json=body, headers=bearer(short))
        assert r.status_code == 201
        assert datetime.fromisoformat(r.json()["expires_at"]) == web.clock() + timedelta(days=2)
    shorter = c.post(
        "/api/me/tokens", json={"name": "shorter", "expires_in_days": 1}, headers=bearer(short)
    )
    assert datetime.fromisoformat(shorter.json()["expires_at"]) == web.clock() + timedelta(days=1)
