"""``proctor export`` refuses what it must, on both databases (the happy
path runs on the demo's output in test_demo.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from proctor.core.artifacts import LocalArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.domain import AssignmentStatus, CampaignStatus
from proctor.core.errors import UsageError
from proctor.export.dataset import export_campaign
from tests import factories as f


@pytest.mark.parametrize(
    "status", [CampaignStatus.draft, CampaignStatus.running, CampaignStatus.closed]
)
def test_unreleased_campaigns_are_sealed(
    db_session: ProctorSession,
    artifact_store: LocalArtifactStore,
    tmp_path: Path,
    status: CampaignStatus,
) -> None:
    camp = f.campaign(db_session, status=status)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="not released: who ran what is sealed"):
        export_campaign(db_session, artifact_store, campaign=camp.name, out=out)
    assert not out.exists()
    assert not any(tmp_path.glob(".out.partial"))


def test_a_failure_half_way_leaves_nothing(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    camp = f.campaign(db_session, status=CampaignStatus.released)
    obj = f.object_type(db_session)
    ep = f.episode(db_session, obj, campaign_id=camp.id)
    from proctor.core.db.models import Artifact
    from proctor.core.domain import ArtifactKind

    # an artifact row whose bytes are not in the store: the copy must fail
    db_session.add(
        Artifact(
            episode_id=ep.id, kind=ArtifactKind.telemetry, uri="x", sha256="0" * 64, size_bytes=1
        )
    )
    db_session.flush()
    out = tmp_path / "out"
    with pytest.raises(Exception, match="not in the store"):
        export_campaign(db_session, artifact_store, campaign=camp.name, out=out)
    assert not out.exists()
    assert not (tmp_path / ".out.partial").exists()


def test_a_policy_that_did_not_opt_in_is_exported_under_its_arm_label(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    """The public board's naming rule holds in the dataset too: after release
    a policy is named only if its submitter opted in; the reference always."""
    import csv
    import json

    import sqlalchemy as sa

    from proctor.core.db.models import Assignment, CampaignPolicy, PlacementEvent
    from proctor.core.domain import (
        EpisodeState,
        LabelStatus,
        Outcome,
        PlacementSource,
        PlacementStatus,
        PolicyKind,
        Visibility,
    )

    camp = f.campaign(
        db_session,
        status=CampaignStatus.released,
        allocation_seed="ab" * 32,
        description="secret-model-x against the human reference",
    )
    obj = f.object_type(db_session)
    ref = f.policy(db_session, "the-reference", kind=PolicyKind.reference)
    shy = f.policy(db_session, "secret-model-x")
    shy.visibility = Visibility.private
    proud = f.policy(db_session, "open-model-y")
    proud.visibility = Visibility.public
    for i, pol in enumerate((ref, shy, proud)):
        db_session.add(CampaignPolicy(campaign_id=camp.id, policy_id=pol.id))
        a = f.assignment(db_session, camp, pol, obj, sequence=i, status=AssignmentStatus.done)
        ep = f.episode(
            db_session,
            obj,
            items=2,
            campaign_id=camp.id,
            assignment_id=a.id,
            run_code=a.run_code,
            state=EpisodeState.closed,
            outcome=Outcome.success,
            placed=2,
            lost=0,
            dropped=0,
            clock_start_s=0.0,
            clock_end_s=10.0,
            label_status=LabelStatus.auto,
        )
        for t in (3.0, 7.0):
            db_session.add(
                PlacementEvent(
                    episode_id=ep.id,
                    t_s=t,
                    source=PlacementSource.detector,
                    status=PlacementStatus.accepted,
                )
            )
    db_session.flush()

    out = tmp_path / "out"
    export_campaign(db_session, artifact_store, campaign=camp.name, out=out)
    with (out / "episodes.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    policies = {row["policy"] for row in rows}
    assert "the-reference" in policies and "open-model-y" in policies
    # interchange format 2 (docs/methods.md §8): each episode's slot block and
    # sequence, which the sequential verdicts pair by
    assert sorted(int(r["sequence"]) for r in rows) == sorted(
        db_session.scalars(sa.select(Assignment.sequence).where(Assignment.campaign_id == camp.id))
    )
    assert all(r["block"] != "" for r in rows)
    assert "secret-model-x" not in policies
    assert any(p.startswith("arm ") for p in policies)
    everything = (
        "".join(p.read_text() for p in out.rglob("*.json")) + (out / "episodes.csv").read_text()
    )
    assert "secret-model-x" not in everything
    dataset = json.loads((out / "dataset.json").read_text())
    assert dataset["interchange_format"] == 2
    assert [w["policy"] for w in dataset["identities_withheld"]] == sorted(
        p for p in policies if p.startswith("arm ")
    )


def _reviewed_campaign(db_session: ProctorSession) -> tuple[str, dict[str, str], int, str]:
    """A released campaign on the object "gearbox" whose withheld policy is
    also called "gearbox", with notes, events and reviews that use the word;
    returns (campaign name, policy name → episode uid, reviewer id, notes)."""
    from proctor.core.db.models import CampaignPolicy, EpisodeEvent, PlacementEvent, ReviewAction
    from proctor.core.domain import (
        EpisodeState,
        LabelStatus,
        Outcome,
        PlacementSource,
        PlacementStatus,
        PolicyKind,
        ReviewActionKind,
        Role,
        Visibility,
    )

    camp = f.campaign(db_session, status=CampaignStatus.released, allocation_seed="cd" * 32)
    obj = f.object_type(db_session, "gearbox")
    reviewer = f.user(db_session, "rev-export", Role.reviewer)
    ref = f.policy(db_session, "the-reference", kind=PolicyKind.reference)
    shy = f.policy(db_session, "gearbox")  # named like the object, not opted in
    shy.visibility = Visibility.private
    notes = "gearbox slipped once; gearbox lid closed"
    uids = {}
    for i, pol in enumerate((ref, shy)):
        db_session.add(CampaignPolicy(campaign_id=camp.id, policy_id=pol.id))
        a = f.assignment(db_session, camp, pol, obj, sequence=i, status=AssignmentStatus.done)
        ep = f.episode(
            db_session,
            obj,
            items=2,
            campaign_id=camp.id,
            assignment_id=a.id,
            run_code=a.run_code,
            state=EpisodeState.closed,
            outcome=Outcome.success,
            placed=2,
            lost=0,
            dropped=0,
            clock_start_s=0.0,
            clock_end_s=10.0,
            label_status=LabelStatus.reviewed,
            operator_notes=notes,
        )
        uids[pol.name] = ep.uid
        db_session.add(EpisodeEvent(episode_id=ep.id, t_s=1.0, kind="log", message=notes))
        for t in (3.0, 7.0):
            placed = PlacementEvent(
                episode_id=ep.id,
                t_s=t,
                source=PlacementSource.reviewer,
                status=PlacementStatus.confirmed,
            )
            db_session.add(placed)
            db_session.flush()
            db_session.add(
                ReviewAction(
                    episode_id=ep.id,
                    reviewer_id=reviewer.id,
                    action=ReviewActionKind.confirm,
                    placement_event_id=placed.id,
                    note="gearbox",
                )
            )
        db_session.add(
            ReviewAction(
                episode_id=ep.id,
                reviewer_label="detector v2 (automatic)",
                action=ReviewActionKind.confirm,
                note="",
            )
        )
    db_session.flush()
    return camp.name, uids, reviewer.id, notes


def test_free_text_is_exported_as_written_and_a_label_only_replaces_a_name(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    """A withheld policy named like the cell's object keeps its arm label in
    the policy column only: free text (operator notes, events, review notes)
    is exported as written — as the public explorer shows it — never with a
    label where the word was (that would tell which label hides the name)."""
    import csv
    import json

    campaign, uids, _, notes = _reviewed_campaign(db_session)
    out = tmp_path / "out"
    export_campaign(db_session, artifact_store, campaign=campaign, out=out)
    dataset = json.loads((out / "dataset.json").read_text())
    [arm] = [w["policy"] for w in dataset["identities_withheld"]]
    assert arm.startswith("arm ") and dataset["reference"] == "the-reference"
    with (out / "episodes.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["policy"], r["object"]) for r in rows} == {
        ("the-reference", "gearbox"),
        (arm, "gearbox"),
    }
    for name, uid in uids.items():
        text = (out / "episodes" / uid / "episode.json").read_text()
        doc = json.loads(text)
        assert doc["episode"]["operator_notes"] == notes, name
        assert [e["message"] for e in doc["events"]] == [notes]
        assert [r["note"] for r in doc["reviews"]] == ["gearbox", "gearbox", ""]
        assert arm not in text


def test_reviewers_are_exported_as_the_public_explorer_names_them(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    """A person who reviewed is "a reviewer" (the public explorer's word),
    never their user id or name; an automatic reviewer keeps its label."""
    import json

    campaign, uids, reviewer_id, _ = _reviewed_campaign(db_session)
    out = tmp_path / "out"
    export_campaign(db_session, artifact_store, campaign=campaign, out=out)
    for uid in uids.values():
        text = (out / "episodes" / uid / "episode.json").read_text()
        assert [r["reviewer"] for r in json.loads(text)["reviews"]] == [
            "a reviewer",
            "a reviewer",
            "detector v2 (automatic)",
        ]
        assert f"user {reviewer_id}" not in text and "rev-export" not in text


def test_the_dataset_gets_the_umasks_mode_and_a_never_succeeding_policy_scores(
    db_session: ProctorSession, artifact_store: LocalArtifactStore, tmp_path: Path
) -> None:
    """The interchange file was created 0600 whatever the umask (mkstemp);
    and a policy with no success on an object exports and analyses (RMST = τ)."""
    import os

    from proctor.analysis.interchange import read_interchange
    from proctor.analysis.leaderboard import analyze
    from proctor.analysis.results import AnalysisProtocol
    from proctor.core.db.models import CampaignPolicy, PlacementEvent
    from proctor.core.domain import (
        EpisodeState,
        LabelStatus,
        Outcome,
        PlacementSource,
        PlacementStatus,
        PolicyKind,
        Visibility,
    )

    camp = f.campaign(db_session, status=CampaignStatus.released)
    obj = f.object_type(db_session)
    ref = f.policy(db_session, "the-reference", kind=PolicyKind.reference)
    stuck = f.policy(db_session, "stuck-model")
    stuck.visibility = Visibility.public
    for i, (pol, succeeds) in enumerate([(ref, True), (ref, True), (stuck, False), (stuck, False)]):
        if i % 2 == 0:
            db_session.add(CampaignPolicy(campaign_id=camp.id, policy_id=pol.id))
        a = f.assignment(db_session, camp, pol, obj, sequence=i, status=AssignmentStatus.done)
        ep = f.episode(
            db_session, obj, items=2, campaign_id=camp.id, assignment_id=a.id,
            run_code=a.run_code, state=EpisodeState.closed,
            outcome=Outcome.success if succeeds else Outcome.ran_out_of_time,
            placed=2 if succeeds else 0, lost=0, dropped=0,
            clock_start_s=0.0, clock_end_s=10.0 if succeeds else 60.0,
            label_status=LabelStatus.auto,
        )  # fmt: skip
        for t in (3.0, 7.0) if succeeds else ():
            db_session.add(
                PlacementEvent(
                    episode_id=ep.id,
                    t_s=t,
                    source=PlacementSource.detector,
                    status=PlacementStatus.accepted,
                )
            )
    db_session.flush()
    out = tmp_path / "out"
    old = os.umask(0o027)
    try:
        export_campaign(db_session, artifact_store, campaign=camp.name, out=out)
    finally:
        os.umask(old)
    for path in (out / "episodes.csv", out / "dataset.json"):
        assert path.stat().st_mode & 0o777 == 0o640, path
    table = read_interchange(out / "episodes.csv")
    lb = analyze(table, AnalysisProtocol(tau=60.0, bootstrap=20))
    row = next(p for p in lb.policies if p.policy == "stuck-model")
    assert row.rmst.estimate == 60.0 and row.median.estimate == float("inf")
