"""Signing in to the pages: the login form, the session cookie, its expiry,
logout, CSRF, and login throttling."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from proctor.core.domain import Role
from proctor.core.settings import Settings
from proctor.web.auth.sessions import SESSION_COOKIE
from tests.web.conftest import PASSWORD, FakeClock, Web, csrf_from, login, page_csrf


def test_login_starts_a_session_and_returns_to_next(web: Web) -> None:
    uid = web.add_user("ada", Role.operator)
    c = web.client(ip="10.1.1.1")
    r = login(c, "ada", next="/account")
    assert r.status_code == 303 and r.headers["location"] == "/account"
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=") and "HttpOnly" in cookie
    me = c.get("/api/me").json()
    assert me["username"] == "ada" and me["authenticated_via"] == "session"
    assert me["effective_roles"] == ["operator"]
    [(actor, label, kind, target, details)] = web.audit("login.success")
    assert (actor, label, kind, target, details["client"]) == (uid, "", "user", "ada", "10.1.1.1")
    # the success ends the attempt reserved before the password was checked
    assert [d["client"] for *_, d in web.audit("login.attempt")] == ["10.1.1.1"]


def test_usernames_are_case_insensitive_at_login(web: Web) -> None:
    web.add_user("grace")
    assert login(web.client(), "  Grace ").status_code == 303


def test_wrong_password_and_unknown_user_get_the_same_answer(web: Web) -> None:
    web.add_user("ada")
    c = web.client(ip="10.2.2.2")
    wrong = login(c, "ada", "not the password")
    unknown = login(c, "nobody", "not the password")
    for r in (wrong, unknown):
        assert r.status_code == 401
        assert "Wrong username or password." in r.text
    assert c.get("/api/me").status_code == 401
    failures = web.audit("login.failure")
    assert [(f[3], f[4]["reason"], f[4]["client"]) for f in failures] == [
        ("ada", "wrong password", "10.2.2.2"),
        ("nobody", "unknown user", "10.2.2.2"),
    ]


def test_next_never_leaves_the_site(web: Web) -> None:
    web.add_user("ada")
    for target in ["//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:x"]:
        c = web.client()
        assert login(c, "ada", next=target).headers["location"] == "/"


def test_login_form_needs_its_csrf_token(web: Web) -> None:
    web.add_user("ada")
    c = web.client()
    c.get("/login")
    r = c.post("/login", data={"username": "ada", "password": PASSWORD})
    assert r.status_code == 403 and "CSRF" in r.text
    forged = c.post(
        "/login", data={"username": "ada", "password": PASSWORD, "csrf_token": "x" * 43}
    )
    assert forged.status_code == 403
    assert c.get("/api/me").status_code == 401


def test_logout_ends_the_session(web: Web) -> None:
    uid = web.add_user("ada")
    c = web.client()
    login(c, "ada")
    token = page_csrf(c)
    assert c.post("/logout").status_code == 403  # no CSRF token: refused
    assert c.get("/api/me").status_code == 200
    r = c.post("/logout", data={"csrf_token": token})
    assert r.status_code == 303
    assert c.get("/api/me").status_code == 401
    assert [a[0] for a in web.audit("logout")] == [uid]
    assert "You are signed out." in c.get("/").text


def test_cookie_writes_need_the_csrf_token(web: Web) -> None:
    web.add_user("ada", Role.submitter)
    c = web.client()
    login(c, "ada")
    token = page_csrf(c)
    body = {"name": "ci", "scopes": ["submitter"]}
    assert c.post("/api/me/tokens", json=body).status_code == 403
    wrong = c.post("/api/me/tokens", json=body, headers={"X-CSRF-Token": "y" * 43})
    assert wrong.status_code == 403
    ok = c.post("/api/me/tokens", json=body, headers={"X-CSRF-Token": token})
    assert ok.status_code == 201
    # the page form the same way
    form = c.post("/account/tokens", data={"name": "x", "expires_in_days": "30"})
    assert form.status_code == 403 and "CSRF token missing or invalid" in form.text


def test_one_sessions_csrf_token_does_not_work_in_another(web: Web) -> None:
    web.add_user("ada")
    web.add_user("bob")
    a, b = web.client(), web.client()
    login(a, "ada")
    login(b, "bob")
    stolen = page_csrf(a)
    r = b.post("/api/me/tokens", json={"name": "x"}, headers={"X-CSRF-Token": stolen})
    assert r.status_code == 403


def test_a_tampered_cookie_is_no_session(web: Web) -> None:
    web.add_user("ada")
    c = web.client()
    login(c, "ada")
    value = c.cookies[SESSION_COOKIE]
    c.cookies.set(SESSION_COOKIE, value[:-2] + ("AA" if not value.endswith("AA") else "BB"))
    assert c.get("/api/me").status_code == 401


def test_idle_sessions_expire(web: Web) -> None:
    web.add_user("ada")
    c = web.client()
    login(c, "ada")
    idle = web.settings.web.session_idle_minutes
    web.clock.advance(minutes=idle - 1)
    assert c.get("/api/me").status_code == 200  # still inside the idle window
    web.clock.advance(minutes=idle - 1)
    assert c.get("/api/me").status_code == 200  # activity moved the window
    web.clock.advance(minutes=idle + 1)
    r = c.get("/api/me")
    assert r.status_code == 401 and r.json() == {"detail": "session expired: sign in again"}
    # a page sends the person to sign in again, and says why
    web.clock.advance(minutes=1)
    login(c, "ada")
    web.clock.advance(minutes=idle + 1)
    page = c.get("/account?tab=tokens")
    assert page.status_code == 303
    location = urlsplit(page.headers["location"])
    assert location.path == "/login"
    assert parse_qs(location.query) == {"next": ["/account?tab=tokens"], "expired": ["1"]}
    assert "Your session expired" in c.get(page.headers["location"]).text


def test_sessions_end_after_their_lifetime_however_active(web: Web) -> None:
    web.add_user("ada")
    c = web.client()
    login(c, "ada")
    hours = web.settings.web.session_max_hours
    for _ in range(hours * 2 - 1):
        web.clock.advance(minutes=30)
        assert c.get("/api/me").status_code == 200
    web.clock.advance(minutes=31)
    assert c.get("/api/me").status_code == 401


def test_changing_the_password_ends_other_sessions(web: Web) -> None:
    web.add_user("ada")
    here, there = web.client(), web.client()
    login(here, "ada")
    login(there, "ada")
    token = page_csrf(here)
    r = here.post(
        "/account/password",
        data={
            "csrf_token": token,
            "current_password": PASSWORD,
            "new_password": "a much better passphrase",
            "confirm_password": "a much better passphrase",
        },
    )
    assert r.status_code == 303
    assert here.get("/api/me").status_code == 200
    assert there.get("/api/me").status_code == 401
    assert login(web.client(), "ada", PASSWORD).status_code == 401
    assert login(web.client(), "ada", "a much better passphrase").status_code == 303
    assert len(web.audit("user.password")) == 1


def test_password_change_explains_what_is_wrong(web: Web) -> None:
    web.add_user("ada")
    c = web.client()
    login(c, "ada")
    cases = [
        ("wrong current", "long enough pass", "long enough pass", "not your current password"),
        (PASSWORD, "short", "short", "at least 10 characters"),
        (PASSWORD, "long enough pass", "different pass!!", "the two new passwords differ"),
    ]
    for current, new, confirm, message in cases:
        r = c.post(
            "/account/password",
            data={
                "csrf_token": page_csrf(c),
                "current_password": current,
                "new_password": new,
                "confirm_password": confirm,
            },
        )
        assert r.status_code == 422 and message in r.text
    assert web.audit("user.password") == []


def test_deactivation_ends_sessions(web: Web) -> None:
    web.add_user("root", Role.admin)
    uid = web.add_user("ada", Role.operator)
    ada, root = web.client(), web.client()
    login(ada, "ada")
    login(root, "root")
    r = root.post(f"/admin/users/{uid}/active", data={"csrf_token": page_csrf(root), "active": "0"})
    assert r.status_code == 303
    assert ada.get("/api/me").status_code == 401
    again = login(web.client(), "ada")
    assert again.status_code == 401 and "deactivated" in again.text


# -- throttling ------------------------------------------------------------------


def test_failed_logins_throttle_the_account(web: Web) -> None:
    web.add_user("ada")
    limit = web.app.state.web.throttle.per_user
    window = web.app.state.web.throttle.window
    for i in range(limit):
        # different addresses: this is the per-account limit
        assert login(web.client(ip=f"10.3.0.{i}"), "ada", "guess").status_code == 401
        web.clock.advance(seconds=10)
    blocked = login(web.client(ip="10.3.1.1"), "ada")  # even the right password
    assert blocked.status_code == 429
    assert "Too many failed sign-ins for this account" in blocked.text
    retry = int(blocked.headers["retry-after"])
    assert retry == int(window.total_seconds()) - 10 * limit
    assert [t[4]["limit"] for t in web.audit("login.throttled")] == ["account"]
    # other accounts are not affected
    web.add_user("bob")
    assert login(web.client(ip="10.3.1.1"), "bob").status_code == 303
    # the lock lifts when the oldest failure leaves the window
    web.clock.advance(seconds=retry - 1)
    assert login(web.client(ip="10.3.1.1"), "ada").status_code == 429
    web.clock.advance(seconds=1)
    assert login(web.client(ip="10.3.1.1"), "ada").status_code == 303


def test_a_successful_login_resets_the_account_count(web: Web) -> None:
    web.add_user("ada")
    limit = web.app.state.web.throttle.per_user_client
    for _ in range(limit - 1):
        login(web.client(), "ada", "guess")
    web.clock.advance(seconds=1)
    assert login(web.client(), "ada").status_code == 303
    web.clock.advance(seconds=1)
    for _ in range(limit - 1):
        assert login(web.client(), "ada", "guess").status_code == 401
    assert login(web.client(), "ada").status_code == 303


def test_failed_logins_throttle_the_client_address(web: Web) -> None:
    web.add_user("ada")
    per_client = web.app.state.web.throttle.per_client
    attacker = web.client(ip="10.9.9.9")
    for i in range(per_client):
        # spread over many accounts so that no account limit is reached
        assert login(attacker, f"victim{i}", "guess").status_code == 401
    r = login(attacker, "ada")
    assert r.status_code == 429
    assert "from this address" in r.text and int(r.headers["retry-after"]) > 0
    assert login(web.client(ip="10.9.9.10"), "ada").status_code == 303


def test_the_login_page_keeps_the_username_and_shows_the_error(web: Web) -> None:
    c = web.client()
    r = login(c, "ada<script>", "x")
    assert r.status_code == 401
    assert 'value="ada&lt;script&gt;"' in r.text  # escaped, not executed
    assert csrf_from(r.text)


# -- sessions end on the server ------------------------------------------------


def test_a_cookie_replayed_after_logout_is_refused(web: Web) -> None:
    """The cookie is signed, not stored: logging out must still end it on the
    server, or a copy taken before (a shared machine, a proxy log) lives on."""
    web.add_user("ada", Role.submitter)
    c = web.client()
    login(c, "ada")
    csrf = page_csrf(c)
    copied = c.cookies[SESSION_COOKIE]
    assert c.post("/logout", data={"csrf_token": csrf}).status_code == 303

    replay = web.client()
    replay.cookies.set(SESSION_COOKIE, copied)
    assert replay.get("/api/me").status_code == 401
    minted = replay.post(
        "/api/me/tokens", json={"name": "after logout"}, headers={"X-CSRF-Token": csrf}
    )
    assert minted.status_code == 401
    assert web.audit("token.create") == []


def test_logout_ends_every_page_session_of_the_user(web: Web) -> None:
    """The documented choice: one nonce per user, so signing out anywhere
    signs out everywhere (other users are untouched)."""
    web.add_user("ada")
    web.add_user("bob")
    laptop, tablet, bob = web.client(), web.client(), web.client()
    for client, name in ((laptop, "ada"), (tablet, "ada"), (bob, "bob")):
        assert login(client, name).status_code == 303
    assert laptop.post("/logout", data={"csrf_token": page_csrf(laptop)}).status_code == 303
    assert tablet.get("/api/me").status_code == 401
    assert bob.get("/api/me").status_code == 200
    assert login(tablet, "ada").status_code == 303
    assert tablet.get("/api/me").status_code == 200


def test_reactivation_does_not_revive_old_sessions(web: Web) -> None:
    web.add_user("root", Role.admin)
    uid = web.add_user("ada", Role.operator)
    ada, root = web.client(), web.client()
    login(ada, "ada")
    login(root, "root")
    for active in ("0", "1"):
        r = root.post(
            f"/admin/users/{uid}/active", data={"csrf_token": page_csrf(root), "active": active}
        )
        assert r.status_code == 303
    assert ada.get("/api/me").status_code == 401
    assert login(ada, "ada").status_code == 303


def _forge(secret_key: str, data: dict[str, object]) -> str:
    from itsdangerous import URLSafeSerializer

    return URLSafeSerializer(secret_key, salt="proctor.session").dumps(data)


def test_a_forged_session_for_a_password_less_account_is_refused(
    web_settings: Settings,
) -> None:
    """Dev signs sessions with the published key. A password-less account
    (token-only, e.g. a `--no-password` admin) gave no secret to the mark
    (HMAC(key, "")), so anyone could forge its session; now such an account
    never has a page session, whatever the cookie says."""
    import hashlib
    import hmac

    from proctor.web.app import create_app
    from proctor.web.auth.sessions import DEV_SECRET_KEY

    settings = web_settings.model_copy(update={"env": "dev", "secret_key": None})
    clock = FakeClock()
    web = Web(app=create_app(settings, clock=clock), clock=clock, settings=settings)
    try:
        assert web.app.state.web.secret_key == DEV_SECRET_KEY
        uid = web.add_user("svcadmin", Role.admin, password=None)
        now = clock().timestamp()
        csrf = "c" * 43
        empty_mark = hmac.new(DEV_SECRET_KEY.encode(), b"", hashlib.sha256).hexdigest()
        for mark in (empty_mark[:16], empty_mark[:32], None, ""):
            forged = web.client()
            forged.cookies.set(
                SESSION_COOKIE,
                _forge(
                    DEV_SECRET_KEY,
                    {"uid": uid, "iat": now, "seen": now, "pwm": mark, "csrf": csrf},
                ),
            )
            assert forged.get("/api/me").status_code == 401, mark
            r = forged.post(
                "/api/users",
                json={"username": "forged-admin", "roles": ["admin"]},
                headers={"X-CSRF-Token": csrf},
            )
            assert r.status_code == 401, mark
        with web.db() as s:
            from proctor.web.accounts import service

            assert service.get_user_by_username(s, "forged-admin") is None
    finally:
        for c in web.clients:
            c.close()
        web.app.state.web.engine.dispose()


def test_a_session_mark_needs_the_users_own_nonce(web: Web) -> None:
    """The mark binds the session to a per-user random nonce as well as the
    password hash: knowing the key and the hash is not enough."""
    import hashlib
    import hmac

    uid = web.add_user("ada")
    key = web.app.state.web.secret_key
    with web.db() as s:
        from proctor.core.db.models import User

        user = s.get(User, uid)
        assert user is not None and len(user.session_nonce) == 32
        password_hash = user.password_hash
        assert password_hash is not None
    now = web.clock().timestamp()
    old_style = hmac.new(key.encode(), password_hash.encode(), hashlib.sha256).hexdigest()[:16]
    c = web.client()
    c.cookies.set(
        SESSION_COOKIE, _forge(key, {"uid": uid, "iat": now, "seen": now, "pwm": old_style})
    )
    assert c.get("/api/me").status_code == 401


def test_a_bearer_header_skips_the_login_csrf_check_only_when_the_token_is_valid(
    web: Web,
) -> None:
    web.add_user("ada", Role.submitter)
    form = {"username": "ada", "password": PASSWORD}
    junk = web.client().post("/login", data=form, headers={"Authorization": "Bearer x"})
    assert junk.status_code == 401
    token = web.token("ada")
    scripted = web.client().post("/login", data=form, headers={"Authorization": f"Bearer {token}"})
    assert scripted.status_code == 303
