"""Failure-mode proposals: the taxonomy file, the telemetry rules on
hand-made telemetry (times worked out by hand), the proposer's review
records (labelled, idempotent, respecting retractions), and precision and
recall against the simulated cell's ground truth."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.annotator.autopropose import PROPOSER, propose_episode
from proctor.annotator.config import Thresholds, load_thresholds
from proctor.annotator.detector import Signals
from proctor.annotator.pipeline import layout_for
from proctor.annotator.proposal_scores import score_rule
from proctor.annotator.proposals import Proposal, propose
from proctor.annotator.tags import retract_tag, tags_of
from proctor.annotator.taxonomy import load_taxonomy, parse_taxonomy
from proctor.core.db.engine import ProctorSession
from proctor.core.errors import ConfigError
from proctor.demo.simulated_episodes import corpus_plan, simulate
from tests.annotator.conftest import report
from tests.annotator.helpers import HZ, RATE, Op, store_episode, telemetry_table

# one good pick, a grasp that closes on nothing, a pick that slips mid-carry,
# then the arm parked for 8 s
OPS = [Op(1.0, 3.0), Op(4.0, 5.0, held=False), Op(6.0, 9.0, slip_at=7.5)]
DURATION = 18.0


def test_the_shipped_taxonomy_loads_and_a_bad_one_names_the_field(tmp_path: Path) -> None:
    tax = load_taxonomy()
    assert {"missed_grasp", "slip_in_transit", "stall", "collision"} <= set(tax.keys)
    assert tax.for_rule("closed_on_nothing").key == "missed_grasp"  # type: ignore[union-attr]
    assert tax.label("gone_mode") == "gone_mode (retired)"
    with pytest.raises(ConfigError, match=r"mode\[1\]\.key: 'a' is listed twice"):
        parse_taxonomy({"mode": [{"key": "a", "label": "A"}, {"key": "a", "label": "B"}]})
    with pytest.raises(ConfigError, match=r"mode\[0\]\.label"):
        parse_taxonomy({"mode": [{"key": "a"}]})
    with pytest.raises(ConfigError, match=r"mode\[0\]\.key"):
        parse_taxonomy({"mode": [{"key": "Bad Key", "label": "x"}]})
    bad = tmp_path / "t.toml"
    bad.write_text("mode = [", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_taxonomy(bad)


def _rules(found: list[Proposal]) -> list[tuple[str, float]]:
    return [(p.rule, round(p.t_s, 2)) for p in found]


def test_the_rules_on_hand_made_telemetry() -> None:
    th = Thresholds(version="t")
    sig = Signals.from_table(telemetry_table(OPS, DURATION), t0=100.0)
    found = propose(sig, layout_for(th, tote_side="left", manifest=None), th)
    # by hand: the empty closure starts at 4.0 and the fingers travel RATE per
    # second, so they reach the closed band (0.97) at 4.0 + 0.97 / RATE
    t_miss = 4.0 + th.detector.closed_band / RATE
    assert ("closed_on_nothing", round(t_miss, 2)) in _rules(found) or (
        "closed_on_nothing",
        round(t_miss + 1 / HZ, 2),
    ) in _rules(found)
    # the slip: the last sample on the plateau before 7.5
    slips = [p for p in found if p.rule == "lost_in_transit"]
    assert len(slips) == 1 and abs(slips[0].t_s - 7.5) <= 2 / HZ
    # parked from 9.8 s (the last op's release pose ends at t_open + 0.8) to the end
    [still] = [p for p in found if p.rule == "no_motion"]
    assert abs(still.t_s - 9.8) <= 2 / HZ and still.evidence["still_s"] >= 8.0
    # the good pick gives nothing
    assert not [p for p in found if p.t_s < 3.5]


def test_the_proposer_writes_labelled_records_once(
    db_session: ProctorSession, tmp_path: Path
) -> None:
    from proctor.core.artifacts import LocalArtifactStore

    store = LocalArtifactStore(tmp_path / "a")
    ep = store_episode(db_session, store, ops=OPS, duration=DURATION, items=3, placed=1)
    th = Thresholds(version="t")
    made = propose_episode(db_session, store=store, uid=ep.uid, thresholds=th)
    assert sorted(t.mode for t in made) == ["missed_grasp", "slip_in_transit", "stall"]
    assert all(t.automatic and t.who == PROPOSER.label for t in made)
    assert {t.evidence["rule"] for t in made} == {
        "closed_on_nothing",
        "lost_in_transit",
        "no_motion",
    }
    # again: nothing new; a retracted proposal is not proposed anew
    assert propose_episode(db_session, store=store, uid=ep.uid, thresholds=th) == []
    slip = next(t for t in made if t.mode == "slip_in_transit")
    retract_tag(db_session, uid=ep.uid, tag_id=slip.id, reviewer=PROPOSER, note="test")
    assert propose_episode(db_session, store=store, uid=ep.uid, thresholds=th) == []
    assert sorted(t.mode for t in tags_of(db_session, [ep.id])) == ["missed_grasp", "stall"]


@pytest.mark.slow
def test_proposals_against_the_simulators_ground_truth(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Simulated episodes over every demo profile and object; the proposer's
    records (read back from the review log) against the world's own log of
    missed grasps and slips."""
    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db import migrate, session_scope
    from proctor.core.db.engine import make_engine, make_session_factory

    url = f"sqlite:///{tmp_path / 'sim.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    store = LocalArtifactStore(tmp_path / "artifacts")
    plan = corpus_plan(36, seed=20_261_124, items=(2, 3))
    done = simulate(plan, sessions=sessions, store=store, spool_root=tmp_path / "spool")
    th = load_thresholds()
    pairs = []
    with session_scope(sessions) as s:
        for ep in done:
            propose_episode(s, store=store, uid=ep.uid, thresholds=th)
            back = [
                Proposal(t.evidence["rule"], t.t_s)
                for t in tags_of(s, [ep.episode_id])
                if t.automatic
            ]
            pairs.append((back, ep.ground_truth))
    engine.dispose()
    miss = score_rule("closed_on_nothing", pairs)
    slip = score_rule("lost_in_transit", pairs)
    report(
        request.config,
        f"failure proposals on {len(done)} simulated episodes (tolerance 1 s):",
        *(
            f"  {r.rule}: proposed {r.proposed}, true {r.true}, matched {r.matched}, "
            f"precision {r.precision}, recall {r.recall}"
            for r in (miss, slip)
        ),
    )
    assert miss.true >= 20 and slip.true >= 1  # the sample has both to score
    assert miss.recall is not None and miss.recall >= 0.95
    assert miss.precision is not None and miss.precision >= 0.8
    assert slip.recall is not None and slip.recall >= 0.8
    assert slip.precision is not None and slip.precision >= 0.8
