"""An endpoint's selection of action units, against the hand-written DROID
server of ``test_droid_units`` (openpi's wire and DROID's conventions written
from their descriptions, nothing of the station's codec).

The server's metadata names its action space and says nothing about units,
so the openpi dialect reads its velocities as SI (rad/s) by default; the
endpoint selecting ``droid`` makes the station read them as DROID's
normalised per-step deltas. A server that declares other units than the
endpoint selects is refused by the station and failed by the conformance
check with what to change."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.models import Episode, EpisodeEvent
from proctor.core.domain import Outcome
from proctor.core.recording import keys
from proctor.core.recording.reader import load_recording
from proctor.policywire.conformance.check import CheckOptions, Report, Status, check_endpoint
from proctor.station.episode_runner import PolicyUnreachable
from tests.station.conftest import PROCTOR, ROOT, clean_env, sim_config, sim_runner
from tests.station.droid_support import droid_server, droid_work, joint_chunk, recorded_steps

# names its action space (so SI by default) and declares no units
NAMED = {"action_space": "joint_velocity", "action_horizon": 10}
# joint 1 at 0.05: DROID's 0.01 rad per step, or 0.05 rad/s read as SI
SLOW_JOINT_1 = [0.05, 0, 0, 0, 0, 0, 0]


def _actions(obs: dict[str, Any], n: int) -> np.ndarray:
    return joint_chunk(SLOW_JOINT_1)


def _episode(station_db: Any, tmp_path: Path, url: str, **work: Any) -> Any:
    """One simulated episode of ``test_droid_units``'s work, with ``work``'s changes."""
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        uid = runner.arm(replace(droid_work(url), **work))
        runner.start(background=False)
        summary = runner.last
    with session_scope(sessions) as s:
        rec = load_recording(s, store, uid)
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        rec.events = {
            e.kind: e.message
            for e in s.scalars(sa.select(EpisodeEvent).where(EpisodeEvent.episode_id == ep.id))
        }
    return summary, rec


def test_a_server_declaring_nothing_runs_as_droid_when_the_endpoint_selects_it(
    station_db: Any, tmp_path: Path
) -> None:
    with droid_server(NAMED, _actions) as server:
        summary, rec = _episode(station_db, tmp_path, server.url, action_units="droid")
    try:
        assert summary is not None and summary.proposed == Outcome.ran_out_of_time, summary
        # the episode's manifest records the convention that ran
        assert rec.manifest["policy"]["action_units"] == "droid"
        assert rec.manifest["policy"]["action_space"] == "joint_velocity"
        # the ledger's event does not say how the policy spoke (the station host's
        # file would tell the arms apart); the manifest above does
        assert rec.events["policy_connected"] == "policy answered"
        running = rec.column(keys.PHASE) == keys.TelemetryPhase.running.value
        assert set(rec.column(keys.ACTION_KIND)[running]) == {"joint_position"}
        q, req, _ = recorded_steps(rec)
        assert len(q) >= 30
        # each target is the measured joints plus 0.05 × 0.2 rad on joint 1
        np.testing.assert_allclose(np.median(req - q, axis=0), [0.01, 0, 0, 0, 0, 0, 0], atol=2e-3)
    finally:
        rec.close()


def test_without_the_selection_the_same_server_runs_in_si_units(
    station_db: Any, tmp_path: Path
) -> None:
    """The control: what the selection changes (a velocity command of 0.05 rad/s)."""
    with droid_server(NAMED, _actions) as server:
        _, rec = _episode(station_db, tmp_path, server.url)
    try:
        assert rec.manifest["policy"]["action_units"] == "si"
        running = rec.column(keys.PHASE) == keys.TelemetryPhase.running.value
        assert set(rec.column(keys.ACTION_KIND)[running]) == {"joint_velocity"}
        _, req, _ = recorded_steps(rec)
        np.testing.assert_allclose(req[0], SLOW_JOINT_1, atol=1e-6)
    finally:
        rec.close()


def test_a_server_declaring_other_units_than_selected_is_refused(
    station_db: Any, tmp_path: Path
) -> None:
    """Not silently resolved: neither the metadata's 'si' nor the endpoint's
    'droid' is chosen over the other; the run is not armed, saying which is which."""
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    with (
        droid_server({**NAMED, "action_units": "si"}, _actions) as server,
        sim_runner(sessions, store, tmp_path, sim_config()) as runner,
        pytest.raises(PolicyUnreachable) as caught,
    ):
        runner.arm(replace(droid_work(server.url), action_units="droid"))
    assert (
        "action_units: the endpoint selects 'droid' but the server's metadata declares 'si'"
    ) in str(caught.value)


def test_work_refuses_units_no_convention_has() -> None:
    from proctor.core.errors import FieldError

    with pytest.raises(FieldError) as caught:
        replace(droid_work("ws://127.0.0.1:9"), action_units="rad/s")
    assert caught.value.field == "action_units"
    assert "must be one of si, droid" in str(caught.value)


# -- the conformance check ----------------------------------------------------------------
def _check(url: str, **options: Any) -> Report:
    opts = CheckOptions(observations=3, request_timeout_s=5.0, connect_timeout_s=5.0, **options)
    return check_endpoint(url, options=opts)


def _finding(report: Report, check: str) -> Any:
    found = [f for f in report.findings if f.check == check]
    assert found, [f.check for f in report.findings]
    return found[-1]


def test_the_check_reads_the_actions_in_the_units_the_endpoint_selects() -> None:
    with droid_server(NAMED, _actions) as server:
        selected = _check(server.url, action_units="droid")
        default = _check(server.url)
    assert selected.passed, [
        (f.check, f.message) for f in selected.findings if f.status == Status.failed
    ]
    sends = _finding(selected, "station_sends")
    assert sends.details["action_units"] == "droid"
    assert (
        "actions read as joint_velocity in droid units (action_units, selected for the "
        "endpoint): DROID's normalised joint velocities"
    ) in sends.message
    units = _finding(selected, "action_units")
    assert units.status == Status.passed and units.details["action_units"] == "droid"
    # the advice names the selection, not the metadata
    assert "select action_units = 'si' instead of 'droid'" in units.message
    assert _finding(default, "station_sends").details["action_units"] == "si"
    assert _finding(default, "action_units").details["action_units"] == "si"


def test_a_conflict_with_the_metadata_fails_the_check_with_what_to_change() -> None:
    with droid_server({**NAMED, "action_units": "si"}, _actions) as server:
        report = _check(server.url, action_units="droid")
    assert not report.passed
    conflict = _finding(report, "action_units_conflict")
    assert conflict.status == Status.failed
    assert conflict.details == {"selected": "droid", "declared": "si"}
    assert conflict.message.startswith(
        "Your server's metadata declares action_units: 'si', but the endpoint selects 'droid'"
    )
    assert "either select 'si' or nothing for the endpoint" in conflict.message
    assert "or make your server declare action_units: 'droid' or nothing" in conflict.message
    # the rest of the check ran, reading the actions as the metadata declares them
    assert _finding(report, "action_units").details["action_units"] == "si"


def test_proctor_policy_check_takes_the_action_units() -> None:
    run = {"capture_output": True, "text": True, "env": clean_env(), "cwd": ROOT, "timeout": 120}
    with droid_server(NAMED, _actions) as server:
        base = [*PROCTOR, "policy", "check", server.url, "--dialect", "openpi", "--json", "-"]
        r = subprocess.run([*base, "--action-units", "droid"], **run)  # type: ignore[call-overload]
        assert r.returncode == 0, r.stdout + r.stderr
        assert '"action_units": "droid"' in r.stdout
        r = subprocess.run([*base, "--action-units", "rad"], **run)  # type: ignore[call-overload]
    assert r.returncode != 0
    assert "--action-units: must be one of si, droid" in r.stdout + r.stderr
    positronic = [*PROCTOR, "policy", "check", "ws://127.0.0.1:9", "--dialect", "positronic_v1"]
    r = subprocess.run([*positronic, "--action-units", "si"], **run)  # type: ignore[call-overload]
    assert r.returncode != 0
    assert "--action-units: the positronic_v1 dialect's commands are positions" in (
        r.stdout + r.stderr
    )
