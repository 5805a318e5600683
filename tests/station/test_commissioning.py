"""The commissioned cell (``proctor.station.commissioning.cell_file``): its file, its checks,
the layout it gives the manifest, how the real profile applies it, and the
host checks of pre-flight (on a fake sysfs tree)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from proctor.annotator.pipeline import parse_layout
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.domain import Side
from proctor.core.errors import ConfigError
from proctor.core.recording.reader import load_recording
from proctor.core.work import Work
from proctor.station.commissioning.cell_file import (
    TablePlane,
    Tcp,
    Tote,
    load_commissioned,
)
from proctor.station.config import load_station_config
from proctor.station.envelope import envelope_settings
from proctor.station.framing import image_similarity, load_image, save_image
from proctor.station.preflight import (
    CheckStatus,
    PreflightSettings,
    check_commissioned,
    check_cpu_governor,
    check_realtime_kernel,
)
from proctor.station.profiles import build_cell
from tests.station.commissioning_support import LIMITS, TABLE_POINTS, a_cell, real_config
from tests.station.conftest import sim_config


def test_the_file_round_trips_and_gives_the_manifest_its_layout(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    a_cell().save(path)
    loaded = load_commissioned(path, LIMITS.q_min, LIMITS.q_max)
    assert loaded == a_cell() and loaded.path == path
    assert json.loads(path.read_text())["format"] == "proctor.commissioned_cell/1"
    assert loaded.reference_image("exterior") == tmp_path / "cell.exterior.png"
    # the target tote is the one on the episode's tote side (+y is the robot's left)
    layout = loaded.layout(Side.left, Side.right)
    assert layout["target_bin"] == [0.5, 0.24, 0.15, 0.12]
    assert layout["source_bin"] == [0.5, -0.24, 0.15, 0.12]
    assert layout["table_z"] == pytest.approx(-0.0205, abs=1e-3)
    # the annotator reads it as it reads the simulated cell's
    parsed = parse_layout(layout, tote_side="left")
    assert parsed.target.cy == pytest.approx(0.24) and parsed.rim_height == pytest.approx(0.08)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"workspace_min": (0.7, -0.41, 0.0)}, "workspace_min must be below workspace_max"),
        ({"workspace_min": (0.3, -0.41, -0.1)}, "below the table"),
        (
            {"home_q": (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 3.5)},
            "home_q: joint 7 at 3.500 rad is outside its limits",
        ),
        (
            {"totes": {"left": Tote(0.5, -0.24, 0.1, 0.1), "right": Tote(0.5, 0.24, 0.1, 0.1)}},
            "left tote must be at larger y",
        ),
        ({"tcp": Tcp((0.0, 0.0, 0.16), (0.0, 0.0, 0.5, 0.5))}, "unit quaternion"),
    ],
)
def test_a_cell_that_cannot_be_right_is_refused(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    path = tmp_path / "cell.json"
    a_cell(**changes).save(path)
    with pytest.raises(ConfigError, match=message):
        load_commissioned(path, LIMITS.q_min, LIMITS.q_max)


def test_the_table_fit_refuses_points_that_are_not_a_table() -> None:
    with pytest.raises(ConfigError, match="on a line"):
        TablePlane.fit([(0.3, 0.0, 0.0), (0.5, 0.0, 0.0), (0.7, 0.0, 0.0)])
    with pytest.raises(ConfigError, match="tilts"):
        TablePlane.fit([(0.3, 0.0, 0.0), (0.5, 0.0, 0.1), (0.5, 0.2, 0.1)])
    with pytest.raises(ConfigError, match="off the fitted plane"):
        TablePlane.fit([*TABLE_POINTS, (0.55, 0.0, 0.0)])


@pytest.mark.parametrize(
    ("arm", "message"),
    [
        # was clipped into the limits at homing; now refused at load
        ({"home_q": [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 3.0]}, "home_q joint 7"),
        ({"workspace_min": [0.5, -0.6, 0.02], "workspace_max": [0.4, 0.6, 0.9]}, "workspace_min"),
        # libfranka's realtime check stays on for the real arm (review #9)
        ({"realtime": "ignore"}, r"real\.arm: realtime is set by the profile"),
    ],
)
def test_the_real_profile_refuses_an_unsafe_arm_config(
    tmp_path: Path, arm: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        build_cell("real", real_config(tmp_path, arm))


def test_the_real_profile_configures_the_arm_from_the_commissioned_cell(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    a_cell().save(path)
    cell = build_cell("real", real_config(tmp_path, {}, path))
    c = cell.arm.config
    assert cell.commissioned == a_cell()
    assert c.realtime == "enforce"  # type: ignore[attr-defined]
    assert c.tcp == (0.0, 0.0, 0.16, 0.0, 0.0, 0.0, 1.0)  # type: ignore[attr-defined]
    assert c.payload_mass == 1.1 and c.payload_com == (0.0, 0.0, 0.06)  # type: ignore[attr-defined]
    assert c.workspace_min == (0.3, -0.41, 0.0) and c.home_q == LIMITS.home_q
    # the measured values are not overridden by hand
    with pytest.raises(ConfigError, match="home_q is set by the commissioned cell"):
        build_cell("real", real_config(tmp_path, {"home_q": list(LIMITS.home_q)}, path))
    assert check_commissioned(cell, "real").status == CheckStatus.passed
    bare = build_cell("real", real_config(tmp_path, {}))
    assert check_commissioned(bare, "real").status == CheckStatus.failed
    assert check_commissioned(bare, "twin").status == CheckStatus.warning


def _with_envelope(tmp_path: Path, path: Path, **envelope: object):  # type: ignore[no-untyped-def]
    base = real_config(tmp_path, {}, path)
    return load_station_config(
        None, **{**base.model_dump(exclude_unset=True), "envelope": envelope}
    )


def test_a_real_station_enforces_the_commissioned_box_and_table(tmp_path: Path) -> None:
    """Hardware review #2 / issue 29 item 4: the envelope in force on a real
    cell is the commissioned one, read back from what the control loop builds
    (``envelope_settings(config, cell.envelope_defaults)``), not the defaults'
    box with the table at z = 0 of the base frame."""
    path = tmp_path / "cell.json"
    a_cell().save(path)
    config = real_config(tmp_path, {}, path)
    cell = build_cell("real", config)
    limits = envelope_settings(config, cell.envelope_defaults)
    assert limits.workspace_min == (0.3, -0.41, 0.0)
    assert limits.workspace_max == (0.7, 0.41, 0.5)
    # the table's highest point under the box (it is 2 cm below the base and
    # tilted by 1 mm over 0.5 m): never z = 0
    table = a_cell().table
    corners = [table.z_at(x, y) for x in (0.3, 0.7) for y in (-0.41, 0.41)]
    assert limits.table_z == pytest.approx(max(corners))
    assert -0.0205 < limits.table_z < -0.0199
    # homing clears the highest rim (8 cm above the table), a margin and the
    # longest item (the default 0.25 m)
    rim = max(table.z_at(0.5, y) for y in (0.24, -0.24)) + 0.08
    assert cell.arm.config.home_clearance_z_m == pytest.approx(rim + 0.05 + 0.25)  # type: ignore[attr-defined]
    # an uncommissioned real cell keeps the defaults (and fails pre-flight)
    assert build_cell("real", real_config(tmp_path, {})).envelope_defaults == {}


@pytest.mark.parametrize(
    ("envelope", "message"),
    [
        ({"workspace_max": (0.8, 0.41, 0.5)}, "envelope.workspace_max.*outside the commissioned"),
        ({"workspace_min": (0.3, -0.45, 0.0)}, "envelope.workspace_min.*outside the commissioned"),
        ({"table_z": -0.1}, "envelope.table_z.*below the commissioned table"),
    ],
)
def test_an_envelope_wider_than_the_commissioned_one_is_refused(
    tmp_path: Path, envelope: dict[str, object], message: str
) -> None:
    path = tmp_path / "cell.json"
    a_cell().save(path)
    with pytest.raises(ConfigError, match=message):
        build_cell("real", _with_envelope(tmp_path, path, **envelope))


def test_an_envelope_may_narrow_the_commissioned_one(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    a_cell().save(path)
    config = _with_envelope(tmp_path, path, workspace_max=(0.6, 0.3, 0.4), table_z=0.0)
    limits = envelope_settings(config, build_cell("real", config).envelope_defaults)
    assert limits.workspace_max == (0.6, 0.3, 0.4) and limits.table_z == 0.0


def test_a_home_clearance_below_the_commissioned_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    a_cell().save(path)
    with pytest.raises(ConfigError, match=r"home_clearance_z_m: 0\.1 m is below"):
        build_cell("real", real_config(tmp_path, {"home_clearance_z_m": 0.1}, path))
    higher = build_cell("real", real_config(tmp_path, {"home_clearance_z_m": 0.6}, path))
    assert higher.arm.config.home_clearance_z_m == 0.6  # type: ignore[attr-defined]


def test_framing_similarity_sees_a_moved_camera_not_the_light(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    # a scene with structure at the thumbnail's scale: blocks of random grey
    scene = np.kron(rng.integers(0, 255, (12, 16)), np.ones((40, 40))).astype(np.uint8)
    scene = np.repeat(scene[:, :, None], 3, axis=2)
    save_image(tmp_path / "ref.png", scene)
    reference = load_image(tmp_path / "ref.png")
    assert np.array_equal(reference, scene)  # PNG: the reference stays exact
    noisy = np.clip(scene + rng.normal(0, 12, scene.shape), 0, 255).astype(np.uint8)
    darker = (scene * 0.6).astype(np.uint8)
    turned = np.roll(scene, 120, axis=1)  # the camera panned by a quarter of the view
    assert image_similarity(reference, noisy) > 0.9
    assert image_similarity(reference, darker) > 0.9
    assert image_similarity(reference, turned) < 0.3
    assert image_similarity(reference, np.zeros_like(scene)) == 0.0  # a covered lens


def _sysfs(root: Path, realtime: str | None, governors: list[str]) -> PreflightSettings:
    if realtime is not None:
        (root / "kernel").mkdir(parents=True)
        (root / "kernel" / "realtime").write_text(realtime + "\n")
    for i, g in enumerate(governors):
        d = root / "devices" / "system" / "cpu" / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "scaling_governor").write_text(g + "\n")
    return PreflightSettings.for_profile("real", {"preflight": {"sysfs_root": str(root)}})


def test_preflight_host_checks_on_a_fake_sysfs(tmp_path: Path) -> None:
    rt = _sysfs(tmp_path / "rt", "1", ["performance", "performance"])
    assert check_realtime_kernel(rt).status == CheckStatus.passed
    assert check_cpu_governor(rt).status == CheckStatus.passed
    stock = _sysfs(tmp_path / "stock", None, ["performance", "powersave"])
    result = check_realtime_kernel(stock)
    assert result.status == CheckStatus.failed and result.name == "realtime kernel"
    assert "not a PREEMPT_RT kernel" in result.detail
    result = check_cpu_governor(stock)
    assert result.status == CheckStatus.failed and "cpu1=powersave" in result.detail
    zero = _sysfs(tmp_path / "zero", "0", [])
    assert check_realtime_kernel(zero).status == CheckStatus.failed
    assert check_cpu_governor(zero).status == CheckStatus.warning  # no cpufreq at all (a VM)
    # off the real cell a stock kernel is a warning (franky-sim keeps no deadlines)
    twin = PreflightSettings.for_profile("twin", {"preflight": {"sysfs_root": str(tmp_path)}})
    assert check_realtime_kernel(twin).status == CheckStatus.warning


def test_a_commissioned_layout_goes_into_the_manifest(
    station_db, serve_demo, tmp_path: Path
) -> None:
    """The runner writes the commissioned cell's layout, for the episode's
    tote side, into the manifest (the simulated cell stands in for a
    commissioned real one: the wiring is the same)."""
    from proctor.station.episode_runner import EpisodeRunner

    _, sessions = station_db
    store = LocalArtifactStore(tmp_path / "artifacts")
    url = serve_demo("reference")
    cfg = sim_config()
    cell = build_cell("sim", cfg)
    cell.commissioned = a_cell()
    runner = EpisodeRunner(
        cell, config=cfg, sessions=sessions, store=store, spool_root=tmp_path / "spool"
    )
    runner.open()
    try:
        work = Work(
            run_code="R-COMM1",
            object_name="towels",
            items=1,
            per_item_cap_s=2.0,
            tote_side=Side.left,
            camera_side=Side.right,
            policy_url=url,
            sim_seed=1,
        )
        runner.arm(work)
        runner.start(background=False)
        summary = runner.last
    finally:
        runner.close()
    assert summary is not None
    with sessions() as s:
        manifest = load_recording(s, store, summary.uid).manifest
    assert manifest["layout"] == a_cell().layout(Side.left, Side.right)
    assert manifest["layout"]["source"] == "commissioned"
