"""Registering scripted demo policies as endpoint submissions of a simulated campaign."""

from __future__ import annotations

import sqlalchemy as sa

from proctor.core.db.models import (
    ObjectType,
    Policy,
    Submission,
    User,
)
from proctor.core.domain import (
    ConformanceStatus,
    EndpointDialect,
    PolicyKind,
    SubmissionKind,
)
from proctor.policywire.serving.openpi import PolicyServer
from tests.scheduler.conftest import Gateway

ARMS = {"reference": PolicyKind.reference, "swift": PolicyKind.policy, "steady": PolicyKind.policy}
OBJECTS = ("spoons", "towels")
CONFIGS = [{"tote": "left", "camera": "left"}, {"tote": "right", "camera": "left"}]


def register_policies(
    gateway: Gateway,
    servers: dict[str, PolicyServer],
    tag: str,
    arms: dict[str, PolicyKind] | None = None,
    objects: tuple[str, ...] = OBJECTS,
) -> dict[int, str]:
    """Policies with endpoint submissions (conformance passed) at the demo servers,
    one per arm (default: all of ``ARMS``), and the objects' types."""
    ids = {}
    with gateway.db.session() as s:
        for profile, kind in (ARMS if arms is None else arms).items():
            owner = User(username=f"lab-{profile}-{tag}")
            s.add(owner)
            s.flush()
            policy = Policy(name=f"{profile}-{tag}", kind=kind, owner_id=owner.id)
            s.add(policy)
            s.flush()
            s.add(
                Submission(
                    policy_id=policy.id,
                    kind=SubmissionKind.endpoint,
                    endpoint_url=servers[profile].url,
                    endpoint_dialect=EndpointDialect.openpi,
                    conformance_status=ConformanceStatus.passed,
                )
            )
            ids[policy.id] = profile
        for name in objects:
            if s.scalar(sa.select(ObjectType.id).where(ObjectType.name == name)) is None:
                s.add(ObjectType(name=name, prompt=f"put the {name} into the target bin"))
    return ids
