"""The demo's world: accounts, object types, policies and their endpoints.

Registered the way a real site registers them — policies owned by a
submitter, each with an endpoint submission that must pass the conformance
check before a campaign may include it — so that the demo exercises the
production path, not a shortcut around it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import ObjectType, Policy, Submission, User, UserRole
from proctor.core.domain import (
    ConformanceStatus,
    EndpointDialect,
    PolicyKind,
    Role,
    SubmissionKind,
    Visibility,
)

# the arms of the demo campaign: the reference agent stands in for the human
# teleoperator; swift/steady cross (fast-but-unreliable vs slow-but-steady);
# balanced/dawdler are close enough that a small campaign cannot separate them
REFERENCE = "reference"
ARMS: tuple[str, ...] = (REFERENCE, "swift", "steady", "balanced", "dawdler")
OBJECTS: tuple[str, ...] = ("spoons", "towels", "scissors", "batteries")

POLICY_NAMES = {
    REFERENCE: "human-reference",
    "swift": "swift",
    "steady": "steady",
    "balanced": "balanced",
    "dawdler": "dawdler",
}
DEMO_ADMIN = "demo"
DEMO_SUBMITTER = "demo-lab"


@dataclass(frozen=True)
class Accounts:
    admin: str
    admin_password: str | None  # None when the account already existed
    submitter: str


def ensure_accounts(session: ProctorSession, *, hash_password: Callable[[str], str]) -> Accounts:
    """An all-roles admin for the pages (password printed once) and the
    submitter who owns the demo policies."""
    password: str | None = None
    admin = session.scalar(sa.select(User).where(User.username == DEMO_ADMIN))
    if admin is None:
        password = secrets.token_urlsafe(12)
        admin = User(
            username=DEMO_ADMIN,
            display_name="Demo admin",
            password_hash=hash_password(password),
            roles=[UserRole(role=r) for r in Role],
        )
        session.add(admin)
    if session.scalar(sa.select(User).where(User.username == DEMO_SUBMITTER)) is None:
        session.add(
            User(
                username=DEMO_SUBMITTER,
                display_name="Demo lab",
                roles=[UserRole(role=Role.submitter)],
            )
        )
    session.flush()
    return Accounts(admin=DEMO_ADMIN, admin_password=password, submitter=DEMO_SUBMITTER)


def ensure_objects(session: ProctorSession) -> list[ObjectType]:
    """The simulated cell's object types, with their tags and prompts."""
    from proctor.station.sim.objects import object_spec

    out = []
    for name in OBJECTS:
        spec = object_spec(name)
        row = session.scalar(sa.select(ObjectType).where(ObjectType.name == name))
        if row is None:
            row = ObjectType(
                name=name,
                display_name=spec.display_name,
                tags=list(spec.tags),
                prompt=spec.prompt,
                description="simulated cell object (proctor demo)",
            )
            session.add(row)
        out.append(row)
    session.flush()
    return out


def ensure_policies(session: ProctorSession) -> dict[str, Policy]:
    owner = session.scalar(sa.select(User).where(User.username == DEMO_SUBMITTER))
    out: dict[str, Policy] = {}
    for arm in ARMS:
        name = POLICY_NAMES[arm]
        row = session.scalar(sa.select(Policy).where(Policy.name == name))
        if row is None:
            row = Policy(
                name=name,
                kind=PolicyKind.reference if arm == REFERENCE else PolicyKind.policy,
                owner_id=owner.id if owner is not None and arm != REFERENCE else None,
                visibility=Visibility.public,
                description=(
                    "scripted near-optimal agent standing in for the human teleoperator"
                    if arm == REFERENCE
                    else f"scripted demo policy '{arm}' (proctor.policywire.serving.demo)"
                ),
            )
            session.add(row)
        out[arm] = row
    session.flush()
    return out


def register_endpoint(
    session: ProctorSession,
    *,
    policy: Policy,
    url: str,
    dialect: EndpointDialect,
    report: dict[str, object],
    passed: bool,
) -> Submission:
    """A new endpoint submission carrying its conformance report (the
    servers listen on fresh ports each run, so each run is a new version)."""
    sub = Submission(
        policy_id=policy.id,
        kind=SubmissionKind.endpoint,
        endpoint_url=url,
        endpoint_dialect=dialect,
        conformance_status=ConformanceStatus.passed if passed else ConformanceStatus.failed,
        conformance_report=report,
        submitted_by_id=policy.owner_id,
        manifest={"source": "proctor demo"},
    )
    session.add(sub)
    session.flush()
    return sub
