"""The human reference an admin registers (``proctor/web/submissions/reference.py``):
only a teleop server on the station host's own loopback, under a name of its
own; the campaign then evaluates it without a server-side conformance check."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from proctor.core.audit import Actor
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import AuditLog, Policy
from proctor.core.db.types import utcnow
from proctor.core.domain import PolicyKind, SubmissionKind
from proctor.core.errors import Conflict, FieldError
from proctor.scheduler.protocol import parse_protocol
from proctor.scheduler.service import create_campaign
from proctor.web.submissions import endpoints
from proctor.web.submissions.reference import register_teleop_reference
from tests import factories
from tests.scheduler.builders import endpoint_policy

ADMIN = Actor(label="cli")


@pytest.mark.parametrize(
    "url",
    ["ws://127.0.0.1:8010", "ws://localhost:8010", "ws://[::1]:8010", "ws://127.0.0.2:9000/"],
)
def test_a_teleop_url_is_a_loopback_websocket(url: str) -> None:
    assert endpoints.check_teleop_url(url) == url


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ws://10.0.0.5:8010", "not a loopback address"),
        ("ws://teleop.lab.internal:8010", "not a loopback address"),
        ("ws://93.184.216.34:8010", "not a loopback address"),
        ("wss://127.0.0.1:8010", "must be ws://"),
        ("http://127.0.0.1:8010", "WebSocket URL"),
        ("ws://user:pw@127.0.0.1:8010", "credentials"),
    ],
)
def test_a_teleop_url_elsewhere_is_refused(url: str, message: str) -> None:
    with pytest.raises(endpoints.EndpointProblem, match=message) as info:
        endpoints.check_teleop_url(url)
    assert info.value.field == "url"


def test_registering_creates_the_reference_once_and_a_teleop_version_each_time(
    db_session: ProctorSession,
) -> None:
    first = register_teleop_reference(db_session, name="human-teleop", actor=ADMIN, now=utcnow())
    second = register_teleop_reference(
        db_session, name="human-teleop", url="ws://127.0.0.1:8011", actor=ADMIN, now=utcnow()
    )
    assert first.policy_id == second.policy_id
    assert (first.kind, first.endpoint_url) == (SubmissionKind.teleop, "ws://127.0.0.1:8010")
    assert second.endpoint_url == "ws://127.0.0.1:8011"
    policy = db_session.get(Policy, first.policy_id)
    assert policy is not None and policy.kind == PolicyKind.reference and policy.owner_id is None
    actions = db_session.scalars(
        sa.select(AuditLog.action).where(AuditLog.target_id == str(second.id))
    ).all()
    assert "reference.teleop" in actions


def test_a_submitted_policys_name_or_an_objects_is_not_the_references(
    db_session: ProctorSession,
) -> None:
    factories.policy(db_session, "acme-diffusion")
    factories.object_type(db_session, "towels")
    with pytest.raises(Conflict, match="taken by a submitted policy"):
        register_teleop_reference(db_session, name="ACME-diffusion", actor=ADMIN, now=utcnow())
    with pytest.raises(Conflict, match="reads like one"):
        register_teleop_reference(db_session, name="acme diffusion", actor=ADMIN, now=utcnow())
    with pytest.raises(FieldError, match="object"):
        register_teleop_reference(db_session, name="towels", actor=ADMIN, now=utcnow())
    with pytest.raises(FieldError, match="object"):
        register_teleop_reference(db_session, name="Tow.els", actor=ADMIN, now=utcnow())
    with pytest.raises(FieldError) as info:
        register_teleop_reference(db_session, name="arm A", actor=ADMIN, now=utcnow())
    assert info.value.field == "name"
    assert str(info.value).startswith("name: must not begin with 'arm '")
    with pytest.raises(FieldError) as info:
        register_teleop_reference(
            db_session, name="human", url="ws://10.1.2.3:8010", actor=ADMIN, now=utcnow()
        )
    assert info.value.field == "url"
    assert db_session.scalar(sa.select(Policy).where(Policy.name == "human")) is None


def test_a_campaign_takes_the_teleop_reference_without_a_server_side_check(
    db_session: ProctorSession,
) -> None:
    sub = register_teleop_reference(db_session, name="human-teleop", actor=ADMIN, now=utcnow())
    policy, _, _ = endpoint_policy(db_session, "acme-server", url="ws://policy.example:8000")
    factories.object_type(db_session, "spoons")
    campaign = create_campaign(
        db_session,
        protocol=parse_protocol(
            {
                "name": "spring",
                "items_per_episode": 4,
                "per_item_cap_s": 30,
                "tau_s": 60,
                "episodes_per_cell": 2,
                "policies": [policy.name],
                "reference": "human-teleop",
                "objects": ["spoons"],
            }
        ),
        actor=ADMIN,
    )
    chosen = {cp.policy_id: cp.submission_id for cp in campaign.policies}
    assert chosen[sub.policy_id] == sub.id
