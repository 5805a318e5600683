"""Small builders for rows the tests need; each returns a flushed object."""

from __future__ import annotations

import secrets
from typing import Any

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    Assignment,
    Campaign,
    Episode,
    ObjectType,
    Policy,
    Station,
    User,
    UserRole,
)
from proctor.core.domain import AssignmentStatus, PolicyKind, Role, Side


def user(session: ProctorSession, username: str | None = None, *roles: Role) -> User:
    u = User(username=username or f"user-{secrets.token_hex(4)}")
    u.roles = [UserRole(role=r) for r in roles]
    session.add(u)
    session.flush()
    return u


def object_type(session: ProctorSession, name: str | None = None, **kw: Any) -> ObjectType:
    o = ObjectType(name=name or f"obj-{secrets.token_hex(4)}", **kw)
    session.add(o)
    session.flush()
    return o


def policy(
    session: ProctorSession, name: str | None = None, kind: PolicyKind = PolicyKind.policy
) -> Policy:
    p = Policy(name=name or f"policy-{secrets.token_hex(4)}", kind=kind)
    session.add(p)
    session.flush()
    return p


def station(session: ProctorSession, name: str | None = None) -> Station:
    s = Station(name=name or f"station-{secrets.token_hex(4)}")
    session.add(s)
    session.flush()
    return s


def campaign(session: ProctorSession, name: str | None = None, **kw: Any) -> Campaign:
    defaults: dict[str, Any] = dict(
        items_per_episode=8, per_item_cap_s=30.0, tau_s=60.0, episodes_per_cell=10
    )
    c = Campaign(name=name or f"campaign-{secrets.token_hex(4)}", **(defaults | kw))
    session.add(c)
    session.flush()
    return c


def assignment(
    session: ProctorSession,
    campaign: Campaign,
    policy: Policy,
    obj: ObjectType,
    sequence: int,
    run_code: str | None = None,
    status: AssignmentStatus = AssignmentStatus.pending,
) -> Assignment:
    a = Assignment(
        campaign_id=campaign.id,
        run_code=run_code or f"R-{secrets.token_hex(3).upper()}",
        endpoint_handle=secrets.token_urlsafe(16),
        policy_id=policy.id,
        object_type_id=obj.id,
        tote_side=Side.left,
        camera_side=Side.right,
        block_index=sequence // 4,
        slot=sequence % 4,
        sequence=sequence,
        status=status,
    )
    session.add(a)
    session.flush()
    return a


def episode(session: ProctorSession, obj: ObjectType, items: int = 8, **kw: Any) -> Episode:
    e = Episode(
        uid=secrets.token_hex(8),
        object_type_id=obj.id,
        items=items,
        budget_s=items * 30.0,
        tote_side=Side.left,
        camera_side=Side.left,
        **kw,
    )
    session.add(e)
    session.flush()
    return e
