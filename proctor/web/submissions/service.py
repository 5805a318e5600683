"""Policies and submissions as their owners see them: registering endpoints,
asking for conformance checks, the opt-in to the public board, campaign
progress and private results. Functions take a keyword-only ``session`` and
never commit (the request owns the transaction)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa
from fastapi import HTTPException, status

from proctor.analysis.snapshot import IntervalSnapshot, read_snapshot
from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    Artifact,
    Assignment,
    Campaign,
    CampaignPolicy,
    ConformanceRun,
    ObjectType,
    Policy,
    RunnerServer,
    Submission,
    User,
)
from proctor.core.domain import (
    AssignmentStatus,
    CampaignStatus,
    ConformanceStatus,
    PolicyKind,
    SubmissionKind,
)
from proctor.core.errors import ConfigError, Conflict, FieldError, NotFound
from proctor.core.settings import Settings
from proctor.policywire.wire.spec import MANIFEST_WIRE
from proctor.runner import queue as runner_queue
from proctor.scheduler.endpoint_keys import encrypt_api_key
from proctor.scheduler.naming import campaign_naming
from proctor.web.auth.access import check_owner_access, owner_filter
from proctor.web.auth.identity import Principal
from proctor.web.snapshots import service as snapshots
from proctor.web.submissions import endpoints, queue, rates, runner_view
from proctor.web.submissions.names import same_name
from proctor.web.submissions.schemas import (
    CampaignProgressOut,
    EndpointIn,
    IntervalOut,
    PolicyDetailOut,
    PolicyOut,
    PolicyPatch,
    ResultOut,
    RunnerOut,
    RunOut,
    SubmissionBrief,
    SubmissionOut,
)

# the conformance report's format (proctor/policywire/conformance/check.py writes it;
# the web app only stores and shows it, and never imports the checker)
REPORT_FORMAT = "proctor.conformance/1"


def queued_report() -> dict[str, Any]:
    return {
        "format": REPORT_FORMAT,
        "verdict": "pending",
        "summary": "Queued: a worker will connect to your server and run the check.",
        "findings": [],
    }


def checkpoint_report() -> dict[str, Any]:
    return {
        "format": REPORT_FORMAT,
        "verdict": "pending",
        "summary": "Stored and inspected. Queued: a runner host will build its environment "
        "and serve it with the runner your policy.toml names (in a sandbox, with no network), "
        "then a worker runs the check against that server.",
        "findings": [],
    }


# -- reading ------------------------------------------------------------------------
def get_policy(session: ProctorSession, principal: Principal, policy_id: int) -> Policy:
    policy = session.get(Policy, policy_id)
    if policy is None or policy.kind != PolicyKind.policy:
        raise NotFound("policy not found")
    check_owner_access(principal, policy.owner_id, what="policy")
    return policy


def get_submission(session: ProctorSession, principal: Principal, submission_id: int) -> Submission:
    sub = session.get(Submission, submission_id)
    if sub is None:
        raise NotFound("submission not found")
    check_owner_access(principal, sub.policy.owner_id, what="submission")
    return sub


def list_policies(session: ProctorSession, principal: Principal) -> list[Policy]:
    return list(
        session.scalars(
            sa.select(Policy)
            .where(Policy.kind == PolicyKind.policy, owner_filter(principal, Policy.owner_id))
            .order_by(Policy.created_at.desc(), Policy.id.desc())
        )
    )


def _run_out(run: ConformanceRun | None) -> RunOut | None:
    if run is None:
        return None
    return RunOut(
        id=run.id,
        status=run.status,
        requested_at=run.requested_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        error=run.error,
    )


def submission_out(session: ProctorSession, sub: Submission) -> SubmissionOut:
    artifact = (
        session.get(Artifact, sub.checkpoint_artifact_id) if sub.checkpoint_artifact_id else None
    )
    return SubmissionOut(
        id=sub.id,
        policy_id=sub.policy_id,
        policy_name=sub.policy.name,
        kind=sub.kind,
        created_at=sub.created_at,
        checkpoint_sha256=sub.checkpoint_sha256,
        checkpoint_size_bytes=artifact.size_bytes if artifact else None,
        archive=dict(artifact.details) if artifact else None,
        manifest=dict(sub.manifest or {}),
        endpoint_url=sub.endpoint_url,
        endpoint_dialect=sub.endpoint_dialect,
        has_api_key=sub.endpoint_api_key_encrypted is not None,
        conformance_status=sub.conformance_status,
        conformance_report=dict(sub.conformance_report or {}),
        check=_run_out(queue.latest_run(session, sub.id)),
        runner=_runner_out(session, sub),
    )


def _runner_out(session: ProctorSession, sub: Submission) -> RunnerOut | None:
    """The checkpoint's latest runner server; ``submission_out`` is only ever
    shown to the owner and the admins (``get_submission``)."""
    if sub.kind != SubmissionKind.checkpoint:
        return None
    server = runner_queue.latest_server(session, sub.id)
    return RunnerOut(**runner_view.runner_fields(server)) if server is not None else None


def _briefs(session: ProctorSession, policy: Policy) -> list[SubmissionBrief]:
    active = set(
        session.scalars(
            sa.select(ConformanceRun.submission_id).where(
                ConformanceRun.submission_id.in_([s.id for s in policy.submissions]),
                ConformanceRun.status.in_(["queued", "running"]),
            )
        )
    )
    return [
        SubmissionBrief(
            id=s.id,
            kind=s.kind,
            created_at=s.created_at,
            conformance_status=s.conformance_status,
            checking=s.id in active,
        )
        for s in sorted(policy.submissions, key=lambda s: s.id, reverse=True)
    ]


def policy_out(session: ProctorSession, policy: Policy) -> PolicyOut:
    return PolicyOut(
        id=policy.id,
        name=policy.name,
        description=policy.description,
        visibility=policy.visibility,
        created_at=policy.created_at,
        submissions=_briefs(session, policy),
    )


def policy_detail(
    session: ProctorSession, policy: Policy, viewer: Principal, *, results: snapshots.ResultCache
) -> PolicyDetailOut:
    """A policy with its campaigns; their results read through the app's
    ``results`` cache."""
    return PolicyDetailOut(
        **policy_out(session, policy).model_dump(),
        campaigns=campaign_progress(session, policy, viewer, results=results),
    )


# -- writing ------------------------------------------------------------------------
def policy_for(
    session: ProctorSession, *, owner: User, name: str, description: str, field: str
) -> Policy:
    """The owner's policy of this name, created if new. A name that is
    someone else's (or the human reference's), or a look-alike of one
    (``names.name_key``: case, spaces, punctuation, look-alike characters),
    is refused with one message that neither repeats nor confirms the other
    name: a withheld policy's name must not be found by guessing (its owner
    may be told which of their own names is too close). A new name must not
    be an object's (the results name objects)."""
    policy = session.scalars(sa.select(Policy).where(Policy.name == name)).first()
    if policy is not None and policy.owner_id == owner.id and policy.kind == PolicyKind.policy:
        if description and not policy.description:
            policy.description = description
        return policy
    if policy is None:
        # names a reader could take for one another would be confused on the leaderboard
        clash = next(
            (p for p in session.scalars(sa.select(Policy)) if same_name(name, p.name)), None
        )
        if clash is None:
            _not_an_object(session, name, field)
            policy = Policy(name=name, owner_id=owner.id, description=description)
            session.add(policy)
            session.flush()
            return policy
        if clash.owner_id == owner.id and clash.kind == PolicyKind.policy:
            raise Conflict(
                f"{field}: '{name}' reads like your policy '{clash.name}' (they differ only "
                "in case, spacing, punctuation or look-alike characters); use that name or "
                "choose another"
            )
    raise Conflict(f"{field}: {NAME_UNAVAILABLE}")


# someone else's name, exactly or a look-alike: one answer for both
NAME_UNAVAILABLE = "this policy name is not available; choose another"


def _not_an_object(session: ProctorSession, name: str, field: str) -> None:
    for obj_name, display in session.execute(sa.select(ObjectType.name, ObjectType.display_name)):
        if same_name(name, obj_name) or (display and same_name(name, display)):
            raise FieldError(
                field,
                f"'{name}' is the name of an object the cell handles; a policy named like "
                "one could be mistaken for it in the results, choose another",
            )


def register_endpoint(
    session: ProctorSession,
    *,
    settings: Settings,
    owner: User,
    body: EndpointIn,
    now: datetime,
) -> Submission:
    try:
        # a Positronic endpoint is stored with its session path
        url, dialect = endpoints.check_endpoint(body.url, body.dialect)
        wire = endpoints.check_wire_options(
            dialect, exterior_numbering=body.exterior_numbering, action_units=body.action_units
        )
        endpoints.check_reachable_publicly(url, settings)
    except endpoints.EndpointProblem as exc:
        raise FieldError(exc.field, exc.message) from None
    rates.enforce(session, "registration", settings=settings, user=owner, now=now)
    key = body.api_key.get_secret_value() if body.api_key is not None else ""
    encrypted = None
    if key:
        try:
            encrypted = encrypt_api_key(key, encryption_key=settings.encryption_key)
        except ConfigError:
            raise HTTPException(
                status.HTTP_503_SERVICE_UNAVAILABLE,
                "this server cannot store API keys (PROCTOR_ENCRYPTION_KEY is not set): "
                "ask its admin, or register an endpoint that needs no key",
            ) from None
    policy = policy_for(
        session,
        owner=owner,
        name=body.policy_name,
        description=body.description,
        field="policy_name",
    )
    manifest: dict[str, Any] = {
        "name": body.policy_name,
        "description": body.description,
        "policy": {
            "action_space": body.action_space.value if body.action_space else None,
            "chunk_length": body.chunk_length,
            "deterministic": body.deterministic,
        },
        "prompts": dict(body.prompts),
    }
    if wire:
        manifest[MANIFEST_WIRE] = wire
    sub = Submission(
        policy_id=policy.id,
        kind=SubmissionKind.endpoint,
        manifest=manifest,
        endpoint_url=url,
        endpoint_dialect=dialect,
        endpoint_api_key_encrypted=encrypted,
        conformance_status=ConformanceStatus.pending,
        conformance_report=queued_report(),
        submitted_by_id=owner.id,
        created_at=now,
    )
    session.add(sub)
    session.flush()
    run = queue.enqueue(session, submission=sub, requested_by_id=owner.id, now=now)
    record_audit(
        session,
        actor=Actor.of(owner),
        action="submission.endpoint",
        target_type="submission",
        target_id=sub.id,
        details={"policy": policy.id, "dialect": dialect.value, "api_key": encrypted is not None},
        at=now,
    )
    queue.dispatch_after_commit(session, settings=settings, run_id=run.id)
    return sub


def request_check(
    session: ProctorSession,
    *,
    settings: Settings,
    sub: Submission,
    actor: User,
    now: datetime,
) -> ConformanceRun:
    if sub.kind not in (SubmissionKind.endpoint, SubmissionKind.checkpoint):
        raise Conflict("only endpoint and checkpoint submissions are checked here")
    if queue.active_run(session, sub.id) is not None:
        raise Conflict("a conformance check of this submission is already queued or running")
    rates.enforce(session, "recheck", settings=settings, user=actor, now=now)
    run = queue.enqueue(session, submission=sub, requested_by_id=actor.id, now=now)
    record_audit(
        session,
        actor=Actor.of(actor),
        action="submission.check",
        target_type="submission",
        target_id=sub.id,
        at=now,
    )
    queue.dispatch_after_commit(session, settings=settings, run_id=run.id)
    return run


def update_policy(
    session: ProctorSession, *, policy: Policy, patch: PolicyPatch, actor: User, now: datetime
) -> Policy:
    changes: dict[str, Any] = {}
    if patch.visibility is not None and patch.visibility != policy.visibility:
        changes["visibility"] = [policy.visibility.value, patch.visibility.value]
        policy.visibility = patch.visibility
    if patch.description is not None and patch.description != policy.description:
        changes["description"] = True
        policy.description = patch.description
    if changes:
        record_audit(
            session,
            actor=Actor.of(actor),
            action="policy.update",
            target_type="policy",
            target_id=policy.id,
            details=changes,
            at=now,
        )
    return policy


# -- campaigns: progress and private results -----------------------------------------
def _interval(x: IntervalSnapshot | None) -> IntervalOut | None:
    return None if x is None else IntervalOut(estimate=x.estimate, lo=x.lo, hi=x.hi)


def _results(
    session: ProctorSession, campaign: Campaign, policy: Policy, results: snapshots.ResultCache
) -> ResultOut | None:
    meta = snapshots.latest_meta(session, campaign_id=campaign.id, stream=snapshots.DEFAULT_STREAM)
    if meta is None:
        return None
    snap = read_snapshot(snapshots.snapshot_result(session, meta.id, results=results))
    mine = next((p for p in snap.policies if p.policy == policy.name), None)
    if mine is None:
        return None
    return ResultOut(
        rank=mine.rank,
        of=sum(1 for p in snap.policies if not p.reference),
        episodes=mine.episodes,
        operations=mine.operations,
        completion=_interval(mine.metric("completion")),
        rmst_s=_interval(mine.metric("rmst")),
        hrt_percent=_interval(mine.metric("hrt")),
        snapshot_id=meta.id,
    )


def campaign_progress(
    session: ProctorSession, policy: Policy, viewer: Principal, *, results: snapshots.ResultCache
) -> list[CampaignProgressOut]:
    """Every campaign this policy is in. While a campaign runs, only its
    overall progress is shown: a count of this policy's episodes that ticks
    up as runs go by would tell anyone watching at the station whose run was
    whose. Its own counts and results follow once the campaign is closed —
    to its owner. An admin looking at someone else's policy sees them only
    once the campaign is released: before, a named policy's rank and scores
    match its blinded arm's row of the preview, so showing them would unblind
    it, which is the audited ``proctor campaign unblind`` and nothing else."""
    owner_view = policy.owner_id == viewer.id
    rows = session.execute(
        sa.select(Campaign, CampaignPolicy.submission_id)
        .join(CampaignPolicy, CampaignPolicy.campaign_id == Campaign.id)
        .where(CampaignPolicy.policy_id == policy.id)
        .order_by(Campaign.id.desc())
    ).all()
    out = []
    for campaign, submission_id in rows:
        originals = sa.and_(Assignment.campaign_id == campaign.id, Assignment.replaces_id.is_(None))
        total = session.scalar(sa.select(sa.func.count()).where(originals)) or 0
        done = (
            session.scalar(
                sa.select(sa.func.count()).where(
                    Assignment.campaign_id == campaign.id,
                    Assignment.status == AssignmentStatus.done,
                )
            )
            or 0
        )
        released = campaign.status == CampaignStatus.released
        # closed but not released, seen by someone else than the owner (an admin)
        sealed = campaign.status == CampaignStatus.closed and not owner_view
        finished = not sealed and campaign.status in (
            CampaignStatus.closed,
            CampaignStatus.released,
        )
        mine = (
            session.scalar(
                sa.select(sa.func.count()).where(
                    Assignment.campaign_id == campaign.id,
                    Assignment.policy_id == policy.id,
                    Assignment.status == AssignmentStatus.done,
                )
            )
            if finished
            else None
        )
        scores = _results(session, campaign, policy, results) if finished else None
        label: str | None = None
        if sealed:
            note = (
                "Closed, not released: this policy's own count and results stay sealed until "
                "the release. Seeing them before is unblinding, an audited admin action "
                "(proctor campaign unblind)."
            )
        elif campaign.status == CampaignStatus.draft:
            note = "The campaign has not started."
        elif campaign.status == CampaignStatus.running:
            note = (
                "Running. Your policy's own count is hidden until the campaign closes: one "
                "that ticks up as runs go by would tell whoever watches the station which "
                "runs are yours."
            )
        elif not released:
            note = (
                "Closed. Your results below are private to you (and the admins) until the "
                "campaign is released."
                if scores
                else "Closed. Results appear here once the leaderboard has been computed."
            )
        else:
            note = "Released: the results are public."
            naming = campaign_naming(session, campaign)
            entry = next((a for a in naming.arms if a.policy_id == policy.id), None)
            if entry is not None:
                label = naming.label(entry)
                if naming.named(entry):
                    note = "Released: the results are public, under your policy's name."
                else:
                    note = (
                        f"Released: the results are public under the blinded label {label}; "
                        "your policy's name, owner and description are withheld because you "
                        "have not opted in to the public board."
                    )
        out.append(
            CampaignProgressOut(
                campaign_id=campaign.id,
                campaign=campaign.name,
                status=campaign.status,
                submission_id=submission_id,
                slots_done=int(done),
                slots_total=int(total),
                my_episodes=int(mine) if mine is not None else None,
                results=scores,
                leaderboard=(
                    f"/leaderboard/{campaign.id}/policies/{quote(label, safe='')}"
                    if released and label is not None
                    else None
                ),
                note=note,
            )
        )
    return out


def runner_rows(session: ProctorSession, *, limit: int = 500) -> list[dict[str, Any]]:
    """The admins' list of runner servers (``/admin/runners``), newest first:
    each with its submission, policy, host and what ``runner_view`` says."""
    rows = session.execute(
        sa.select(RunnerServer, Policy.name)
        .join(Submission, Submission.id == RunnerServer.submission_id)
        .join(Policy, Policy.id == Submission.policy_id)
        .order_by(RunnerServer.id.desc())
        .limit(limit)
    ).all()
    return [
        {
            **runner_view.runner_fields(server),
            "submission_id": server.submission_id,
            "policy_name": name,
            "host": server.host,
            "worker": server.worker,
            "url": server.url,
            "dialect": server.dialect,
            "diagnostics": dict(server.diagnostics or {}),
        }
        for server, name in rows
    ]
