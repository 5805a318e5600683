"""The pages as a person uses them: home, navigation, my account, users."""

from __future__ import annotations

import re

from proctor.core.domain import Role
from proctor.web.nav import NAV
from tests.web.conftest import Web, login, page_csrf


def nav_links(html: str) -> list[str]:
    nav = re.search(r'<nav class="mainnav".*?</nav>', html, re.S)
    assert nav
    return re.findall(r'href="([^"]+)"', nav.group(0))


def test_home_and_navigation_follow_the_roles(web: Web) -> None:
    c = web.client()
    public = c.get("/")
    assert public.status_code == 200
    assert nav_links(public.text) == ["/leaderboard", "/api/docs"]
    assert "Sign in" in public.text
    assert "set-cookie" not in public.headers  # no session for a visitor who only looks

    web.add_user("op", Role.operator)
    login(c, "op")
    home = c.get("/")
    assert nav_links(home.text) == ["/leaderboard", "/console", "/api/docs"]
    assert "Signed in as <strong>op</strong> (operator)" in home.text


def test_every_navigation_link_leads_to_a_page(web: Web) -> None:
    """No dead links: each leads to a page a real route serves."""
    web.add_user("all", *Role)
    c = web.client()
    login(c, "all")
    links = nav_links(c.get("/").text)
    assert links == [item.path for item in NAV]
    for path in links:
        assert c.get(path).status_code == 200, path


def test_no_page_is_a_stand_in(web: Web) -> None:
    """The placeholder mechanism (a 501 page naming an issue) is gone with its
    last page: nothing is registered, templated or importable for it."""
    from pathlib import Path

    import proctor.web as web_package
    from proctor.web.app import api_routes

    assert not (Path(web_package.__file__).parent / "placeholders").exists()
    names = [rc.original_route.name for rc in api_routes(web.app)]
    assert not [n for n in names if n.startswith("placeholder")], names
    assert not [
        r for r in web.app.routes if (getattr(r, "name", None) or "").startswith("placeholder")
    ]


def test_create_a_token_on_the_account_page_and_revoke_it(web: Web) -> None:
    web.add_user("ada", Role.submitter, Role.reviewer)
    c = web.client()
    login(c, "ada")
    account = c.get("/account")
    # only roles ada holds are offered
    offered = re.findall(r'name="scopes" value="([^"]+)"', account.text)
    assert offered == ["reviewer", "submitter", "read-only"]
    r = c.post(
        "/account/tokens",
        data={
            "csrf_token": page_csrf(c),
            "name": "nightly export",
            "scopes": ["submitter", "read-only"],
            "expires_in_days": "90",
        },
    )
    assert r.status_code == 200 and r.headers["cache-control"] == "no-store"
    token = re.search(r'<code id="new-token">(prt_[^<]+)</code>', r.text)
    assert token and "only time it is shown" in r.text
    plaintext = token.group(1)
    me = web.client().get("/api/me", headers={"Authorization": f"Bearer {plaintext}"}).json()
    assert me["token_scopes"] == ["submitter", "read-only"]

    account = c.get("/account").text
    assert plaintext not in account and plaintext[:12] in account
    token_id = re.search(r'data-token-id="(\d+)"', account)
    assert token_id
    r = c.post(f"/account/tokens/{token_id.group(1)}/revoke", data={"csrf_token": page_csrf(c)})
    assert r.status_code == 303 and r.headers["location"] == "/account"
    after = c.get("/account").text
    assert "is revoked." in after and "status-revoked" in after
    assert (
        web.client().get("/api/me", headers={"Authorization": f"Bearer {plaintext}"}).status_code
        == 401
    )


def test_the_token_form_explains_its_errors(web: Web) -> None:
    web.add_user("ada", Role.submitter)
    c = web.client()
    login(c, "ada")
    cases = [
        ({"name": "", "expires_in_days": "30"}, "give the token a name"),
        (
            {"name": "x", "scopes": ["admin"], "expires_in_days": "30"},
            "cannot grant the &#39;admin&#39; role",
        ),
        ({"name": "x", "expires_in_days": "7"}, "choose one of the offered lifetimes"),
    ]
    for data, message in cases:
        r = c.post("/account/tokens", data={"csrf_token": page_csrf(c), **data})
        assert r.status_code == 422 and message in r.text, message
    assert web.audit("token.create") == []


def test_admin_users_page(web: Web) -> None:
    web.add_user("root", Role.admin)
    c = web.client()
    login(c, "root")
    page = c.get("/admin/users")
    assert page.status_code == 200 and 'data-username="root"' in page.text

    bad = c.post(
        "/admin/users",
        data={"csrf_token": page_csrf(c), "username": "x", "email": "nope", "roles": "operator"},
    )
    assert bad.status_code == 422
    assert 'id="username-error"' in bad.text and 'id="email-error"' in bad.text
    assert 'value="operator" checked' in bad.text  # the form keeps what was typed

    r = c.post(
        "/admin/users",
        data={
            "csrf_token": page_csrf(c),
            "username": "Grace",
            "display_name": "Grace Hopper",
            "password": "cobol is fine",
            "roles": ["operator", "reviewer"],
        },
    )
    assert r.status_code == 303
    listing = c.get("/admin/users").text
    assert "User grace is added." in listing
    row = re.search(r'<tr data-username="grace".*?</tr>', listing, re.S)
    assert row and row.group(0).count("checked") == 2
    uid = re.search(r'action="/admin/users/(\d+)/roles"', row.group(0))
    assert uid

    r = c.post(
        f"/admin/users/{uid.group(1)}/roles",
        data={"csrf_token": page_csrf(c), "roles": ["submitter"]},
    )
    assert r.status_code == 303 and "Roles of grace: submitter." in c.get("/admin/users").text
    r = c.post(
        f"/admin/users/{uid.group(1)}/active", data={"csrf_token": page_csrf(c), "active": "0"}
    )
    assert "grace is deactivated." in c.get("/admin/users").text
    assert login(web.client(), "grace", "cobol is fine").status_code == 401


def test_admin_page_refuses_to_remove_the_last_admin(web: Web) -> None:
    root = web.add_user("root", Role.admin)
    c = web.client()
    login(c, "root")
    r = c.post(f"/admin/users/{root}/roles", data={"csrf_token": page_csrf(c), "roles": "operator"})
    assert r.status_code == 303
    page = c.get("/admin/users").text
    assert "last active admin" in page and "flash-error" in page
    assert c.get("/api/me").json()["roles"] == ["admin"]


def test_admin_sets_a_password(web: Web) -> None:
    web.add_user("root", Role.admin)
    uid = web.add_user("ada", password=None)  # a token-only account
    c = web.client()
    login(c, "root")
    short = c.post(
        f"/admin/users/{uid}/password", data={"csrf_token": page_csrf(c), "password": "x"}
    )
    assert short.status_code == 303 and "at least 10 characters" in c.get("/admin/users").text
    c.post(
        f"/admin/users/{uid}/password", data={"csrf_token": page_csrf(c), "password": "now she can"}
    )
    assert login(web.client(), "ada", "now she can").status_code == 303
