"""Anytime-valid verdicts (docs/methods.md §10): the e-process by hand, its
size under monitoring after every episode against the naive peeking
log-rank, its episodes to a verdict against the fixed design, and
``proctor analyze --sequential`` / ``proctor power sequential``."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from proctor.analysis.cells import build_cell
from proctor.analysis.episodes import Episode, scored
from proctor.analysis.interchange import write_interchange
from proctor.analysis.leaderboard import pair_effects
from proctor.analysis.operations import extract_operations
from proctor.analysis.planning import BridgeModel, wilson_interval
from proctor.analysis.seqdesign import crossings, design, naive_pair_peeking, naive_peeking
from proctor.analysis.sequential import (
    log_wealth,
    pad_operations,
    pair_z,
    sequential_pair,
    start_times,
    threshold,
)
from proctor.analysis.significance import logrank
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models

ALPHA = 0.05
OBJECTS = list(PHAIL_OBJECTS)
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
# the sequential entry's keys before the directional estimand (boards read them)
LEGACY_KEYS = {"rejected", "stopped_at", "episodes_total", "e_value", "threshold"}


def ep(eid: str, policy: str, placements: tuple[float, ...], items: int, duration: float,
       outcome: str = "success", obj: str = "spoons", minute: int = 0) -> Episode:  # fmt: skip
    return Episode(
        eid, policy, obj, items, duration, placements, 0, 0, outcome,
        started_at=(T0 + timedelta(minutes=minute)).isoformat(),
    )  # fmt: skip


# --- by hand -------------------------------------------------------------------


def test_pair_z_by_hand() -> None:
    # A: placements at 2 and 5 s → operations 2, 3 (both successes).
    # B: placement at 4 s, out of time at 10 s → a success at 4, censored at 6.
    # t = 2 (A): at risk A {2, 3} = 2, B {4, 6} = 2, n = 4, d = 1:
    #   O − E += 1 − 2/4 = 1/2;  V += 2·2·(4 − 1) / (4²·3) = 1/4
    # t = 3 (A): A {3} = 1, B = 2, n = 3: O − E += 1 − 1/3 = 2/3; V += 1·2·2 / (9·2) = 2/9
    # t = 4 (B): A = 0, B = 2: O − E += 0 − 0/2 = 0; V += 0
    # U = 7/6, V = 17/36, z = U/√V = 7/√17 ≈ 1.6977 (χ² = 49/17)
    a = ep("a", "A", (2.0, 5.0), 2, 5.0)
    b = ep("b", "B", (4.0,), 2, 10.0, outcome="ran_out_of_time")
    ops_a, ops_b = extract_operations([a]), extract_operations([b])
    z = pair_z(pad_operations(ops_a), pad_operations(ops_b))
    assert z.shape == (1, 1)
    assert z[0, 0] == pytest.approx(7 / math.sqrt(17), abs=1e-12)
    assert logrank([(ops_a, ops_b)]).chi2 == pytest.approx(49 / 17, abs=1e-12)
    # swapping the labels negates it: what makes the bet fair under H0
    assert pair_z(pad_operations(ops_b), pad_operations(ops_a))[0, 0] == pytest.approx(-z[0, 0])


def test_pair_z_matches_the_stratum_logrank_with_ties_and_ghosts() -> None:
    rng = np.random.default_rng(4)
    m = phail_like_models()
    eps, _ = scored(cohort([m[1], m[4]], {"spoons": ()}, episodes_per_cell=6, rng=rng))
    a = [e for e in eps if e.policy == "alpha"][:5]
    b = [e for e in eps if e.policy == "delta"][:5]
    # a tie across the pair: B's first placement moved onto A's first
    b[0] = dataclasses.replace(b[0], placements_s=(a[0].placements_s[0], *b[0].placements_s[1:]))
    z = pair_z(pad_operations(extract_operations(a)), pad_operations(extract_operations(b)))
    for i in range(5):
        for j in range(5):
            lr = logrank([(extract_operations([a[i]]), extract_operations([b[j]]))])
            expected = (
                0.0 if lr.variance == 0 else (lr.observed - lr.expected) / math.sqrt(lr.variance)
            )
            assert z[i, j] == pytest.approx(expected, abs=1e-9)


def test_wealth_by_hand() -> None:
    # λ1 = 0 → E1 = 1
    # λ2 = S1 / (1 + Q1) = 0.5 / 1.25 = 0.4 → E2 = 1 · (1 + 0.4 · 0.5) = 1.2
    # λ3 = 1.0 / 1.5 = 0.667, capped at 0.5 → E3 = 1.2 · (1 − 0.5) = 0.6
    logs = log_wealth(np.array([0.5, 0.5, -1.0]))[0]
    assert np.exp(logs) == pytest.approx([1.0, 1.2, 0.6], abs=1e-12)


def clear_pairs(n_pairs: int) -> list[Episode]:
    """A places 10 items in 1 s each, B in 20 s each, alternating A, B: every
    pair's z is far above 2, so every bet score is +1."""
    out = []
    for k in range(n_pairs):
        out.append(ep(f"a{k}", "A", tuple(float(s) for s in range(1, 11)), 10, 10.0,
                      minute=2 * k))  # fmt: skip
        out.append(ep(f"b{k}", "B", tuple(20.0 * s for s in range(1, 11)), 10, 200.0,
                      minute=2 * k + 1))  # fmt: skip
    return out


def test_stopped_at_by_hand() -> None:
    # g = +1 every pair: λ1 = 0, then S/(1 + Q) = k/(1 + k) ≥ 1/2, capped at
    # 0.5, so E after pair k is 1.5^(k−1). Threshold 1/α = 20: 1.5^8 = 25.63
    # is the first ≥ 20 (1.5^7 = 17.09), at pair 9, completed by episode 18.
    eps = clear_pairs(12)
    r = sequential_pair("A", "B", eps, start_times(eps), alpha=ALPHA, comparisons=1, tau=20.0)
    assert r.threshold == 20.0
    assert r.stopped_at == 18
    assert r.e_value == pytest.approx(1.5**8)
    assert r.episodes_total == 24 and r.matched_pairs == 12
    # the direction comes from the confidence sequence of δ (§10): every pair's
    # difference is (20 − 1)/20 of τ per item, and after 12 pairs the sequence
    # (tests/analysis/test_confseq.py) lies above 0, so A is named
    assert r.favours == "A" and r.verdict == "better"
    assert r.delta_s is not None and 0 < r.delta_s[0] < 19.0 <= r.delta_s[1]
    # without τ no direction is named, whatever the bets' sign
    assert (
        sequential_pair("A", "B", eps, start_times(eps), alpha=ALPHA, comparisons=1).favours is None
    )
    # E moves only when an episode completes a pair, and holds in between
    assert r.path[:4] == pytest.approx([1.0, 1.0, 1.0, 1.5])
    # three pairs on the board: threshold 3/α = 60; 1.5^10 = 57.7 < 60 ≤ 1.5^11
    r3 = sequential_pair("A", "B", eps, start_times(eps), alpha=ALPHA, comparisons=3)
    assert r3.threshold == 60.0 and r3.stopped_at == 24
    # the board's five keys keep their meaning; the direction's keys are added
    assert {k: v for k, v in r3.to_json().items() if k in LEGACY_KEYS} == {
        "rejected": True,
        "stopped_at": 24,
        "episodes_total": 24,
        "e_value": pytest.approx(1.5**11),
        "threshold": 60.0,
    }
    assert r3.to_json()["pairing"] == "start"


def test_pairs_are_matched_within_object_in_start_order() -> None:
    # B's towels episode cannot complete A's spoons episode: no pair, E = 1
    eps = [
        ep("a0", "A", (1.0,), 1, 1.0, obj="spoons", minute=0),
        ep("b0", "B", (9.0,), 1, 9.0, obj="towels", minute=1),
        ep("a1", "A", (1.0,), 1, 1.0, obj="towels", minute=2),
        ep("b1", "B", (9.0,), 1, 9.0, obj="spoons", minute=3),
    ]
    r = sequential_pair("A", "B", eps, start_times(eps), alpha=ALPHA, comparisons=1)
    assert r.matched_pairs == 2
    # pairs complete at episodes 3 (towels) and 4 (spoons); the first bet is 0
    assert r.path[:3] == pytest.approx([1.0, 1.0, 1.0])


# --- size under monitoring, and the naive contrast -----------------------------


@pytest.fixture(scope="module")
def null_pools() -> dict[str, object]:
    rng = np.random.default_rng(11)
    alpha_model = phail_like_models()[1]
    eps, _ = scored(
        cohort([alpha_model], PHAIL_OBJECTS, episodes_per_cell=150, rng=rng, configurations=False)
    )
    return {o: extract_operations([e for e in eps if e.object == o]) for o in OBJECTS}


def test_type_one_error_under_monitoring_after_every_episode(null_pools: dict) -> None:  # type: ignore[type-arg]
    # both arms from one pool per object: exactly exchangeable episodes.
    # 800 null pairs watched after each of 320 episodes. The bound is α plus
    # two binomial SDs (0.0654 at n = 800); the naive test below breaks it.
    streams = 800
    z = [pair_z(pad_operations(null_pools[o]), pad_operations(null_pools[o])) for o in OBJECTS]
    cross = crossings(
        z, streams=streams, pairs_per_object=40, bar=threshold(ALPHA, 1),
        rng=np.random.default_rng(12),
    )  # fmt: skip
    hits = int(np.isfinite(cross).sum())
    bound = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / streams)
    assert hits / streams <= bound, (hits, streams)
    # …and the log-rank p < α looked at after every episode rejects far more
    # often, on the same kind of null pairs, with a quarter of the looks
    ever, last = naive_peeking(
        [(null_pools[o], null_pools[o]) for o in OBJECTS],
        streams=200, pairs_per_object=10, alpha=ALPHA, rng=np.random.default_rng(13),
    )  # fmt: skip
    naive = int(ever.sum())
    lo, _ = wilson_interval(naive, 200)
    assert lo > bound, (naive, 200)
    # peeking is worse than one look at the end with the same test
    assert naive > int(last.sum())
    # at the episode level (no clustering to ignore) the same matched pairs'
    # z test is of size α at one look, and peeking alone breaks it
    ever, last = naive_pair_peeking(
        z, streams=streams, pairs_per_object=40, alpha=ALPHA, rng=np.random.default_rng(14)
    )
    lo, _ = wilson_interval(int(ever.sum()), streams)
    assert lo > bound, int(ever.sum())
    assert int(last.sum()) / streams <= bound


# --- episodes to a verdict against the fixed design ----------------------------


def test_clearly_different_pair_stops_within_70_percent_of_the_fixed_design() -> None:
    # alpha vs gamma of the PhAIL-like models: the fixed design's n per cell
    # for 80 % power (macro-KS, bridge model) against the e-process's mean
    # episodes to a verdict when given the horizon that reaches 80 % too.
    rng = np.random.default_rng(7)
    m = {x.name: x for x in phail_like_models()}
    cells = {}
    padded = {}
    for name in ("alpha", "gamma"):
        eps, _ = scored(
            cohort([m[name]], PHAIL_OBJECTS, episodes_per_cell=150, rng=rng, configurations=False)
        )
        for o in OBJECTS:
            mine = [e for e in eps if e.object == o]
            cells[(name, o)] = build_cell(name, o, mine, tau=300.0, replicates=1, seed=0)
            padded[(name, o)] = pad_operations(extract_operations(mine))
    effects, _, _ = pair_effects(
        {o: cells[("alpha", o)] for o in OBJECTS}, {o: cells[("gamma", o)] for o in OBJECTS},
        tau=300.0, rho=None,
    )  # fmt: skip
    n_fixed = BridgeModel(effects, sims=2000, rng=np.random.default_rng(0)).n_needed(
        alpha=ALPHA, target=0.8
    )
    assert n_fixed is not None
    z = [pair_z(padded[("alpha", o)], padded[("gamma", o)]) for o in OBJECTS]
    d = design(z, n_fixed=n_fixed, target=0.8, bar=threshold(ALPHA, 1), streams=1000, rng=rng)
    assert d.fraction is not None
    assert d.fraction <= 0.70, d
    assert d.expected_episodes is not None and d.p90_episodes is not None
    assert d.expected_episodes <= d.p90_episodes <= (d.max_episodes or 0)


# --- the command line -------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    from proctor.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def timed(eps: list[Episode], seed: int = 0) -> list[Episode]:
    order = np.random.default_rng(seed).permutation(len(eps))
    return [
        dataclasses.replace(e, started_at=(T0 + timedelta(minutes=int(k))).isoformat())
        for e, k in zip(eps, order, strict=True)
    ]


@pytest.fixture(scope="module")
def timed_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    eps = cohort(
        phail_like_models()[1:4], {"spoons": (), "towels": ()}, episodes_per_cell=12,
        rng=np.random.default_rng(5),
    )  # fmt: skip
    path = tmp_path_factory.mktemp("seq") / "episodes.csv"
    write_interchange(timed(eps), path)
    return path


def test_analyze_sequential_json_table_and_plots(
    capsys: pytest.CaptureFixture[str], timed_csv: Path, tmp_path: Path
) -> None:
    out = tmp_path / "r.json"
    code, stdout, err = run_cli(
        capsys, "analyze", str(timed_csv), "--bootstrap", "100", "--sequential",
        "--json", str(out), "--plots", str(tmp_path / "fig"),
    )  # fmt: skip
    assert code == 0, err
    assert "Anytime-valid verdicts" in stdout
    data = json.loads(out.read_text())
    assert len(data["pairs"]) == 3
    for pr in data["pairs"]:
        seq = pr["sequential"]
        assert set(seq) >= LEGACY_KEYS
        assert seq["verdict"] in ("better", "unclear", "undecided")
        assert (seq["favours"] is not None) == (seq["verdict"] == "better")
        assert seq["threshold"] == pytest.approx(3 / 0.05)
        assert seq["rejected"] == (seq["stopped_at"] is not None)
        assert 0 < seq["episodes_total"] <= 48
    assert (tmp_path / "fig" / "sequential_alpha_vs_beta.png").exists() or any(
        p.name.startswith("sequential_") for p in (tmp_path / "fig").iterdir()
    )
    # without the flag the pairs carry no sequential entry
    code, _, _ = run_cli(
        capsys, "analyze", str(timed_csv), "--bootstrap", "100", "--json", str(out)
    )
    assert code == 0 and "sequential" not in json.loads(out.read_text())["pairs"][0]


def bad_file(tmp_path: Path, eps: list[Episode]) -> str:
    path = tmp_path / "bad.csv"
    write_interchange(eps, path)
    return str(path)


def test_analyze_sequential_refuses_bad_input(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    eps = clear_pairs(4)
    # no started_at
    no_start = [dataclasses.replace(e, started_at=None) for e in eps]
    code, _, err = run_cli(capsys, "analyze", bad_file(tmp_path, no_start), "--sequential")
    assert code == 2 and "started_at" in err and "have none" in err
    # ...which is fine without --sequential
    code, _, _ = run_cli(capsys, "analyze", bad_file(tmp_path, no_start), "--bootstrap", "50")
    assert code == 0
    # two episodes of the pair starting at the same time
    tie = [*eps[:-1], dataclasses.replace(eps[-1], started_at=eps[-2].started_at)]
    code, _, err = run_cli(capsys, "analyze", bad_file(tmp_path, tie), "--sequential")
    assert code == 2 and "same time" in err and eps[-1].episode_id in err
    # not a time
    garbled = [*eps[:-1], dataclasses.replace(eps[-1], started_at="yesterday")]
    code, _, err = run_cli(capsys, "analyze", bad_file(tmp_path, garbled), "--sequential")
    assert code == 2 and "ISO 8601" in err and eps[-1].episode_id in err
    # a policy whose every episode was a system fault: its pair has no episodes
    ghost = [*eps, ep("c0", "C", (), 2, 3.0, outcome="system", minute=99)]
    code, _, err = run_cli(capsys, "analyze", bad_file(tmp_path, ghost), "--sequential")
    assert code == 2 and "policy C has no scored episodes" in err


def test_power_sequential(
    capsys: pytest.CaptureFixture[str], timed_csv: Path, tmp_path: Path
) -> None:
    out = tmp_path / "p.json"
    code, stdout, err = run_cli(
        capsys, "power", "sequential", str(timed_csv), "--pair", "alpha,gamma",
        "--streams", "300", "--sims", "500", "--json", str(out),
    )  # fmt: skip
    assert code == 0, err
    assert "Sequential vs fixed design" in stdout
    (entry,) = json.loads(out.read_text())["pairs"]
    assert entry["n_fixed_per_cell"] >= 1
    seq = entry["sequential"]
    assert seq["fixed_episodes"] == 2 * 2 * entry["n_fixed_per_cell"]
    assert 0 <= seq["power_at_fixed_n"] <= 1
    code, _, err = run_cli(capsys, "power", "sequential", str(timed_csv), "--streams", "5")
    assert code == 2 and "--streams" in err
