"""Registering the human reference: the teleoperated arm each station serves.

The reference is a person at the station driving the arm with a SpaceMouse or
the keyboard (``proctor station teleop``, which serves the policy wire on
the station host's loopback, ``ws://127.0.0.1:8010`` by default). It is a
``teleop`` submission of a ``reference`` policy: the scheduler hands its URL
to the station that claims the run, and the station connects to it on its
own host. The gateway refuses its handles and the conformance worker never
checks it (neither can reach a station's loopback, and the server connects
to no loopback or private address for anyone); each station's pre-flight
connects and reads its metadata before every reference episode instead.

Only admins register it (``proctor submission reference``, a command run
with the database's credentials); submitters cannot create a reference
policy nor a teleop submission, so the address rule for their endpoints
(``endpoints.check_reachable_publicly``) is unchanged.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from pydantic import TypeAdapter, ValidationError

from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import ObjectType, Policy, Submission
from proctor.core.domain import (
    ConformanceStatus,
    EndpointDialect,
    PolicyKind,
    SubmissionKind,
    Visibility,
)
from proctor.core.errors import Conflict, FieldError
from proctor.runner.manifest import PolicyName
from proctor.web.submissions import endpoints
from proctor.web.submissions.names import same_name

DEFAULT_TELEOP_URL = "ws://127.0.0.1:8010"  # `proctor station teleop`'s default port

TELEOP_REPORT = {
    "verdict": "station",
    "summary": (
        "Served by each station host (proctor station teleop); the server never "
        "connects to it. Each station connects to it and reads its metadata before "
        "every reference episode."
    ),
}


def register_teleop_reference(
    session: ProctorSession,
    *,
    name: str,
    url: str = DEFAULT_TELEOP_URL,
    description: str = "",
    actor: Actor,
    now: datetime,
) -> Submission:
    """A new ``teleop`` submission of the reference policy ``name``, which is
    created if new. A name taken by a submitted policy, or one differing from
    an existing policy's only in case, is refused, and so is an object's name."""
    try:
        name = TypeAdapter(PolicyName).validate_python(name)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise FieldError("name", message) from None
    try:
        checked = endpoints.check_teleop_url(url)
    except endpoints.EndpointProblem as exc:
        raise FieldError(exc.field, exc.message) from None
    policy = _reference_policy(session, name, description)
    sub = Submission(
        policy_id=policy.id,
        kind=SubmissionKind.teleop,
        endpoint_url=checked,
        # what TeleopPolicy speaks (proctor/station/teleop/policy.py)
        endpoint_dialect=EndpointDialect.openpi,
        manifest={"name": name, "description": description, "source": "proctor station teleop"},
        conformance_status=ConformanceStatus.pending,
        conformance_report=dict(TELEOP_REPORT),
        submitted_by_id=actor.user_id,
        created_at=now,
    )
    session.add(sub)
    session.flush()
    record_audit(
        session,
        actor=actor,
        action="reference.teleop",
        target_type="submission",
        target_id=sub.id,
        details={"policy": policy.id},
        at=now,
    )
    return sub


def _reference_policy(session: ProctorSession, name: str, description: str) -> Policy:
    existing = [p for p in session.scalars(sa.select(Policy)) if same_name(name, p.name)]
    for policy in existing:
        if policy.name == name and policy.kind == PolicyKind.reference:
            if description and not policy.description:
                policy.description = description
            return policy
    if existing:
        raise Conflict(
            f"name: '{name}' is taken by a submitted policy (or reads like one: it differs "
            "only in case, spacing, punctuation or look-alike characters); the reference "
            "needs a name of its own"
        )
    for obj_name, display in session.execute(sa.select(ObjectType.name, ObjectType.display_name)):
        if same_name(name, obj_name) or (display and same_name(name, display)):
            raise FieldError("name", f"'{name}' is the name of an object the cell handles")
    # the human reference is always named on the board (proctor/scheduler/naming.py)
    policy = Policy(
        name=name,
        kind=PolicyKind.reference,
        owner_id=None,
        visibility=Visibility.public,
        description=description or "the human reference: teleoperation at the station",
    )
    session.add(policy)
    session.flush()
    return policy
