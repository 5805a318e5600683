"""The release detector and the classifier on hand-made telemetry.

Each table is written in the recorder's schema by ``helpers.telemetry_table``
from scripted gripper operations whose true event times the helper computes
by its own stepping rules (the simulated 2F-85's), independently of the
detector.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pytest

from proctor.annotator.config import ClassifierThresholds, Thresholds, load_thresholds
from proctor.annotator.detector import Signals, Zone, detect
from proctor.annotator.pipeline import analyze_table
from proctor.core.errors import UsageError
from proctor.core.recording import keys
from tests.annotator.helpers import (
    HZ,
    POLL_LATENCY_S,
    POLL_S,
    SOURCE_XY,
    TARGET_XY,
    Op,
    telemetry_table,
    true_events,
)

TH = Thresholds()  # the defaults: release_open 0.03 is the helper's release rule
LAYOUT = TH.cell.layout("left")


def run(table: pa.Table, items: int = 8, th: Thresholds = TH) -> list:
    return analyze_table(table, t0=100.0, items=items, tote_side="left", thresholds=th)


def with_column(table: pa.Table, name: str, values: np.ndarray) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), pa.array(values))


def col(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False).copy()


def test_a_release_over_the_target_is_a_success_at_the_true_time() -> None:
    ops = [Op(1.0, 3.0)]
    [(kind, t_true)] = true_events(ops, 5)
    [c] = run(telemetry_table(ops, 5))
    assert (kind, c.candidate.kind) == ("release", "release")
    assert c.candidate.t_s == pytest.approx(t_true, abs=1e-9)
    assert c.candidate.zone == Zone.target
    assert c.is_success and c.verdict.rule == "release over the target bin"
    f = c.candidate.features
    # held from the moment the fingers stopped on the item until the release command
    assert f["hold_s"] == pytest.approx(3.0 - (1.0 + 0.8 / 1.75), abs=0.02)
    assert f["displacement_m"] == pytest.approx(abs(TARGET_XY[1] - SOURCE_XY[1]), abs=1e-3)
    assert f["hold_position"] == pytest.approx(0.8)
    assert f["target_ledger"] == 1
    assert c.verdict.score == pytest.approx(0.12)  # the bin's half width: dead centre


def test_a_missed_grasp_gives_no_candidate() -> None:
    ops = [Op(1.0, 3.0, held=False)]
    assert true_events(ops, 5) == []
    assert run(telemetry_table(ops, 5)) == []


def test_a_slip_in_transit_is_a_failure_at_the_slip_time() -> None:
    ops = [Op(1.0, 4.0, slip_at=2.5)]
    [(kind, t_true)] = true_events(ops, 6)
    [c] = run(telemetry_table(ops, 6))
    assert (kind, c.candidate.kind) == ("slip", "slump")
    assert c.candidate.t_s == pytest.approx(t_true, abs=1e-9)
    assert c.candidate.zone == Zone.elsewhere
    assert c.verdict.verdict.value == "failure"


def test_a_slip_over_the_target_bin_is_a_placement() -> None:
    # the item slips while the hand waits over the target bin
    ops = [Op(1.0, 4.0, slip_at=3.85)]
    [c] = run(telemetry_table(ops, 6))
    assert c.candidate.kind == "slump" and c.candidate.zone == Zone.target
    assert c.is_success and c.verdict.rule == "slip over the target bin"


def test_a_hold_shorter_than_the_minimum_is_ignored() -> None:
    # the fingers reach the item at 1.457 s; the release command comes 0.14 s later
    ops = [Op(1.0, 1.6)]
    assert [k for k, _ in true_events(ops, 3)] == ["release"]
    assert run(telemetry_table(ops, 3)) == []
    shorter = dataclasses.replace(TH, detector=dataclasses.replace(TH.detector, min_hold_s=0.1))
    assert len(run(telemetry_table(ops, 3), th=shorter)) == 1


def test_a_release_over_the_source_bin_is_neutral() -> None:
    [c] = run(telemetry_table([Op(1.0, 3.0, release_xy=SOURCE_XY)], 5))
    assert c.candidate.zone == Zone.source
    assert c.verdict.verdict.value == "neutral"


def test_a_release_outside_both_bins_is_a_failure() -> None:
    [c] = run(telemetry_table([Op(1.0, 3.0, release_xy=(0.75, 0.0))], 5))
    assert c.candidate.zone == Zone.elsewhere
    assert c.verdict.verdict.value == "failure"


def test_a_target_flicker_that_never_opens_the_fingers_is_no_release() -> None:
    ops = [Op(1.0, 4.0)]
    table = telemetry_table(ops, 6)
    target, position = col(table, keys.GRIPPER_TARGET), col(table, keys.GRIPPER_POSITION)
    k = 200  # t = 2.0 s: one sample of "open", the fingers give one step (0.0175), then hold again
    target[k] = 0.0
    position[k] = 0.8 - 0.0175
    table = with_column(table, keys.GRIPPER_TARGET, target)
    table = with_column(table, keys.GRIPPER_POSITION, position)
    [(_, t_true)] = true_events(ops, 6)
    [c] = run(table)
    assert c.candidate.t_s == pytest.approx(t_true)


def test_still_closed_when_the_recording_ends_gives_no_release() -> None:
    assert run(telemetry_table([Op(1.0, 30.0)], 5)) == []


def test_the_target_ledger_stops_more_successes_than_items() -> None:
    ops = [Op(1.0, 3.0), Op(4.0, 6.0), Op(7.0, 9.0)]
    out = run(telemetry_table(ops, 11), items=2)
    assert [c.candidate.features["target_ledger"] for c in out] == [1, 2, 3]
    assert [c.verdict.verdict.value for c in out] == ["success", "success", "unknown"]
    assert "already received all 2 items" in out[2].verdict.rule


def test_a_landing_on_the_rim_is_unknown() -> None:
    rim_y = TARGET_XY[1] + LAYOUT.target.half_y - 0.004  # 4 mm inside the rim
    [c] = run(telemetry_table([Op(1.0, 3.0, release_xy=(0.5, rim_y))], 5))
    assert c.verdict.verdict.value == "unknown"
    assert "rim" in c.verdict.rule


def test_the_zone_follows_the_ballistic_landing_point() -> None:
    """A release while the hand sweeps outwards at 1 m/s, 3 cm inside the target
    bin's far rim, from 11 cm up: the item flies ~15 cm further and lands
    outside the bin."""
    ops = [Op(1.0, 3.0, release_xy=(0.5, TARGET_XY[1] + 0.09))]
    table = telemetry_table(ops, 5)
    y = col(table, keys.EE_Y)
    t = col(table, keys.T) - 100.0
    sweep = (t > 2.7) & (t < 3.3)
    y[sweep] = TARGET_XY[1] + 0.09 + (t[sweep] - 3.01)
    [c] = run(with_column(table, keys.EE_Y, y))
    assert c.candidate.features["zone_at_release"] == Zone.target
    assert c.candidate.features["vy"] == pytest.approx(1.0, abs=0.01)
    assert c.candidate.zone == Zone.elsewhere
    assert c.verdict.verdict.value == "failure"
    under_tool = dataclasses.replace(
        TH, classifier=dataclasses.replace(TH.classifier, use_landing=False)
    )
    [c2] = run(with_column(table, keys.EE_Y, y), th=under_tool)
    assert c2.is_success


def test_the_object_flag_is_not_needed() -> None:
    """Without the gripper's object flag the plateau alone marks the hold."""
    ops = [Op(1.0, 3.0), Op(4.0, 6.0, held=False), Op(7.0, 10.0, slip_at=8.5)]
    table = telemetry_table(ops, 12)
    with_flag = [(c.candidate.kind, c.candidate.t_s) for c in run(table)]
    no_flag = table.drop_columns([keys.GRIPPER_OBJECT])
    assert [(c.candidate.kind, c.candidate.t_s) for c in run(no_flag)] == with_flag
    assert with_flag == [("release", 3.01), ("slump", 8.5)]


def test_nan_samples_are_carried_forward() -> None:
    ops = [Op(1.0, 3.0)]
    table = telemetry_table(ops, 5)
    target = col(table, keys.GRIPPER_TARGET)
    target[:5] = np.nan  # before the gripper first reported
    target[150] = np.nan
    [c] = run(with_column(table, keys.GRIPPER_TARGET, target))
    assert c.candidate.t_s == pytest.approx(true_events(ops, 5)[0][1])


def test_unsorted_samples_are_put_in_time_order() -> None:
    ops = [Op(1.0, 3.0)]
    table = telemetry_table(ops, 5)
    order = np.random.default_rng(3).permutation(table.num_rows)
    [c] = run(table.take(pa.array(order)))
    assert c.candidate.t_s == pytest.approx(true_events(ops, 5)[0][1])


def test_a_missing_column_is_named() -> None:
    table = telemetry_table([Op(1.0, 3.0)], 5).drop_columns([keys.GRIPPER_POSITION])
    with pytest.raises(UsageError, match=keys.GRIPPER_POSITION):
        Signals.from_table(table, t0=100.0)


def test_too_short_a_recording_has_no_candidates() -> None:
    table = telemetry_table([Op(1.0, 3.0)], 5).slice(0, 1)
    assert detect(Signals.from_table(table, t0=100.0), LAYOUT, TH.detector) == []


def test_the_shipped_thresholds_find_the_same_events() -> None:
    """The calibrated file (tuned on the simulated cell's polled 2F-85) finds
    the scripted events, read through a polled status, within one poll period
    and its reply's latency of the truth."""
    shipped = load_thresholds()
    ops = [Op(1.0, 3.0), Op(4.0, 6.0, held=False), Op(7.0, 10.0, slip_at=8.5)]
    out = run(telemetry_table(ops, 12, polled_status=True), th=shipped)
    truth = true_events(ops, 12)
    assert [c.candidate.kind for c in out] == ["release", "slump"]
    for c, (_, t) in zip(out, truth, strict=True):
        assert abs(c.candidate.t_s - t) <= POLL_S + POLL_LATENCY_S
    assert isinstance(shipped.classifier, ClassifierThresholds)


def test_a_polled_quantised_status_delays_the_events_by_at_most_a_poll() -> None:
    """Read through a 50 Hz, 8-bit status poll (as a 2F-85 is), the same
    operations give the same events, each seen at most one poll (plus its
    reply's latency and a sample) after it happened, never before."""
    ops = [Op(1.0, 3.0), Op(4.0, 6.0, held=False), Op(7.0, 10.0, slip_at=8.5)]
    truth = true_events(ops, 12)
    out = run(telemetry_table(ops, 12, polled_status=True))
    assert [c.candidate.kind for c in out] == ["release", "slump"]
    for c, (_, t) in zip(out, truth, strict=True):
        assert 0.0 <= c.candidate.t_s - t <= POLL_S + POLL_LATENCY_S + 1 / HZ + 1e-9
