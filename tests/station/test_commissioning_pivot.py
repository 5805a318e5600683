"""Commissioning's optional steps (second hardware review #5, deploy step 9b):
the pivot check of the typed TCP, and the 2F-85's fully-closed reading, which
the real profile hands to the gripper."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from proctor.core.errors import ConfigError
from proctor.core.geometry import euler_to_matrix, matrix_to_quat, quat_to_matrix
from proctor.station.commissioning.cell_file import (
    Payload,
    Tcp,
    TcpPivot,
    flange_pose,
    load_commissioned,
)
from proctor.station.commissioning.procedure import (
    Inputs,
    Operator,
    _inputs,
    measure_closed_counts,
    measure_pivot,
)
from proctor.station.config import load_station_config
from proctor.station.profiles import build_cell
from tests.station.commissioning_support import LIMITS, a_cell, real_config

TCP_TRUE = np.array([0.001, -0.002, 0.163])  # flange frame, m
POINT = np.array([0.52, 0.08, 0.04])  # base frame, m
DOWN = euler_to_matrix([math.pi, 0.0, 0.0])


def orientations(tilts: list[tuple[float, float, float]]) -> list[np.ndarray]:
    return [DOWN @ euler_to_matrix(np.radians(t)) for t in tilts]


SPREAD = orientations([(25, 0, 0), (-25, 0, 10), (0, 25, -20), (0, -25, 30), (15, 15, 0)])


def poses(rotations: list[np.ndarray], noise_m: float = 0.0, seed: int = 0) -> list[Any]:
    """Flange poses with the fingertip (TCP_TRUE) on POINT: t_i = c − R_i p."""
    rng = np.random.default_rng(seed)
    out = []
    for r in rotations:
        t = POINT - r @ TCP_TRUE + rng.normal(0.0, noise_m, 3)
        out.append((*t, *matrix_to_quat(r)))
    return out


def test_exact_poses_give_the_tcp_and_the_point() -> None:
    pivot = TcpPivot.solve(poses(SPREAD))
    np.testing.assert_allclose(pivot.tcp_xyz, TCP_TRUE, atol=1e-9)
    np.testing.assert_allclose(pivot.point, POINT, atol=1e-9)
    assert pivot.residual_m < 1e-9
    pivot.check(Tcp((0.0, 0.0, 0.16)))  # 3.7 mm from the typed one: within 5 mm


def test_noisy_poses_still_find_the_tcp_within_a_few_mm() -> None:
    many = orientations(
        [(a, b, c) for a in (-25, 0, 25) for b in (-25, 0, 25) for c in (0, 30) if (a, b) != (0, 0)]
    )
    pivot = TcpPivot.solve(poses(many, noise_m=0.0003, seed=4))
    assert float(np.linalg.norm(np.asarray(pivot.tcp_xyz) - TCP_TRUE)) < 0.002
    assert 0.0001 < pivot.residual_m < 0.001


def test_a_typed_tcp_the_pivot_disagrees_with_is_refused_naming_both() -> None:
    pivot = TcpPivot.solve(poses(SPREAD))
    with pytest.raises(
        ConfigError,
        match=r"tcp: the pivot check measures the TCP at \[1\.0, -2\.0, 163\.0\] mm, the typed "
        r"--tcp is \[0\.0, 0\.0, 150\.0\] mm: 13\.2 mm apart \(limit 5 mm; residual 0\.0 mm\)",
    ):
        pivot.check(Tcp((0.0, 0.0, 0.15)))


def test_a_fingertip_that_slid_off_the_point_is_refused() -> None:
    pivot = TcpPivot.solve(poses(SPREAD, noise_m=0.005, seed=1))
    with pytest.raises(ConfigError, match=r"tcp_pivot: the fingertip moved off the point"):
        pivot.check(Tcp(tuple(TCP_TRUE)))  # type: ignore[arg-type]


def test_orientations_about_one_axis_are_refused_as_ill_conditioned() -> None:
    """Turning about one axis leaves the TCP's component along it (and the
    point's) undetermined: refused, not solved to an arbitrary answer."""
    about_z = orientations([(0, 0, a) for a in (0, 40, 80, 120, 160)])
    with pytest.raises(ConfigError, match=r"too alike to determine the TCP .*ill-conditioned"):
        TcpPivot.solve(poses(about_z))
    with pytest.raises(ConfigError, match=r"tcp_pivot\.poses: .* at least 4 orientations, got 3"):
        TcpPivot.solve(poses(SPREAD[:3]))


def test_the_flange_pose_removes_the_configured_tcp() -> None:
    tcp = Tcp((0.01, 0.0, 0.16), tuple(matrix_to_quat(euler_to_matrix([0, 0, -math.pi / 4]))))  # type: ignore[arg-type]
    for pose in poses(SPREAD):
        o_t_f = np.eye(4)
        o_t_f[:3, :3], o_t_f[:3, 3] = quat_to_matrix(np.asarray(pose[3:])), pose[:3]
        o_t_ee = o_t_f @ tcp.matrix()
        ee = np.array([*o_t_ee[:3, 3], *matrix_to_quat(o_t_ee[:3, :3])])
        back = np.asarray(flange_pose(ee, tcp))
        np.testing.assert_allclose(back[:3], pose[:3], atol=1e-12)
        assert abs(abs(float(back[3:] @ np.asarray(pose[3:]))) - 1.0) < 1e-12


def test_the_pivot_step_reads_the_arm_at_each_touch() -> None:
    """Interactive: the operator says yes, then Enter at each of 4 touches;
    the arm reports O_T_EE with the typed TCP configured; the solved TCP is
    shown and returned."""
    typed = Tcp((0.0, 0.0, 0.16))
    ee = []
    for pose in poses(SPREAD[:4]):
        o_t_f = np.eye(4)
        o_t_f[:3, :3], o_t_f[:3, 3] = quat_to_matrix(np.asarray(pose[3:])), pose[:3]
        o_t_ee = o_t_f @ typed.matrix()
        ee.append(np.array([*o_t_ee[:3, 3], *matrix_to_quat(o_t_ee[:3, :3])]))
    touches = iter(ee)
    held: list[np.ndarray] = []  # where the operator holds the tool now
    cell = SimpleNamespace(
        arm=SimpleNamespace(read_state=lambda: SimpleNamespace(ee_pose=held[-1]))
    )
    prompts: list[str] = []

    def prompt(text: str, default: str) -> str:
        prompts.append(text)
        if "orientation" in text:
            held.append(next(touches))
        if text.endswith("(y/n)"):
            assert default == "n"  # nothing optional happens by default
            return "y"
        return default

    said: list[str] = []
    op = Operator(True, echo=said.append, prompt=prompt)
    pivot = measure_pivot(cell, Inputs(tcp=typed), op)  # type: ignore[arg-type]
    assert pivot is not None
    np.testing.assert_allclose(pivot.tcp_xyz, TCP_TRUE, atol=1e-9)
    assert sum("orientation" in p for p in prompts) == 4
    assert any(s.startswith("TCP pivot check: [1.0, -2.0, 163.0] mm") for s in said)


def test_the_pivot_step_non_interactive_takes_the_poses_or_skips() -> None:
    given = [",".join(f"{v:.12g}" for v in p) for p in poses(SPREAD)]
    inputs = _inputs(
        "0,0,0.16", 1.0, "0,0,0", None, None, None, None, None, None,
        Operator(False, echo=lambda _: None), pivot_pose=given,
    )  # fmt: skip
    said: list[str] = []
    op = Operator(False, echo=said.append)
    pivot = measure_pivot(SimpleNamespace(), inputs, op)  # type: ignore[arg-type]
    assert pivot is not None and pivot.residual_m < 1e-6
    # nothing given: skipped, saying so (nothing optional happens unasked)
    bare = dataclasses.replace(inputs, pivot_poses=None)
    assert measure_pivot(SimpleNamespace(), bare, op) is None  # type: ignore[arg-type]
    assert "TCP pivot check: skipped" in said
    # asked for, but nobody to touch: refused naming the option that answers it
    with pytest.raises(Exception, match="--pivot-pose"):
        measure_pivot(SimpleNamespace(), dataclasses.replace(bare, pivot=True), op)  # type: ignore[arg-type]


class FakeGripper:
    def __init__(self) -> None:
        self.sent: list[float] = []
        self.measured = 0

    def needs_activation(self) -> bool:
        return False

    def measure_closed_counts(self) -> int:
        self.measured += 1
        return 227

    def send(self, command: Any) -> Any:
        self.sent.append(command.position)
        return command


def test_the_closed_reading_is_measured_only_when_the_operator_confirms() -> None:
    gripper = FakeGripper()
    cell = SimpleNamespace(gripper=gripper)
    said: list[str] = []
    quiet = Operator(False, echo=said.append)
    assert measure_closed_counts(cell, Inputs(), quiet) is None  # type: ignore[arg-type]
    assert gripper.measured == 0 and "gripper closed reading: skipped" in said
    answers = iter(["n", "y"])
    asking = Operator(True, echo=said.append, prompt=lambda text, default: next(answers))
    assert measure_closed_counts(cell, Inputs(), asking) is None  # type: ignore[arg-type]
    assert gripper.measured == 0
    assert measure_closed_counts(cell, Inputs(), asking) == 227  # type: ignore[arg-type]
    assert gripper.measured == 1 and gripper.sent == [0.0]  # opened again
    assert measure_closed_counts(cell, Inputs(measure_closed=True), quiet) == 227  # type: ignore[arg-type]
    assert measure_closed_counts(cell, Inputs(closed_counts=230), quiet) == 230  # type: ignore[arg-type]
    assert gripper.measured == 2


def test_the_file_keeps_the_pivot_and_the_closed_reading(tmp_path: Path) -> None:
    cell = a_cell(tcp_pivot=TcpPivot.solve(poses(SPREAD)), gripper_closed_counts=227)
    path = tmp_path / "cell.json"
    cell.save(path)
    loaded = load_commissioned(path, LIMITS.q_min, LIMITS.q_max)
    assert loaded == cell
    # a stored pivot that disagrees with the stored TCP is refused at load
    bad = dataclasses.replace(cell, tcp=Tcp((0.0, 0.0, 0.15)), payload=Payload(1.1))
    bad.save(path)
    with pytest.raises(ConfigError, match=r"cell\.json: tcp: the pivot check measures"):
        load_commissioned(path, LIMITS.q_min, LIMITS.q_max)
    a_cell(gripper_closed_counts=300).save(path)
    with pytest.raises(ConfigError, match=r"gripper_closed_counts: expected 1–255, got 300"):
        load_commissioned(path, LIMITS.q_min, LIMITS.q_max)


def test_the_real_profile_takes_closed_counts_from_the_commissioned_cell(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    a_cell(gripper_closed_counts=227).save(path)
    cell = build_cell("real", real_config(tmp_path, {}, path))
    assert cell.gripper.config.closed_counts == 227  # type: ignore[attr-defined]
    config = real_config(tmp_path, {}, path)
    section = config.profile_section("real")
    section["gripper"] = {**section["gripper"], "closed_counts": 230}
    hand_set = config.model_copy(update={"real": section})
    with pytest.raises(
        ConfigError, match=r"real\.gripper: closed_counts is set by the commissioned cell"
    ):
        build_cell("real", hand_set)
    # a cell commissioned without it leaves the config's (or the default) in force
    a_cell().save(path)
    assert build_cell("real", hand_set).gripper.config.closed_counts == 230  # type: ignore[attr-defined]


def test_the_twin_profile_refuses_a_hand_set_closed_counts_before_any_peer_starts(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cell.json"
    a_cell(gripper_closed_counts=227).save(path)
    config = load_station_config(None, commissioned=path, twin={"gripper": {"closed_counts": 230}})
    with pytest.raises(
        ConfigError, match=r"twin\.gripper: closed_counts is set by the commissioned cell"
    ):
        build_cell("twin", config)
