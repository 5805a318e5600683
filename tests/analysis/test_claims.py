"""Per-object pair tests and letters, Barnard on a pair's success, and the
rankings side by side (proctor.analysis.claims), by hand and on a cohort."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from proctor.analysis.claims import rank_metric
from proctor.analysis.episodes import EpisodeTable
from proctor.analysis.interchange import write_interchange
from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import to_json
from proctor.analysis.results import AnalysisProtocol
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models
from tests.analysis.cli_support import in_process


def test_rank_metric_by_hand() -> None:
    # estimate then 4 replicates; a tie in replicate 3 shares first place
    values = {
        "a": np.array([3.0, 3.0, 1.0, 2.0, np.nan]),
        "b": np.array([2.0, 1.0, 2.0, 2.0, 1.0]),
        "c": np.array([1.0, 0.0, 0.0, 0.0, 0.0]),
    }
    r = rank_metric("x", values, higher_is_better=True)
    assert r.order == ("a", "b", "c")
    assert r.top1_share == pytest.approx({"a": 1.5 / 4, "b": 2.5 / 4, "c": 0.0})
    low = rank_metric("y", values, higher_is_better=False)
    assert low.order == ("c", "b", "a")
    assert low.top1_share["c"] == 1.0


@pytest.fixture(scope="module")
def board() -> dict:
    eps = cohort(
        phail_like_models()[:3], PHAIL_OBJECTS, episodes_per_cell=12, rng=np.random.default_rng(8)
    )
    return to_json(
        analyze(EpisodeTable(tuple(eps)), AnalysisProtocol(tau=240.0, bootstrap=300, seed=2))
    )


def test_pairs_carry_barnard_and_per_object_tests(board: dict) -> None:
    pairs = board["pairs"]
    n = len(pairs)
    for pr in pairs:
        sb = pr["success_barnard"]
        assert sb["p_bonferroni"] == pytest.approx(min(1.0, sb["p"] * n))
        a = next(p for p in board["policies"] if p["policy"] == pr["a"])
        assert sb["successes"][0] == a["binary"]["successes"]  # same objects: all of them
        assert [t["object"] for t in pr["per_object_tests"]] == pr["objects"]
        for t in pr["per_object_tests"]:
            assert t["ks"]["p_bonferroni"] == pytest.approx(min(1.0, t["ks"]["p"] * n))
            assert t["significant"] == (t["ks"]["p_bonferroni"] < 0.05)
            lo, hi = t["rmst_diff"]["ci"]
            assert lo <= t["rmst_diff"]["estimate"] <= hi
    # letters per object follow that object's tests: pairs that differ share no letter
    letters = {x["object"]: x["letters"] for x in board["letters_per_object"]}
    assert set(letters) == set(PHAIL_OBJECTS)
    for pr in pairs:
        for t in pr["per_object_tests"]:
            la, lb = letters[t["object"]][pr["a"]], letters[t["object"]][pr["b"]]
            assert (not set(la) & set(lb)) == t["significant"]
    # the human reference is far faster than any model on every object
    assert any(t["significant"] for pr in pairs for t in pr["per_object_tests"])


def test_rankings_side_by_side(board: dict) -> None:
    by = {r["metric"]: r for r in board["rankings"]}
    assert set(by) >= {"hrt", "rmst_pooled", "auc_vs_reference"}
    for r in by.values():
        names = [p["policy"] for p in r["policies"]]
        assert "human" not in names and len(names) == 2
        assert sum(p["top1_share"] for p in r["policies"]) == pytest.approx(1.0)
        est = [p["estimate"] for p in r["policies"]]
        assert est == sorted(est, reverse=r["higher_is_better"])
    hrt = {p["policy"]: p["estimate"] for p in by["hrt"]["policies"]}
    assert hrt == {
        p["policy"]: p["hrt"]["estimate"] for p in board["policies"] if p["policy"] in hrt
    }
    pooled = {p["policy"]: p["estimate"] for p in by["rmst_pooled"]["policies"]}
    for p in board["policies"]:
        if p["policy"] in pooled:
            assert pooled[p["policy"]] == pytest.approx(p["rmst_pooled"]["estimate"])


def test_cli_prints_letters_rankings_and_step(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    eps = cohort(
        phail_like_models()[:3], {"spoons": ("rigid",), "towels": ("deformable",)},
        episodes_per_cell=8, rng=np.random.default_rng(4),
    )  # fmt: skip
    path = tmp_path / "e.csv"
    write_interchange(eps, path)
    code, out, err = in_process(capsys, "analyze", str(path), "--bootstrap", "100")
    assert code == 0, err
    for text in ("Letters per object", "Rankings by rule", "Barnard"):
        assert text in out
    js = tmp_path / "step.json"
    code, out, err = in_process(
        capsys, "power", "step", "--n-max", "12", "--rates", "0.2,0.9", "--json", str(js)
    )
    assert code == 0, err
    step = json.loads(js.read_text())["step"]
    assert step["size"] <= 0.05 and step["at"]["reject"] > step["size"]


def test_first_n_reaching_by_hand() -> None:
    from proctor.analysis.detection import DetectionCurve, first_n_reaching

    curve = DetectionCurve(
        n=np.array([30, 10, 20, 40]),  # unsorted on purpose
        rate={
            "macro_ks": np.array([0.9, 0.5, 0.82, 0.95]),
            "rmst": np.array([0.79, 0.2, 0.6, 0.8]),
            "binary@30": np.array([0.1, 0.0, 0.05, 0.3]),
        },
        lo={},
        hi={},
        outer=100,
        inner=100,
        alpha=0.05,
    )
    assert first_n_reaching(curve) == {"macro_ks": 20, "rmst": 40, "binary@30": None}
    assert first_n_reaching(curve, 0.5) == {"macro_ks": 10, "rmst": 20, "binary@30": None}


def test_power_detection_prints_table_4(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    eps = cohort(
        phail_like_models()[:3], {"spoons": ("rigid",)}, episodes_per_cell=10,
        rng=np.random.default_rng(6),
    )  # fmt: skip
    path = tmp_path / "e.csv"
    write_interchange(eps, path)
    out = tmp_path / "d.json"
    code, text, err = in_process(
        capsys, "power", "detection", str(path), "--pair", "human,alpha", "--outer", "30",
        "--inner", "30", "--n", "2,4,8", "--power", "0.5", "--json", str(out),
        "--calibrate-rho", "--bridge-sims", "200",
    )  # fmt: skip
    assert code == 0, err
    assert "PhAIL Table 4" in text
    (det,) = json.loads(out.read_text())["detection"]
    for key, rate in det["rate"].items():
        reached = [n for n, r in zip(det["n"], rate, strict=True) if r >= 0.5]
        assert det["first_n"][key] == (min(reached) if reached else None)
    # the human is far faster than alpha: the KS resolves it within the n tried
    assert det["first_n"]["macro_ks"] is not None
    cal = json.loads(out.read_text())["rho_calibration"]
    assert 0.0 <= cal["rho"] <= 1.0 and "calibrated" in text
    assert [p["n"] for p in cal["points"]] == det["n"]
    assert [p["observed"] for p in cal["points"]] == det["rate"]["macro_ks"]
    gaps = [abs(p["observed"] - p["predicted"]) for p in cal["points"]]
    assert cal["max_gap"] == pytest.approx(max(gaps))


def _effects(rho: float) -> list:
    from proctor.analysis.planning import ObjectEffect

    f = np.linspace(0.05, 0.95, 40)
    out = []
    for k, shift in enumerate((0.20, 0.12, 0.28)):
        delta = shift * np.sin(np.pi * f)  # a gap that closes at both ends, as F's do
        out.append(ObjectEffect(f"o{k}", f, delta, m_bar=6.0, rho=rho))
    return out


def test_calibrate_rho_recovers_a_planted_rho() -> None:
    """Rates made by a bridge model at ρ = 0.3 (its own draws) are fitted by a
    model with other draws: the calibrated ρ is the planted one, and the
    indicator-free default (ρ = 0) misses the rates by far more."""
    from proctor.analysis.planning import BridgeModel, calibrate_rho

    truth = BridgeModel(_effects(0.3), sims=4000, rng=np.random.default_rng(1))
    ns = [2, 4, 8, 12, 16]
    rates = [truth.power(n) for n in ns]
    assert 0.1 < rates[0] < rates[-1] < 1.0
    model = BridgeModel(_effects(0.0), sims=4000, rng=np.random.default_rng(2))
    fit = calibrate_rho([(model, ns, rates)])
    assert fit.rho == pytest.approx(0.3, abs=0.04)
    assert fit.max_gap < 0.03
    at_zero = calibrate_rho([(model, ns, rates)], grid=[0.0])
    assert at_zero.max_gap > 3 * fit.max_gap


def test_per_object_ks_equals_the_test_on_that_object_alone() -> None:
    """The per-object statistics the macro test computes on its relabellings
    are the studentized test run on one stratum with the same draws."""
    from proctor.analysis.significance import studentized_macro_ks_test
    from tests.analysis.helpers import arm_operations

    eps = cohort(
        phail_like_models()[:3], PHAIL_OBJECTS, episodes_per_cell=8, rng=np.random.default_rng(9)
    )
    table = EpisodeTable(tuple(eps))
    strata = {
        o: (arm_operations(table, "alpha", o), arm_operations(table, "beta", o))
        for o in PHAIL_OBJECTS
    }

    def rng(o: str) -> np.random.Generator:
        return np.random.default_rng(sum(map(ord, o)))

    macro = studentized_macro_ks_test(
        strata, tau=240.0, replicates=300, rngs={o: rng(o) for o in strata}
    )
    for o in strata:
        alone = studentized_macro_ks_test(
            {o: strata[o]}, tau=240.0, replicates=300, rngs={o: rng(o)}
        )
        assert macro.object_statistic[o] == pytest.approx(alone.statistic, rel=1e-9)
        # per object: the permutation reference alone (the wild one is the macro test's)
        assert macro.object_p[o] == alone.p_permutation
