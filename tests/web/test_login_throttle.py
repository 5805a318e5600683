"""The login throttle under concurrency, and the bound on password hashing.

Sign-ins run in parallel threads through the real app (one HTTP client per
thread) on each database backend. The password hasher is wrapped so that the
test can count verifications and see how many run at once; each one takes a
moment, as a real argon2id check does (~0.13 s), which is what lets
concurrent guesses overlap.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from proctor.core.domain import Role
from proctor.core.settings import Settings
from tests.web.conftest import FakeClock, Web, login, web_app

# how long one verification takes in these tests: about a real argon2id check
VERIFY_TIME_S = 0.15


class CountingHasher:
    """Wraps the app's argon2 hasher: counts verifications and the most
    that ran at once; ``gate`` (when set) holds each verification until it
    is opened."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.lock = threading.Lock()
        self.verified = 0
        self.active = 0
        self.most_active = 0
        self.gate: threading.Event | None = None

    def verify(self, password_hash: str, password: str) -> bool:
        with self.lock:
            self.verified += 1
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        try:
            if self.gate is not None:
                self.gate.wait(timeout=30)
            else:
                threading.Event().wait(VERIFY_TIME_S)
            return self.inner.verify(password_hash, password)
        finally:
            with self.lock:
                self.active -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def counting(web: Web) -> CountingHasher:
    passwords = web.app.state.web.passwords
    hasher = CountingHasher(passwords._hasher)
    passwords._hasher = hasher
    return hasher


def in_parallel(n: int, attempt: Callable[[int], int]) -> list[int]:
    """Run ``attempt(i)`` for i in 0..n-1 at once; their status codes."""
    start = threading.Barrier(n)

    def go(i: int) -> int:
        start.wait(timeout=30)
        return attempt(i)

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(go, range(n)))


def test_concurrent_guesses_from_one_address_are_checked_at_most_the_limit(web: Web) -> None:
    web.add_user("ada")
    hasher = counting(web)
    limit = web.app.state.web.throttle.per_user_client
    clients = [web.client(ip="10.7.0.1") for _ in range(40)]
    codes = in_parallel(40, lambda i: login(clients[i], "ada", f"guess {i}").status_code)
    assert hasher.verified == limit
    assert sorted(codes) == [401] * limit + [429] * (40 - limit)
    assert len(web.audit("login.attempt")) == limit
    assert len(web.audit("login.failure")) == limit
    assert len(web.audit("login.throttled")) == 40 - limit


def test_concurrent_guesses_from_many_addresses_stop_at_the_account_limit(web: Web) -> None:
    web.add_user("ada")
    hasher = counting(web)
    limit = web.app.state.web.throttle.per_user
    clients = [web.client(ip=f"10.8.0.{i}") for i in range(40)]
    codes = in_parallel(40, lambda i: login(clients[i], "ada", f"guess {i}").status_code)
    assert hasher.verified == limit
    assert sorted(codes) == [401] * limit + [429] * (40 - limit)


def test_concurrent_unknown_usernames_from_one_address_stop_at_the_client_limit(
    web: Web,
) -> None:
    hasher = counting(web)
    limit = web.app.state.web.throttle.per_client
    clients = [web.client(ip="10.9.0.1") for _ in range(40)]
    codes = in_parallel(40, lambda i: login(clients[i], f"nobody{i}", "guess").status_code)
    assert hasher.verified == limit  # unknown users cost a (dummy) verification too
    assert sorted(codes) == [401] * limit + [429] * (40 - limit)


@pytest.fixture
def bounded_web(web_settings: Settings) -> Iterator[Web]:
    """An app that computes at most 2 password hashes at once."""

    settings = web_settings.model_copy(
        update={
            "web": web_settings.web.model_copy(
                update={"max_concurrent_hashes": 2, "hash_wait_s": 30.0}
            )
        }
    )
    yield from web_app(settings)


def test_concurrent_hashing_never_exceeds_the_bound(bounded_web: Web) -> None:
    web = bounded_web
    for i in range(8):
        web.add_user(f"user{i}")
    hasher = counting(web)
    # different users and addresses: no throttle limit is near
    clients = [web.client(ip=f"10.10.0.{i}") for i in range(8)]
    codes = in_parallel(8, lambda i: login(clients[i], f"user{i}", "wrong guess").status_code)
    assert codes == [401] * 8  # everyone was answered; the excess waited its turn
    assert hasher.verified == 8
    assert hasher.most_active <= 2


def test_a_sign_in_that_waits_too_long_for_a_hash_slot_gets_503(web_settings: Settings) -> None:
    from proctor.web.app import create_app

    settings = web_settings.model_copy(
        update={
            "web": web_settings.web.model_copy(
                update={"max_concurrent_hashes": 1, "hash_wait_s": 0.2}
            )
        }
    )
    clock = FakeClock()
    web = Web(app=create_app(settings, clock=clock), clock=clock, settings=settings)
    try:
        web.add_user("ada")
        web.add_user("bob")
        hasher = counting(web)
        hasher.gate = threading.Event()
        first = web.client(ip="10.11.0.1")
        with ThreadPoolExecutor(max_workers=1) as pool:
            # ada's check holds the only slot until the gate opens
            held = pool.submit(lambda: login(first, "ada", "wrong guess").status_code)
            while hasher.active == 0:
                assert not held.done(), held.result()
                threading.Event().wait(0.01)
            busy = login(web.client(ip="10.11.0.2"), "bob", "wrong guess")
            hasher.gate.set()
            assert held.result() == 401
        assert busy.status_code == 503
        assert busy.headers["retry-after"] == "5"
        assert "busy" in busy.text
        assert hasher.verified == 1
        reasons = [d["reason"] for *_, d in web.audit("login.failure")]
        assert sorted(reasons) == ["server busy", "wrong password"]
    finally:
        for c in web.clients:
            c.close()
        web.app.state.web.engine.dispose()


def test_wrong_passwords_from_elsewhere_do_not_lock_the_user_out(web: Web) -> None:
    """Five wrong passwords from one address throttle that address for the
    account, not the account everywhere: the owner still signs in."""
    web.add_user("ada")
    limit = web.app.state.web.throttle.per_user_client
    attacker = web.client(ip="10.12.0.66")
    for _ in range(limit):
        assert login(attacker, "ada", "guess").status_code == 401
    blocked = login(attacker, "ada")
    assert blocked.status_code == 429
    assert "for this account from this address" in blocked.text
    assert [t[4]["limit"] for t in web.audit("login.throttled")] == ["account-client"]
    assert login(web.client(ip="10.12.0.7"), "ada").status_code == 303


def test_hashing_for_other_requests_is_bounded_too(web_settings: Settings) -> None:
    """Setting a password (here: an admin adding a user) takes a hashing slot
    as well; with none free for the whole wait it is a 503, nothing written."""
    from proctor.web.app import create_app

    settings = web_settings.model_copy(
        update={
            "web": web_settings.web.model_copy(
                update={"max_concurrent_hashes": 1, "hash_wait_s": 0.2}
            )
        }
    )
    clock = FakeClock()
    web = Web(app=create_app(settings, clock=clock), clock=clock, settings=settings)
    try:
        web.add_user("root", Role.admin)
        token = web.token("root", ("admin",))
        slots = web.app.state.web.passwords._slots
        body = {"username": "newbie", "password": "a long enough passphrase"}
        auth = {"Authorization": f"Bearer {token}"}
        assert slots.acquire(timeout=5)  # every slot taken (a flood of sign-ins)
        try:
            r = web.client().post("/api/users", json=body, headers=auth)
        finally:
            slots.release()
        assert r.status_code == 503 and r.headers["retry-after"] == "5"
        assert "busy" in r.json()["detail"]
        assert web.audit("user.create")[1:] == []
        assert web.client().post("/api/users", json=body, headers=auth).status_code == 201
    finally:
        for c in web.clients:
            c.close()
        web.app.state.web.engine.dispose()
