"""The pre-registered interaction test: its size on null data (simulation),
its power on an injected interaction, and how a protocol pre-registers it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from proctor.analysis.interaction import interaction_test
from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import to_json
from proctor.analysis.results import AnalysisProtocol
from proctor.analysis.synthetic import PHAIL_OBJECTS, PolicyModel, cohort, simulate_episode

A = PolicyModel("a", 6.0, p_drop=0.03)
B = PolicyModel("b", 9.0, p_drop=0.05)
REF = PolicyModel("ref", 2.5, sigma=0.35, p_drop=0.0, p_lost=0.0, p_safety=0.0, reference=True)


def _rejections(factor: str, effect: str, models: list[PolicyModel], runs: int) -> np.ndarray:
    ps = []
    policies = (models[0].name, models[1].name)
    for i in range(runs):
        rng = np.random.default_rng(10_000 + i)
        # cohort() draws tote and camera sides at random and lets neither change a thing
        eps = cohort(models, PHAIL_OBJECTS, episodes_per_cell=8, rng=rng, items=(3, 5))
        r = interaction_test(
            eps, policies=policies, factor=factor, effect=effect, tau=60.0,
            permutations=99, rng=rng,
        )  # fmt: skip
        assert r is not None
        ps.append(r.p)
    return np.asarray(ps)


@pytest.mark.parametrize(
    ("factor", "effect", "models"),
    [("tote_side", "rmst_difference", [A, B]), ("camera_side", "hrt", [A, REF])],
)
def test_the_size_holds_on_null_data(factor: str, effect: str, models: list[PolicyModel]) -> None:
    runs, alpha = 300, 0.05
    p = _rejections(factor, effect, models, runs)
    rate = float(np.mean(p <= alpha))
    # exact by construction (a permutation test): the rejection rate is within
    # Monte Carlo error of alpha, three standard errors above at most
    assert rate <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / runs), rate
    assert rate > 0  # the test can reject at all
    # and the p-values are roughly uniform, not piled at 1
    assert 0.35 < float(np.median(p)) < 0.65


def _with_interaction(rng: np.random.Generator) -> list:
    """Policy a is three times as slow with the tote on the right; b does not care."""
    slow_a = dataclasses.replace(A, scale_s=A.scale_s * 3.0)
    eps = []
    for obj, tags in PHAIL_OBJECTS.items():
        for k in range(20):
            tote = ("left", "right")[k % 2]
            for m in (slow_a if tote == "right" else A, B):
                eps.append(
                    simulate_episode(
                        m,
                        obj,
                        items=4,
                        budget_per_item=30.0,
                        rng=rng,
                        episode_id=f"{m.name}-{obj}-{k}",
                        tote=tote,
                        camera="left",
                        tags=tags,
                    )
                )
    return eps


def test_an_interaction_is_found_and_its_direction_reported() -> None:
    rng = np.random.default_rng(5)
    eps = _with_interaction(rng)
    r = interaction_test(
        eps, policies=("a", "b"), factor="tote_side", effect="rmst_difference",
        tau=60.0, permutations=199, rng=rng,
    )  # fmt: skip
    assert r is not None and r.levels == ("left", "right")
    assert r.p < 0.01
    left, right = r.per_level
    assert left is not None and right is not None and right > left  # a loses more on the right
    # the camera side did not matter
    r_cam = interaction_test(
        eps, policies=("a", "b"), factor="camera_side", effect="rmst_difference",
        tau=60.0, permutations=199, rng=rng,
    )  # fmt: skip
    assert r_cam is None  # one level only: nothing to test


def test_object_tags_are_permuted_among_objects() -> None:
    rng = np.random.default_rng(6)
    eps = cohort([A, B], PHAIL_OBJECTS, episodes_per_cell=6, rng=rng, items=(3, 4))
    r = interaction_test(
        eps, policies=("a", "b"), factor="object_tag:rigid", effect="rmst_difference",
        tau=60.0, permutations=199, rng=rng,
    )  # fmt: skip
    assert r is not None and r.levels == ("not rigid", "rigid")
    # two of four objects are rigid: six distinct assignments, so p >= 1/6 roughly
    assert r.p > 0.1


def test_a_protocol_pre_registers_the_factors() -> None:
    with pytest.raises(ValueError, match="interaction factor 'weather'"):
        AnalysisProtocol(tau=60.0, interaction_factors=("weather",))
    eps = cohort([REF, A, B], PHAIL_OBJECTS, episodes_per_cell=5, rng=np.random.default_rng(2))
    from proctor.analysis.episodes import EpisodeTable

    table = EpisodeTable(tuple(eps))
    plain = to_json(analyze(table, AnalysisProtocol(tau=60.0, bootstrap=30, seed=1)))
    assert all(p["interactions"] == [] for p in plain["pairs"])
    lb = analyze(
        table,
        AnalysisProtocol(
            tau=60.0, bootstrap=30, seed=1, interaction_factors=("tote_side", "station")
        ),
    )
    js = to_json(lb)
    assert js["protocol"]["interaction_factors"] == ["tote_side", "station"]
    for pair in js["pairs"]:
        # no station recorded: only the tote side is tested
        [x] = pair["interactions"]
        assert x["factor"] == "tote_side" and x["policies"] == [pair["a"], pair["b"]]
        assert 0 < x["p"] <= 1 and x["permutations"] == 30
    ref = next(p for p in js["policies"] if p["reference"])
    assert ref["hrt_interactions"] == []
    other = next(p for p in js["policies"] if not p["reference"])
    [h] = other["hrt_interactions"]
    assert h["effect"] == "hrt" and h["policies"] == [other["policy"], ref["policy"]]
    # the pairs' verdicts are the plain run's: the tests only add to them
    assert [p["verdict"] for p in js["pairs"]] == [p["verdict"] for p in plain["pairs"]]
