"""The shared cache middleware as the tests reach it, for tests that need it
outside the cache's own tests."""

from __future__ import annotations

from proctor.web.shared_cache import SharedCacheMiddleware
from tests.web.conftest import Web


def cache_of(web: Web) -> SharedCacheMiddleware:
    web.client().get("/api/health")  # Starlette builds its middleware stack on the first call
    layer = web.app.middleware_stack
    while not isinstance(layer, SharedCacheMiddleware):
        layer = layer.app
    return layer
