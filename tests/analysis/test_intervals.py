"""BCa intervals for RMST and HRT (proctor.analysis.intervals, .throughput;
docs/methods.md §4, "Interval coverage"): the acceleration against its
closed forms, the interval against scipy's BCa on an i.i.d. sample, the
cell jackknife against a cell rebuilt without the episode, coverage by
simulation against a large-sample truth, and the board's warning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from proctor.analysis import throughput
from proctor.analysis.bootstrap import percentile_interval
from proctor.analysis.cells import CellWork, build_cell
from proctor.analysis.episodes import RAN_OUT_OF_TIME, SUCCESS, SYSTEM, Episode
from proctor.analysis.interchange import write_interchange
from proctor.analysis.intervals import (
    HRT_INTERVAL,
    Resampled,
    acceleration,
    bca_interval,
    interval_method,
    variance_inflation,
)
from proctor.analysis.km import at_risk, risk_set, rmst, survival
from proctor.analysis.operations import extract_operations
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models
from proctor.analysis.throughput import (
    COVERAGE_FLOOR,
    MEASURED_HRT_COVERAGE,
    coverage_threshold,
    coverage_warning,
    interval,
    macro_hrt,
    macro_rmst,
)


def loo_means(x: np.ndarray) -> np.ndarray:
    return np.array([np.delete(x, i).mean() for i in range(x.size)])


def test_acceleration_of_a_mean_is_its_skewness_over_6_root_n() -> None:
    """For the mean the jackknife influence is x_i − x̄ exactly, so a =
    Σd³ / (6 (Σd²)^{3/2}) (Efron & Tibshirani 1993, eq. 14.15); here by hand
    for 1, 2, 3, 10: d = (−3, −2, −1, 6), Σd³ = −27 − 8 − 1 + 216 = 180,
    Σd² = 9 + 4 + 1 + 36 = 50, a = 180 / (6 · 50^{3/2}) = 0.0848528…"""
    x = np.array([1.0, 2.0, 3.0, 10.0])
    assert acceleration((loo_means(x),)) == pytest.approx(180 / (6 * 50**1.5), rel=1e-12)
    assert acceleration((loo_means(x),)) == pytest.approx(0.08485281374, rel=1e-9)


def test_acceleration_of_two_independent_samples_weighs_each_by_its_size() -> None:
    """θ = x̄ − ȳ from independent samples: the influence values are d_x and
    −d_y, so a = (Σd_x³/n_x³ − Σd_y³/n_y³) / (6 (Σd_x²/n_x² + Σd_y²/n_y²)^{3/2})."""
    x = np.array([1.0, 2.0, 3.0, 10.0])
    y = np.array([4.0, 4.5, 9.0, 2.0, 7.5, 1.0])
    theta = x.mean() - y.mean()
    jack = (loo_means(x) - y.mean(), x.mean() - loo_means(y))
    dx, dy = x - x.mean(), y - y.mean()
    num = (dx**3).sum() / 4**3 - (dy**3).sum() / 6**3
    den = (dx**2).sum() / 4**2 + (dy**2).sum() / 6**2
    assert theta == pytest.approx(4.0 - 28.0 / 6.0)
    assert acceleration(jack) == pytest.approx(num / (6 * den**1.5), rel=1e-12)


def test_variance_inflation_of_one_cell_is_root_n_over_n_minus_1() -> None:
    x = np.array([1.0, 2.0, 3.0, 10.0, 4.0])
    assert variance_inflation((loo_means(x),)) == pytest.approx(np.sqrt(5 / 4), rel=1e-12)
    # a cell of one episode has no influence values: nothing to inflate
    assert variance_inflation((np.array([3.0]),)) == 1.0


def test_bca_matches_scipy_on_an_iid_sample() -> None:
    """Clusters of one observation: the episode BCa is the ordinary BCa.
    scipy.stats.bootstrap draws its own replicates, so the two agree to
    the Monte Carlo error of B = 20 000 (≈ 0.5 % here), far from the
    percentile interval (≈ 5 % lower at both ends on this skewed sample)."""
    rng = np.random.default_rng(3)
    x = rng.lognormal(0.0, 1.0, 15)
    b = 20_000
    reps = x[rng.integers(0, x.size, (b, x.size))].mean(axis=1)
    ours = bca_interval(Resampled(float(x.mean()), reps, (loo_means(x),)))
    ref = stats.bootstrap(
        (x,), np.mean, method="BCa", n_resamples=b, random_state=np.random.default_rng(4)
    ).confidence_interval
    assert ours.lo == pytest.approx(ref.low, rel=0.015)
    assert ours.hi == pytest.approx(ref.high, rel=0.015)
    plain = percentile_interval(float(x.mean()), reps)
    assert plain.lo is not None and plain.hi is not None
    assert ours.lo is not None and ours.hi is not None
    assert plain.hi < ours.hi * 0.97 and plain.lo < ours.lo * 0.98


def test_bca_without_bias_or_skew_is_the_percentile_interval() -> None:
    """z₀ = 0 (replicates symmetric about the estimate) and a = 0
    (symmetric influence): the levels are α/2 and 1 − α/2 exactly."""
    reps = np.concatenate([np.arange(1.0, 500.0), -np.arange(1.0, 500.0)])
    x = Resampled(0.0, reps, (np.array([-1.0, 0.0, 1.0]),))
    assert bca_interval(x) == percentile_interval(0.0, reps)


def test_the_cell_jackknife_is_the_cell_without_that_episode() -> None:
    m = phail_like_models()[1]
    eps = [
        e
        for e in cohort([m], {"spoons": ()}, episodes_per_cell=7, rng=np.random.default_rng(9))
        if e.outcome != SYSTEM
    ]
    cell = build_cell(m.name, "spoons", eps, tau=300.0, replicates=10, seed=0)
    for i in range(len(eps)):
        rs = risk_set(extract_operations(eps[:i] + eps[i + 1 :]))
        alone = float(rmst(rs.grid, survival(rs), 300.0)[0])
        assert cell.jackknife_rmst()[i] == pytest.approx(alone, rel=1e-12)


def test_unknown_method_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unknown 'studentised'.*bca"):
        interval_method("studentised")


def _cells(n: int, replicates: int, rng: np.random.Generator) -> list[tuple[CellWork, CellWork]]:
    """(reference cell, policy cell) per object of a fresh PhAIL-like cohort."""
    models = phail_like_models()
    eps = cohort([models[0], models[1]], PHAIL_OBJECTS, episodes_per_cell=n, rng=rng)
    seed = int(rng.integers(2**31))
    out = []
    for o in PHAIL_OBJECTS:
        pair = []
        for m in (models[0], models[1]):
            mine = [e for e in eps if e.policy == m.name and e.object == o]
            pair.append(build_cell(m.name, o, mine, tau=300.0, replicates=replicates, seed=seed))
        out.append((pair[0], pair[1]))
    return out


def _true_hrt(n: int, seed: int) -> float:
    """The KM limit of macro HRT, from n episodes a cell (as the benchmark)."""
    models = phail_like_models()
    eps = cohort(
        [models[0], models[1]], PHAIL_OBJECTS, episodes_per_cell=n, rng=np.random.default_rng(seed)
    )

    def cell_rmst(policy: str, o: str) -> float:
        rs = risk_set(extract_operations([e for e in eps if e.policy == policy and e.object == o]))
        return float(rmst(rs.grid, survival(rs), 300.0)[0])

    ref, policy = models[0].name, models[1].name
    return float(np.mean([100 * cell_rmst(ref, o) / cell_rmst(policy, o) for o in PHAIL_OBJECTS]))


@pytest.mark.slow
def test_the_boards_hrt_interval_covers_better_than_the_percentile_at_small_n() -> None:
    """The review's finding, small: 3 episodes a cell of the PhAIL-like
    alpha against the human reference, 300 fresh cohorts, B = 300. The truth
    is the KM limit from 3000 episodes a cell (Monte Carlo SE ≈ 0.1 HRT
    points, against interval widths of ≈ 10). The percentile interval misses
    the truth far more often than 5 % (benchmarks/coverage.py: 0.85); the
    board's method clearly less (0.91). Coverage SE at 300 trials ≈ 0.02;
    the board's interval contains the percentile one (same replicates,
    wider levels), so the gap is a count of trials only it covers."""
    truth = _true_hrt(3000, seed=1)
    assert 10.5 < truth < 11.8  # benchmarks/coverage.py: 11.11 (SE 0.11)
    rng = np.random.default_rng(2)
    hits = {"percentile": 0, HRT_INTERVAL: 0}
    trials = 300
    for _ in range(trials):
        x = macro_hrt(_cells(3, 300, rng))
        for method in hits:
            iv = interval(x, 0.05, method)
            assert iv.lo is not None and iv.hi is not None
            hits[method] += iv.lo <= truth <= iv.hi
    cov = {m: h / trials for m, h in hits.items()}
    assert cov["percentile"] < 0.89, cov
    assert cov[HRT_INTERVAL] > cov["percentile"] + 0.03, cov


def test_the_expanded_percentile_by_hand() -> None:
    """One cell of 5 episodes: f = √(5/4), the levels Φ(∓1.959964 · 1.118034)
    = Φ(∓2.191306) = 0.014217 / 0.985783; with B = 999 the order statistics
    ⌊1000 · 0.014217⌋ = 14 and ⌈1000 · 0.985783⌉ = 986 (the percentile
    interval's: 25 and 975)."""
    reps = np.arange(1.0, 1000.0)[::-1].copy()  # the k-th smallest is k
    x = Resampled(500.0, reps, (loo_means(np.array([1.0, 2.0, 3.0, 10.0, 4.0])),))
    iv = interval_method("percentile_expanded").compute(x, 0.05)
    assert (iv.lo, iv.hi) == (14.0, 986.0)
    plain = percentile_interval(500.0, reps)
    assert (plain.lo, plain.hi) == (25.0, 975.0)


def test_rmst_variance_without_clusters_is_greenwood() -> None:
    """One operation an episode (independent operations): the infinitesimal
    jackknife is the Greenwood-type RMST variance Σ_j A_j² d_j / (Y_j (Y_j − d_j))
    (Klein & Moeschberger 2003, §4.5), A_j = ∫_{t_j}^τ S."""
    rng = np.random.default_rng(0)
    t, c = rng.exponential(10, 300).round(3), rng.uniform(0, 30, 300).round(3)
    eps = [
        Episode(f"e{i}", "p", "o", 1, a + 0.001, (a,), 0, 0, SUCCESS)
        if a <= b
        else Episode(f"e{i}", "p", "o", 1, b, (), 0, 0, RAN_OUT_OF_TIME)
        for i, (a, b) in enumerate(zip(t, c, strict=True))
    ]
    cell = build_cell("p", "o", eps, tau=20.0, replicates=5, seed=1)
    rs, s = cell.rs, cell.s[:, 0]
    m = int(np.searchsorted(rs.grid, 20.0, side="right"))
    d = np.asarray(rs.events.sum(axis=1)).ravel()[:m]
    y = at_risk(rs)[:m]
    a = np.cumsum((np.diff(np.append(rs.grid[:m], 20.0)) * s[:m])[::-1])[::-1]
    greenwood = float(np.sum(a**2 * d / (y * (y - d))))
    assert cell.rmst_variance(20.0)[0] == pytest.approx(greenwood, rel=1e-9)


def test_rmst_variance_with_clusters_is_the_jackknifes() -> None:
    """Episodes of many operations: the clustered variance agrees with the
    episode jackknife's and the bootstrap's at 200 episodes (all three
    estimate the same thing; within 5 %)."""
    m = phail_like_models()[1]
    eps = [
        e
        for e in cohort([m], {"spoons": ()}, episodes_per_cell=200, rng=np.random.default_rng(8))
        if e.outcome != SYSTEM
    ]
    cell = build_cell(m.name, "spoons", eps, tau=300.0, replicates=2000, seed=0)
    jk = cell.jackknife_rmst()
    n = jk.size
    jack_var = (n - 1) / n * np.sum((jk - jk.mean()) ** 2)
    var = cell.rmst_variance()
    assert var[0] == pytest.approx(jack_var, rel=0.05)
    assert var[0] == pytest.approx(np.var(cell.rmst()[1:]), rel=0.05)
    # and each replicate's own: on average the same size
    assert var[1:].mean() == pytest.approx(var[0], rel=0.05)


def test_macro_rmst_of_one_cell_is_that_cells_rmst() -> None:
    (_, cell), *_ = _cells(4, 50, np.random.default_rng(5))
    x = macro_rmst([cell])
    assert x.estimate == pytest.approx(float(cell.rmst()[0]))
    np.testing.assert_allclose(x.jackknife[0], cell.jackknife_rmst())


# a table that reaches the floor at 10 (the measured one does not by 40:
# docs/methods.md §4), to test the rule on both sides of a threshold
REACHED_AT_10 = {3: 0.85, 5: 0.91, 10: 0.935, 20: 0.94, 40: 0.95}


def test_the_warning_reads_the_measured_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below the first size from which every measured coverage reaches the
    floor, a cell names the coverage measured at the size at or below it;
    a dip further up moves the threshold; none reached: every cell."""
    table = dict(REACHED_AT_10)
    monkeypatch.setattr(throughput, "MEASURED_HRT_COVERAGE", table)
    assert COVERAGE_FLOOR == 0.93 and coverage_threshold() == 10
    assert coverage_warning(10) is None and coverage_warning(400) is None
    w = coverage_warning(7)
    assert w is not None and (w.measured_at, w.coverage, w.threshold) == (5, 0.91, 10)
    assert "covered 91% of the time at 5 episodes per cell" in w.text
    assert "10 or more episodes per cell cover at least 93%" in w.text
    tiny = coverage_warning(2)
    assert tiny is not None and tiny.coverage is None and "not measured below 3" in tiny.text
    table[20] = 0.92
    assert coverage_threshold() == 40
    table[40] = 0.925
    assert coverage_threshold() is None
    big = coverage_warning(400)
    assert big is not None and (big.measured_at, big.coverage) == (40, 0.925)
    assert "no measured size (up to 40 episodes per cell) reached 93%" in big.text


def test_an_interval_at_another_level_than_measured_is_always_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table measured the 95 % interval; with α = 0.1 the board's HRT
    interval is a 90 % one, whose coverage nobody measured: it is flagged at
    any cell size, and the text names both levels rather than a 95 % it is not."""
    monkeypatch.setattr(throughput, "MEASURED_HRT_COVERAGE", dict(REACHED_AT_10))
    assert coverage_warning(400, level=0.95) is None
    w = coverage_warning(400, level=0.90)
    assert w is not None and (w.measured_at, w.coverage) == (None, None)
    assert "coverage of its 90 % interval is not measured" in w.text
    assert "measured the 95 % interval" in w.text
    small = coverage_warning(7, level=0.90)
    assert small is not None and "covered" not in small.text


def test_the_measured_table_is_the_one_in_methods_md() -> None:
    """docs/methods.md §4 prints the row the board reads."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "methods.md").read_text()
    sizes = sorted(MEASURED_HRT_COVERAGE)
    assert "| n/cell | " + " | ".join(map(str, sizes)) + " |" in doc
    row = " | ".join(f"{MEASURED_HRT_COVERAGE[n]:.3f}" for n in sizes)
    assert f"| measured HRT coverage (worse policy) | {row} |" in doc


@pytest.mark.parametrize("small", [True, False])
def test_proctor_analyze_flags_an_hrt_from_small_cells(
    small: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CLI table: ⚠ beside the HRT and the measured coverage under the
    table for cells below the threshold; nothing at the threshold. The JSON
    carries the same warning."""
    from proctor.cli import main

    if not small:
        monkeypatch.setattr(throughput, "MEASURED_HRT_COVERAGE", REACHED_AT_10)
    n = 3 if small else 10
    models = phail_like_models()[:2]
    eps = cohort(models, {"spoons": ()}, episodes_per_cell=n, rng=np.random.default_rng(4))
    path, out = tmp_path / "episodes.csv", tmp_path / "result.json"
    write_interchange(eps, path)
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", str(path), "--bootstrap", "50", "--json", str(out)])
    assert not exit_.value.code
    stdout = capsys.readouterr().out
    warning = json.loads(out.read_text())["policies"][1]["hrt_coverage_warning"]
    if small:
        assert warning["min_episodes_per_cell"] == 3 and warning["measured_at"] == 3
        assert warning["coverage"] == MEASURED_HRT_COVERAGE[3]
        assert "⚠ alpha: HRT from a cell of 3 episode(s)" in stdout
        assert f"covered {MEASURED_HRT_COVERAGE[3]:.0%} of the time" in " ".join(stdout.split())
    else:
        assert warning is None and "⚠" not in stdout
