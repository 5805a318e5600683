"""The demo policies keep their character on the simulated cell.

Measured on the acceptance corpus (``conftest.py``: 36 episodes of 1–3 items
per demo profile, cached), from the cell's ground truth — not from the
annotator, so a detector change cannot move these figures — with the
analysis's own Kaplan–Meier code. The properties ``proctor demo`` relies on:
the reference agent is the fastest; swift is faster than steady but loses
items (hard failures), steady almost never does, so their time-to-success
CDFs cross; balanced and dawdler are close. The full-size demo campaign
(8 items, τ = the budget) is measured by ``./run bench demo_profiles``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
import sqlalchemy as sa

from proctor.analysis.episodes import Episode as ScoredEpisode
from proctor.analysis.km import kaplan_meier, quantile_time, survival_at
from proctor.analysis.operations import extract_operations
from proctor.annotator.evaluation import PLAN_ORDER
from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db.engine import make_engine, make_session_factory
from proctor.core.db.models import Artifact, Assignment, Episode, Policy
from proctor.core.domain import ArtifactKind, Outcome
from tests.annotator.conftest import Corpus, report


@dataclass(frozen=True)
class Character:
    episodes: int
    operations: int
    median_s: float  # KM median time to success
    plateau: float  # F(∞): the share of operations that ever succeed
    ghost_share: float  # hard failures (lost, dropped, safety) per operation
    grid: np.ndarray
    survival: np.ndarray

    def cdf(self, t: float) -> float:
        return float(1.0 - survival_at(self.grid, self.survival, t)[0])


@pytest.fixture(scope="module")
def characters(sim_corpus: Corpus) -> dict[str, Character]:
    engine = make_engine(sim_corpus.url)
    store = LocalArtifactStore(sim_corpus.artifacts)
    by_profile: dict[str, list[ScoredEpisode]] = {}
    try:
        with make_session_factory(engine)() as s:
            for ep in s.scalars(sa.select(Episode).order_by(*PLAN_ORDER)):
                if ep.outcome == Outcome.system:
                    continue
                assignment = s.get(Assignment, ep.assignment_id)
                assert assignment is not None
                policy = s.get(Policy, assignment.policy_id)
                assert policy is not None
                truth_row = s.scalar(
                    sa.select(Artifact).where(
                        Artifact.episode_id == ep.id, Artifact.kind == ArtifactKind.ground_truth
                    )
                )
                assert truth_row is not None and ep.outcome is not None
                truth = json.loads(store.read_bytes(truth_row.sha256))
                final = truth["final"]
                profile = policy.name.removeprefix("demo-")
                by_profile.setdefault(profile, []).append(
                    ScoredEpisode(
                        episode_id=ep.uid,
                        policy=profile,
                        object="any",
                        items=ep.items,
                        duration_s=float(ep.clock_end_s - ep.clock_start_s),  # type: ignore[operator]
                        placements_s=tuple(float(t) for t in truth["placements_s"]),
                        lost=int(final["lost"]),
                        dropped=int(final["dropped"]),
                        outcome=ep.outcome.value,
                    )
                )
    finally:
        engine.dispose()
    out = {}
    for profile, episodes in by_profile.items():
        ops = extract_operations(episodes)
        km = kaplan_meier(ops)
        s = km.survival[:, None]
        out[profile] = Character(
            episodes=len(episodes),
            operations=len(ops),
            median_s=float(quantile_time(km.t, s, 0.5)[0]),
            plateau=km.plateau,
            ghost_share=float(ops.ghost.mean()),
            grid=km.t,
            survival=s,
        )
    return out


def test_the_demo_profiles_keep_their_character(
    characters: dict[str, Character], request: pytest.FixtureRequest
) -> None:
    c = characters
    report(
        request.config,
        "demo profiles on the acceptance corpus (ground truth; KM over operations):",
        *(
            f"  {p:<10} {x.episodes} episodes, {x.operations} operations, median "
            f"{x.median_s:.2f} s, plateau {x.plateau:.1%}, hard failures {x.ghost_share:.1%}"
            for p, x in sorted(c.items())
        ),
    )
    # the reference agent is the fastest of all
    others = [x.median_s for p, x in c.items() if p != "reference"]
    assert c["reference"].median_s < min(others)
    # swift vs steady: swift is quicker …
    assert c["swift"].median_s < 0.75 * c["steady"].median_s
    # … but fails hard where steady does not (≈ 5–10 % of its operations) …
    assert 0.02 <= c["swift"].ghost_share <= 0.15
    assert c["steady"].ghost_share <= 0.02
    # … so the CDFs cross: swift ahead early, steady ahead at the end
    t_early = c["swift"].median_s
    assert c["swift"].cdf(t_early) > c["steady"].cdf(t_early) + 0.2
    assert c["swift"].plateau < c["steady"].plateau
    # balanced and dawdler are close
    b, d = c["balanced"].median_s, c["dawdler"].median_s
    assert abs(b - d) / ((b + d) / 2) < 0.3
