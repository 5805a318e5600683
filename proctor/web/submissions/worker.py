"""Running queued conformance checks — in a worker process, never in the web
server (``proctor submission work`` / ``proctor submission worker``).

A run is claimed in one short transaction, the check talks to the
submitter's server with no transaction open, and the report is written in
another: the submission's ``conformance_status`` becomes ``passed`` or
``failed`` (only a passed endpoint can join a campaign; the scheduler
enforces it) and the run ``done``. A checker that crashes leaves the run
``error`` and the submission's status as it was.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import sessionmaker

from proctor.core import netguard
from proctor.core.audit import Actor, record_audit
from proctor.core.db.engine import ProctorSession, session_scope
from proctor.core.db.models import ConformanceRun, Submission, User
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    ConformanceRunStatus,
    ConformanceStatus,
    EndpointDialect,
    SubmissionKind,
)
from proctor.core.settings import Settings
from proctor.policywire.conformance.check import (
    CheckOptions,
    Expectations,
    Report,
    Status,
    check_endpoint,
)
from proctor.policywire.handshake import auth_headers
from proctor.policywire.wire.spec import (
    ActionSpace,
    manifest_action_units,
    manifest_exterior_numbering,
)
from proctor.scheduler.endpoint_keys import decrypt_api_key
from proctor.web.submissions import endpoints, queue, runner_wait

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    run_id: int
    submission_id: int
    url: str
    expect: Expectations
    options: CheckOptions
    # the URL is a runner server's, written by the platform's runner host: a
    # private address is where runners live, so it is not refused
    platform_written: bool = False


@dataclass(frozen=True)
class Outcome:
    run_id: int
    submission_id: int
    verdict: str  # passed | failed | error
    summary: str


def _job(
    session: ProctorSession, run: ConformanceRun, settings: Settings, runner_url: str | None = None
) -> Job:
    sub = session.get(Submission, run.submission_id)
    if sub is None:
        raise RuntimeError("the submission vanished")
    if sub.kind == SubmissionKind.checkpoint:
        if runner_url is None:
            raise RuntimeError("the checkpoint's runner server is not ready")
        return _checkpoint_job(session, run, sub, runner_url, settings)
    if sub.kind != SubmissionKind.endpoint or not sub.endpoint_url:
        raise RuntimeError("only endpoint and checkpoint submissions can be checked")
    declared: dict[str, Any] = dict((sub.manifest or {}).get("policy") or {})
    terms = _identity_terms(session, sub)
    key = None
    if sub.endpoint_api_key_encrypted:
        key = decrypt_api_key(
            sub.endpoint_api_key_encrypted, encryption_key=settings.encryption_key
        )
    dialect = sub.endpoint_dialect
    return Job(
        run_id=run.id,
        submission_id=sub.id,
        # a Positronic URL is stored with its session path; normalising again is a no-op
        url=endpoints.endpoint_url(sub.endpoint_url, dialect),
        expect=_expectations(declared, terms),
        options=CheckOptions(
            dialect=dialect,
            # Api-Key (openpi, RoboArena) or Bearer (Positronic), as each dialect's client sends it
            headers=auth_headers(dialect, key),
            sim_keys=settings.submissions.conformance_sim_keys,
            exterior_numbering=manifest_exterior_numbering(sub.manifest),
            action_units=manifest_action_units(sub.manifest),
        ),
    )


def _identity_terms(session: ProctorSession, sub: Submission) -> list[str]:
    terms = [sub.policy.name]
    owner = session.get(User, sub.policy.owner_id) if sub.policy.owner_id else None
    if owner is not None:
        terms += [owner.username, owner.display_name or ""]
    return terms


def _expectations(declared: dict[str, Any], terms: list[str]) -> Expectations:
    space = declared.get("action_space")
    return Expectations(
        action_space=ActionSpace(space) if space else None,
        chunk_length=declared.get("chunk_length"),
        deterministic=bool(declared.get("deterministic")),
        identity_terms=tuple(t for t in terms if t),
    )


def _checkpoint_job(
    session: ProctorSession, run: ConformanceRun, sub: Submission, url: str, settings: Settings
) -> Job:
    """A checkpoint is checked at its runner server, with what its policy.toml
    declares: the wire its runner serves (``runner.dialect`` for a command,
    openpi for LeRobot and openpi), the action space, chunk length and
    determinism. A runner server takes no key."""
    manifest: dict[str, Any] = dict(sub.manifest or {})
    runner: dict[str, Any] = dict(manifest.get("runner") or {})
    dialect = EndpointDialect(runner.get("dialect") or EndpointDialect.openpi.value)
    return Job(
        run_id=run.id,
        submission_id=sub.id,
        url=endpoints.endpoint_url(url, dialect),
        expect=_expectations(dict(manifest.get("policy") or {}), _identity_terms(session, sub)),
        options=CheckOptions(
            dialect=dialect,
            sim_keys=settings.submissions.conformance_sim_keys,
            exterior_numbering=manifest_exterior_numbering(sub.manifest),
            action_units=manifest_action_units(sub.manifest),
        ),
        platform_written=True,
    )


def _refused_report(message: str) -> dict[str, Any]:
    return {
        "format": "proctor.conformance/1",
        "verdict": "failed",
        "summary": f"Failed: {message}",
        "findings": [
            {
                "check": "connect",
                "title": "Endpoint address",
                "status": "failed",
                "message": message,
                "details": {},
            }
        ],
    }


def _check(
    job: Job, settings: Settings, check: Callable[..., Report]
) -> tuple[dict[str, Any] | None, str | None]:
    """The report of checking ``job`` (or why the checker itself failed)."""
    allowed = endpoints.private_endpoints_allowed(settings) or job.platform_written
    try:
        # resolved and judged once, here; every connection of the check goes to
        # the judged address, so a name that changes meanwhile cannot move it
        pinned = netguard.pin(job.url, allow_private=allowed)
    except netguard.AddressRefused as exc:
        return _refused_report(f"The endpoint's url: {exc}."), None
    options = dataclasses.replace(
        job.options,
        pinned=pinned,
        # why a connection failed (refused, HTTP status, timed out) is said only
        # about a public server on a site that allows private ones: in prod, and
        # for any private address, it would map a network that is not the submitter's
        connect_detail=allowed and pinned.public and not job.platform_written,
    )
    try:
        return check(job.url, expect=job.expect, options=options).to_json(), None
    except Exception:
        log.exception("conformance run %s: the checker failed", job.run_id)
        return None, traceback.format_exc(limit=8)


def run_one(
    sessions: sessionmaker[ProctorSession],
    settings: Settings,
    run_id: int,
    *,
    clock: Callable[[], datetime] = utcnow,
    check: Callable[..., Report] = check_endpoint,
    poll_s: float = 1.0,
) -> Outcome:
    """Run a claimed (``running``) run to its end and record what it found.
    A checkpoint is checked at its runner server: asked for first, then
    waited for (``runner_wait.wait_ready``)."""
    with session_scope(sessions) as session:
        run = session.get(ConformanceRun, run_id)
        if run is None:
            raise RuntimeError(f"conformance run {run_id} does not exist")
        submission_id = run.submission_id
        runner_id = runner_wait.request(session, submission_id, now=clock(), since=run.requested_at)
    report: dict[str, Any] | None = None
    error: str | None = None
    runner_url: str | None = None
    if runner_id is not None:
        waited = runner_wait.wait_ready(sessions, runner_id, settings.runner, poll_s=poll_s)
        runner_url, report, error = waited.url, waited.report, waited.error
    job = None
    if report is None and error is None:
        with session_scope(sessions) as session:
            run = session.get(ConformanceRun, run_id)
            assert run is not None
            try:
                job = _job(session, run, settings, runner_url)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
    if job is not None:
        report, error = _check(job, settings, check)
    with session_scope(sessions) as session:
        run = session.get(ConformanceRun, run_id)
        assert run is not None
        sub = session.get(Submission, submission_id)
        now = clock()
        run.finished_at = now
        if report is None or sub is None:
            run.status = ConformanceRunStatus.error
            run.error = (error or "the submission vanished")[:4000]
            return Outcome(run_id, submission_id, "error", run.error.splitlines()[-1])
        run.status = ConformanceRunStatus.done
        passed = report.get("verdict") == Status.passed.value
        sub.conformance_status = ConformanceStatus.passed if passed else ConformanceStatus.failed
        sub.conformance_report = {**report, "run_id": run_id}
        record_audit(
            session,
            actor=Actor(label=f"worker {run.worker or ''}".strip()),
            action="submission.conformance",
            target_type="submission",
            target_id=sub.id,
            details={"run": run_id, "verdict": report.get("verdict")},
            at=now,
        )
        return Outcome(run_id, sub.id, report.get("verdict", "failed"), str(report.get("summary")))


def work(
    sessions: sessionmaker[ProctorSession],
    settings: Settings,
    *,
    run_id: int | None = None,
    handed: str | None = None,
    drain: bool = True,
    clock: Callable[[], datetime] = utcnow,
    check: Callable[..., Report] = check_endpoint,
    on_outcome: Callable[[Outcome], None] | None = None,
    poll_s: float = 1.0,
) -> list[Outcome]:
    """Run ``run_id`` — handed over (claimed for this process by the web app
    under the token ``handed``), or claimed here if still queued and the caps
    allow — then, with ``drain``, every other queued run the caps leave room
    for; stale ones (a worker died) are queued again first."""
    outcomes: list[Outcome] = []
    caps = queue.Caps.of(settings)
    with session_scope(sessions) as session:
        queue.requeue_stale_of(session, settings, now=clock())
    first = run_id
    while True:
        with session_scope(sessions) as session:
            if first is not None and handed is not None:
                claimed = first if queue.adopt(session, first, token=handed) else None
            else:
                claimed = queue.claim(session, now=clock(), run_id=first, caps=caps)
        if claimed is None and first is not None:
            first = None  # taken by someone else, or not queued: go on with the rest
            if not drain:
                break
            continue
        if claimed is None:
            break
        outcome = run_one(sessions, settings, claimed, clock=clock, check=check, poll_s=poll_s)
        outcomes.append(outcome)
        if on_outcome is not None:
            on_outcome(outcome)
        first = None
        if not drain:
            break
    return outcomes
