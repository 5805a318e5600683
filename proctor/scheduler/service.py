"""Campaigns: create, start, status, close, reveal, unblind, release.

Functions take a keyword-only ``session`` and never commit: the request or
CLI command owns the transaction. Claiming work lives in ``claims.py``.

Lifecycle: draft → (start: seed drawn, commitment published, allocation
written) running → (close: seed revealed) closed → (release: identities
public) released. Every transition and every unblinding is an audit-log row.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from proctor.core.audit import Actor, record_audit
from proctor.core.db.models import (
    Assignment,
    Campaign,
    CampaignObject,
    CampaignPolicy,
    ObjectType,
    Policy,
    Submission,
    User,
)
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    AssignmentStatus,
    CampaignStatus,
    ConformanceStatus,
    PolicyKind,
    Side,
    SubmissionKind,
)
from proctor.core.errors import Conflict, NotFound, UsageError
from proctor.scheduler import runners
from proctor.scheduler.adaptive_campaign import apply_plan, verify_plan
from proctor.scheduler.adaptive_rule import AdaptiveRule
from proctor.scheduler.allocation import (
    AllocationProtocol,
    Slot,
    SpatialConfig,
    commitment,
    derive_allocation,
    verify_commitment,
)
from proctor.scheduler.codes import new_endpoint_handle, unique_codes
from proctor.scheduler.protocol import CampaignProtocol, PolicyEntry

_IN_CHUNK = 500  # keep IN (...) lists well under every driver's parameter limit


class CampaignNotFound(NotFound):
    """No campaign by that name or id. The API answers 404 "campaign not
    found", the same as for a campaign the caller may not see yet."""

    exit_code = 1
    http_detail = "campaign not found"


class CampaignStateError(Conflict):
    """The campaign is not in a state that allows this (the API answers 409)."""

    exit_code = 1


def get_campaign(session: Session, ref: int | str, *, lock: bool = False) -> Campaign:
    """A campaign by id or by name (a string of digits is tried as an id first).
    ``lock`` takes a row lock (PostgreSQL) so concurrent transitions serialize."""

    def one(where: sa.ColumnElement[bool]) -> Campaign | None:
        stmt = sa.select(Campaign).where(where)
        return session.scalars(stmt.with_for_update() if lock else stmt).one_or_none()

    if isinstance(ref, int) or ref.isdigit():
        found = one(Campaign.id == int(ref))
        if found is not None:
            return found
        if isinstance(ref, int):
            raise CampaignNotFound(f"no campaign with id {ref}")
    found = one(Campaign.name == str(ref))
    if found is None:
        raise CampaignNotFound(f"no campaign named '{ref}'")
    return found


def _require(campaign: Campaign, *allowed: CampaignStatus, doing: str) -> None:
    if campaign.status not in allowed:
        wanted = " or ".join(s.value for s in allowed)
        raise CampaignStateError(
            f"campaign '{campaign.name}' is {campaign.status.value}; "
            f"{doing} needs it to be {wanted}"
        )


# ---------------------------------------------------------------- create


def _choose_submission(
    session: Session, policy: Policy, entry: PolicyEntry, where: str, problems: list[str]
) -> Submission | None:
    if entry.submission is not None:
        sub = session.get(Submission, entry.submission)
        if sub is None or sub.policy_id != policy.id:
            problems.append(
                f"{where}.submission: submission {entry.submission} is not a version of "
                f"'{policy.name}'"
            )
            return None
        problem = _unrunnable(sub)
        if problem:
            problems.append(f"{where}.submission: submission {sub.id} {problem}")
            return None
        return sub
    # an uploaded checkpoint runs like an endpoint once its runner passed the
    # check: the runner host serves it on demand (proctor/runner/queue.py)
    runnable = sa.and_(
        Submission.kind.in_((SubmissionKind.endpoint, SubmissionKind.checkpoint)),
        Submission.conformance_status == ConformanceStatus.passed,
    )
    if policy.kind == PolicyKind.reference:
        # the station serves the human reference itself: no server-side check exists
        runnable = sa.or_(runnable, Submission.kind == SubmissionKind.teleop)
    sub = session.scalars(
        sa.select(Submission)
        .where(Submission.policy_id == policy.id, runnable)
        .order_by(Submission.id.desc())
        .limit(1)
    ).first()
    if sub is None:
        problems.append(
            f"{where}: '{policy.name}' has no endpoint or checkpoint submission that passed "
            "the conformance check"
            + (
                " (register the teleop reference: proctor submission reference)"
                if policy.kind == PolicyKind.reference
                else ""
            )
        )
    return sub


def _unrunnable(sub: Submission) -> str | None:
    """Why a submission cannot be evaluated now, or None. A ``teleop``
    submission (only a reference has one: ``proctor/web/submissions/reference.py``)
    runs without a conformance verdict: the server cannot reach it, and each
    station checks it in its pre-flight before every episode. An uploaded
    ``checkpoint`` runs like an endpoint once its check passed: a runner host
    serves it while the campaign has runs left."""
    if sub.kind == SubmissionKind.teleop and sub.endpoint_url:
        return None
    if sub.kind == SubmissionKind.teleop:
        return "is a teleop reference without a teleop server url"
    if sub.kind == SubmissionKind.endpoint and not sub.endpoint_url:
        return "is an endpoint submission without an endpoint url"
    if sub.conformance_status != ConformanceStatus.passed:
        return f"has not passed the conformance check (it is {sub.conformance_status.value})"
    return None


def create_campaign(session: Session, *, protocol: CampaignProtocol, actor: Actor) -> Campaign:
    """A draft campaign from a validated protocol; every unresolvable name
    or unrunnable submission is reported at once, naming its field."""
    problems: list[str] = []
    if session.scalar(sa.select(Campaign.id).where(Campaign.name == protocol.name)) is not None:
        problems.append(f"name: a campaign named '{protocol.name}' already exists")

    names = [protocol.reference.name, *(p.name for p in protocol.policies)]
    found = {p.name: p for p in session.scalars(sa.select(Policy).where(Policy.name.in_(names)))}
    arms: list[tuple[Policy, Submission | None]] = []
    entries = [("reference", protocol.reference, PolicyKind.reference)] + [
        (f"policies[{i}]", p, PolicyKind.policy) for i, p in enumerate(protocol.policies)
    ]
    for where, entry, kind in entries:
        policy = found.get(entry.name)
        if policy is None:
            problems.append(f"{where}: no policy named '{entry.name}'")
            continue
        if policy.kind != kind:
            problems.append(
                f"{where}: '{policy.name}' is a {policy.kind.value}, not a {kind.value}"
                + (
                    " (name the human reference under `reference`)"
                    if kind.value == "policy"
                    else ""
                )
            )
            continue
        arms.append((policy, _choose_submission(session, policy, entry, where, problems)))

    objects = {
        o.name: o
        for o in session.scalars(sa.select(ObjectType).where(ObjectType.name.in_(protocol.objects)))
    }
    for i, name in enumerate(protocol.objects):
        if name not in objects:
            problems.append(f"objects[{i}]: no object type named '{name}'")
    if problems:
        raise UsageError("; ".join(problems))

    campaign = Campaign(
        name=protocol.name,
        description=protocol.description,
        status=CampaignStatus.draft,
        items_per_episode=protocol.items_per_episode,
        per_item_cap_s=protocol.per_item_cap_s,
        tau_s=protocol.tau_s,
        episodes_per_cell=protocol.episodes_per_cell,
        spatial_configs=[
            {"tote": c.tote.value, "camera": c.camera.value} for c in protocol.spatial_configs
        ],
        protocol_extra=protocol.extra,
        latency_budget=(
            protocol.latency_budget.model_dump() if protocol.latency_budget is not None else None
        ),
        cell_profiles=sorted(protocol.cell_profiles) if protocol.cell_profiles else None,
        created_by_id=actor.user_id,
    )
    campaign.policies = [
        CampaignPolicy(policy_id=p.id, submission_id=s.id if s else None, active=True)
        for p, s in arms
    ]
    campaign.objects = [CampaignObject(object_type_id=objects[n].id) for n in protocol.objects]
    campaign.allocation_rule = _allocation_rule(protocol, found)
    session.add(campaign)
    session.flush()
    record_audit(
        session,
        actor=actor,
        action="campaign.create",
        target_type="campaign",
        target_id=campaign.id,
        details={"name": campaign.name},
    )
    return campaign


def _allocation_rule(protocol: CampaignProtocol, found: dict[str, Policy]) -> dict[str, Any]:
    """Sentinels by id (the reference always) and the adaptive rule, if any."""
    names = {protocol.reference.name, *protocol.sentinels}
    return {
        "sentinels": sorted(found[n].id for n in names),
        "adaptive": protocol.adaptive.model_dump() if protocol.adaptive else None,
    }


def _adaptive_json(c: Campaign, active: set[int]) -> dict[str, Any] | None:
    rule = c.allocation_rule or {}
    if not rule.get("adaptive"):
        return None
    sentinels = tuple(p for p in rule.get("sentinels", []) if p in active)
    try:
        return AdaptiveRule(sentinels=sentinels, **rule["adaptive"]).to_json()
    except (TypeError, ValueError) as exc:
        raise CampaignStateError(f"campaign '{c.name}' cannot start: {exc}") from None


# ---------------------------------------------------------------- start


@dataclass(frozen=True)
class StartResult:
    campaign_id: int
    commitment: str  # SHA-256 of the sealed seed: publish it
    protocol_digest: str  # SHA-256 of the canonical allocation protocol
    slots: int
    blocks: int


def _configs(campaign: Campaign) -> list[SpatialConfig]:
    return [SpatialConfig(Side(c["tote"]), Side(c["camera"])) for c in campaign.spatial_configs]


def start_campaign(
    session: Session, *, campaign: int | str, actor: Actor, seed: str | None = None
) -> StartResult:
    """Seal a fresh seed, publish its commitment, write the allocation.

    ``seed`` exists for tests and for replaying a derivation; the CLI and the
    API never pass it (a chosen seed would defeat the commitment).
    """
    c = get_campaign(session, campaign, lock=True)
    _require(c, CampaignStatus.draft, doing="starting")
    active = [cp for cp in c.policies if cp.active]
    problems = []
    for cp in active:
        sub = session.get(Submission, cp.submission_id) if cp.submission_id else None
        if sub is None:
            problems.append(f"policy {cp.policy_id} has no submission to evaluate")
        elif (why := _unrunnable(sub)) is not None:
            problems.append(f"submission {sub.id} {why}")
    if not active:
        problems.append("no active policies")
    if problems:
        raise CampaignStateError(f"campaign '{c.name}' cannot start: " + "; ".join(problems))

    # the transition first, conditionally: a concurrent start (SQLite has no row
    # locks) finds the campaign no longer in draft and writes nothing
    moved = session.execute(
        sa.update(Campaign)
        .where(Campaign.id == c.id, Campaign.status == CampaignStatus.draft)
        .values(status=CampaignStatus.running),
        execution_options={"synchronize_session": False},
    )
    if moved.rowcount != 1:
        raise CampaignStateError(f"campaign '{c.name}' was started meanwhile")
    protocol = AllocationProtocol.canonical(
        policies=[cp.policy_id for cp in active],
        objects=[co.object_type_id for co in c.objects],
        configs=_configs(c),
        episodes_per_cell=c.episodes_per_cell,
        adaptive=_adaptive_json(c, {cp.policy_id for cp in active}),
    )
    seed = seed if seed is not None else secrets.token_hex(32)
    slots = derive_allocation(seed, protocol)
    submission_of = {cp.policy_id: cp.submission_id for cp in active}
    issued = session.scalar(sa.select(sa.func.count()).select_from(Assignment)) or 0
    codes = unique_codes(
        len(slots), already_issued=issued, taken=lambda cand: _taken_codes(session, cand)
    )
    now = utcnow()
    session.execute(
        sa.insert(Assignment),
        [
            {
                "campaign_id": c.id,
                "run_code": code,
                "endpoint_handle": new_endpoint_handle(),
                "policy_id": s.policy_id,
                "submission_id": submission_of[s.policy_id],
                "object_type_id": s.object_type_id,
                "tote_side": s.config.tote,
                "camera_side": s.config.camera,
                "block_index": s.block_index,
                "slot": s.slot,
                "sequence": s.sequence,
                "status": AssignmentStatus.pending,
                "attempt": 1,
                "created_at": now,
            }
            for s, code in zip(slots, codes, strict=True)
        ],
    )
    c.status = CampaignStatus.running
    c.allocation_seed = seed
    c.seed_commitment = commitment(seed)
    c.allocation_protocol = protocol.to_json()
    c.started_at = now
    session.flush()
    # checkpoints are served by a runner host from now on: ask for them at once,
    # so their environments build while the first runs of the others go by
    runners.request_for_campaign(session, c.id, now=now)
    result = StartResult(
        campaign_id=c.id,
        commitment=c.seed_commitment,
        protocol_digest=protocol.digest(),
        slots=len(slots),
        blocks=protocol.block_count,
    )
    record_audit(
        session,
        actor=actor,
        action="campaign.start",
        target_type="campaign",
        target_id=c.id,
        details={
            "commitment": result.commitment,
            "protocol_digest": result.protocol_digest,
            "algorithm": protocol.algorithm,
            "adaptive": protocol.adaptive,
            "slots": result.slots,
        },
    )
    return result


def _taken_codes(session: Session, candidates: Iterable[str]) -> set[str]:
    cand = list(candidates)
    taken: set[str] = set()
    for i in range(0, len(cand), _IN_CHUNK):
        chunk = cand[i : i + _IN_CHUNK]
        taken.update(
            session.scalars(sa.select(Assignment.run_code).where(Assignment.run_code.in_(chunk)))
        )
    return taken


# ---------------------------------------------------------------- status


@dataclass(frozen=True)
class CellProgress:
    """One (policy, object) cell. ``done`` counts episodes that count toward
    the cell; requeued (system) and skipped slots are listed, not counted."""

    arm: str  # the policy's name, or a blinded label ("arm A")
    is_reference: bool | None  # None while blinded: the reference is an identity too
    object_name: str
    target: int
    done: int
    claimed: int
    pending: int
    requeued: int
    skipped: int
    done_by_config: dict[str, int]
    # why its pending runs are not handed out now ("waiting for runner: building
    # environment"), or None: an uploaded checkpoint waits for its runner server
    waiting: str | None = None


@dataclass(frozen=True)
class ConfigProgress:
    config: str  # "tote left / camera right"
    blocks_planned: int
    blocks_complete: int
    done: int  # episodes counted in this configuration, all arms and objects


@dataclass(frozen=True)
class CampaignReport:
    id: int
    name: str
    status: CampaignStatus
    identities: bool  # whether ``arm`` carries policy names
    items_per_episode: int
    per_item_cap_s: float
    tau_s: float
    episodes_per_cell: int
    commitment: str | None
    seed: str | None  # only once closed
    protocol_digest: str | None
    started_at: datetime | None
    closed_at: datetime | None
    released_at: datetime | None
    slots: int
    done: int
    claimed: int
    pending: int
    requeued: int
    skipped: int
    blocks: int
    blocks_complete: int
    cells: list[CellProgress] = field(default_factory=list)
    configs: list[ConfigProgress] = field(default_factory=list)
    # the cell profiles whose stations may run it; None: any station
    cell_profiles: list[str] | None = None

    @property
    def config_spread(self) -> int:
        """Worst imbalance: over cells, max − min episodes done across configurations."""
        spreads = [
            max(c.done_by_config.values()) - min(c.done_by_config.values())
            for c in self.cells
            if c.done_by_config
        ]
        return max(spreads, default=0)


def arm_labels(c: Campaign, policy_ids: Sequence[int], names: dict[int, str]) -> dict[int, str]:
    """Policy id → label: ``names`` when given (identities shown), else blinded
    ``arm A``, ``arm B``, … (also used by ``proctor.scheduler.naming`` for blinded previews)."""
    if names:
        return {pid: names[pid] for pid in policy_ids}
    # blinded: letters in an order drawn from the sealed seed, so neither the
    # policy ids nor the order of the first block give them away
    key = c.allocation_seed or ""
    order = sorted(
        policy_ids, key=lambda pid: hashlib.sha256(f"{key}/arm-label/{pid}".encode()).hexdigest()
    )
    return {pid: f"arm {chr(ord('A') + i) if i < 26 else i + 1}" for i, pid in enumerate(order)}


def campaign_status(
    session: Session, *, campaign: int | str, identities: bool = False, actor: Actor | None = None
) -> CampaignReport:
    """Per-cell progress and balance across configurations.

    With ``identities=False`` the arms carry blinded labels: per-cell counts
    by name, watched while episodes run, would tell whoever watches which run
    was whose. Naming them before the campaign is released is a form of
    unblinding: it needs an ``actor`` and writes an audit row.
    """
    c = get_campaign(session, campaign)
    if identities and c.status != CampaignStatus.released:
        if actor is None:
            raise UsageError("actor: naming the arms of an unreleased campaign is audited")
        record_audit(
            session,
            actor=actor,
            action="campaign.status_identified",
            target_type="campaign",
            target_id=c.id,
            details={"campaign_status": c.status.value},
        )
    policies = {cp.policy_id: cp for cp in c.policies}
    pol_rows = {
        p.id: p for p in session.scalars(sa.select(Policy).where(Policy.id.in_(list(policies))))
    }
    obj_rows = {co.object_type_id: session.get(ObjectType, co.object_type_id) for co in c.objects}
    proto = AllocationProtocol.from_json(c.allocation_protocol) if c.allocation_protocol else None
    arm_ids = list(proto.policies) if proto else sorted(policies)
    labels = arm_labels(
        c, arm_ids, {pid: pol_rows[pid].name for pid in arm_ids} if identities else {}
    )
    configs = _configs(c)

    rows = session.execute(
        sa.select(
            Assignment.policy_id,
            Assignment.object_type_id,
            Assignment.tote_side,
            Assignment.camera_side,
            Assignment.block_index,
            Assignment.status,
            Assignment.replaces_id,
        ).where(Assignment.campaign_id == c.id)
    ).all()
    counts: dict[tuple[int, int], dict[AssignmentStatus, int]] = defaultdict(
        lambda: defaultdict(int)
    )
    by_config: dict[tuple[int, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    block_cfg: dict[int, str] = {}
    block_done: dict[int, set[int]] = defaultdict(set)
    config_done: dict[str, int] = defaultdict(int)
    for pid, oid, tote, cam, block, status, replaces in rows:
        label = SpatialConfig(tote, cam).label
        counts[(pid, oid)][status] += 1
        if replaces is None:
            block_cfg[block] = label
        if status == AssignmentStatus.done:
            by_config[(pid, oid)][label] += 1
            block_done[block].add(pid)
            config_done[label] += 1

    if identities:  # the reference first, then by name
        arm_ids.sort(key=lambda pid: (pol_rows[pid].kind != PolicyKind.reference, labels[pid]))
    else:
        arm_ids.sort(key=lambda pid: labels[pid])
    waiting = runners.waiting_now(session, c.id) if c.status == CampaignStatus.running else {}
    cells = []
    for pid in arm_ids:
        policy = pol_rows[pid]
        why = waiting.get(policies[pid].submission_id or 0)
        for oid, obj in obj_rows.items():
            n = counts[(pid, oid)]
            cells.append(
                CellProgress(
                    arm=labels[pid],
                    is_reference=(policy.kind == PolicyKind.reference) if identities else None,
                    object_name=obj.name if obj else str(oid),
                    target=c.episodes_per_cell,
                    done=n[AssignmentStatus.done],
                    claimed=n[AssignmentStatus.claimed],
                    pending=n[AssignmentStatus.pending],
                    requeued=n[AssignmentStatus.requeued],
                    skipped=n[AssignmentStatus.skipped],
                    done_by_config={cfg.label: by_config[(pid, oid)][cfg.label] for cfg in configs},
                    waiting=why if n[AssignmentStatus.pending] else None,
                )
            )
    n_arms = len(arm_ids)
    complete = {b for b, arms in block_done.items() if len(arms) == n_arms}
    config_rows = [
        ConfigProgress(
            config=cfg.label,
            blocks_planned=sum(1 for lab in block_cfg.values() if lab == cfg.label),
            blocks_complete=sum(1 for b in complete if block_cfg.get(b) == cfg.label),
            done=config_done[cfg.label],
        )
        for cfg in configs
    ]
    totals: dict[AssignmentStatus, int] = defaultdict(int)
    for n in counts.values():
        for status, k in n.items():
            totals[status] += k
    sealed = c.status in (CampaignStatus.draft, CampaignStatus.running)
    return CampaignReport(
        id=c.id,
        name=c.name,
        status=c.status,
        identities=identities,
        items_per_episode=c.items_per_episode,
        per_item_cap_s=c.per_item_cap_s,
        tau_s=c.tau_s,
        episodes_per_cell=c.episodes_per_cell,
        commitment=c.seed_commitment,
        seed=None if sealed else c.allocation_seed,
        protocol_digest=proto.digest() if proto else None,
        cell_profiles=list(c.cell_profiles) if c.cell_profiles is not None else None,
        started_at=c.started_at,
        closed_at=c.closed_at,
        released_at=c.released_at,
        slots=len(rows),
        done=totals[AssignmentStatus.done],
        claimed=totals[AssignmentStatus.claimed],
        pending=totals[AssignmentStatus.pending],
        requeued=totals[AssignmentStatus.requeued],
        skipped=totals[AssignmentStatus.skipped],
        blocks=len(block_cfg),
        blocks_complete=len(complete),
        cells=cells,
        configs=config_rows,
    )


# ---------------------------------------------------------------- close, reveal


def close_campaign(session: Session, *, campaign: int | str, actor: Actor) -> str:
    """No more claims; the seed is revealed. Returns the seed."""
    c = get_campaign(session, campaign, lock=True)
    _require(c, CampaignStatus.running, doing="closing")
    seed = c.allocation_seed
    if seed is None:
        raise CampaignStateError(f"campaign '{c.name}' is running without a sealed seed")
    # the rule's last word, on the outcomes since the last claim, so the
    # log of never-run slots is what the replay after reveal gives
    apply_plan(session, c)
    c.status = CampaignStatus.closed
    c.closed_at = utcnow()
    unfinished = session.scalar(
        sa.select(sa.func.count())
        .select_from(Assignment)
        .where(
            Assignment.campaign_id == c.id,
            Assignment.status.in_([AssignmentStatus.pending, AssignmentStatus.claimed]),
        )
    )
    session.flush()
    record_audit(
        session,
        actor=actor,
        action="campaign.close",
        target_type="campaign",
        target_id=c.id,
        details={
            "seed": c.allocation_seed,
            "commitment": c.seed_commitment,
            "unfinished": unfinished,
        },
    )
    return seed


@dataclass(frozen=True)
class Revelation:
    """The revealed seed and the check anyone can repeat with it."""

    campaign_id: int
    seed: str
    commitment: str
    commitment_verified: bool
    protocol: dict[str, Any]
    protocol_digest: str
    slots_checked: int
    replacements: int  # requeued/skipped slots' fresh copies, outside the derivation
    mismatches: list[str]

    @property
    def verified(self) -> bool:
        return self.commitment_verified and not self.mismatches


def reveal_allocation(session: Session, *, campaign: int | str) -> Revelation:
    """Re-derive the allocation from the revealed seed and compare it with
    the log, slot by slot. Only once the campaign is closed."""
    c = get_campaign(session, campaign)
    _require(c, CampaignStatus.closed, CampaignStatus.released, doing="revealing the seed")
    if c.allocation_seed is None or c.seed_commitment is None or c.allocation_protocol is None:
        raise CampaignStateError(f"campaign '{c.name}' has no sealed allocation")
    protocol = AllocationProtocol.from_json(c.allocation_protocol)
    expected = derive_allocation(c.allocation_seed, protocol)
    logged = session.execute(
        sa.select(
            Assignment.sequence,
            Assignment.block_index,
            Assignment.slot,
            Assignment.policy_id,
            Assignment.object_type_id,
            Assignment.tote_side,
            Assignment.camera_side,
        )
        .where(Assignment.campaign_id == c.id, Assignment.replaces_id.is_(None))
        .order_by(Assignment.sequence)
    ).all()
    replacements = session.scalar(
        sa.select(sa.func.count())
        .select_from(Assignment)
        .where(Assignment.campaign_id == c.id, Assignment.replaces_id.is_not(None))
    )
    if protocol.adaptive is not None:
        return _reveal_adaptive(session, c, protocol, expected, logged, replacements or 0)
    mismatches: list[str] = []
    if len(logged) != len(expected):
        mismatches.append(f"the log has {len(logged)} slots; the derivation gives {len(expected)}")
    for row, slot in zip(logged, expected, strict=False):
        want = (
            slot.sequence,
            slot.block_index,
            slot.slot,
            slot.policy_id,
            slot.object_type_id,
            slot.config.tote,
            slot.config.camera,
        )
        if tuple(row) != want:
            mismatches.append(f"sequence {slot.sequence}: logged {tuple(row)}, derived {want}")
    return Revelation(
        campaign_id=c.id,
        seed=c.allocation_seed,
        commitment=c.seed_commitment,
        commitment_verified=verify_commitment(c.allocation_seed, c.seed_commitment),
        protocol=protocol.to_json(),
        protocol_digest=protocol.digest(),
        slots_checked=min(len(logged), len(expected)),
        replacements=replacements or 0,
        mismatches=mismatches,
    )


def _reveal_adaptive(
    session: Session,
    c: Campaign,
    protocol: AllocationProtocol,
    expected: list[Slot],
    logged: Sequence[Any],  # rows: sequence, block_index, slot, policy, object, sides
    replacements: int,
) -> Revelation:
    """Blocks, objects and configurations as derived from the seed; which
    policy each slot went to (or its withdrawal) as the rule replays it on
    the recorded outcomes."""
    by_seq = {s.sequence: s for s in expected}
    mismatches: list[str] = []
    for row in logged:
        slot = by_seq.get(row.sequence)
        want = slot and (slot.block_index, slot.slot, slot.object_type_id, slot.config.tote)
        got = (row.block_index, row.slot, row.object_type_id, row.tote_side)
        if slot is None or want != got or slot.config.camera != row.camera_side:
            mismatches.append(f"sequence {row.sequence}: logged {tuple(row)}, not derived")
    mismatches.extend(verify_plan(session, c))
    assert c.allocation_seed is not None and c.seed_commitment is not None
    return Revelation(
        campaign_id=c.id,
        seed=c.allocation_seed,
        commitment=c.seed_commitment,
        commitment_verified=verify_commitment(c.allocation_seed, c.seed_commitment),
        protocol=protocol.to_json(),
        protocol_digest=protocol.digest(),
        slots_checked=len(logged),
        replacements=replacements,
        mismatches=mismatches,
    )


# ---------------------------------------------------------------- unblind, release


@dataclass(frozen=True)
class UnblindedRun:
    run_code: str
    sequence: int
    block_index: int
    status: AssignmentStatus
    object_name: str
    config: str
    policy_name: str
    is_reference: bool
    owner: str | None
    submission_id: int | None


def unblind(
    session: Session,
    *,
    campaign: int | str,
    actor: Actor,
    reason: str,
    run_codes: Sequence[str] = (),
) -> list[UnblindedRun]:
    """Who ran under which run code (all, or the ones named). An admin
    action: the caller checks the role; this writes the audit row."""
    reason = reason.strip()
    if not reason:
        raise UsageError("reason: say why you unblind (it is written to the audit log)")
    c = get_campaign(session, campaign)
    stmt = (
        sa.select(Assignment, Policy, ObjectType, User.username)
        .join(Policy, Policy.id == Assignment.policy_id)
        .join(ObjectType, ObjectType.id == Assignment.object_type_id)
        .outerjoin(User, User.id == Policy.owner_id)
        .where(Assignment.campaign_id == c.id)
        .order_by(Assignment.sequence)
    )
    wanted = sorted({r.strip().upper() for r in run_codes if r.strip()})
    if wanted:
        stmt = stmt.where(Assignment.run_code.in_(wanted))
    out = [
        UnblindedRun(
            run_code=a.run_code,
            sequence=a.sequence,
            block_index=a.block_index,
            status=a.status,
            object_name=o.name,
            config=SpatialConfig(a.tote_side, a.camera_side).label,
            policy_name=p.name,
            is_reference=p.kind == PolicyKind.reference,
            owner=owner,
            submission_id=a.submission_id,
        )
        for a, p, o, owner in session.execute(stmt).all()
    ]
    missing = sorted(set(wanted) - {r.run_code for r in out})
    if missing:
        raise UsageError(f"run_code: {', '.join(missing)} not in campaign '{c.name}'")
    record_audit(
        session,
        actor=actor,
        action="campaign.unblind",
        target_type="campaign",
        target_id=c.id,
        details={
            "reason": reason,
            "run_codes": wanted or "all",
            "runs": len(out),
            "campaign_status": c.status.value,
        },
    )
    return out


def release_campaign(session: Session, *, campaign: int | str, actor: Actor) -> None:
    """Identities become public for this campaign's results."""
    c = get_campaign(session, campaign, lock=True)
    _require(c, CampaignStatus.closed, doing="releasing")
    c.status = CampaignStatus.released
    c.released_at = utcnow()
    session.flush()
    record_audit(
        session, actor=actor, action="campaign.release", target_type="campaign", target_id=c.id
    )


def list_campaigns(session: Session) -> list[Campaign]:
    return list(session.scalars(sa.select(Campaign).order_by(Campaign.id)))
