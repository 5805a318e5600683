"""The whole analysis on small tables whose scores can be derived by hand,
and the JSON it writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from proctor.analysis.binary import Posterior
from proctor.analysis.episodes import Episode, EpisodeTable, Exclusion
from proctor.analysis.leaderboard import _hrt, analyze, default_tau
from proctor.analysis.report import RESULT_KEYS, data_version, to_json
from proctor.analysis.results import AnalysisProtocol, WelchTest
from proctor.analysis.significance import verdict
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models

PROTOCOL = AnalysisProtocol(tau=10.0, bootstrap=200, seed=1)


def single(eid: str, policy: str, obj: str, t: float | None, **kw) -> Episode:
    """A one-item episode: success at t, or (t None) a dropped item."""
    if t is None:
        return Episode(eid, policy, obj, 1, 5.0, (), 0, 1, "success", **kw)
    return Episode(eid, policy, obj, 1, t, (t,), 0, 0, "success", **kw)


def hand_table(reference: bool = True) -> EpisodeTable:
    return EpisodeTable(
        episodes=(
            single("r1", "human", "o1", 2.0, reference=reference),
            single("r2", "human", "o1", 4.0, reference=reference),
            single("r3", "human", "o2", 1.0, reference=reference),
            single("r4", "human", "o2", 1.0, reference=reference),
            single("m1", "bot", "o1", 6.0),
            single("m2", "bot", "o1", None),
            single("m3", "bot", "o2", 4.0),
            single("m4", "bot", "o2", 6.0),
            Episode("s1", "bot", "o2", 3, 9.0, (), 0, 0, "system"),
        )
    )


def test_scores_by_hand() -> None:
    lb = analyze(hand_table(), PROTOCOL)
    by = {p.policy: p for p in lb.policies}
    bot, human = by["bot"], by["human"]
    o1 = next(o for o in bot.per_object if o.object == "o1")
    o2 = next(o for o in bot.per_object if o.object == "o2")
    # RMST(10) = E[min(T, τ)], a ghost counting τ: reference o1 (2+4)/2 = 3,
    # o2 (1+1)/2 = 1; bot o1 (6+10)/2 = 8, o2 (4+6)/2 = 5
    assert o1.rmst.estimate == pytest.approx(8.0)
    assert o2.rmst.estimate == pytest.approx(5.0)
    assert human.rmst.estimate == pytest.approx(2.0)
    # HRT per cell 3/8 = 37.5 %, 1/5 = 20 %; macro (37.5 + 20)/2 = 28.75 %,
    # not the ratio of pooled RMSTs 2/6.5 = 30.77 %
    assert o1.hrt.estimate == pytest.approx(37.5)
    assert o2.hrt.estimate == pytest.approx(20.0)
    assert bot.hrt.estimate == pytest.approx(28.75)
    assert bot.rmst.estimate == pytest.approx(6.5)  # macro RMST (8 + 5)/2
    assert human.hrt.estimate == 100.0 and human.rank is None and bot.rank == 1
    # UPH 3600/8 = 450 on o1; MTBF/A = RMST/(1 − F(τ)) = 8/(1 − 0.5) = 16
    assert o1.uph.estimate == pytest.approx(450.0)
    assert o1.mtbfa.estimate == pytest.approx(16.0)
    # every bot operation is slower than every reference one: AUC 0
    assert bot.auc_vs_reference.estimate == pytest.approx(0.0)
    # completion 3 placed of 4 presented; one ghost in 4 operations, a drop
    assert bot.completion.estimate == pytest.approx(0.75)
    assert bot.hard_failure_rate.estimate == pytest.approx(0.25)
    assert bot.failure_modes.drops_per_operation.estimate == pytest.approx(0.25)
    assert bot.failure_modes.safety_stops_per_episode.estimate == 0.0
    # the system episode is listed, not scored
    assert lb.excluded == (Exclusion("s1", "bot", "o2", "system: infrastructure fault"),)
    assert bot.episodes == 4
    # intervals bracket their estimates
    for iv in (bot.hrt, bot.rmst, o1.rmst, bot.completion):
        assert iv.lo <= iv.estimate <= iv.hi


def test_hrt_sanity_numbers_of_methods_md() -> None:
    # docs/methods.md §4: reference RMST 10.5 s and OpenPI 77.7 s give 13.5 %
    assert float(_hrt(np.array(10.5), np.array(77.7))) == pytest.approx(13.51, abs=0.005)


def test_without_a_reference_hrt_and_auc_are_omitted_and_said_to_be() -> None:
    lb = analyze(hand_table(reference=False), PROTOCOL)
    assert lb.reference is None
    assert all(p.hrt is None and p.auc_vs_reference is None for p in lb.policies)
    assert any("no reference policy" in n for n in lb.notes)
    js = to_json(lb)
    assert all(p["hrt"] is None for p in js["policies"])
    assert js["protocol"]["reference"] is None
    # ranked by macro RMST instead (human 2 s before bot 6.5 s)
    assert [p["policy"] for p in js["policies"]] == ["human", "bot"]


def test_crossing_curves_get_the_crossing_verdict() -> None:
    # A: each episode places 3 items at 2 s intervals and drops 2 (ghosts);
    # B: places all 5 at 10 s intervals. RMST(60): A = 0.6·2 + 0.4·60 = 25.2 s,
    # B = 10 s → B better; AUC P(T_A < T_B) = 0.6 → A faster. KS = 0.6.
    eps = []
    for k in range(12):
        eps.append(Episode(f"a{k}", "A", "o", 5, 10.0, (2.0, 4.0, 6.0), 0, 2, "success"))
        eps.append(Episode(f"b{k}", "B", "o", 5, 50.0, (10.0, 20.0, 30.0, 40.0, 50.0), 0, 0,
                           "success"))  # fmt: skip
    lb = analyze(EpisodeTable(tuple(eps)), AnalysisProtocol(tau=60.0, bootstrap=200, seed=0))
    (pair,) = lb.pairs
    assert pair.macro_ks.raw_statistic == pytest.approx(0.6)
    assert pair.significant
    assert pair.verdict == "crossing" and pair.winner is None
    a_first = pair.a == "A"
    assert pair.rmst_diff.estimate == pytest.approx(15.2 if a_first else -15.2)
    assert pair.auc.estimate == pytest.approx(0.6 if a_first else 0.4)


def test_a_difference_without_a_clear_direction_is_unclear() -> None:
    """Issue 31: A's operations take 2 s or 58 s (each episode one or the
    other), B's about 30 s: the CDFs differ plainly (KS rejects) but
    RMST(60) is about 30 s for both, so the Bonferroni-level ΔRMST interval
    holds 0 and no one is called better."""
    rng = np.random.default_rng(1)
    eps = []
    for k in range(16):
        step = 2.0 if k % 2 else 58.0
        a = tuple(round(step * (i + 1) + float(rng.uniform(0, 0.5)), 3) for i in range(3))
        eps.append(Episode(f"a{k}", "A", "o", 3, a[-1], a, 0, 0, "success"))
        b = tuple(round(30.0 * (i + 1) + float(rng.uniform(0, 0.5)), 3) for i in range(3))
        eps.append(Episode(f"b{k}", "B", "o", 3, b[-1], b, 0, 0, "success"))
    lb = analyze(EpisodeTable(tuple(eps)), AnalysisProtocol(tau=60.0, bootstrap=400, seed=0))
    (pair,) = lb.pairs
    assert pair.significant
    iv = pair.rmst_diff_bonferroni
    assert iv.lo is not None and iv.hi is not None and iv.lo < 0 < iv.hi
    assert (pair.verdict, pair.winner) == ("unclear", None)
    js = to_json(lb)["pairs"][0]
    assert js["verdict"] == "unclear"
    assert js["macro_ks"]["method"] == "studentized"
    assert js["logrank"]["method"] == "episode_clustered"


def test_verdict_rules() -> None:
    # the direction is read from the Bonferroni-level interval of ΔRMST (issue 31)
    assert verdict(False, -3.0, 0.7, (-5.0, -1.0)) == ("indistinguishable", None)
    assert verdict(True, -3.0, 0.7, (-5.0, -1.0)) == ("better", "a")
    assert verdict(True, 3.0, 0.3, (1.0, 5.0)) == ("better", "b")
    assert verdict(True, -3.0, 0.3, (-5.0, -1.0)) == ("crossing", None)
    assert verdict(True, -3.0, 0.5, (-5.0, -1.0)) == ("crossing", None)
    # KS rejects, the interval holds 0: different, direction unclear — even
    # where both point estimates agree (the old rule called this "better")
    assert verdict(True, -3.0, 0.7, (-6.0, 0.5)) == ("unclear", None)
    assert verdict(True, -3.0, 0.7, (-6.0, 0.0)) == ("unclear", None)
    assert verdict(True, -3.0, 0.7) == ("unclear", None)  # no interval


@pytest.fixture(scope="module")
def synthetic_table() -> EpisodeTable:
    eps = cohort(
        phail_like_models()[:3], PHAIL_OBJECTS, episodes_per_cell=14,
        rng=np.random.default_rng(3),
    )  # fmt: skip
    # one policy never ran on one object
    eps = [e for e in eps if not (e.policy == "beta" and e.object == "towels")]
    return EpisodeTable(tuple(eps))


def test_every_key_of_the_result_is_listed(synthetic_table: EpisodeTable) -> None:
    """RESULT_KEYS (the words policy names may not be) covers the result."""
    lb = analyze(synthetic_table, AnalysisProtocol(tau=240.0, bootstrap=50, seed=4))
    extra = {
        "label_stream": "auto_and_reviewed",
        "campaign_id": 1,
        "tau_source": "x",
        "source": "y",
    }
    js = to_json(lb, extra_protocol=extra)

    def keys(value: object, parent: str = "") -> set[str]:
        if isinstance(value, dict):
            own = set() if parent in ("letters", "letters_completion") else set(value)
            return own | {x for k, v in value.items() for x in keys(v, k)}
        if isinstance(value, list):
            return {x for v in value for x in keys(v, parent)}
        return set()

    found = keys(js)
    assert found - RESULT_KEYS == set()
    assert {"policy", "estimate", "rmst", "letters_completion"} <= found


def test_result_json_schema(synthetic_table: EpisodeTable) -> None:
    protocol = AnalysisProtocol(tau=240.0, bootstrap=200, seed=4)
    lb = analyze(synthetic_table, protocol)
    js = to_json(lb, code_version="test", data_version=data_version(synthetic_table))
    text = json.dumps(js, allow_nan=False)  # strict JSON: no NaN or inf anywhere
    assert json.loads(text) == js
    expected = {"tau": 240.0, "bootstrap": 200, "seed": 4, "alpha": 0.05, "reference": "human"}
    assert {k: js["protocol"][k] for k in expected} == expected
    for p in js["policies"]:
        for key in ("policy", "episodes", "operations", "rmst", "hrt", "uph", "completion",
                    "mtbfa", "hard_failure_rate", "auc_vs_reference", "per_object"):  # fmt: skip
            assert key in p, key
        assert set(p["rmst"]) == {"estimate", "ci"}
        for o in p["per_object"]:
            for key in ("object", "episodes", "rmst", "hrt", "km"):
                assert key in o
            km = o["km"]
            assert len(km["t"]) == len(km["cdf"]) == len(km["lo"]) == len(km["hi"])
            assert km["t"][0] == 0 and km["cdf"][0] == 0
            assert all(lo <= c + 1e-9 and c <= hi + 1e-9 for c, lo, hi in zip(
                km["cdf"], km["lo"], km["hi"], strict=True))  # fmt: skip
            assert np.all(np.diff(km["cdf"]) >= 0)
    beta = next(p for p in js["policies"] if p["policy"] == "beta")
    assert beta["objects_missing"] == ["towels"]
    assert any("towels" in n for n in beta["notes"])
    assert {b["key"] for b in beta["per_tag"]} == {"articulated", "rigid", "small"}
    assert beta["per_configuration"] and all(
        {"tote_placement", "external_camera", "same_side", "completion", "hrt"} <= set(b)
        for b in beta["per_configuration"]
    )
    assert len(js["pairs"]) == 3
    for pr in js["pairs"]:
        for key in ("a", "b", "macro_ks", "logrank", "rmst_diff", "verdict"):
            assert key in pr
        assert set(pr["macro_ks"]) >= {"statistic", "p"}
        assert set(pr["logrank"]) >= {"chi2", "p", "p_bonferroni"}
        if "beta" in (pr["a"], pr["b"]):
            assert "towels" not in pr["objects"]
        if pr["verdict"] == "indistinguishable":
            assert pr["power"] is not None
    assert set(js["letters"]) == {"human", "alpha", "beta"}
    assert js["matrix"]["policies"] == [p["policy"] for p in js["policies"]]
    assert isinstance(js["excluded"], list)


def test_results_are_reproducible_from_the_seed(synthetic_table: EpisodeTable) -> None:
    def run(seed: int) -> dict:
        return to_json(
            analyze(synthetic_table, AnalysisProtocol(tau=240.0, bootstrap=100, seed=seed))
        )

    a, b, c = run(7), run(7), run(8)
    assert a == b
    pa = {p["policy"]: p for p in a["policies"]}
    pc = {p["policy"]: p for p in c["policies"]}
    assert pa["alpha"]["hrt"]["estimate"] == pc["alpha"]["hrt"]["estimate"]
    assert pa["alpha"]["hrt"]["ci"] != pc["alpha"]["hrt"]["ci"]


def test_data_version_is_order_free_and_content_sensitive(synthetic_table) -> None:
    eps = list(synthetic_table.episodes)
    same = EpisodeTable(tuple(reversed(eps)))
    assert data_version(same) == data_version(synthetic_table)
    e0 = eps[0]
    moved = Episode(**{**e0.__dict__, "duration_s": e0.duration_s + 0.001})
    assert data_version(EpisodeTable((moved, *eps[1:]))) != data_version(synthetic_table)


def test_default_tau_is_the_budget() -> None:
    eps = (
        Episode("a", "p", "o", 2, 10.0, (), 0, 0, "ran_out_of_time", budget_s=60.0),
        Episode("b", "p", "o", 4, 12.0, (), 0, 0, "ran_out_of_time", budget_s=120.0),
    )
    assert default_tau(EpisodeTable(eps)) == (120.0, "largest budget_s")
    no_budget = tuple(Episode(**{**e.__dict__, "budget_s": None}) for e in eps)
    assert default_tau(EpisodeTable(no_budget))[0] == 12.0


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(tau=0.0), "tau"),
        (dict(tau=10.0, bootstrap=0), "bootstrap"),
        (dict(tau=10.0, alpha=1.5), "alpha"),
        (dict(tau=10.0, success_at=(0.0,)), "success_at"),
        (dict(tau=10.0, rho=2.0), "rho"),
    ],
)
def test_protocol_rejects_bad_values(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AnalysisProtocol(**kw)


def test_nothing_to_score() -> None:
    with pytest.raises(ValueError, match="no episodes to score"):
        analyze(EpisodeTable((Episode("s", "p", "o", 1, 1.0, (), 0, 0, "system"),)), PROTOCOL)


def test_policies_without_a_common_object_are_not_compared() -> None:
    eps = (
        single("a1", "A", "o1", 2.0),
        single("a2", "A", "o1", 3.0),
        single("b1", "B", "o2", 2.0),
        single("b2", "B", "o2", 4.0),
    )
    lb = analyze(EpisodeTable(eps), PROTOCOL)
    assert lb.pairs == ()
    assert any("no common object" in n for n in lb.notes)


# cells where the policy never succeeds (issue 22): every operation censored,
# only ghosts (a lost and a dropped item), or one censored episode
NO_SUCCESS_CELLS = {
    "all_censored": (
        Episode("n1", "never", "o1", 2, 10.0, (), 0, 0, "ran_out_of_time"),
        Episode("n2", "never", "o1", 1, 7.0, (), 0, 0, "operator_stop"),
    ),
    "ghost_only": (
        Episode("n1", "never", "o1", 1, 3.0, (), 1, 0, "success"),
        Episode("n2", "never", "o1", 1, 4.0, (), 0, 1, "success"),
    ),
    "single_censored": (Episode("n1", "never", "o1", 1, 10.0, (), 0, 0, "ran_out_of_time"),),
}


@pytest.mark.parametrize("cell", sorted(NO_SUCCESS_CELLS))
def test_a_cell_with_no_success_scores_rmst_tau_and_no_median(cell: str) -> None:
    eps = (*hand_table().episodes, *NO_SUCCESS_CELLS[cell])
    lb = analyze(EpisodeTable(eps), PROTOCOL)
    never = next(p for p in lb.policies if p.policy == "never")
    (o1,) = never.per_object
    # no event: S = 1 on [0, τ], so RMST = ∫₀^τ 1 dt = τ exactly, in every
    # replicate (each is the same cell reweighted), and F never reaches ½
    assert o1.rmst.estimate == 10.0 and (o1.rmst.lo, o1.rmst.hi) == (10.0, 10.0)
    assert never.rmst.estimate == 10.0
    assert o1.median.estimate == np.inf and never.median.estimate == np.inf
    assert any("no successful operation" in n for n in o1.notes)
    # HRT = reference RMST on o1 / τ = 3 / 10
    assert o1.hrt.estimate == pytest.approx(30.0)
    # the other policies are scored as before, and the result serialises
    bot = next(p for p in lb.policies if p.policy == "bot")
    assert bot.rmst.estimate == pytest.approx(6.5)
    js = json.loads(json.dumps(to_json(lb), allow_nan=False))
    row = next(p for p in js["policies"] if p["policy"] == "never")
    assert row["median"] == {"estimate": None, "ci": [None, None]}
    assert row["per_object"][0]["median"] == {"estimate": None, "ci": [None, None]}
    assert row["per_object"][0]["rmst"] == {"estimate": 10.0, "ci": [10.0, 10.0]}
    assert set(row["per_object"][0]["km"]["cdf"]) == {0.0}


def test_multi_part_results_are_named_records_and_keep_their_json_shape() -> None:
    """docs/style.md: results are frozen dataclasses, not tuples read by
    position; the JSON the web stores and ``proctor analyze --json`` prints
    keeps the keys it always had (old snapshots stay readable)."""
    lb = analyze(hand_table(), PROTOCOL)
    bot = next(p for p in lb.policies if p.policy == "bot")
    post = bot.binary.success_posterior
    assert isinstance(post, Posterior) and post.lo <= post.mean <= post.hi
    assert isinstance(bot.binary.completion_posterior, Posterior)
    (pair,) = lb.pairs
    welch = pair.completion_welch
    assert isinstance(welch, WelchTest) and welch.p <= welch.p_bonferroni <= 1
    (x,) = lb.excluded
    assert isinstance(x, Exclusion) and x.episode_id == "s1"

    js = to_json(lb)
    jbot = next(p for p in js["policies"] if p["policy"] == "bot")
    assert jbot["binary"]["success_rate"] == {"estimate": post.mean, "ci": [post.lo, post.hi]}
    cpost = bot.binary.completion_posterior
    assert jbot["binary"]["completion_mean"] == {"estimate": cpost.mean, "ci": [cpost.lo, cpost.hi]}
    assert js["pairs"][0]["completion_welch"] == {
        "t": pytest.approx(welch.t),
        "df": pytest.approx(welch.df),
        "p": pytest.approx(welch.p),
        "p_bonferroni": pytest.approx(welch.p_bonferroni),
    }
    assert js["excluded"] == [
        {"episode_id": "s1", "policy": "bot", "object": "o2", "reason": x.reason}
    ]


def _envelope_table() -> EpisodeTable:
    """bot: interventions 3, not counted, 0, 5 (and a system episode with 100,
    which is never scored); human: none counted; steady: 2 in every episode."""
    return EpisodeTable(
        episodes=(
            single("r1", "human", "o1", 2.0, reference=True),
            single("r2", "human", "o2", 1.0, reference=True),
            single("m1", "bot", "o1", 6.0, envelope_interventions=3),
            single("m2", "bot", "o1", None),
            single("m3", "bot", "o2", 4.0, envelope_interventions=0),
            single("m4", "bot", "o2", 6.0, envelope_interventions=5),
            Episode("s1", "bot", "o2", 3, 9.0, (), 0, 0, "system", envelope_interventions=100),
            single("d1", "steady", "o1", 3.0, envelope_interventions=2),
            single("d2", "steady", "o2", 5.0, envelope_interventions=2),
            single("d3", "steady", "o2", None, envelope_interventions=2),
        )
    )


def test_envelope_interventions_per_episode_by_hand() -> None:
    lb = analyze(_envelope_table(), PROTOCOL)
    by = {p.policy: p for p in lb.policies}
    bot = by["bot"].failure_modes.envelope_interventions_per_episode
    # (3 + 0 + 5) over the 3 counted episodes = 8/3; reading the uncounted one
    # as zero would give 8/4 = 2, and the system episode's 100 is never scored
    assert bot.estimate == pytest.approx(8 / 3)
    # every replicate is a weighted mean of the counted episodes' 3, 0 and 5
    assert 0.0 <= bot.lo <= bot.estimate <= bot.hi <= 5.0 and bot.lo < bot.hi
    assert "envelope interventions per episode over the 3 of 4 episodes" in " ".join(
        by["bot"].notes
    )
    # the same count in every episode: no spread to resample
    steady = by["steady"].failure_modes.envelope_interventions_per_episode
    assert (steady.estimate, steady.lo, steady.hi) == (2.0, 2.0, 2.0)
    assert not any("envelope" in n for n in by["steady"].notes)
    # no episode counted: unknown, not zero
    human = by["human"].failure_modes.envelope_interventions_per_episode
    assert (human.estimate, human.lo, human.hi) == (None, None, None)
    assert "envelope interventions not recorded for these episodes" in by["human"].notes
    # the JSON, beside safety stops; unknown is null
    js = {p["policy"]: p["failure_modes"] for p in to_json(lb)["policies"]}
    assert js["bot"]["envelope_interventions_per_episode"]["estimate"] == pytest.approx(8 / 3)
    assert js["human"]["envelope_interventions_per_episode"] == {
        "estimate": None,
        "ci": [None, None],
    }
    assert list(js["bot"]).index("envelope_interventions_per_episode") > list(js["bot"]).index(
        "safety_stops_per_episode"
    )


def test_the_envelope_count_is_part_of_the_data_version() -> None:
    table = _envelope_table()
    changed = EpisodeTable(
        episodes=tuple(
            Episode(**{**e.__dict__, "envelope_interventions": 4}) if e.episode_id == "m1" else e
            for e in table.episodes
        )
    )
    assert data_version(changed) != data_version(table)
