"""``/api/stations``: an admin enrols a station, rotates and revokes its
token over the API; the token is shown once (no-store), only its hash is
stored, and nobody but an admin reaches any of it."""

from __future__ import annotations

import hashlib

import sqlalchemy as sa

from proctor.core import station_credentials
from proctor.core.db.models import StationToken
from proctor.core.domain import Role
from tests.web.conftest import Web, login, page_csrf


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_an_admin_enrols_rotates_and_revokes_a_station(web: Web) -> None:
    web.add_user("root", Role.admin)
    admin = bearer(web.token("root", ("admin",)))
    c = web.client()
    made = c.post("/api/stations", json={"name": "cell-a", "profile": "sim"}, headers=admin)
    assert made.status_code == 201, made.text
    assert made.headers["cache-control"] == "no-store"
    first = made.json()["token"]
    assert station_credentials.looks_like_token(first) and made.json()["station"] == "cell-a"
    again = c.post("/api/stations", json={"name": "cell-a", "profile": "sim"}, headers=admin)
    assert again.status_code == 409 and "already enrolled" in again.json()["detail"]
    bad = c.post("/api/stations", json={"name": "cell-b", "profile": "lab"}, headers=admin)
    assert bad.status_code == 422 and "profile" in bad.text

    rotated = c.post("/api/stations/cell-a/tokens", json={"window_hours": 2}, headers=admin)
    assert rotated.status_code == 201, rotated.text
    second = rotated.json()["token"]
    listed = c.get("/api/stations/cell-a/tokens", headers=admin)
    assert listed.status_code == 200
    assert [(t["prefix"], t["live"]) for t in listed.json()] == [
        (second[:12], True),
        (first[:12], True),
    ]
    assert listed.json()[1]["expires_at"] is not None
    assert first not in listed.text and second not in listed.text
    with web.db() as s:
        hashes = set(s.scalars(sa.select(StationToken.token_hash)))
    assert hashes == {hashlib.sha256(t.encode()).hexdigest() for t in (first, second)}

    gone = c.delete(f"/api/stations/cell-a/tokens?prefix={first[:12]}", headers=admin)
    assert gone.status_code == 200 and gone.json()["revoked"] == [first[:12]]
    assert c.delete("/api/stations/nobody/tokens", headers=admin).status_code == 404
    assert [(a[1], a[4]["station"]) for a in web.audit("station.enrol")] == [("root", "cell-a")]


def test_only_an_admin_with_a_recent_sign_in_mints_station_tokens(web: Web) -> None:
    web.add_user("root", Role.admin)
    web.add_user("op", Role.operator)
    c = web.client()
    operator = bearer(web.token("op", ("operator",)))
    for method, path in [
        ("POST", "/api/stations"),
        ("POST", "/api/stations/cell-a/tokens"),
        ("GET", "/api/stations/cell-a/tokens"),
        ("DELETE", "/api/stations/cell-a/tokens"),
    ]:
        r = c.request(method, path, json={"name": "cell-a"}, headers=operator)
        assert r.status_code == 403, (method, path)
    login(c, "root")
    web.clock.advance(minutes=web.settings.web.token_reauth_minutes, seconds=1)
    csrf = page_csrf(c)
    stale = c.post("/api/stations", json={"name": "cell-a"}, headers={"X-CSRF-Token": csrf})
    assert stale.status_code == 403 and "recent sign-in" in stale.json()["detail"]
    login(c, "root")
    fresh = c.post("/api/stations", json={"name": "cell-a"}, headers={"X-CSRF-Token": page_csrf(c)})
    assert fresh.status_code == 201, fresh.text
