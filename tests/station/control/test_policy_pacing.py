"""How the control loop paces the policy: velocity chunks asked for ahead
(the arm keeps moving between 1-row chunks), a hanging policy still stopping
the arm, an oversized reply refused, and telemetry ticks accounted for.

Real parts throughout: the policies are served over a real WebSocket on
loopback (``PolicyServer``), the cell is the simulated one, on its virtual
clock or on the monotonic clock."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.models import Episode, EpisodeEvent
from proctor.core.domain import Outcome, Side
from proctor.core.recording import keys
from proctor.core.recording.reader import load_recording
from proctor.core.work import Work
from proctor.policywire.client import PolicyClient, PolicyError, PolicyProtocolError
from proctor.policywire.serving.openpi import Fault, PolicyServer
from tests.backends import once
from tests.station.conftest import sim_config, sim_runner

SPEED = 0.05  # m/s, straight up: well inside the workspace for the 1.5 s budget
CONTROL_HZ = 15.0


class TwistPolicy:
    """Cartesian velocity, one row per reply: the shortest chunk there is.
    ``latency_s`` is spent in every reply (the server thread sleeps), like a
    model's compute."""

    def __init__(self, latency_s: float = 0.0, extra: dict[str, Any] | None = None) -> None:
        self.latency_s = latency_s
        self.extra = extra or {}
        self.requests = 0

    def metadata(self) -> dict[str, Any]:
        return {"action_space": "cartesian_velocity", "action_horizon": 1}

    def new_session(self) -> TwistPolicy:
        return self

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        self.requests += 1
        if self.latency_s:
            time.sleep(self.latency_s)
        row = np.array([[0.0, 0.0, SPEED, 0.0, 0.0, 0.0, 0.0]])
        return {"actions": row, **self.extra}

    def reset(self, message: dict[str, Any]) -> None:
        pass


def _work(url: str, budget_s: float = 1.5) -> Work:
    return Work(
        run_code="R-PACE01",
        object_name="towels",
        items=1,
        per_item_cap_s=budget_s,
        tote_side=Side.left,
        camera_side=Side.right,
        policy_url=url,
        sim_seed=3,
    )


def _run(
    sessions: Any, tmp: Path, server: PolicyServer, *, real_time: bool, **config: Any
) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """One episode; returns (summary, recording, finished-event details, manifest)."""
    store = LocalArtifactStore(tmp / "artifacts")
    cfg = sim_config(
        control_hz=CONTROL_HZ,
        **({"sim": {"clock": "monotonic"}} if real_time else {}),
        **config,
    )
    with sim_runner(sessions, store, tmp, cfg) as runner:
        uid = runner.arm(_work(server.url))
        runner.start(background=False)
        summary = runner.last
    assert summary is not None
    with session_scope(sessions) as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        finished = s.scalar(
            sa.select(EpisodeEvent).where(
                EpisodeEvent.episode_id == ep.id, EpisodeEvent.kind == "finished"
            )
        )
        rec = load_recording(s, store, uid)
        manifest = rec.manifest
        details = dict(finished.details)
    return summary, rec, details, manifest


def _moving_fraction(rec: Any, settle_s: float = 0.3) -> tuple[float, int]:
    """Fraction of the samples after ``settle_s`` (until the end) at which the
    tool moved at least half the commanded speed, and how many samples."""
    t = rec.column(keys.T) - rec.clock_start_s
    speed = rec.column(keys.EE_SPEED)
    phase = rec.column(keys.PHASE)
    window = (t > settle_s) & (phase != keys.TelemetryPhase.stopped.value)
    return float(np.mean(speed[window] > 0.5 * SPEED)), int(window.sum())


def test_one_row_velocity_chunks_keep_the_arm_moving_on_the_virtual_clock(
    station_db, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    with PolicyServer(TwistPolicy()) as server:
        summary, rec, _, manifest = _run(
            sessions, tmp_path, server, real_time=False, policy_lookahead_steps=1
        )
    assert summary.proposed == Outcome.ran_out_of_time
    moving, n = _moving_fraction(rec)
    assert n > 100 and moving == 1.0, (moving, n)
    phase = rec.column(keys.PHASE)
    t = rec.column(keys.T) - rec.clock_start_s
    # after the first reply the loop never waits for the policy: every next chunk is there
    first_running = t[phase == keys.TelemetryPhase.running.value][0]
    waiting = (phase == keys.TelemetryPhase.awaiting_policy.value) & (t > first_running)
    assert not waiting.any()
    # one request per control step, each answered (1.5 s at 15 Hz, the first one included)
    assert summary.policy_calls == pytest.approx(1.5 * CONTROL_HZ, abs=2)
    assert manifest["policy_lookahead_steps"] == 1
    # the virtual clock keeps every tick
    assert manifest["telemetry_ticks"]["missed"] == 0 and summary.telemetry_missed_ticks == 0
    rec.close()


@once()  # the database plays no part in the pacing
def test_velocity_chunks_asked_for_ahead_keep_the_arm_moving_in_real_time(
    station_db, tmp_path: Path, backend: str
) -> None:
    """A policy that takes 20 ms a reply, 1-row chunks, 15 Hz, real time: asked
    for one step ahead the arm keeps moving; asked for only when the chunk is
    done (the old behaviour, lookahead 0) it stands still about half the time."""
    _, sessions = station_db
    fractions = {}
    for lookahead in (1, 0):
        with PolicyServer(TwistPolicy(latency_s=0.02)) as server:
            summary, rec, _, _ = _run(
                sessions,
                tmp_path / f"ahead{lookahead}",
                server,
                real_time=True,
                policy_lookahead_steps=lookahead,
            )
        assert summary.proposed == Outcome.ran_out_of_time, summary.reason
        fractions[lookahead], n = _moving_fraction(rec)
        assert n > 80
        # the latency recorded is the policy's 20 ms plus the round trip
        assert 0.02 <= summary.latency_p50_s < 0.066
        rec.close()
    print(f"moving at ≥ half speed: lookahead 1 {fractions[1]:.0%}, lookahead 0 {fractions[0]:.0%}")
    assert fractions[1] >= 0.95
    assert fractions[0] <= 0.7


def test_a_hanging_velocity_policy_still_stops_the_arm_in_time(
    station_db, tmp_path: Path, backend: str
) -> None:
    _, sessions = station_db
    timeout = 0.5
    with PolicyServer(TwistPolicy(), fault=Fault("hang", 10)) as server:
        summary, rec, details, _ = _run(
            sessions,
            tmp_path,
            server,
            real_time=True,
            policy_lookahead_steps=1,
            policy_timeout_s=timeout,
        )
    assert summary.proposed == Outcome.system
    assert summary.reason == f"policy did not answer within {timeout:g} s"
    lag = details["t_stop_s"] - details["t_request_s"]
    # the episode ends within one control period plus the timeout of the unanswered
    # request (and some scheduling slack: a shared 2-core machine)
    assert timeout <= lag <= timeout + 1.0 / CONTROL_HZ + 0.15, details
    # and the arm did not run on meanwhile: it was halted when its last 1-row chunk
    # ran out (one control period after the request) and is at rest well before the stop
    t = rec.column(keys.T) - rec.clock_start_s
    speed = rec.column(keys.EE_SPEED)
    after = t > details["t_request_s"] + 1.0 / CONTROL_HZ + 0.1
    assert after.sum() > 20 and speed[after].max() < 1e-3, speed[after].max()
    before = (t > 0.3) & (t < details["t_request_s"])
    assert speed[before].min() > 0.5 * SPEED
    rec.close()


def test_an_oversized_reply_is_a_malformed_reply(station_db, tmp_path: Path) -> None:
    """A reply of 2 MiB against a 1 MiB cap: refused from the frame's header,
    the arm stopped, the episode ``system`` with the station's own words."""
    _, sessions = station_db
    cap = 2**20
    policy = TwistPolicy(extra={"debug": np.zeros(2 * 2**20, dtype=np.uint8)})
    with PolicyServer(policy) as server:
        summary, rec, _, _ = _run(
            sessions, tmp_path, server, real_time=False, policy_max_message_bytes=cap
        )
    assert summary.proposed == Outcome.system
    assert summary.reason == (
        f"malformed policy reply: a message larger than the station's limit of {cap} bytes"
    )
    assert summary.policy_calls == 0
    speed = rec.column(keys.EE_SPEED)
    assert speed[-5:].max() < 1e-3
    rec.close()


def test_the_client_takes_replies_up_to_its_cap_and_refuses_larger_ones() -> None:
    cap = 2**20
    big = np.zeros(cap, dtype=np.uint8)  # the array alone is the cap: the message is larger
    fits = np.zeros(cap - 4096, dtype=np.uint8)
    with PolicyServer(TwistPolicy(extra={"debug": fits})) as server:
        client = PolicyClient(server.url, max_message_bytes=cap)
        client.connect()
        assert client.infer({"x": np.zeros(1)}, timeout_s=5).actions.shape == (1, 7)
        client.close()
    with PolicyServer(TwistPolicy(extra={"debug": big})) as server:
        client = PolicyClient(server.url, max_message_bytes=cap)
        client.connect()
        with pytest.raises(PolicyProtocolError, match="larger than the station's limit"):
            client.infer({"x": np.zeros(1)}, timeout_s=5)
        # the connection is gone: the next request fails cleanly too
        with pytest.raises(PolicyError, match="not connected"):
            client.infer({"x": np.zeros(1)}, timeout_s=5)


class _HugeMetadata(TwistPolicy):
    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "blob": np.zeros(2**17, dtype=np.uint8)}


def test_oversized_metadata_fails_the_preflight() -> None:
    with PolicyServer(_HugeMetadata()) as server:
        client = PolicyClient(server.url, max_message_bytes=2**16)
        with pytest.raises(PolicyProtocolError, match="policy metadata rejected: a message larger"):
            client.connect()


@once()  # the database plays no part in the schedule
def test_missed_telemetry_ticks_are_counted_and_reported(
    station_db, tmp_path: Path, backend: str
) -> None:
    """Real time, a request every control step. Whatever the machine's load
    makes the loop miss, the manifest's count must agree with the recording:
    scheduled ticks = rows recorded while running + ticks missed."""
    _, sessions = station_db
    with PolicyServer(TwistPolicy()) as server:
        summary, rec, details, manifest = _run(
            sessions, tmp_path, server, real_time=True, policy_lookahead_steps=1
        )
    ticks = manifest["telemetry_ticks"]
    assert ticks == details["telemetry_ticks"]
    assert ticks["hz"] == 100
    phase = rec.column(keys.PHASE)
    recorded = int((phase != keys.TelemetryPhase.stopped.value).sum())
    assert ticks["scheduled"] == recorded + ticks["missed"]
    # the schedule covers the episode: 1.5 s at 100 Hz (the first tick at 0, the last ≤ 1.5 s)
    assert abs(ticks["scheduled"] - 151) <= 1, ticks
    assert summary.telemetry_missed_ticks == ticks["missed"]
    if ticks["missed"]:
        assert any("ticks at 100 Hz not sampled" in n for n in summary.notes)
    # every sample carries the arm state's own time: strictly increasing, never back-filled
    t = rec.column(keys.T)
    assert np.all(np.diff(t) > 0)
    gaps = np.diff(t[phase != keys.TelemetryPhase.stopped.value])
    assert math.isclose(gaps.max(), ticks["max_gap_s"], abs_tol=1e-3)
    print(json.dumps(ticks))
    rec.close()
