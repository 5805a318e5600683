"""Campaign lifecycle on both databases: validation, start (commitment and
allocation), status, close, reveal, unblind, release."""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy as sa

from proctor.core.db.models import Assignment, AuditLog, Campaign, Submission
from proctor.core.domain import (
    CampaignStatus,
    ConformanceStatus,
    SubmissionKind,
)
from proctor.core.errors import UsageError
from proctor.scheduler import service
from proctor.scheduler.allocation import AllocationProtocol, derive_allocation
from proctor.scheduler.codes import is_endpoint_handle, is_run_code
from proctor.scheduler.protocol import parse_protocol
from proctor.scheduler.service import Actor, CampaignNotFound, CampaignStateError
from tests.scheduler import builders

ADMIN = Actor(label="test-admin")


def _audit(session, action: str) -> list[AuditLog]:
    return list(session.scalars(sa.select(AuditLog).where(AuditLog.action == action)))


def test_protocol_validation_names_every_field() -> None:
    good = {
        "name": "c",
        "items_per_episode": 8,
        "per_item_cap_s": 30,
        "tau_s": 60,
        "episodes_per_cell": 4,
        "reference": "human",
        "policies": ["a", {"name": "b", "submission": 3}],
        "objects": ["spoons"],
    }
    p = parse_protocol(good)
    assert [e.name for e in p.policies] == ["a", "b"] and p.policies[1].submission == 3
    assert len(p.spatial_configs) == 4  # default: all four

    cases = {
        "items_per_episode": (0, "items_per_episode"),
        "per_item_cap_s": (-1, "per_item_cap_s"),
        "policies": ([], "policies"),
        "objects": (["spoons", "spoons"], "objects[1]: 'spoons' is already listed"),
        "spatial_configs": ([{"tote": "up", "camera": "left"}], "spatial_configs[0].tote"),
    }
    for key, (value, message) in cases.items():
        with pytest.raises(UsageError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_protocol(good | {key: value})
    with pytest.raises(UsageError, match=r"policies\[1\]: 'a' is already listed"):
        parse_protocol(good | {"policies": ["a", "a"]})
    with pytest.raises(UsageError, match=r"policies\[0\]: 'human' is the reference"):
        parse_protocol(good | {"policies": ["human"]})
    # a policy named like one of the campaign's objects could be taken for it
    with pytest.raises(UsageError, match=r"policies\[1\]: 'Spoons' is also the name of an object"):
        parse_protocol(good | {"policies": ["a", "Spoons"]})
    with pytest.raises(UsageError, match=r"reference: 'spoons' is also the name of an object"):
        parse_protocol(good | {"reference": "spoons"})
    with pytest.raises(UsageError, match="colour: Extra inputs are not permitted"):
        parse_protocol(good | {"colour": "red"})
    with pytest.raises(UsageError, match=r"episodes_per_cell: .* exceeds the limit"):
        parse_protocol(good | {"episodes_per_cell": 10_000, "objects": [str(i) for i in range(9)]})


def test_create_reports_every_unresolvable_name_and_writes_nothing(db_session) -> None:
    w = builders.world(db_session, 2)
    checkpoint = Submission(
        policy_id=w.policies[1].id,
        kind=SubmissionKind.checkpoint,
        checkpoint_sha256="0" * 64,
        conformance_status=ConformanceStatus.pending,
    )
    db_session.add(checkpoint)
    w.submissions[w.policies[0].name].conformance_status = ConformanceStatus.failed
    db_session.flush()
    proto = builders.protocol(
        w,
        reference=w.policies[1].name,
        policies=[w.policies[0].name, {"name": w.policies[1].name + "x"}, w.reference.name],
        objects=[w.objects[0].name, "ghost-object"],
    )
    before = db_session.scalar(sa.select(sa.func.count()).select_from(Campaign))
    with pytest.raises(UsageError) as exc:
        service.create_campaign(db_session, protocol=proto, actor=ADMIN)
    msg = str(exc.value)
    assert f"reference: '{w.policies[1].name}' is a policy, not a reference" in msg
    assert (
        f"policies[0]: '{w.policies[0].name}' has no endpoint or checkpoint submission "
        "that passed" in msg
    )
    assert f"policies[1]: no policy named '{w.policies[1].name}x'" in msg
    assert f"policies[2]: '{w.reference.name}' is a reference, not a policy" in msg
    assert "objects[1]: no object type named 'ghost-object'" in msg
    assert db_session.scalar(sa.select(sa.func.count()).select_from(Campaign)) == before

    proto = builders.protocol(
        w, policies=[{"name": w.policies[1].name, "submission": checkpoint.id}]
    )
    # a checkpoint runs like an endpoint, once its runner passed the check
    with pytest.raises(
        UsageError,
        match=r"policies\[0\]\.submission: .* has not passed the conformance check",
    ):
        service.create_campaign(db_session, protocol=proto, actor=ADMIN)
    other = w.submissions[w.reference.name].id
    proto = builders.protocol(w, policies=[{"name": w.policies[1].name, "submission": other}])
    with pytest.raises(UsageError, match=r"policies\[0\]\.submission: .* is not a version of"):
        service.create_campaign(db_session, protocol=proto, actor=ADMIN)


def test_start_commits_and_writes_the_allocation(db_session) -> None:
    w = builders.world(db_session, 3)
    c = service.create_campaign(db_session, protocol=builders.protocol(w), actor=ADMIN)
    assert c.status == CampaignStatus.draft
    assert {cp.submission_id for cp in c.policies} == {s.id for s in w.submissions.values()}

    result = service.start_campaign(db_session, campaign=c.id, actor=ADMIN)
    db_session.refresh(c)
    assert c.status == CampaignStatus.running and c.started_at is not None
    assert len(c.allocation_seed) == 64
    assert result.commitment == c.seed_commitment
    assert result.commitment == hashlib.sha256(c.allocation_seed.encode()).hexdigest()
    assert result.slots == 4 * 2 * 4  # arms × objects × episodes per cell
    (row,) = _audit(db_session, "campaign.start")
    assert row.details["commitment"] == result.commitment
    assert c.allocation_seed not in str(row.details)  # the seed stays sealed

    assignments = list(
        db_session.scalars(
            sa.select(Assignment)
            .where(Assignment.campaign_id == c.id)
            .order_by(Assignment.sequence)
        )
    )
    protocol = AllocationProtocol.from_json(c.allocation_protocol)
    derived = derive_allocation(c.allocation_seed, protocol)
    assert [(a.policy_id, a.object_type_id, a.tote_side, a.camera_side) for a in assignments] == [
        (s.policy_id, s.object_type_id, s.config.tote, s.config.camera) for s in derived
    ]
    assert all(
        is_run_code(a.run_code) and is_endpoint_handle(a.endpoint_handle) for a in assignments
    )
    assert len({a.run_code for a in assignments}) == len(assignments)
    assert all(a.submission_id == w.submissions[_name(w, a.policy_id)].id for a in assignments)

    with pytest.raises(CampaignStateError, match="is running; starting needs it to be draft"):
        service.start_campaign(db_session, campaign=c.name, actor=ADMIN)


def _name(w: builders.World, policy_id: int) -> str:
    return next(p.name for p in w.arms if p.id == policy_id)


def test_start_refuses_a_submission_that_lost_its_conformance(db_session) -> None:
    w = builders.world(db_session, 1)
    c = service.create_campaign(db_session, protocol=builders.protocol(w), actor=ADMIN)
    w.submissions[w.policies[0].name].conformance_status = ConformanceStatus.failed
    db_session.flush()
    with pytest.raises(CampaignStateError, match=r"cannot start: submission .* conformance"):
        service.start_campaign(db_session, campaign=c.id, actor=ADMIN)
    assert db_session.scalar(sa.select(sa.func.count()).where(Assignment.campaign_id == c.id)) == 0


def test_status_close_reveal_unblind_release(db_session) -> None:
    w = builders.world(db_session, 2)
    c = service.create_campaign(
        db_session, protocol=builders.protocol(w, episodes_per_cell=3), actor=ADMIN
    )
    service.start_campaign(db_session, campaign=c.id, actor=ADMIN)

    report = service.campaign_status(db_session, campaign=c.id)
    assert report.slots == 3 * 2 * 3 and report.pending == report.slots and report.done == 0
    assert report.seed is None and report.commitment == c.seed_commitment
    assert not report.identities
    assert [cell.arm for cell in report.cells] == ["arm A"] * 2 + ["arm B"] * 2 + ["arm C"] * 2
    assert {cell.is_reference for cell in report.cells} == {None}  # the reference is blinded too
    names = {p.name for p in w.arms}
    assert not any(name in repr(report) for name in names)
    assert sum(cfg.blocks_planned for cfg in report.configs) == report.blocks == 6
    with pytest.raises(UsageError, match="audited"):
        service.campaign_status(db_session, campaign=c.id, identities=True)
    named = service.campaign_status(db_session, campaign=c.id, identities=True, actor=ADMIN)
    assert {cell.arm for cell in named.cells} == names
    assert [cell.arm for cell in named.cells if cell.is_reference] == [w.reference.name] * 2
    assert named.cells[0].arm == w.reference.name  # listed first

    with pytest.raises(CampaignStateError, match=r"revealing the seed needs it to be closed"):
        service.reveal_allocation(db_session, campaign=c.id)

    seed = service.close_campaign(db_session, campaign=c.id, actor=ADMIN)
    assert seed == c.allocation_seed
    assert service.campaign_status(db_session, campaign=c.id).seed == seed
    revelation = service.reveal_allocation(db_session, campaign=c.name)
    assert revelation.verified and revelation.slots_checked == 18 and revelation.replacements == 0

    # tampering with the log after the fact is caught
    a = db_session.scalars(
        sa.select(Assignment).where(Assignment.campaign_id == c.id, Assignment.sequence == 4)
    ).one()
    other = next(p.id for p in w.arms if p.id != a.policy_id)
    a.policy_id = other
    db_session.flush()
    tampered = service.reveal_allocation(db_session, campaign=c.id)
    assert not tampered.verified and tampered.mismatches[0].startswith("sequence 4:")

    with pytest.raises(UsageError, match="reason: say why"):
        service.unblind(db_session, campaign=c.id, actor=ADMIN, reason="  ")
    runs = service.unblind(
        db_session, campaign=c.id, actor=ADMIN, reason="audit", run_codes=[a.run_code.lower()]
    )
    assert [(r.run_code, r.policy_name) for r in runs] == [(a.run_code, _name(w, other))]
    assert runs[0].owner == w.owners[_name(w, other)].username
    with pytest.raises(UsageError, match="R-ZZZZ not in campaign"):
        service.unblind(db_session, campaign=c.id, actor=ADMIN, reason="x", run_codes=["R-ZZZZ"])
    (row,) = _audit(db_session, "campaign.unblind")
    assert row.details["reason"] == "audit" and row.details["run_codes"] == [a.run_code]

    service.release_campaign(db_session, campaign=c.id, actor=ADMIN)
    assert service.get_campaign(db_session, c.id).status == CampaignStatus.released
    actions = db_session.scalars(
        sa.select(AuditLog.action)
        .where(AuditLog.target_type == "campaign", AuditLog.target_id == str(c.id))
        .order_by(AuditLog.id)
    ).all()
    assert actions == [
        "campaign.create",
        "campaign.start",
        "campaign.status_identified",
        "campaign.close",
        "campaign.unblind",
        "campaign.release",
    ]
    with pytest.raises(CampaignNotFound):
        service.get_campaign(db_session, "no-such-campaign")
