"""The app skeleton: factory, errors, documentation, static assets, health,
the transaction per request, and the structural rule that every write is
authenticated."""

from __future__ import annotations

import logging
import math
import re
import secrets
import warnings
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi import FastAPI, HTTPException

from proctor.core.db import migrate
from proctor.core.db.engine import session_scope
from proctor.core.db.models import AuditLog
from proctor.core.db.types import utcnow
from proctor.core.domain import Role
from proctor.core.errors import ConfigError
from proctor.core.settings import load_settings
from proctor.web.accounts import service
from proctor.web.app import api_routes
from proctor.web.deps import NowDep, SessionDep
from proctor.web.templating import compile_all
from tests.web.conftest import PASSWORD, Web, login

WEB_DIR = Path(__file__).resolve().parents[2] / "proctor" / "web"
# a key prod accepts (random; the same for every run of the suite)
PROD_KEY = "Zq8vR2mW5kT0yH3nB7cX1fJ4sL9pD6gA-e_uQiOwEr"


def test_importing_the_app_module_builds_nothing() -> None:
    import proctor.web.app

    assert not [v for v in vars(proctor.web.app).values() if isinstance(v, FastAPI)]


def test_health_reports_database_and_schema(web: Web) -> None:
    r = web.client().get("/api/health")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok" and body["database"] == "ok"
    assert body["schema_revision"] == body["schema_head"] is not None


def test_health_says_when_the_schema_is_behind(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from proctor.web.app import create_app

    settings = load_settings(env="test", data_dir=tmp_path)  # an empty SQLite file
    r = TestClient(create_app(settings)).get("/api/health")
    assert r.status_code == 200
    assert r.json()["status"] == "degraded"
    assert r.json()["schema_revision"] is None
    assert "proctor db upgrade" in r.json()["detail"]


def test_api_errors_are_json_and_pages_are_html(web: Web) -> None:
    c = web.client()
    api = c.get("/api/no-such-thing")
    assert api.status_code == 404
    assert api.headers["content-type"].startswith("application/json")
    assert api.json() == {"detail": "Not Found"}
    page = c.get("/no-such-page")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html")
    assert "Not found" in page.text and "<nav" in page.text


def test_validation_errors_name_the_field(web: Web) -> None:
    web.add_user("root", Role.admin)
    token = web.token("root", ("admin",))
    r = web.client().post(
        "/api/users",
        json={"username": "No Spaces Allowed!", "roles": ["admin"]},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "username"]
    assert "pattern" in error["msg"]


def test_a_page_showing_bad_form_input_names_the_field(web: Web) -> None:
    web.add_user("root", Role.admin)
    c = web.client()
    login(c, "root")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', c.get("/account").text)
    assert csrf
    bad = c.post("/admin/users/0/roles", data={"csrf_token": csrf.group(1), "roles": "admin"})
    assert bad.status_code == 422
    assert "user_id" in bad.text and "greater than or equal to 1" in bad.text


def test_unexpected_errors_are_500_without_details(web: Web) -> None:
    from fastapi.testclient import TestClient

    def explode() -> None:
        raise RuntimeError("secret internals")

    web.app.add_api_route("/api/explode", explode)
    web.app.add_api_route("/explode", explode)
    c = TestClient(web.app, raise_server_exceptions=False)
    api = c.get("/api/explode")
    assert api.status_code == 500 and api.json() == {"detail": "internal server error"}
    page = c.get("/explode")
    assert page.status_code == 500 and "unexpected error" in page.text
    assert "secret internals" not in page.text + api.text


def test_the_request_owns_the_transaction(web: Web) -> None:
    """Committed when the route returns, rolled back when it raises."""

    def write(session: SessionDep, now: NowDep, fail: bool = False) -> dict[str, str]:
        session.add(AuditLog(at=now, action="test.write", actor_label="fail" if fail else "ok"))
        session.flush()
        if fail:
            raise HTTPException(409, "refused after writing")
        return {"written": "yes"}

    web.app.add_api_route("/api/test-write", write, methods=["GET"])
    c = web.client()
    assert c.get("/api/test-write").status_code == 200
    assert c.get("/api/test-write", params={"fail": "true"}).status_code == 409
    with web.db() as s:
        labels = s.scalars(sa.select(AuditLog.actor_label).where(AuditLog.action == "test.write"))
        assert list(labels) == ["ok"]


def test_openapi_documents_the_api_and_not_the_pages(web: Web) -> None:
    spec = web.client().get("/api/openapi.json").json()
    paths = set(spec["paths"])
    assert {"/api/health", "/api/me", "/api/me/tokens", "/api/users", "/api/audit"} <= paths
    assert all(p.startswith("/api/") for p in paths)
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


def test_openapi_operation_ids_are_unique(web: Web) -> None:
    """FastAPI warns (and Swagger UI / client generators misbehave) when two
    operations share an id, e.g. one function serving GET and HEAD."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the "Duplicate Operation ID" warning fails the test
        spec = web.app.openapi()
    ids = [
        op["operationId"]
        for methods in spec["paths"].values()
        for method, op in methods.items()
        if method in {"get", "head", "post", "put", "patch", "delete", "options"}
    ]
    assert len(ids) > 30
    assert sorted(i for i in set(ids) if ids.count(i) > 1) == []
    both = spec["paths"]["/api/artifacts/{sha256}"]
    assert set(both) == {"get", "head"}
    assert both["get"]["operationId"] != both["head"]["operationId"]
    r = web.client().head("/api/artifacts/" + "0" * 64)
    assert r.status_code == 404 and r.content == b""


def test_docs_page_uses_only_local_assets(web: Web) -> None:
    c = web.client()
    r = c.get("/api/docs")
    assert r.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', r.text)
    assert sources and all(s.startswith(("/", "#")) for s in sources), sources
    assert "/static/vendor/swagger-ui/swagger-ui-bundle.js" in r.text
    for path in ("vendor/swagger-ui/swagger-ui-bundle.js", "vendor/swagger-ui/swagger-ui.css"):
        asset = c.get(f"/static/{path}")
        assert asset.status_code == 200 and len(asset.content) > 100_000
    assert (WEB_DIR / "static/vendor/swagger-ui/LICENSE").is_file()


def test_no_template_or_script_loads_anything_from_another_host() -> None:
    offenders = []
    for path in [
        *WEB_DIR.rglob("*.html"),
        *WEB_DIR.glob("static/js/*.js"),
        *WEB_DIR.glob("static/css/*.css"),
    ]:
        for url in re.findall(r'(?:src|href)\s*=\s*"(https?:)?//', path.read_text()):
            offenders.append(f"{path}: {url}")
        if re.search(r"""(src|href)\s*=\s*["']https?://""", path.read_text()):
            offenders.append(str(path))
    assert offenders == []


def test_security_headers_and_static_files(web: Web) -> None:
    c = web.client()
    r = c.get("/")
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert r.headers["x-content-type-options"] == "nosniff"
    css = re.search(r'href="(/static/css/proctor\.css\?v=\w+)"', r.text)
    assert css, "the layout links its stylesheet with a version"
    assert c.get(css.group(1)).status_code == 200


def test_pages_have_no_inline_scripts() -> None:
    """The CSP forbids inline scripts: a template with one would break."""
    for path in WEB_DIR.rglob("*.html"):
        for tag in re.findall(r"<script[^>]*>", path.read_text()):
            # data blocks (type="application/json") are not executed: allowed
            data_block = re.search(r'type="application/(ld\+)?json"', tag)
            assert "src=" in tag or data_block, f"{path}: inline script {tag}"
        assert not re.search(r"\son[a-z]+=", path.read_text()), f"{path}: inline event handler"


def test_prod_refuses_missing_default_or_short_secret_keys(tmp_path: Path) -> None:
    from proctor.web.app import create_app
    from proctor.web.auth.sessions import DEV_SECRET_KEY

    with pytest.raises(ConfigError, match="PROCTOR_SECRET_KEY"):
        load_settings(env="prod", data_dir=tmp_path)
    for key, match in [
        (DEV_SECRET_KEY, "published development key"),
        ("short", "at least 32"),
        # long enough, but guessable: the length alone is not a key
        (" " * 32, "PROCTOR_SECRET_KEY looks guessable"),
        ("a" * 32, "PROCTOR_SECRET_KEY looks guessable"),
        ("ab" * 40, "PROCTOR_SECRET_KEY looks guessable"),
        ("abcdefg" * 6, "PROCTOR_SECRET_KEY looks guessable"),
        # a repeated word: worth one copy of it, however many characters it has
        ("Passw0rd!" * 4, "PROCTOR_SECRET_KEY looks guessable"),
        ("Tr0ub4dor&3" * 3 + "Tr0", "PROCTOR_SECRET_KEY looks guessable"),
        ("Passw0rd!" * 4 + "X", "PROCTOR_SECRET_KEY looks guessable"),
        # a 13-character unit of 13 distinct characters: 13 × log2(13) ≈ 48 bits
        ("0123456789abc" * 3, "PROCTOR_SECRET_KEY looks guessable"),
    ]:
        settings = load_settings(env="prod", data_dir=tmp_path, secret_key=key)
        with pytest.raises(ConfigError, match=match):
            create_app(settings)
    for good in (secrets.token_urlsafe(48), secrets.token_hex(16), PROD_KEY):
        ok = load_settings(env="prod", data_dir=tmp_path, secret_key=good)
        assert isinstance(create_app(ok), FastAPI)


def test_a_keys_estimate_reads_repeats_as_copies() -> None:
    from proctor.web.auth.sessions import estimated_key_bits, literals_and_copies

    assert literals_and_copies("Passw0rd!" * 4) == ("Passw0rd!", 1)
    assert literals_and_copies("Passw0rd!" * 4 + "X") == ("Passw0rd!X", 1)
    assert literals_and_copies("ab" * 40) == ("ab", 1)  # a copy may overlap itself
    assert literals_and_copies("abcXabc") == ("abcX", 1)
    assert literals_and_copies("abXab") == ("abXab", 0)  # two characters are no copy
    # a repeated word is worth about one copy of it, however many times it repeats
    assert estimated_key_bits("Passw0rd!" * 8) < estimated_key_bits("Passw0rd!") + 15
    # digits only: at most log2(10) bits a character, whatever the frequencies say
    digits = "".join(secrets.choice("0123456789") for _ in range(40))
    assert estimated_key_bits(digits) <= 40 * math.log2(10) + 2 * 2 * math.log2(40)


def test_dev_default_secret_is_logged_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from proctor.web.app import create_app

    with caplog.at_level(logging.WARNING, logger="proctor.web.auth.sessions"):
        create_app(load_settings(env="dev", data_dir=tmp_path))
    assert any("PROCTOR_SECRET_KEY is not set" in r.getMessage() for r in caplog.records)


def test_prod_sets_secure_cookies(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from proctor.web.app import create_app

    settings = load_settings(env="prod", data_dir=tmp_path, secret_key=PROD_KEY)
    r = TestClient(create_app(settings), base_url="https://testserver").get("/login")
    cookie = r.headers["set-cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    # __Host-: the browser keeps it only with Secure, Path=/ and no Domain
    assert cookie.startswith("__Host-proctor_session=") and "; Path=/" in cookie
    assert "domain=" not in cookie.lower()
    assert r.headers["strict-transport-security"] == "max-age=31536000"


def test_prod_sessions_work_under_the_host_prefix(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from proctor.web.app import create_app

    settings = load_settings(env="prod", data_dir=tmp_path, secret_key=PROD_KEY)
    migrate.upgrade(settings.db_url)
    app = create_app(settings)
    with session_scope(app.state.web.session_factory) as s:
        service.create_user(
            session=s,
            passwords=app.state.web.passwords,
            username="ada",
            password=PASSWORD,
            actor=service.Actor(label="test"),
            now=utcnow(),
        )
    c = TestClient(app, base_url="https://testserver", follow_redirects=False)
    assert login(c, "ada").status_code == 303
    assert set(c.cookies.keys()) == {"__Host-proctor_session"}
    assert c.get("/api/me").json()["username"] == "ada"
    # the unprefixed name is not read in prod: it could be planted over plain HTTP
    plain = TestClient(app, base_url="https://testserver")
    plain.cookies.set("proctor_session", c.cookies["__Host-proctor_session"])
    assert plain.get("/api/me").status_code == 401


def test_dev_sends_no_hsts(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from proctor.web.app import create_app

    r = TestClient(create_app(load_settings(env="dev", data_dir=tmp_path))).get("/login")
    assert "strict-transport-security" not in r.headers
    assert r.headers["set-cookie"].startswith("proctor_session=")


UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


STATION_API = "/api/station/v1"


def _dependency_calls(route: Any) -> set[str]:
    names: set[str] = set()
    stack = [route.dependant]
    while stack:
        dep = stack.pop()
        if dep.call is not None:
            names.add(getattr(dep.call, "__name__", ""))
        stack.extend(dep.dependencies)
    return names


def test_every_write_is_authenticated_or_csrf_checked(web: Web) -> None:
    """Structural: a route that changes anything resolves the caller (and so
    checks roles and, for cookies, CSRF) or at least checks CSRF (sign-in).
    Applies to every router added to the app, not only this one's."""
    routes = api_routes(web.app)
    assert len(routes) > 20
    unguarded = []
    station_routes = []
    for route in routes:
        if route.methods & UNSAFE:
            calls = _dependency_calls(route)
            # the station API takes a station's bearer token, never a cookie: its
            # routes resolve the calling station, and a browser cannot forge one
            if route.path.startswith(STATION_API) and "calling_station" in calls:
                station_routes.append(route.path)
            elif not calls & {"resolve_principal", "require_csrf"}:
                unguarded.append(f"{sorted(route.methods)} {route.path}")
    assert unguarded == []
    assert f"{STATION_API}/claims" in station_routes
    # and the only writes that need no sign-in are signing in and out (and a station's)
    anonymous = [
        route.path
        for route in routes
        if route.methods & UNSAFE
        and "resolve_principal" not in _dependency_calls(route)
        and route.path not in station_routes
    ]
    assert sorted(anonymous) == ["/login"]


def test_every_page_template_compiles_before_serving(web: Web) -> None:
    """`proctor serve` compiles the templates before it listens: each domain's
    pages are found through the loaders, and each one compiles."""
    names = compile_all(web.app.state.web.templates)
    for expected in ("base.html", "explorer/episode.html", "leaderboard/board.html"):
        assert expected in names
    env = web.app.state.web.templates.env
    assert all(env.cache is not None and any(k[1] == n for k in env.cache) for n in names)


def test_a_data_folder_with_its_own_key_signs_with_it_not_the_published_one(
    tmp_path: Path,
) -> None:
    """`proctor demo` made a key in its data folder; `proctor serve` on that folder
    (no PROCTOR_SECRET_KEY) must sign with it, as the README says."""
    from proctor.web.auth.sessions import (
        DEV_SECRET_KEY,
        data_dir_secret_key,
        resolve_secret_key,
    )

    bare = load_settings(env="dev", data_dir=tmp_path / "bare")
    assert resolve_secret_key(bare) == DEV_SECRET_KEY  # no key of its own: the loud fallback
    assert not (tmp_path / "bare").exists()  # and none is made for it
    own = data_dir_secret_key(tmp_path / "demo")
    served = load_settings(env="dev", data_dir=tmp_path / "demo")
    assert resolve_secret_key(served) == own != DEV_SECRET_KEY
    # a key set in the environment still wins
    chosen = secrets.token_urlsafe(48)
    assert (
        resolve_secret_key(load_settings(env="dev", data_dir=tmp_path / "demo", secret_key=chosen))
        == chosen
    )
