"""The typed result contract: the JSON ``to_json`` writes reads back strictly
as ``LeaderboardSnapshot``, older versions through explicit migrations, and a
statistic added as one row of ``METRICS`` reaches every reader."""

from __future__ import annotations

import copy
import dataclasses
import io

import numpy as np
import pytest
from rich.console import Console

from proctor.analysis import cli as analysis_cli
from proctor.analysis import metrics
from proctor.analysis.episodes import EpisodeTable
from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import RESULT_KEYS, to_json
from proctor.analysis.results import AnalysisProtocol, PolicyResult
from proctor.analysis.snapshot import (
    SCHEMA,
    SCHEMA_V1,
    IntervalSnapshot,
    SnapshotError,
    migrate,
    read_snapshot,
)
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models
from tests.analysis.metrics_support import DUMMY


@pytest.fixture(scope="module")
def table() -> EpisodeTable:
    eps = cohort(
        phail_like_models()[:3], PHAIL_OBJECTS, episodes_per_cell=6, rng=np.random.default_rng(8)
    )
    return EpisodeTable(tuple(eps))


@pytest.fixture(scope="module")
def board(table: EpisodeTable):  # type: ignore[no-untyped-def]
    return analyze(table, AnalysisProtocol(tau=240.0, bootstrap=60, seed=2))


@pytest.fixture(scope="module")
def doc(board) -> dict:  # type: ignore[no-untyped-def]
    return to_json(board, code_version="t", data_version="d")


def test_the_result_json_reads_back_typed_and_equal(board, doc) -> None:  # type: ignore[no-untyped-def]
    snap = read_snapshot(doc)
    assert snap.schema == SCHEMA
    assert [p.policy for p in snap.policies] == [p.policy for p in board.policies]
    for typed, result in zip(snap.policies, board.policies, strict=True):
        assert typed.rank == result.rank and typed.episodes == result.episodes
        for m in metrics.METRICS:
            iv = m.read(result)
            got = typed.metric(m.name)
            if iv is None:
                assert got is None, m.name
                continue
            assert got is not None, m.name
            # the JSON writes non-finite values as null
            finite = iv.estimate is not None and np.isfinite(iv.estimate)
            expected = iv.estimate if finite else None
            assert got.estimate == pytest.approx(expected), m.name
    for typed_pair, pair in zip(snap.pairs, board.pairs, strict=True):
        assert (typed_pair.a, typed_pair.b, typed_pair.verdict) == (pair.a, pair.b, pair.verdict)
        assert typed_pair.macro_ks.p_bonferroni == pair.ks_p_bonferroni


def test_every_interval_of_a_policy_is_a_row_of_the_metric_table() -> None:
    """A new interval field of PolicyResult without a METRICS row would be
    written by no one: the recipe is a formula, a field and a row."""
    rows = {m.json_path[0] for m in metrics.METRICS}
    fields = {f.name for f in dataclasses.fields(PolicyResult) if "Interval" in str(f.type)}
    assert fields - rows == set()
    names = [m.name for m in metrics.METRICS]
    assert len(names) == len(set(names))
    assert len({m.json_path for m in metrics.METRICS}) == len(names)
    assert {k for m in metrics.METRICS for k in m.json_path} <= RESULT_KEYS


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d["policies"][1].update(surprise=1),
            r"policies\[1\]: unknown key\(s\) \['surprise'\]",
        ),
        (lambda d: d["pairs"][0]["macro_ks"].pop("p"), r"pairs\[0\]\.macro_ks\.p: missing"),
        (
            lambda d: d["policies"][0].update(episodes="12"),
            r"policies\[0\]\.episodes: expected int",
        ),
        (
            lambda d: d["policies"][2]["failure_modes"].update(spills_per_operation=None),
            r"policies\[2\]\.failure_modes: unknown key\(s\) \['spills_per_operation'\]",
        ),
        (lambda d: d["policies"][0]["rmst"].update(ci=[1.0]), r"policies\[0\]\.rmst\.ci: expected"),
        (lambda d: d.update(schema="proctor.analysis/9"), r"schema: 'proctor.analysis/9'"),
    ],
)
def test_reading_is_strict_and_names_the_path(doc, change, message) -> None:  # type: ignore[no-untyped-def]
    bad = copy.deepcopy(doc)
    change(bad)
    with pytest.raises(SnapshotError, match=message):
        read_snapshot(bad)


def test_a_version_one_result_is_migrated_explicitly(doc) -> None:  # type: ignore[no-untyped-def]
    """A result written early in version 1's life lacks what was added later;
    the migration says what that means, the reader has no fallbacks."""
    old = copy.deepcopy(doc)
    old["schema"] = SCHEMA_V1
    for key in ("letters_per_object", "rankings", "sites", "stations"):
        old.pop(key)
    for p in old["policies"]:
        for key in ("latency", "policy_faults", "hrt_coverage_warning", "per_site"):
            p.pop(key)
        p["failure_modes"].pop("envelope_interventions_per_episode")
    for q in old["pairs"]:
        q["macro_ks"].pop("method")
        q["logrank"] = {k: q["logrank"][k] for k in ("chi2", "p", "p_bonferroni",
                                                     "observed_a", "expected_a")}  # fmt: skip
        q.pop("rmst_diff_bonferroni")
        q.pop("success_barnard")
    assert migrate(old)["schema"] == SCHEMA and old["schema"] == SCHEMA_V1  # a copy
    snap = read_snapshot(old)
    assert snap.rankings == [] and snap.sites == []
    p = snap.policies[1]
    assert p.latency is None and p.policy_faults is None
    assert p.metric("envelope_interventions_per_episode") is None
    assert p.metric("policy_faults_per_episode") is None
    assert p.metric("rmst") == read_snapshot(doc).policies[1].metric("rmst")
    q = snap.pairs[0]
    assert q.logrank.method == "operation_level" and q.logrank.p_permutation is None
    assert q.macro_ks.method == "unstudentized" and q.rmst_diff_bonferroni is None
    # the same document claiming the current version is not silently patched
    old["schema"] = SCHEMA
    with pytest.raises(SnapshotError, match="missing"):
        read_snapshot(old)


def test_a_statistic_added_as_one_row_reaches_the_json_the_snapshot_and_the_table(
    monkeypatch: pytest.MonkeyPatch, board
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, DUMMY))
    js = to_json(board)
    alpha = next(p for p in board.policies if p.policy == "alpha")
    written = next(p for p in js["policies"] if p["policy"] == "alpha")["double_uph"]
    assert written["estimate"] == pytest.approx(2 * alpha.uph.estimate)
    typed = read_snapshot(js).policy("alpha").metric("double_uph")
    assert isinstance(typed, IntervalSnapshot)
    assert typed.hi == pytest.approx(2 * alpha.uph.hi)
    out = io.StringIO()
    monkeypatch.setattr(analysis_cli, "_stdout", lambda: Console(file=out, width=250))
    analysis_cli._print_leaderboard(board, "test")
    header = next(line for line in out.getvalue().splitlines() if "RMST s" in line)
    assert "2×UPH" in header
    row = next(line for line in out.getvalue().splitlines() if "│ alpha" in line)
    assert f"{2 * alpha.uph.estimate:.1f}" in row


def test_a_result_written_before_a_row_was_added_reads_it_as_not_computed(
    monkeypatch: pytest.MonkeyPatch, doc
) -> None:  # type: ignore[no-untyped-def]
    """A stored board is not rescored when the code changes: the board of a
    released campaign must still open after a statistic is added."""
    monkeypatch.setattr(metrics, "METRICS", (*metrics.METRICS, DUMMY))
    snap = read_snapshot(doc)  # written without the row
    assert all(p.metric("double_uph") is None for p in snap.policies)
    assert snap.policies[1].metric("uph") is not None


def test_the_sequential_runs_of_proctor_analyze_read_back(doc) -> None:  # type: ignore[no-untyped-def]
    """`proctor analyze --sequential --json` adds each pair's run (README, "The result JSON")."""
    run = {"method": "e-process", "e_value": 3.2, "episodes": 14}
    with_runs = copy.deepcopy(doc)
    with_runs["pairs"][0]["sequential"] = run
    snap = read_snapshot(with_runs)
    assert snap.pairs[0].sequential == run and snap.pairs[1].sequential is None


def test_a_malformed_version_one_result_is_refused_by_name(doc) -> None:  # type: ignore[no-untyped-def]
    old = copy.deepcopy(doc)
    old["schema"] = SCHEMA_V1
    del old["pairs"][0]["macro_ks"]
    with pytest.raises(SnapshotError, match=r"not a well-formed proctor\.analysis/1 result"):
        read_snapshot(old)


def _drift_entries() -> list[dict]:
    """Two sentinels as ``proctor.analysis.drift`` writes them: one with both
    tests, one with too few episodes for either."""
    from proctor.analysis.drift import SentinelDrift, StationTest, TrendTest

    both = SentinelDrift(
        policy="ref",
        level=0.0125,
        trend=TrendTest(
            s=-14.0,
            var=60.0,
            z=-1.68,
            p=0.093,
            flagged=False,
            direction=None,
            episodes=("e1", "e2", "e3"),
            s_by_object={"spoons": -9.0, "towels": -5.0},
        ),
        stations=StationTest(
            statistic=7.9,
            df=1,
            p=0.005,
            flagged=True,
            median_by_station={"cell-a": 2.1, "cell-b": 1.4},
            episodes_by_station={"cell-a": ("e1", "e3"), "cell-b": ("e2",)},
        ),
    )
    few = SentinelDrift(policy="sentinel", level=0.0125, trend=None, stations=None)
    return [both.to_json(), few.to_json()]


def test_drift_and_early_stops_read_typed(doc) -> None:  # type: ignore[no-untyped-def]
    current = copy.deepcopy(doc)
    current["drift"] = _drift_entries()
    current["early_stops"] = {
        "rule": "e-process",
        "alpha": 0.05,
        "lag_blocks": 1,
        "sentinels": ["ref"],
        "blocks_read_through": 3,
        "pairs": [{"a": "A", "b": "B", "resolved_after_block": 2, "episodes": 48, "e_value": 31.5}],
        "stopped": [{"policy": "B", "after_block": 2, "no_slots_from_block": 4}],
    }
    snap = read_snapshot(current)
    assert snap.drift is not None and snap.early_stops is not None
    ref, few = snap.drift
    assert ref.stations is not None and ref.trend is not None
    assert (ref.stations.test, ref.stations.statistic, ref.stations.df) == (
        "van Elteren, stratified by object",
        7.9,
        1,
    )
    assert ref.stations.episodes == {"cell-a": ["e1", "e3"], "cell-b": ["e2"]}
    assert ref.trend.s_by_object == {"spoons": -9.0, "towels": -5.0}
    assert ref.flagged and not ref.certifies_no_drift
    assert few.trend is None and few.stations is None and not few.flagged
    assert snap.early_stops.pairs[0].e_value == 31.5
    assert snap.early_stops.stopped[0].no_slots_from_block == 4
    # strict like the rest: a misspelt key is named with its path
    bad = copy.deepcopy(current)
    bad["drift"][0]["stations"]["pvalue"] = bad["drift"][0]["stations"].pop("p")
    with pytest.raises(SnapshotError, match=r"drift\[0\]\.stations: unknown key\(s\) \['pvalue'\]"):
        read_snapshot(bad)
    # a result scored without a campaign carries neither
    plain = read_snapshot(doc)
    assert plain.drift is None and plain.early_stops is None


def test_version_two_drift_tests_before_stratification_are_migrated(doc) -> None:  # type: ignore[no-untyped-def]
    """Before the drift tests were stratified by object, a version-2 result
    carried Mann–Kendall and Kruskal–Wallis in another shape; the migration
    names them, so no page falls back key by key."""
    old = copy.deepcopy(doc)
    old["schema"] = "proctor.analysis/2"
    old["drift"] = [
        {
            "policy": "ref",
            "level": 0.0125,
            "flagged": True,
            "trend": {
                "mann_kendall_s": 12,
                "z": 2.2,
                "p": 0.028,
                "flagged": False,
                "direction": None,
                "episodes": ["e1", "e2"],
            },
            "stations": {
                "kruskal_wallis_h": 6.5,
                "p": 0.011,
                "flagged": True,
                "median_throughput": {"cell-a": 2.0, "cell-b": 1.5},
                "episodes": {"cell-a": ["e1"], "cell-b": ["e2"]},
            },
        }
    ]
    (d,) = read_snapshot(old).drift or []
    assert d.trend is not None and d.stations is not None
    assert (d.trend.test, d.trend.variance, d.trend.s_by_object) == ("Mann–Kendall", None, {})
    assert d.trend.mann_kendall_s == 12.0
    assert (d.stations.test, d.stations.statistic, d.stations.df) == ("Kruskal–Wallis", 6.5, None)
    assert d.certifies_no_drift is False
    # the same shape claiming version 3 is refused, not patched
    old["schema"] = SCHEMA
    with pytest.raises(SnapshotError, match=r"drift\[0\]\.certifies_no_drift: missing"):
        read_snapshot(old)
