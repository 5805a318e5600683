"""Rows a campaign needs: policies with endpoint submissions that passed the
conformance check, a human reference, object types, stations."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy.orm import Session

from proctor.core import station_credentials
from proctor.core.audit import Actor
from proctor.core.db.models import ObjectType, Policy, Station, Submission, User
from proctor.core.domain import ConformanceStatus, EndpointDialect, PolicyKind, SubmissionKind
from proctor.core.errors import Conflict
from proctor.scheduler.protocol import CampaignProtocol, parse_protocol


@dataclass
class World:
    policies: list[Policy]
    reference: Policy
    objects: list[ObjectType]
    submissions: dict[str, Submission]  # by policy name
    owners: dict[str, User]

    @property
    def arms(self) -> list[Policy]:
        return [self.reference, *self.policies]


def endpoint_policy(
    session: Session,
    name: str,
    *,
    kind: PolicyKind = PolicyKind.policy,
    url: str | None = None,
    api_key_encrypted: bytes | None = None,
    conformance: ConformanceStatus = ConformanceStatus.passed,
) -> tuple[Policy, Submission, User]:
    owner = User(username=f"owner-of-{name}")
    session.add(owner)
    session.flush()
    policy = Policy(name=name, kind=kind, owner_id=owner.id)
    session.add(policy)
    session.flush()
    sub = Submission(
        policy_id=policy.id,
        kind=SubmissionKind.endpoint,
        endpoint_url=url or f"ws://{name}.inference.example:8000",
        endpoint_dialect=EndpointDialect.openpi,
        endpoint_api_key_encrypted=api_key_encrypted,
        conformance_status=conformance,
    )
    session.add(sub)
    session.flush()
    return policy, sub, owner


def world(
    session: Session, n_policies: int = 3, objects: tuple[str, ...] = ("spoons", "towels")
) -> World:
    tag = secrets.token_hex(3)
    subs: dict[str, Submission] = {}
    owners: dict[str, User] = {}
    ref, sub, owner = endpoint_policy(session, f"human-ref-{tag}", kind=PolicyKind.reference)
    subs[ref.name], owners[ref.name] = sub, owner
    pols = []
    for i in range(n_policies):
        p, sub, owner = endpoint_policy(session, f"policy{i}-{tag}")
        pols.append(p)
        subs[p.name], owners[p.name] = sub, owner
    objs = []
    for name in objects:
        o = ObjectType(name=f"{name}-{tag}", display_name=name.title(), prompt=f"put the {name}")
        session.add(o)
        objs.append(o)
    session.flush()
    return World(pols, ref, objs, subs, owners)


def protocol(w: World, **overrides: object) -> CampaignProtocol:
    data: dict[str, object] = {
        "name": f"campaign-{secrets.token_hex(4)}",
        "items_per_episode": 4,
        "per_item_cap_s": 30.0,
        "tau_s": 60.0,
        "episodes_per_cell": 4,
        "reference": w.reference.name,
        "policies": [p.name for p in w.policies],
        "objects": [o.name for o in w.objects],
    }
    data.update(overrides)
    return parse_protocol(data)


def station(session: Session, name: str | None = None) -> Station:
    s = Station(name=name or f"station-{secrets.token_hex(3)}")
    session.add(s)
    session.flush()
    return s


def enrolled_station(session: Session, name: str | None = None) -> tuple[Station, str]:
    """A station enrolled as an admin enrols one: its row and its token."""
    issued = station_credentials.enrol(
        session,
        name=name or f"station-{secrets.token_hex(3)}",
        profile="sim",
        actor=Actor(label="test-admin"),
    )
    found = session.get(Station, issued.station_id)
    assert found is not None
    return found, issued.token


def station_token(session: Session, name: str) -> str:
    """A live token for the station ``name``: enrolled if it is not yet, else a
    rotation (the station's earlier tokens stay valid for the default window)."""
    try:
        return enrolled_station(session, name)[1]
    except Conflict:
        return station_credentials.rotate(session, name=name, actor=Actor(label="test-admin")).token
