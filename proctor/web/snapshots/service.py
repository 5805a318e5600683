"""Reading snapshots, fast.

Computing them (deciding a board is stale, scoring it, storing the row) is
``proctor.analysis.store.recompute``; the web schedules it (``worker``) and reads.

A page never runs the analysis: it reads the latest stored snapshot of a
(campaign, label stream). Reads cost one indexed query for the latest id;
the parsed result is cached by snapshot id in the app's ``ResultCache``
(``AppState.results``: one per app, so one per database; rows are never
updated, so a cached result is never stale).

The analysis protocol of a campaign is τ from the campaign and the defaults
of ``proctor.analysis.results.AnalysisProtocol``, overridden by the campaign's
``protocol_extra["analysis"]`` (keys: ``bootstrap``, ``ks_resamples``,
``seed``, ``alpha``, ``success_at``, ``power_target``, ``power_sims``,
``rho``, ``sweep_points``) — so a demo can ask for fewer replicates and
say so in every result it publishes.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

# re-exported: the web's readers name the streams and the latest row from here
from proctor.analysis.store import STREAMS as STREAMS
from proctor.analysis.store import latest_row as latest_row
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import AnalysisSnapshot
from proctor.core.domain import LabelStream
from proctor.core.errors import UsageError

log = logging.getLogger(__name__)

DEFAULT_STREAM = LabelStream.auto_and_reviewed


# ------------------------------------------------------------------- reading


@dataclass(frozen=True)
class SnapshotMeta:
    id: int
    campaign_id: int | None
    label_stream: LabelStream
    code_version: str
    data_version: str
    created_at: datetime


_META_COLUMNS = (
    AnalysisSnapshot.id,
    AnalysisSnapshot.campaign_id,
    AnalysisSnapshot.label_stream,
    AnalysisSnapshot.code_version,
    AnalysisSnapshot.data_version,
    AnalysisSnapshot.created_at,
)


def latest_meta(
    session: ProctorSession, *, campaign_id: int, stream: LabelStream
) -> SnapshotMeta | None:
    """The latest snapshot's identity and versions (not its result)."""
    row = session.execute(
        sa.select(*_META_COLUMNS)
        .where(
            AnalysisSnapshot.campaign_id == campaign_id,
            AnalysisSnapshot.label_stream == LabelStream(stream),
        )
        .order_by(AnalysisSnapshot.id.desc())
        .limit(1)
    ).first()
    return None if row is None else SnapshotMeta(*row)


def list_meta(session: ProctorSession, *, campaign_id: int | None = None) -> list[SnapshotMeta]:
    q = sa.select(*_META_COLUMNS).order_by(AnalysisSnapshot.id.desc())
    if campaign_id is not None:
        q = q.where(AnalysisSnapshot.campaign_id == campaign_id)
    return [SnapshotMeta(*r) for r in session.execute(q.limit(500))]


def streams_available(session: ProctorSession, *, campaign_id: int) -> list[LabelStream]:
    present = set(
        session.scalars(
            sa.select(AnalysisSnapshot.label_stream)
            .where(AnalysisSnapshot.campaign_id == campaign_id)
            .distinct()
        )
    )
    return [s for s in STREAMS if s in present]


class ResultCache:
    """Parsed snapshot results (and views and pages derived from them) by
    key, least recently used first out. Each app owns one
    (``AppState.results``): keys need not name the database."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> Any:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return value


def read_result(session: ProctorSession, snapshot_id: int) -> dict[str, Any]:
    """A snapshot's result JSON, read now (no cache: for one-off readers such
    as the demo's closing summary)."""
    result = session.scalar(
        sa.select(AnalysisSnapshot.result).where(AnalysisSnapshot.id == snapshot_id)
    )
    if result is None:
        raise UsageError(f"snapshot {snapshot_id}: no such snapshot")
    return json_safe(result)


def snapshot_result(
    session: ProctorSession, snapshot_id: int, *, results: ResultCache
) -> dict[str, Any]:
    """A snapshot's result JSON, through the app's ``results`` cache
    (snapshot rows never change). The cache belongs to one app and so to one
    database: a snapshot id alone names the row."""
    key = ("result", snapshot_id)
    cached = results.get(key)
    if cached is not None:
        return cached
    return results.put(key, read_result(session, snapshot_id))


def json_safe(value: Any) -> Any:
    """Non-finite floats (NaN, ±inf) as ``null``, the result schema's mark of
    a number that does not exist: strict JSON has no NaN, and browsers'
    ``JSON.parse`` rejects it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value
