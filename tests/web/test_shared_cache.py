"""The shared cache in front of the app (proctor.web.shared_cache): public result
pages come from memory, byte for byte what the app answered; anything
private, partial or changed goes to the app."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from proctor.core.db.models import Campaign
from proctor.core.domain import CampaignStatus, Role
from proctor.web.shared_cache import SharedCacheMiddleware
from tests.web.cache_support import cache_of
from tests.web.conftest import Web, login
from tests.web.leaderboard_data import SeededCampaign, seed_campaign


@pytest.fixture
def released(web: Web) -> SeededCampaign:
    with web.db() as s:
        return seed_campaign(s, released=True, episodes_per_cell=3, seed=5)


def test_a_public_page_is_served_from_memory_as_the_app_answered_it(
    web: Web, released: SeededCampaign
) -> None:
    cache = cache_of(web)
    url = f"/leaderboard/{released.campaign_id}"
    first = web.client().get(url)
    assert first.status_code == 200 and "public" in first.headers["cache-control"]
    hits = cache.hits
    second = web.client().get(url)
    assert cache.hits == hits + 1
    assert second.content == first.content
    assert dict(second.headers) == dict(first.headers)  # security headers, ETag, Vary
    # the client already holds it: 304 from memory
    again = web.client().get(url, headers={"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304 and cache.hits == hits + 2
    assert again.content == b""
    # a different query is a different page
    other = web.client().get(url + "?stream=auto_and_reviewed")
    assert other.status_code == 200 and cache.hits == hits + 2


def test_signed_in_visitors_and_their_pages_never_go_through_it(
    web: Web, released: SeededCampaign
) -> None:
    cache = cache_of(web)
    url = f"/leaderboard/{released.campaign_id}"
    web.add_user("ada", Role.admin)
    admin = web.client()
    login(admin, "ada")
    hits = cache.hits
    mine = admin.get(url)
    assert mine.status_code == 200 and "private" in mine.headers["cache-control"]
    public = web.client().get(url)
    assert "public" in public.headers["cache-control"]  # the admin's page was not kept
    admin.get(url)
    assert cache.hits == hits  # a signed-in request is never answered from memory
    token = web.token("ada")
    web.client().get(
        f"/api/leaderboard/{released.campaign_id}", headers={"Authorization": f"Bearer {token}"}
    )
    assert cache.hits == hits


def test_a_write_in_this_process_clears_it_at_once(web: Web, released: SeededCampaign) -> None:
    cache = cache_of(web)
    url = f"/api/leaderboard/{released.campaign_id}"
    web.client().get(url)
    hits = cache.hits
    web.client().get(url)
    assert cache.hits == hits + 1
    with web.db() as s:  # any committed write: the next request goes to the app
        s.execute(
            sa.update(Campaign)
            .where(Campaign.id == released.campaign_id)
            .values(description="re-described")
        )
    web.client().get(url)
    assert cache.hits == hits + 1
    web.client().get(url)
    assert cache.hits == hits + 2
    with web.db() as s:  # a textual statement counts as a write too
        s.execute(
            sa.text("UPDATE campaigns SET description = 'again' WHERE id = :i"),
            {"i": released.campaign_id},
        )
    web.client().get(url)
    assert cache.hits == hits + 2
    web.client().get(url)
    hits += 1
    assert cache.hits == hits + 2
    # a read-only transaction does not clear it
    with web.db() as s:
        s.scalar(sa.select(Campaign.id))
    web.client().get(url)
    assert cache.hits == hits + 3


def test_entries_expire_and_blinded_or_failed_answers_are_not_kept(web: Web) -> None:
    with web.db() as s:
        blinded = seed_campaign(s, released=False, episodes_per_cell=3, seed=6)
    cache = cache_of(web)
    now = [1000.0]  # a stepped clock: a loaded machine cannot make two GETs "expire"
    cache.clock = lambda: now[0]
    cache.seconds = 0.2
    hits = cache.hits
    for url in (f"/leaderboard/{blinded.campaign_id}", "/leaderboard/999999", "/no/such/page"):
        web.client().get(url)
        web.client().get(url)
    assert cache.hits == hits
    with web.db() as s:
        s.execute(
            sa.update(Campaign)
            .where(Campaign.id == blinded.campaign_id)
            .values(status=CampaignStatus.released)
        )
    url = f"/api/leaderboard/{blinded.campaign_id}"
    web.client().get(url)
    web.client().get(url)
    assert cache.hits == hits + 1
    now[0] += 0.25
    web.client().get(url)
    assert cache.hits == hits + 1


def test_it_keeps_within_its_memory_bounds(
    web: Web, released: SeededCampaign, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proctor.web import shared_cache

    cache = cache_of(web)
    page = len(web.client().get(f"/api/leaderboard/{released.campaign_id}").content)
    monkeypatch.setattr(shared_cache, "MAX_TOTAL_BYTES", 2 * page + page // 2)
    urls = [
        f"/api/leaderboard/{released.campaign_id}?stream=auto_and_reviewed&n={i}" for i in range(4)
    ]
    for url in urls:
        web.client().get(url)
    assert len(cache._entries) == 2 and cache._bytes <= shared_cache.MAX_TOTAL_BYTES
    hits = cache.hits
    web.client().get(urls[-1])  # the newest stayed…
    assert cache.hits == hits + 1
    web.client().get(urls[0])  # …the oldest went first
    assert cache.hits == hits + 1


def test_concurrent_misses_of_a_kept_page_reach_the_app_once() -> None:
    """When a kept page expires or a write makes it old, the visitors who ask
    for it meanwhile wait for one request to fetch it (before: each went to
    the app, 50 renders at once at every expiry under load)."""
    import asyncio

    from proctor.web.shared_cache import GenerationWatcher

    class Watcher(GenerationWatcher):
        def __init__(self) -> None:
            self.value = (0, 0)

        async def current(self) -> tuple[int, int]:  # type: ignore[override]
            return self.value

    calls = 0
    gate = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal calls
        calls += 1
        await gate.wait()
        body = f"page {calls}".encode()
        headers = [
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"public, max-age=30"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    watcher = Watcher()
    cache = SharedCacheMiddleware(app, seconds=30, watcher=watcher)

    async def get() -> tuple[int, bytes]:
        scope = {"type": "http", "method": "GET", "path": "/p", "query_string": b"", "headers": []}
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        await cache(scope, None, send)  # type: ignore[arg-type]
        return sent[0]["status"], sent[1]["body"]

    async def scenario() -> list[tuple[int, bytes]]:
        gate.set()
        assert await get() == (200, b"page 1")  # kept
        gate.clear()
        watcher.value = (1, 0)  # a write elsewhere: the kept page is old
        waiting = [asyncio.create_task(get()) for _ in range(20)]
        for _ in range(5):
            await asyncio.sleep(0)
        gate.set()
        return await asyncio.gather(*waiting)

    answers = asyncio.run(scenario())
    assert calls == 2
    assert answers == [(200, b"page 2")] * 20
