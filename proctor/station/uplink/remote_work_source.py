"""A campaign's work, claimed from the server over the station API.

``claim`` asks ``POST /claims`` with the idempotency key
``claim:<campaign>:<n>``; ``n`` moves on only once a reply arrived, so a
claim whose reply was lost is asked again under the same key and gets the
same run (the server holds at most one claim per station anyway). While the
server is offline no claim is made: ``claim`` returns None and
``nothing_reason`` says why, for the console.

The work carries no server row: ``campaign_id``/``assignment_id`` stay None in
the ledger (the server links the episode by its run code). The policy is the
server's gateway (its origin as ws:// or wss:// plus the claim's gateway
path), which accepts this station's token; a human reference's teleop server
is on the station host's loopback.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import sessionmaker

from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import EndpointDialect, Outcome
from proctor.core.errors import FieldError, ProctorError
from proctor.core.station_api_wire import WorkWire
from proctor.core.work import LatencyBudget, Work
from proctor.station import episodes
from proctor.station.uplink.client import Offline, StationApiClient
from proctor.station.uplink.forwarder import Forwarder
from proctor.station.uplink.outbox import Outbox

log = logging.getLogger(__name__)

# how long a claim waits for the forwarder to deliver the endings of earlier runs
SETTLE_WAIT_S = 10.0
# how long a claim waits for a just-started forwarder's first hello
FIRST_HELLO_WAIT_S = 15.0


def to_work(wire: WorkWire, client: StationApiClient) -> Work:
    """The runner's ``Work`` for a claimed run."""
    if wire.gateway_path:
        if not wire.gateway_path.startswith("/"):
            raise FieldError("work.gateway_path", "must be a path starting with '/'")
        url = client.policy_origin + wire.gateway_path
    elif wire.teleop_url:
        url = wire.teleop_url
    else:
        raise FieldError("work.gateway_path", "the claim names no policy to connect to")
    try:
        dialect = EndpointDialect(wire.dialect) if wire.dialect else None
    except ValueError:
        raise FieldError("work.dialect", f"unknown dialect {wire.dialect!r}") from None
    budget = wire.latency_budget
    return Work(
        run_code=wire.run_code,
        object_name=wire.object,
        items=wire.items,
        per_item_cap_s=wire.per_item_cap_s,
        tote_side=wire.tote_side,  # type: ignore[arg-type]  # validated to Side
        camera_side=wire.camera_side,  # type: ignore[arg-type]
        policy_url=url,
        sim_seed=wire.sim_seed,
        prompt=wire.prompt or wire.object_prompt,
        dialect=dialect,
        exterior_numbering=wire.exterior_numbering,
        action_units=wire.action_units,
        policy_headers=client.server_headers,
        latency_budget=LatencyBudget(budget.budget_ms, budget.tolerance) if budget else None,
    )


class RemoteWorkSource:
    """``proctor.core.work.WorkSource`` over the station API."""

    def __init__(
        self,
        *,
        client: StationApiClient,
        outbox: Outbox,
        forwarder: Forwarder,
        sessions: sessionmaker[ProctorSession],
        campaign: int | str,
    ) -> None:
        if isinstance(campaign, str) and not campaign.strip():
            raise FieldError("uplink.campaign", "name the campaign to claim runs of")
        self.client = client
        self.outbox = outbox
        self.forwarder = forwarder
        self.sessions = sessions
        self.campaign = campaign
        self.nothing_reason = ""

    @property
    def _counter(self) -> str:
        return f"claim:{self.campaign}"

    def claim(self) -> Work | None:
        # a station that has just started has not heard the server yet: its
        # first hello decides whether it is online (not a claim made in the dark)
        self.forwarder.first_pass(FIRST_HELLO_WAIT_S)
        if not self.forwarder.online:
            self.nothing_reason = "the server is offline: no new run can be claimed" + (
                f" ({self.forwarder.last_error})" if self.forwarder.last_error else ""
            )
            return None
        if not self._previous_runs_settled():
            return None
        n = self.outbox.counter(self._counter)
        try:
            reply = self.client.claim(self.campaign, key=f"{self._counter}:{n}")
        except Offline as exc:
            self.forwarder.mark_offline(str(exc))
            self.nothing_reason = f"the server is offline: {exc}"
            return None
        except ProctorError as exc:
            self.outbox.advance(self._counter, n)  # refused: a reply all the same
            self.nothing_reason = f"the server refused the claim: {exc}"
            return None
        self.outbox.advance(self._counter, n)
        if reply.work is None:
            self.nothing_reason = reply.reason or "nothing is scheduled for this station now"
            return None
        if reply.work.run_code in self.forwarder.unsettled_runs():
            # the server handed back a run this station has already ended: its
            # ending is still on the way (never run a slot twice)
            self.nothing_reason = f"waiting for the server to settle run {reply.work.run_code}"
            return None
        self.nothing_reason = ""
        self._object_type(reply.work)
        return to_work(reply.work, self.client)

    def _previous_runs_settled(self) -> bool:
        """Whether every run this station ended has been settled by the server;
        if not, the forwarder is given ``SETTLE_WAIT_S`` to deliver the endings.
        The server holds one claim per station and answers a claim with the run
        still held, so claiming before the last ending arrived would get the
        same run again."""
        if not self.forwarder.unsettled_runs():
            return True
        self.forwarder.drain(SETTLE_WAIT_S)
        pending = self.forwarder.unsettled_runs()
        if pending:
            self.nothing_reason = (
                f"waiting for the server to settle {len(pending)} ended run(s): "
                + ", ".join(pending[:3])
            )
            return False
        return True

    def _object_type(self, wire: WorkWire) -> None:
        """The ledger's object type as the campaign names it (display name, prompt)."""
        with session_scope(self.sessions) as s:
            episodes.ensure_object_type(
                s,
                name=wire.object,
                display_name=wire.object_display_name,
                prompt=wire.object_prompt,
            )

    def completed(self, work: Work, *, episode_uid: str, outcome: Outcome) -> None:
        # the server settles the run when the closed snapshot arrives
        self.forwarder.nudge()

    def abandoned(self, work: Work, *, reason: str) -> None:
        self.outbox.queue_abandon(work.run_code, reason)
        self.forwarder.nudge()
