"""Computing snapshots, and reading them fast.

A page never runs the analysis: it reads the latest stored snapshot of a
(campaign, label stream). Reads cost one indexed query for the latest id;
the parsed result is cached in-process by snapshot id (rows are never
updated, so a cached result is never stale).

The analysis protocol of a campaign is τ from the campaign and the defaults
of ``analysis.results.Protocol``, overridden by the campaign's
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

from analysis.report import data_version
from analysis.results import Protocol
from analysis.store import build_snapshot, campaign_protocol, code_version, load_episodes
from proctor.db.engine import ProctorSession
from proctor.db.models import AnalysisSnapshot, Campaign
from proctor.domain import LabelStream
from proctor.errors import ProctorError, UsageError

log = logging.getLogger(__name__)

STREAMS: tuple[LabelStream, ...] = tuple(LabelStream)
DEFAULT_STREAM = LabelStream.auto_and_reviewed
# the protocol fields a result records (analysis.report.to_json) and that must
# match for an old snapshot to stand for a new computation
_COMPARED = ("tau", "bootstrap", "ks_resamples", "seed", "alpha", "success_at", "power_target")


def _protocol_json(p: Protocol) -> dict[str, Any]:
    return {
        "tau": p.tau,
        "bootstrap": p.bootstrap,
        "ks_resamples": p.resamples,
        "seed": p.seed,
        "alpha": p.alpha,
        "success_at": list(p.success_at),
        "power_target": p.power_target,
    }


@dataclass(frozen=True)
class StreamOutcome:
    """What recomputing one label stream did."""

    stream: LabelStream
    status: str  # "created" | "unchanged" | "failed"
    snapshot_id: int | None
    data_version: str | None
    message: str = ""


def recompute(
    session: ProctorSession,
    *,
    campaign_id: int,
    streams: tuple[LabelStream, ...] = STREAMS,
    protocol: Protocol | None = None,
    created_by_id: int | None = None,
    force: bool = False,
) -> list[StreamOutcome]:
    """Score a campaign under each stream and store a snapshot for each whose
    input (data version), code version or protocol differs from its latest
    snapshot (``force``: always). A stream that cannot be scored (no
    episodes yet, a contradictory reference) is reported, not raised. Adds
    rows to the caller's transaction; never commits."""
    campaign = session.get(Campaign, campaign_id)
    if campaign is None:
        raise UsageError(f"campaign_id: no campaign {campaign_id}")
    protocol = protocol or campaign_protocol(campaign)
    wanted = _protocol_json(protocol)
    cv = code_version()
    out: list[StreamOutcome] = []
    for stream in streams:
        stream = LabelStream(stream)
        table = load_episodes(session, campaign_id=campaign_id, stream=stream)
        dv = data_version(table)
        latest = latest_row(session, campaign_id=campaign_id, stream=stream)
        if (
            not force
            and latest is not None
            and latest.data_version == dv
            and latest.code_version == cv
            and all(latest.protocol.get(k) == wanted[k] for k in _COMPARED)
        ):
            out.append(StreamOutcome(stream, "unchanged", latest.id, dv))
            continue
        try:
            # scores first, adds the row only once scored: a failure adds nothing
            snap = build_snapshot(
                session,
                campaign_id=campaign_id,
                stream=stream,
                protocol=protocol,
                created_by_id=created_by_id,
            )
        except ProctorError as exc:
            out.append(StreamOutcome(stream, "failed", None, dv, str(exc)))
            continue
        out.append(StreamOutcome(stream, "created", snap.id, snap.data_version))
    return out


def stale_campaigns(session: ProctorSession) -> list[int]:
    """Campaigns whose latest snapshot of some stream no longer matches the
    data it was scored from (its data version), e.g. a review committed just
    before a crash, whose queued recomputation was lost with the process.
    Compares data only: a new code version alone does not make a board stale
    here (it is recomputed with the next change, as before)."""
    latest = (
        sa.select(sa.func.max(AnalysisSnapshot.id))
        .where(AnalysisSnapshot.campaign_id.is_not(None))
        .group_by(AnalysisSnapshot.campaign_id, AnalysisSnapshot.label_stream)
    )
    rows = session.execute(
        sa.select(
            AnalysisSnapshot.campaign_id,
            AnalysisSnapshot.label_stream,
            AnalysisSnapshot.data_version,
        )
        .where(AnalysisSnapshot.id.in_(latest))
        .order_by(AnalysisSnapshot.campaign_id)
    )
    stale: list[int] = []
    for campaign_id, stream, stored in rows:
        if campaign_id in stale:
            continue
        table = load_episodes(session, campaign_id=campaign_id, stream=LabelStream(stream))
        if data_version(table) != stored:
            stale.append(campaign_id)
    return stale


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


def latest_row(
    session: ProctorSession, *, campaign_id: int, stream: LabelStream
) -> AnalysisSnapshot | None:
    return session.scalar(
        sa.select(AnalysisSnapshot)
        .where(
            AnalysisSnapshot.campaign_id == campaign_id,
            AnalysisSnapshot.label_stream == LabelStream(stream),
        )
        .order_by(AnalysisSnapshot.id.desc())
        .limit(1)
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
    """Parsed snapshot results (and views derived from them) by key."""

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


RESULTS = ResultCache()


def db_key(session: ProctorSession) -> str:
    """Which database a session reads: part of every cache key (one process
    may serve several databases, e.g. in tests and benchmarks)."""
    bind: Any = session.get_bind()
    engine = getattr(bind, "engine", bind)
    return engine.url.render_as_string(hide_password=True)


def snapshot_result(session: ProctorSession, snapshot_id: int) -> dict[str, Any]:
    """A snapshot's result JSON (cached: snapshot rows never change)."""
    key = ("result", db_key(session), snapshot_id)
    cached = RESULTS.get(key)
    if cached is not None:
        return cached
    result = session.scalar(
        sa.select(AnalysisSnapshot.result).where(AnalysisSnapshot.id == snapshot_id)
    )
    if result is None:
        raise UsageError(f"snapshot {snapshot_id}: no such snapshot")
    return RESULTS.put(key, json_safe(result))


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
