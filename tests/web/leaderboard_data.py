"""Campaigns with real rows for the leaderboard, policy page, explorer and
blinding tests: policies with owners, endpoints and checkpoints (the
identities blinding must hide), a sealed allocation's assignments, closed
episodes with operator logs and placement events, detector candidates and
review actions — then snapshots computed by the real analysis
(``proctor.analysis.store.recompute`` → ``proctor.analysis.store.build_snapshot``).
Nothing here writes a number a page shows: the pages' numbers come from the
analysis of these rows.

Episodes come from ``proctor.analysis.synthetic`` (a known generative model) so a
test can tell what the ranking should look like.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from proctor.analysis.store import StreamOutcome, recompute
from proctor.analysis.synthetic import PolicyModel, simulate_episode
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import (
    AnnotationCandidate,
    Assignment,
    Campaign,
    CampaignObject,
    CampaignPolicy,
    Episode,
    EpisodeEvent,
    ObjectType,
    PlacementEvent,
    Policy,
    ReviewAction,
    Station,
    Submission,
    User,
)
from proctor.core.domain import (
    AssignmentStatus,
    CampaignStatus,
    CandidateVerdict,
    EndpointDialect,
    EpisodeState,
    LabelStatus,
    LabelStream,
    PlacementSource,
    PlacementStatus,
    PolicyKind,
    ReviewActionKind,
    Side,
    SubmissionKind,
    Visibility,
)

START = datetime(2031, 5, 1, 9, 0, tzinfo=UTC)
ALL_STREAMS = tuple(LabelStream)
# small enough for a test, big enough for stable intervals
TEST_ANALYSIS = {"bootstrap": 200, "ks_resamples": 200, "power_sims": 60}


@dataclass
class PolicyIdentity:
    """Everything that names a policy: must never appear before release."""

    policy_id: int
    name: str
    owner: str
    endpoint_url: str
    checkpoint_sha256: str
    description: str

    def secrets(self) -> list[str]:
        return [self.name, self.owner, self.endpoint_url, self.checkpoint_sha256, self.description]


@dataclass
class SeededCampaign:
    campaign_id: int
    name: str
    identities: list[PolicyIdentity]
    objects: list[str]
    episode_uids: list[str]
    # uid → policy name (what the test knows; what pages must not say before release)
    episode_policy: dict[str, str] = field(default_factory=dict)
    outcomes: list[StreamOutcome] = field(default_factory=list)

    def secrets(self) -> list[str]:
        return [s for i in self.identities for s in i.secrets()]


def default_models(tag: str) -> list[PolicyModel]:
    speeds = {"spoons": 1.0, "towels": 1.4}
    return [
        PolicyModel(
            f"human-ref-{tag}",
            2.5,
            sigma=0.35,
            frailty_shape=12.0,
            p_drop=0.0,
            p_lost=0.0,
            p_safety=0.0,
            object_speed=speeds,
            reference=True,
        ),
        PolicyModel(f"swift-vla-{tag}", 6.0, p_drop=0.03, p_safety=0.0, object_speed=speeds),
        PolicyModel(f"steady-act-{tag}", 9.0, p_drop=0.05, p_safety=0.01, object_speed=speeds),
        PolicyModel(f"slow-dp-{tag}", 16.0, p_drop=0.08, p_safety=0.02, object_speed=speeds),
    ]


def seed_campaign(
    session: ProctorSession,
    *,
    released: bool,
    episodes_per_cell: int = 6,
    items: int = 4,
    seed: int = 7,
    objects: dict[str, list[str]] | None = None,
    models: list[PolicyModel] | None = None,
    compute: bool = True,
    streams: tuple[LabelStream, ...] = (LabelStream.auto_and_reviewed,),
    tag: str | None = None,
    opted_in: bool | Collection[str] = True,
    skip: Collection[tuple[str, str]] = (),
) -> SeededCampaign:
    """A closed (or released) campaign with scored episodes, and its snapshots
    under ``streams`` (``ALL_STREAMS`` for every label stream). ``opted_in``:
    which policies' submitters agreed to be named on the public board (all,
    none, or these names); the others stay private, the model's default.
    ``skip``: (policy, object) cells that get no episodes."""
    tag = tag or secrets.token_hex(3)
    rng = np.random.default_rng(seed)
    objects = objects or {"spoons": ["rigid"], "towels": ["deformable"]}
    models = models or default_models(tag)
    obj_rows = {}
    for name, tags in objects.items():
        row = session.query(ObjectType).filter_by(name=name).one_or_none()
        if row is None:
            row = ObjectType(name=name, display_name=name.capitalize(), tags=tags)
            session.add(row)
            session.flush()
        obj_rows[name] = row
    station = Station(name=f"cell-{tag}", profile="sim")
    session.add(station)
    campaign = Campaign(
        name=f"campaign-{tag}",
        status=CampaignStatus.released if released else CampaignStatus.closed,
        items_per_episode=items,
        per_item_cap_s=30.0,
        tau_s=items * 30.0,
        episodes_per_cell=episodes_per_cell,
        spatial_configs=[{"tote": "left", "camera": "left"}, {"tote": "left", "camera": "right"}],
        protocol_extra={"analysis": dict(TEST_ANALYSIS)},
        seed_commitment=secrets.token_hex(32),
        allocation_seed=secrets.token_hex(32),
        started_at=START,
        closed_at=START + timedelta(days=2),
        released_at=START + timedelta(days=3) if released else None,
    )
    session.add(campaign)
    session.flush()
    identities: list[PolicyIdentity] = []
    policy_rows: dict[str, tuple[Policy, Submission]] = {}
    for m in models:
        owner = User(username=f"owner-{m.name}", display_name=f"Lab of {m.name}")
        session.add(owner)
        session.flush()
        policy = Policy(
            name=m.name,
            kind=PolicyKind.reference if m.reference else PolicyKind.policy,
            owner_id=owner.id,
            description=f"checkpoint trained by {owner.username} on private-data-{m.name}",
            visibility=(
                Visibility.public
                if (opted_in is True or (opted_in is not False and m.name in opted_in))
                else Visibility.private
            ),
        )
        session.add(policy)
        session.flush()
        endpoint = f"ws://gpu-{m.name}.internal.example:8{len(identities)}00/serve"
        ckpt = secrets.token_hex(32)
        sub = Submission(
            policy_id=policy.id,
            kind=SubmissionKind.endpoint,
            endpoint_url=endpoint,
            endpoint_dialect=EndpointDialect.openpi,
            checkpoint_sha256=ckpt,
            manifest={"name": m.name},
        )
        session.add(sub)
        session.flush()
        session.add(
            CampaignPolicy(campaign_id=campaign.id, policy_id=policy.id, submission_id=sub.id)
        )
        policy_rows[m.name] = (policy, sub)
        identities.append(
            PolicyIdentity(policy.id, m.name, owner.username, endpoint, ckpt, policy.description)
        )
    for row in obj_rows.values():
        session.add(CampaignObject(campaign_id=campaign.id, object_type_id=row.id))
    session.flush()

    seeded = SeededCampaign(campaign.id, campaign.name, identities, list(objects), [])
    sequence = 0
    sides = (Side.left, Side.right)
    for k in range(episodes_per_cell):
        for obj_name, tags in objects.items():
            camera = sides[k % 2]
            for m in models:
                if (m.name, obj_name) in skip:
                    continue
                ep = simulate_episode(
                    m,
                    obj_name,
                    items=items,
                    budget_per_item=30.0,
                    rng=rng,
                    episode_id="x",
                    tote="left",
                    camera=camera.value,
                    tags=tuple(tags),
                )
                policy, sub = policy_rows[m.name]
                uid = secrets.token_hex(8)
                run_code = f"R-{secrets.token_hex(3).upper()}"
                a = Assignment(
                    campaign_id=campaign.id,
                    run_code=run_code,
                    endpoint_handle=secrets.token_urlsafe(16),
                    policy_id=policy.id,
                    submission_id=sub.id,
                    object_type_id=obj_rows[obj_name].id,
                    tote_side=Side.left,
                    camera_side=camera,
                    block_index=sequence // len(models),
                    slot=sequence % len(models),
                    sequence=sequence,
                    status=AssignmentStatus.done,
                    station_id=station.id,
                )
                session.add(a)
                session.flush()
                sequence += 1
                duration = ep.duration_s
                if ep.placements_s and ep.placements_s[-1] >= duration - 1e-6:
                    # the episode ends a moment after its last placement
                    duration = round(duration + 0.4, 3)
                start = START + timedelta(minutes=5 * sequence)
                clock0 = 1000.0 + 400.0 * sequence
                reviewed = sequence % 3 != 0
                row = Episode(
                    uid=uid,
                    station_id=station.id,
                    assignment_id=a.id,
                    campaign_id=campaign.id,
                    run_code=run_code,
                    object_type_id=obj_rows[obj_name].id,
                    items=items,
                    budget_s=ep.budget_s,
                    tote_side=Side.left,
                    camera_side=camera,
                    state=EpisodeState.closed,
                    clock_start_s=clock0,
                    clock_end_s=clock0 + duration,
                    started_at=start,
                    ended_at=start + timedelta(seconds=duration),
                    outcome=ep.outcome,
                    outcome_reason="",
                    placed=ep.placed,
                    lost=ep.lost,
                    dropped=ep.dropped,
                    operator_notes=f"run {run_code} went as expected",
                    logged_at=start + timedelta(seconds=duration + 30),
                    label_status=LabelStatus.reviewed if reviewed else LabelStatus.auto,
                    envelope_interventions=envelope_count(sequence, reference=m.reference),
                )
                session.add(row)
                session.flush()
                _labels(session, row, ep.placements_s, reviewed=reviewed, rng=rng)
                if not m.reference:
                    late = a.block_index % 2 == 0
                    session.add(policy_calls_event(row.id, sequence, late=late))
                seeded.episode_uids.append(uid)
                seeded.episode_policy[uid] = m.name
    session.flush()
    if compute:
        seeded.outcomes = recompute(session, campaign_id=campaign.id, streams=streams)
    return seeded


def policy_calls_event(episode_id: int, sequence: int, *, late: bool) -> EpisodeEvent:
    """A seeded episode's per-call table as the station writes it, without
    drawing from the shared generator: four calls of 8 rows at 15 Hz, round
    trips 20–70 ms, the server reporting its time on every other call, and,
    when ``late``, the third chunk two steps late (8 stale actions). The
    reference's episodes have none (its page shows that nothing was recorded)."""
    dt = 1 / 15
    delay = 2 * dt if late else 0.0
    intended = [round(8 * dt * i, 6) for i in range(4)]
    return EpisodeEvent(
        episode_id=episode_id,
        t_s=None,
        kind="policy_calls",
        message="4 policy calls",
        details={
            "control_hz": 15.0,
            "budget_ms": None,
            "tolerance": None,
            "over_budget": 0,
            "calls_not_listed": 0,
            "columns": {
                "t_ask_s": intended,
                "round_trip_ms": [20.0 + (sequence % 7) + 15.0 * i for i in range(4)],
                "server_ms": [12.0 if i % 2 == 0 else None for i in range(4)],
                "t_intended_s": intended,
                "t_start_s": [t + (delay if i == 2 else 0.0) for i, t in enumerate(intended)],
                "actions": [8, 8, 8, 8],
                "skipped": [0, 0, 0, 0],
                "over_budget": [False] * 4,
            },
        },
    )


def envelope_count(sequence: int, *, reference: bool) -> int | None:
    """The seeded episodes' envelope interventions, without drawing from the
    shared generator (which would change every episode after): 0–4, but every
    fifth episode uncounted (a station that did not count them) and the
    reference's never, so pages show both a partly counted rate and an unknown
    one."""
    if reference or sequence % 5 == 0:
        return None
    return (sequence * 7) % 5


def _labels(
    session: ProctorSession,
    episode: Episode,
    placements: tuple[float, ...],
    *,
    reviewed: bool,
    rng: np.random.Generator,
) -> None:
    """Detector candidates and placements (accepted), and for reviewed
    episodes the reviewer's confirmed times and the review log."""
    session.add(
        EpisodeEvent(episode_id=episode.id, t_s=0.0, kind="started", message="episode started")
    )
    for t in placements:
        cand = AnnotationCandidate(
            episode_id=episode.id,
            t_s=t,
            kind="release",
            zone="target",
            features={"drop_height_m": 0.05},
            verdict=CandidateVerdict.success,
            rule="release-over-target",
            score=0.9,
            detector_version="test",
        )
        session.add(cand)
        session.flush()
        det = PlacementEvent(
            episode_id=episode.id,
            t_s=t,
            source=PlacementSource.detector,
            # a reviewed episode needed review: its detector rows stayed proposed
            status=PlacementStatus.proposed if reviewed else PlacementStatus.accepted,
            candidate_id=cand.id,
        )
        session.add(det)
        session.flush()
        if reviewed:
            confirmed = PlacementEvent(
                episode_id=episode.id,
                t_s=t,
                source=PlacementSource.reviewer,
                status=PlacementStatus.confirmed,
                candidate_id=cand.id,
            )
            session.add(confirmed)
            session.flush()
            session.add(
                ReviewAction(
                    episode_id=episode.id,
                    reviewer_label="test reviewer",
                    action=ReviewActionKind.confirm,
                    placement_event_id=confirmed.id,
                    before={"t_s": t},
                    after={"t_s": t},
                    note="",
                )
            )
    # a regrasp inside the source bin: a neutral candidate
    if episode.duration_s and episode.duration_s > 2:
        session.add(
            AnnotationCandidate(
                episode_id=episode.id,
                t_s=round(float(rng.uniform(0.5, 1.5)), 3),
                kind="release",
                zone="source",
                features={},
                verdict=CandidateVerdict.neutral,
                rule="release-over-source",
                score=0.2,
                detector_version="test",
            )
        )
    session.add(
        EpisodeEvent(
            episode_id=episode.id,
            t_s=episode.duration_s,
            kind="log",
            message=f"operator logged {episode.placed} placed, {episode.dropped} dropped",
        )
    )
