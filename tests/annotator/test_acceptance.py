"""Issue 7's acceptance, measured on the simulated corpus (``conftest.py``).

* Detector recall and precision of placements ≥ 98 %, median |Δt| ≤ 0.1 s,
  95th percentile ≤ 0.5 s against the cell's ground truth, across every
  demo policy profile and object; the share of episodes sent to review is
  reported. The figures are printed (``-s``) and summarised at the end of
  the run (also under ``-q``).
* Disagreement episodes are queued, agreement episodes are not. Besides the
  detector's own disagreements, one episode in four gets a miscounting
  operator (one placement too few, or one too many): the detector must
  disagree and queue exactly those.
* The queued episodes are reviewed through the review service by the demo's
  automatic reviewer (flagged miscounts resolved by the automatic admin),
  and the analysis then runs on "auto + reviewed" and on "reviewed only"
  from the same database.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from proctor.analysis.leaderboard import analyze
from proctor.analysis.results import AnalysisProtocol
from proctor.analysis.store import load_episodes
from proctor.annotator.autoreview import resolve_flag_with_ground_truth, review_with_ground_truth
from proctor.annotator.config import load_thresholds
from proctor.annotator.evaluation import PLAN_ORDER, score_database
from proctor.annotator.reconcile import annotate_episode, pending_episodes
from proctor.annotator.review import review_queue
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db.engine import ProctorSession, make_engine, make_session_factory, session_scope
from proctor.core.db.models import Episode, PlacementEvent, ReviewAction
from proctor.core.domain import LabelStatus, LabelStream, Outcome, PlacementSource, PlacementStatus
from proctor.core.recording.reader import load_ground_truth
from proctor.demo.simulated_episodes import OBJECT_NAMES, PROFILES
from tests.annotator.conftest import Corpus, report

MISCOUNT_EVERY = 4
EXACT_S = inspect.signature(review_with_ground_truth).parameters["exact_s"].default
# The first test waits for the corpus: ≈ 0.5 CPU-s an episode through the real
# runner (≈ 2 min on an idle 2-core machine), far longer on a shared, loaded
# one; afterwards it comes from the cache (see conftest.py).
pytestmark = pytest.mark.timeout(2400)


@dataclass
class Annotated:
    corpus: Corpus
    sessions: object
    store: LocalArtifactStore
    miscounted: dict[str, int]  # uid → the true placed count
    detected: dict[str, int]  # uid → the detector's success count

    def session(self) -> ProctorSession:
        return self.sessions()  # type: ignore[operator]


@pytest.fixture(scope="module")
def annotated(sim_corpus: Corpus) -> Iterator[Annotated]:
    engine = make_engine(sim_corpus.url)
    sessions = make_session_factory(engine)
    store = LocalArtifactStore(sim_corpus.artifacts)
    miscounted: dict[str, int] = {}
    with session_scope(sessions) as s:
        episodes = list(s.scalars(sa.select(Episode).order_by(*PLAN_ORDER)))
        assert len(episodes) == len(sim_corpus.plan)
        for i, ep in enumerate(episodes):
            if i % MISCOUNT_EVERY != 1 or ep.outcome == Outcome.system:
                continue
            assert ep.placed is not None and ep.lost is not None and ep.dropped is not None
            true = ep.placed
            if ep.placed > 0:
                ep.placed -= 1  # an operator who missed one
            elif ep.lost + ep.dropped < ep.items:
                ep.placed += 1  # ... or counted one that never landed
            else:
                continue
            miscounted[ep.uid] = true
    th = load_thresholds()
    detected: dict[str, int] = {}
    with session_scope(sessions) as s:
        for ep in pending_episodes(s):
            detected[ep.uid] = annotate_episode(s, store=store, episode=ep, thresholds=th).successes
    yield Annotated(sim_corpus, sessions, store, miscounted, detected)
    engine.dispose()


def test_the_corpus_covers_every_profile_and_object(annotated: Annotated) -> None:
    cells = {(s.profile, s.object_name) for s in annotated.corpus.plan}
    assert cells == {(p, o) for p in PROFILES for o in OBJECT_NAMES}
    assert len(annotated.detected) == len(annotated.corpus.plan)


def test_detector_meets_the_acceptance_figures(
    annotated: Annotated, request: pytest.FixtureRequest
) -> None:
    with annotated.session() as s:
        score, scores = score_database(s, store=annotated.store)
    # the review share is the detector's own: against the true count, not a miscount
    honest = [e for e in scores if e.uid not in annotated.miscounted]
    natural_review = sum(len(e.detected_s) != len(e.true_s) for e in scores) / len(scores)
    queued_share = sum(e.to_review for e in scores) / len(scores)
    lines = [
        f"annotator acceptance on {score.episodes} simulated episodes "
        f"({len(PROFILES)} demo profiles × {len(OBJECT_NAMES)} objects, telemetry only):",
        *("  " + line for line in score.lines()),
        f"  detector count ≠ true count (what review would catch): {natural_review:.1%}",
        f"  queued for review incl. {len(annotated.miscounted)} miscounting operators: "
        f"{queued_share:.1%}",
    ]
    report(request.config, *lines)
    summary = "\n".join(lines)
    assert score.true_placements >= 300, summary
    assert score.recall >= 0.98, summary
    assert score.precision >= 0.98, summary
    assert score.median_abs_error_s <= 0.1, summary
    assert score.p95_abs_error_s <= 0.5, summary
    assert len(honest) + len(annotated.miscounted) == score.episodes


def test_disagreements_are_queued_and_agreements_are_not(annotated: Annotated) -> None:
    with annotated.session() as s:
        rows = {ep.uid: ep for ep in s.scalars(sa.select(Episode))}
        queued = {e.uid for e in review_queue(s)}
    disagree = {uid for uid, n in annotated.detected.items() if n != rows[uid].placed}
    assert queued == disagree
    # a miscount is caught whenever the detector counted right (when it erred the
    # same way as the operator, the two agree: an error no count check can see)
    caught = {uid for uid, true in annotated.miscounted.items() if annotated.detected[uid] == true}
    assert caught <= queued
    assert len(caught) >= 0.9 * len(annotated.miscounted)
    for uid, ep in rows.items():
        expected = LabelStatus.needs_review if uid in disagree else LabelStatus.auto
        assert ep.label_status == expected, uid


def test_review_then_analysis_on_both_label_streams(
    annotated: Annotated, request: pytest.FixtureRequest
) -> None:
    with session_scope(annotated.sessions) as s:  # type: ignore[arg-type]
        queued = [e.uid for e in review_queue(s)]
        for uid in queued:
            review_with_ground_truth(s, store=annotated.store, uid=uid)
        flagged = [e.uid for e in review_queue(s, admin=True)]
        # the automatic reviewer flags exactly the queued miscounts (truth ≠ log)
        assert set(flagged) == set(annotated.miscounted) & set(queued)
        for uid in flagged:
            state = resolve_flag_with_ground_truth(s, store=annotated.store, uid=uid)
            if state.label_status == LabelStatus.needs_review:  # else: nothing left to confirm
                review_with_ground_truth(s, store=annotated.store, uid=uid)
        assert review_queue(s, admin=True) == []

    with annotated.session() as s:
        reviewed = set(
            s.scalars(sa.select(Episode.uid).where(Episode.label_status == LabelStatus.reviewed))
        )
        assert reviewed == set(queued)
        # reviewed placements are the ground truth's: a candidate within the reviewer's
        # 20 ms (a third of a 15 fps frame) is confirmed as it stands, any other moved
        # or added at the true time (to the 0.1 ms the API keeps)
        for uid in reviewed:
            ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
            assert ep is not None
            confirmed = list(
                s.scalars(
                    sa.select(PlacementEvent.t_s)
                    .where(
                        PlacementEvent.episode_id == ep.id,
                        PlacementEvent.source == PlacementSource.reviewer,
                        PlacementEvent.status == PlacementStatus.confirmed,
                    )
                    .order_by(PlacementEvent.t_s)
                )
            )
            truth = load_ground_truth(s, annotated.store, uid)
            assert truth is not None
            assert confirmed == pytest.approx(sorted(truth["placements_s"]), abs=EXACT_S + 1e-4)
            assert ep.placed == len(truth["placements_s"])
        n_actions = s.scalar(sa.select(sa.func.count()).select_from(ReviewAction))
        automatic = s.scalar(
            sa.select(sa.func.count())
            .select_from(ReviewAction)
            .where(ReviewAction.reviewer_id.is_(None), ReviewAction.reviewer_label != "")
        )
        assert n_actions and n_actions == automatic  # every record says it was software

        both = load_episodes(s, campaign_id=None, stream=LabelStream.auto_and_reviewed)
        only = load_episodes(s, campaign_id=None, stream=LabelStream.reviewed_only)
    protocol = AnalysisProtocol(tau=60.0, bootstrap=200, power_sims=50)
    uids_both = {e.episode_id for e in both.episodes}
    uids_only = {e.episode_id for e in only.episodes}
    assert uids_only == reviewed
    # every episode is auto or reviewed now: none is left out for its labels
    assert uids_both | {x.episode_id for x in both.excluded} == set(annotated.detected)
    assert not [x for x in both.excluded if "label" in x.reason], both.excluded
    lb_both = analyze(both, protocol)
    lb_only = analyze(only, protocol)
    names_both = {p.policy for p in lb_both.policies}
    names_only = {p.policy for p in lb_only.policies}
    assert names_only <= names_both and len(names_both) == len(PROFILES)
    report(
        request.config,
        f"  analysis: auto + reviewed scored {len(uids_both)} episodes "
        f"({len(names_both)} policies), reviewed only {len(uids_only)} "
        f"({len(names_only)} policies); {len(queued)} reviewed, "
        f"{len(flagged)} flagged counts corrected; excluded: "
        + (", ".join(sorted({x.reason for x in both.excluded})) or "none"),
    )
