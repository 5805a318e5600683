"""An episode as the station's ledger holds it, in the wire's terms.

``content`` reads the ledger's Episode row and its events (an event's
``seq`` is its position among the episode's events, by id: the order the
station wrote them); ``digest`` hashes that content together with the
artifacts the server has registered for it, so the revision grows both when
the episode changes and once its last artifact is in: the server then gets
the final snapshot after the artifacts it refers to. The revision itself is
kept by the outbox (``Outbox.stamp``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Episode, EpisodeEvent, ObjectType
from proctor.core.episode_record import OPERATOR_LABEL_KEY
from proctor.core.station_api_wire import EpisodeWire, EventWire


def _events(session: ProctorSession, episode: Episode) -> list[EventWire]:
    rows = session.scalars(
        sa.select(EpisodeEvent)
        .where(EpisodeEvent.episode_id == episode.id)
        .order_by(EpisodeEvent.id)
    )
    return [
        EventWire(
            seq=seq,
            t_s=e.t_s,
            at=e.at,
            kind=e.kind,
            message=e.message[:4000],
            details=dict(e.details or {}),
        )
        for seq, e in enumerate(rows)
    ]


def _operator_label(events: list[EventWire]) -> str | None:
    """Who logged it, as the log event names them. Never a user id: the
    station host's accounts are not the server's users."""
    for e in reversed(events):
        label = e.details.get(OPERATOR_LABEL_KEY) if e.kind == "operator_log" else None
        if isinstance(label, str) and label:
            return label
    return None


def content(session: ProctorSession, episode: Episode) -> dict[str, Any]:
    """Every field of the wire but ``rev`` and ``clock_offset_s``."""
    obj = session.get(ObjectType, episode.object_type_id)
    assert obj is not None  # a foreign key
    events = _events(session, episode)
    return {
        "uid": episode.uid,
        "run_code": episode.run_code,
        "object": obj.name,
        "items": episode.items,
        "budget_s": episode.budget_s,
        "tote_side": episode.tote_side.value,
        "camera_side": episode.camera_side.value,
        "sim_seed": episode.sim_seed,
        "state": episode.state.value,
        "clock_start_s": episode.clock_start_s,
        "clock_end_s": episode.clock_end_s,
        "started_at": episode.started_at,
        "ended_at": episode.ended_at,
        "outcome": episode.outcome.value if episode.outcome is not None else None,
        "outcome_reason": episode.outcome_reason[:4000],
        "envelope_interventions": episode.envelope_interventions,
        "placed": episode.placed,
        "lost": episode.lost,
        "dropped": episode.dropped,
        "operator_notes": episode.operator_notes[:4000],
        "operator_label": _operator_label(events),
        "logged_at": episode.logged_at,
        "events": events,
    }


def digest(fields: dict[str, Any], registered: Iterable[str] = ()) -> str:
    """A stable hash of ``content(...)`` and the registered artifacts' sha256s."""
    doc = {
        **{k: v for k, v in fields.items() if k != "events"},
        "events": [e.model_dump(mode="json") for e in fields["events"]],
        "registered": sorted(registered),
    }
    text = json.dumps(doc, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def snapshot(fields: dict[str, Any], *, rev: int, clock_offset_s: float | None) -> EpisodeWire:
    return EpisodeWire(**fields, rev=rev, clock_offset_s=clock_offset_s or 0.0)
