"""Bounds on the filtered leaderboards computed on request.

A filtered board (``/leaderboard/ID?station=…``) that is not one of the
documented levels stored with its snapshot is scored on request: 0.5–0.7 s
of CPU each on the demo campaign, with hundreds of distinct filters. Each
app keeps (``AppState.subsets``):

* its own small cache of them, apart from ``AppState.results`` (the parsed
  snapshots and the public's pages), so no number of filters can evict a
  public page;
* a few permits (``web.subset_analyses``, 1 by default): a request that finds
  them all taken is answered 503 with Retry-After at once, never queued, so
  analyses cannot pile up on the CPU behind the unfiltered board.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from fastapi import HTTPException, status

from proctor.web.snapshots.service import ResultCache

T = TypeVar("T")
RETRY_AFTER_S = 5


class SubsetWork:
    def __init__(self, *, permits: int = 1, capacity: int = 64) -> None:
        self.cache = ResultCache(capacity)
        self._permits = threading.BoundedSemaphore(permits)
        self._lock = threading.Lock()
        self.analyses = 0  # computed on request (tests and the busy answer read it)

    def run(self, analysis: Callable[[], T]) -> T:
        """``analysis()`` under a permit (the caller is on a worker thread,
        never the event loop); 503 when every permit is taken."""
        if not self._permits.acquire(blocking=False):
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE,
                "the server is computing other filtered leaderboards: try again in a moment",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        try:
            with self._lock:
                self.analyses += 1
            return analysis()
        finally:
            self._permits.release()
