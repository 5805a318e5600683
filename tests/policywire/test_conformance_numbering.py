"""Servers written as the field writes them (``tests/policywire/field_servers.py``):
an openpi DROID server, a RoboArena server written to RoboArena's test script,
and a vLLM-Omni-style openpi endpoint behind a URL path that sends a
``PolicyServerConfig`` first frame. Each runs a whole simulated episode with
the numbering it reads, and the conformance check catches the other
numbering, saying what to change."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.domain import EndpointDialect, Outcome, Side
from proctor.core.work import Work
from proctor.policywire.conformance.check import CheckOptions, Report, Status, check_endpoint
from tests.policy_servers import PROCTOR, ROOT, clean_env
from tests.policywire.field_servers import (
    EXT0,
    EXT1,
    QUICK,
    VLLM_PATH,
    WRIST,
    FieldServer,
    droid_handler,
    roboarena_handler,
    vllm_handler,
)
from tests.policywire.field_servers import field_server as field_server  # the fixture
from tests.station.conftest import sim_config, sim_runner


def _check(url: str, dialect: EndpointDialect, numbering: int | None = None) -> Report:
    return check_endpoint(
        url,
        options=CheckOptions(dialect=dialect, exterior_numbering=numbering, **QUICK),  # type: ignore[arg-type]
    )


def _finding(report: Report, check: str) -> Any:
    return next(f for f in report.findings if f.check == check)


def _episode(station_db: Any, tmp_path: Path, **work: Any) -> Any:
    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    with sim_runner(sessions, store, tmp_path, sim_config()) as runner:
        runner.arm(
            Work(
                run_code="R-FIELD1",
                object_name="towels",
                items=1,
                per_item_cap_s=4.0,
                tote_side=Side.right,
                camera_side=Side.left,
                sim_seed=3,
                **work,
            )
        )
        runner.start(background=False)
        return runner.last


# -- the openpi DROID server --------------------------------------------------------------
def test_an_openpi_droid_server_gets_exterior_image_1_and_runs_an_episode(
    field_server: Callable[..., FieldServer], station_db: Any, tmp_path: Path
) -> None:
    server = field_server(droid_handler)
    report = _check(server.url, EndpointDialect.openpi)
    numbering = _finding(report, "exterior_numbering")
    assert numbering.status == Status.passed, numbering.message
    assert "sends observation/exterior_image_1_left, the key your server reads" in (
        numbering.message
    )
    assert report.passed, report.summary

    server.seen.clear()
    summary = _episode(station_db, tmp_path, policy_url=server.url, dialect=EndpointDialect.openpi)
    assert summary.proposed == Outcome.ran_out_of_time, summary.reason
    assert summary.policy_calls >= 3
    assert len(server.seen) == summary.policy_calls
    assert all(EXT1 in s["keys"] and EXT0 not in s["keys"] for s in server.seen)


def test_numbering_from_0_is_caught_for_a_droid_server(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(droid_handler)
    report = _check(server.url, EndpointDialect.openpi, numbering=0)
    numbering = _finding(report, "exterior_numbering")
    assert numbering.status == Status.failed
    assert numbering.message.startswith(
        "The station numbers exterior cameras from 0: it sends observation/exterior_image_0_left, "
        "and your server failed on it ("
    )
    assert numbering.message.endswith(
        "but answered when the image came as observation/exterior_image_1_left. Register the "
        "endpoint again with exterior_numbering = 1 (the station will then send "
        "observation/exterior_image_1_left), or make your server read "
        "observation/exterior_image_0_left."
    )
    assert numbering.details["outcomes"] == {"0": "failed", "1": "read"}
    # the first failure is the one the summary leads with
    assert report.summary.startswith("Failed: The station numbers exterior cameras from 0")


# -- the RoboArena server -----------------------------------------------------------------
def test_a_roboarena_server_reading_0_runs_an_episode_with_numbering_0(
    field_server: Callable[..., FieldServer], station_db: Any, tmp_path: Path
) -> None:
    server = field_server(roboarena_handler)
    report = _check(server.url, EndpointDialect.roboarena, numbering=0)
    assert _finding(report, "exterior_numbering").status == Status.passed
    assert report.passed, report.summary

    server.seen.clear()
    summary = _episode(
        station_db,
        tmp_path,
        policy_url=server.url,
        dialect=EndpointDialect.roboarena,
        exterior_numbering=0,
    )
    assert summary.proposed == Outcome.ran_out_of_time, summary.reason
    assert summary.policy_calls >= 3 and len(server.seen) == summary.policy_calls
    # the image arrives under its key, at the size the config asked for
    assert all(s["shape"] == (180, 320, 3) for s in server.seen)


def test_the_default_numbering_is_caught_for_a_roboarena_server_reading_0(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(roboarena_handler)
    report = _check(server.url, EndpointDialect.roboarena)
    numbering = _finding(report, "exterior_numbering")
    assert numbering.status == Status.failed
    assert numbering.message == (
        "The station numbers exterior cameras from 1: it sends observation/exterior_image_1_left, "
        "and your server's actions do not change with it, but they do when the image comes as "
        "observation/exterior_image_0_left: your server reads that key and would run blind. "
        "Register the endpoint again with exterior_numbering = 0 (the station will then send "
        "observation/exterior_image_0_left), or make your server read "
        "observation/exterior_image_1_left."
    )
    assert not report.passed


# -- an openpi server behind a URL path (vLLM-Omni's robot endpoint) ----------------------
def test_an_openpi_server_behind_a_path_with_a_policy_server_config(
    field_server: Callable[..., FieldServer], station_db: Any, tmp_path: Path
) -> None:
    server = field_server(vllm_handler, path=VLLM_PATH)
    assert server.url.endswith(VLLM_PATH)
    report = _check(server.url, EndpointDialect.openpi, numbering=0)
    assert report.passed, report.summary
    metadata = _finding(report, "metadata")
    assert metadata.status == Status.passed  # not "looks like roboarena's"
    assert "Your first frame is a PolicyServerConfig" in metadata.message
    assert _finding(report, "replies").status == Status.passed  # bare arrays are its way
    errors = _finding(report, "error_convention")
    assert errors.message.startswith(
        "Sent an observation without images, your server reported the error as a "
        "{'type': 'error'} map, as vLLM-Omni's robot endpoint does"
    )
    sends = _finding(report, "station_sends")
    assert sends.details["request"][EXT0] == "uint8 (180, 320, 3)"
    assert sends.details["request"]["session_id"] == "text"
    assert "endpoint" not in sends.details["request"]
    assert sends.details["exterior_first_index"] == 0

    server.seen.clear()
    summary = _episode(
        station_db,
        tmp_path,
        policy_url=server.url,
        dialect=EndpointDialect.openpi,
        exterior_numbering=0,
    )
    assert summary.proposed == Outcome.ran_out_of_time, summary.reason
    assert summary.policy_calls >= 3 and len(server.seen) == summary.policy_calls
    assert all("session_id" in s["keys"] and s["shape"] == (180, 320, 3) for s in server.seen)


def test_the_default_numbering_is_caught_behind_the_path(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(vllm_handler, path=VLLM_PATH)
    report = _check(server.url, EndpointDialect.openpi)
    numbering = _finding(report, "exterior_numbering")
    assert numbering.status == Status.failed
    assert (
        "and your server failed on it (policy server sent an error map instead of actions), "
        "but answered when the image came as observation/exterior_image_0_left."
    ) in numbering.message
    assert "Register the endpoint again with exterior_numbering = 0" in numbering.message


def test_the_report_lists_what_the_station_sends(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(droid_handler)
    sends = _finding(_check(server.url, EndpointDialect.openpi), "station_sends")
    assert sends.status == Status.passed
    assert sends.details["request"] == {
        "observation/cartesian_position": "float32 (6,)",
        EXT1: "uint8 (224, 224, 3)",
        "observation/gripper_position": "float32 (1,)",
        "observation/joint_position": "float32 (7,)",
        WRIST: "uint8 (224, 224, 3)",
        "prompt": "text",
    }
    assert sends.details["exterior_first_index"] == 1
    assert sends.details["action_space"] == "joint_velocity"
    assert sends.message.startswith(
        "With your server the station speaks the openpi dialect. Each request carries "
        "observation/cartesian_position, observation/exterior_image_1_left, "
    )
    assert "fitted into 224×224 (H×W) and padded black" in sends.message
    assert "exterior cameras numbered from 1" in sends.message
    # DROID's server names no action space: DROID's joint velocities, in DROID's units
    assert sends.details["action_units"] == "droid"
    assert (
        "actions read as joint_velocity in droid units (action_units): DROID's normalised "
        "joint velocities in [-1, 1]: each step the station adds v × 0.2 rad"
    ) in sends.message
    assert "played one per control step at 15 Hz from the first row, at most 8 rows" in (
        sends.message
    )


def test_proctor_policy_check_takes_the_numbering(
    field_server: Callable[..., FieldServer],
) -> None:
    server = field_server(vllm_handler, path=VLLM_PATH)
    base = [*PROCTOR, "policy", "check", server.url, "--dialect", "openpi", "--json", "-"]
    run = {"capture_output": True, "text": True, "env": clean_env(), "cwd": ROOT, "timeout": 120}
    r = subprocess.run(base, **run)  # type: ignore[call-overload]
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Register the endpoint again with exterior_numbering = 0" in r.stdout
    r = subprocess.run([*base, "--exterior-numbering", "0"], **run)  # type: ignore[call-overload]
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"exterior_first_index": 0' in r.stdout
