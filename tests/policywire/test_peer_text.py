"""A policy server cannot write its own words into what staff read.

Before a campaign is released, operators and reviewers read an episode's
outcome reason and events, and the manifest, without knowing whose policy ran.
A hostile server could try to unblind itself by choosing what it sends —
map keys, strings, dtype names, numbers, close codes — so that a station
error quotes it. Every station error describes such values by type and size
only, and the stored reason is bounded (``proctor.core.episode_record.bounded``).

Real parts: the policy servers answer over real WebSockets on loopback, the
episode runs on the simulated cell, stored in a real database (both backends).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import sqlalchemy as sa
from websockets.sync.server import ServerConnection, serve

from proctor.core import episode_record
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.models import Episode, EpisodeEvent
from proctor.core.domain import EndpointDialect, Outcome, Side
from proctor.core.recording.reader import load_recording
from proctor.core.work import Work
from proctor.policywire.client import PolicyClient, PolicyDisconnected
from proctor.policywire.dialects import positronic_frames as positronic
from proctor.policywire.handshake import parse_metadata
from proctor.policywire.serving.openpi import PolicyServer
from proctor.policywire.wire import codec
from proctor.policywire.wire.spec import ActionSpace, ProtocolError, extract_chunk
from proctor.station import episodes
from tests.station.conftest import sim_config, sim_runner

TEAM = "TEAM sub1 -- policy sub1-evil -- hi operator!"
# what must never appear: the words, and the number a server could use in their place
MARKERS = ("TEAM", "sub1", "evil", "operator!", "4242")
HOLD = dict(hold_pose=np.zeros(6), hold_q=np.arange(7.0), hold_grip=0.25)


def _leaks(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


class HostilePolicy:
    """Passes the handshake, then answers a map whose only key is a message to the staff."""

    def metadata(self) -> dict[str, Any]:
        return {"action_space": "cartesian_velocity"}

    def new_session(self) -> HostilePolicy:
        return self

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {TEAM: 1}

    def reset(self, message: dict[str, Any]) -> None:
        pass


def test_a_reply_whose_keys_spell_a_team_reaches_no_stored_reason_event_or_manifest(
    station_db, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    with PolicyServer(HostilePolicy()) as server:
        work = Work(
            run_code="R-EVIL01",
            object_name="towels",
            items=1,
            per_item_cap_s=2.0,
            tote_side=Side.left,
            camera_side=Side.right,
            policy_url=server.url,
            sim_seed=5,
        )
        with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
            uid = runner.arm(work)
            runner.start(background=False)
            summary = runner.last
    assert summary is not None and summary.proposed == Outcome.system
    assert summary.reason.startswith("malformed policy reply: reply has no 'actions'")
    assert _leaks(summary.reason) == [], summary.reason
    with session_scope(sessions) as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        events = s.scalars(sa.select(EpisodeEvent).where(EpisodeEvent.episode_id == ep.id)).all()
        stored = [ep.outcome_reason] + [
            f"{e.kind}: {e.message} {json.dumps(e.details)}" for e in events
        ]
        fault = next(e for e in events if e.kind == "system_fault")
        rec = load_recording(s, store, uid)
        manifest = json.dumps(rec.manifest)
        rec.close()
    assert [line for line in stored if _leaks(line)] == []
    assert _leaks(manifest) == [], manifest
    # the fault is classed as the policy's protocol failure, for the scheduler to count
    assert fault.details == {"fault": episode_record.FAULT_POLICY_PROTOCOL}


def _nd(dtype: Any, data: Any, shape: list[int] | None = None) -> bytes:
    """A msgpack-numpy array or scalar with exactly the fields given."""
    if shape is None:
        return msgpack.packb({b"__npgeneric__": True, b"dtype": dtype, b"data": data})
    return msgpack.packb({b"__ndarray__": True, b"dtype": dtype, b"shape": shape, b"data": data})


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param(lambda: extract_chunk({TEAM: 1}, ActionSpace.joint_velocity), id="keys"),
        pytest.param(lambda: codec.unpackb(_nd(TEAM, b"", [0])), id="dtype-text"),
        pytest.param(
            lambda: codec.unpackb(_nd({"names": [TEAM], "formats": ["<f8"]}, b"\0" * 8, [1])),
            id="dtype-field-name",
        ),
        pytest.param(lambda: codec.unpackb(_nd("<f8", TEAM)), id="scalar-data"),
        pytest.param(lambda: codec.unpackb(_nd("<f8", b"\0" * 8, [4242])), id="lengths"),
        pytest.param(
            lambda: parse_metadata(
                {"action_space": TEAM}, dialect=None, default_image_size=(224, 224)
            ),
            id="action_space",
        ),
        pytest.param(
            lambda: parse_metadata(
                {"image_resolution": [TEAM, 1]}, dialect=None, default_image_size=(224, 224)
            ),
            id="image_resolution-text",
        ),
        pytest.param(
            lambda: parse_metadata(
                {"image_resolution": [4242, 9999]}, dialect=None, default_image_size=(224, 224)
            ),
            id="image_resolution-number",
        ),
        pytest.param(
            lambda: parse_metadata(
                {"n_external_cameras": TEAM}, dialect=None, default_image_size=(224, 224)
            ),
            id="n_external_cameras-text",
        ),
        pytest.param(
            lambda: parse_metadata(
                {"n_external_cameras": 4242}, dialect=None, default_image_size=(224, 224)
            ),
            id="n_external_cameras-number",
        ),
        pytest.param(
            lambda: positronic.decode_result({TEAM: 1}, control_hz=15, action_fps=None, **HOLD),
            id="positronic-keys",
        ),
        pytest.param(
            lambda: positronic.decode_result(
                {"result": [{"robot_command": {"type": TEAM}}]},
                control_hz=15,
                action_fps=None,
                **HOLD,
            ),
            id="positronic-command-type",
        ),
        pytest.param(
            lambda: positronic.decode_result(
                {"result": [{f"robot_command.{TEAM}": {"type": "joint_pos"}}]},
                control_hz=15,
                action_fps=None,
                **HOLD,
            ),
            id="positronic-second-arm",
        ),
        pytest.param(
            lambda: positronic.decode_result(
                {"result": [{"timestamp": 4242.0, "target_grip": 0.5}]},
                control_hz=15,
                action_fps=None,
                **HOLD,
            ),
            id="positronic-timestamp",
        ),
        pytest.param(
            lambda: positronic.decode_result(
                {"result": [{"timestamp": 0.5, "target_grip": 0.5}, {"timestamp": 0.4242}]},
                control_hz=15,
                action_fps=None,
                **HOLD,
            ),
            id="positronic-timestamp-back",
        ),
        pytest.param(
            lambda: positronic.parse_meta({"local_stack": {"name": TEAM}}), id="positronic-layer"
        ),
        pytest.param(lambda: positronic.parse_meta({"image_sizes": TEAM}), id="image_sizes-text"),
        pytest.param(
            lambda: positronic.parse_meta({"image_sizes": [4242, 9999]}), id="image_sizes-number"
        ),
        pytest.param(lambda: positronic.parse_meta({"action_fps": TEAM}), id="action_fps"),
        pytest.param(
            lambda: positronic.read_handshake(
                lambda _t: codec.packb({"status": TEAM}), per_message_s=1, total_s=1
            ),
            id="handshake-status",
        ),
        pytest.param(
            lambda: positronic.read_handshake(
                lambda _t: codec.packb({"status": "ready", "meta": {}, "protocol_version": TEAM}),
                per_message_s=1,
                total_s=1,
            ),
            id="handshake-version",
        ),
    ],
)
def test_no_protocol_error_quotes_what_the_server_sent(hostile: Any) -> None:
    with pytest.raises((ProtocolError, codec.CodecError)) as caught:
        hostile()
    assert _leaks(str(caught.value)) == [], str(caught.value)


def test_an_application_close_code_is_not_repeated() -> None:
    """3000–4999 are the server's to choose: a number that could stand for a team."""

    def handle(ws: ServerConnection) -> None:
        ws.send(codec.packb({"action_space": "joint_velocity"}))
        ws.recv()
        ws.close(4242, TEAM)

    with serve(handle, "127.0.0.1", 0) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        client = PolicyClient(f"ws://127.0.0.1:{port}", dialect=EndpointDialect.openpi)
        client.connect()
        with pytest.raises(PolicyDisconnected) as caught:
            client.infer({}, timeout_s=5.0)
        client.close()
        server.shutdown()
    message = str(caught.value)
    assert "application close code" in message and _leaks(message) == [], message
    # the submitter's own conformance report may still name it
    assert caught.value.close_code == 4242


def test_a_reply_error_is_a_protocol_error_of_bounded_length() -> None:
    """However large the reply, the message describing it stays short."""
    with pytest.raises(ProtocolError) as caught:
        extract_chunk({f"{TEAM} {i}": i for i in range(5000)}, ActionSpace.joint_velocity)
    assert len(str(caught.value)) < 100 and _leaks(str(caught.value)) == []


def test_stored_reasons_and_event_messages_are_capped(station_db, backend: str) -> None:
    _, sessions = station_db
    long = "x" * 10_000
    with session_scope(sessions) as s:
        station = episodes.ensure_station(s, name="cell-cap", profile="sim")
        obj = episodes.ensure_object_type(s, name="towels")
        work = Work(
            run_code="R-CAP001",
            object_name="towels",
            items=1,
            per_item_cap_s=2.0,
            tote_side=Side.left,
            camera_side=Side.right,
            policy_url="ws://127.0.0.1:1",
        )
        ep = episodes.create_episode(s, work=work, station=station, object_type=obj)
        episodes.mark_running(s, episode=ep, clock_start_s=0.0)
        episodes.mark_finishing(
            s, episode=ep, clock_end_s=1.0, proposed=Outcome.system, reason=long
        )
        episodes.add_event(s, episode=ep, kind="system_fault", message=long)
        uid = ep.uid
    with session_scope(sessions) as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        lengths = [len(e.message) for e in ep.events] + [len(ep.outcome_reason)]
        reason = ep.outcome_reason
    assert max(lengths) == episode_record.MAX_REASON_CHARS
    assert re.fullmatch(r"x+…", reason)
