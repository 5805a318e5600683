"""The store layer on both databases: episodes per label stream, and the
leaderboard snapshot."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from proctor.analysis.report import SCHEMA
from proctor.analysis.results import AnalysisProtocol
from proctor.analysis.store import build_snapshot, load_episodes, recompute, stale_campaigns
from proctor.core.db.models import AnalysisSnapshot, PlacementEvent, Station
from proctor.core.domain import (
    AssignmentStatus,
    EpisodeState,
    LabelStatus,
    LabelStream,
    Outcome,
    PlacementSource,
    PlacementStatus,
    PolicyKind,
    Side,
)
from proctor.core.errors import UsageError
from tests import factories as f


class World:
    """A small campaign: a reference and a policy on two objects."""

    def __init__(self, session) -> None:
        self.s = session
        self.campaign = f.campaign(session, tau_s=60.0, items_per_episode=3)
        self.human = f.policy(session, "human-ref", kind=PolicyKind.reference)
        self.bot = f.policy(session, "bot-1")
        self.cup = f.object_type(session, "cup", tags=["rigid", "small"])
        self.towel = f.object_type(session, "towel", tags=["deformable"])
        self.seq = 0

    def episode(
        self,
        policy,
        obj,
        *,
        placed: list[float],
        status: LabelStatus = LabelStatus.reviewed,
        outcome: Outcome = Outcome.ran_out_of_time,
        detector: list[float] | None = None,
        lost: int = 0,
        dropped: int = 0,
        state: EpisodeState = EpisodeState.closed,
        items: int = 3,
        duration: float = 50.0,
    ):
        a = f.assignment(self.s, self.campaign, policy, obj, self.seq, status=AssignmentStatus.done)
        self.seq += 1
        e = f.episode(
            self.s,
            obj,
            items=items,
            assignment_id=a.id,
            campaign_id=self.campaign.id,
            state=state,
            clock_start_s=1000.0,
            clock_end_s=1000.0 + duration,
            outcome=outcome,
            placed=len(placed),
            lost=lost,
            dropped=dropped,
            label_status=status,
        )
        e.camera_side = Side.right
        for t in placed:
            self.s.add(PlacementEvent(episode_id=e.id, t_s=t, source=PlacementSource.reviewer,
                                      status=PlacementStatus.confirmed))  # fmt: skip
        for t in placed if detector is None else detector:
            st = (
                PlacementStatus.accepted if status == LabelStatus.auto else PlacementStatus.proposed
            )
            self.s.add(PlacementEvent(episode_id=e.id, t_s=t, source=PlacementSource.detector,
                                      status=st))  # fmt: skip
        # a superseded reviewer row must never be read
        self.s.add(PlacementEvent(episode_id=e.id, t_s=0.5, source=PlacementSource.reviewer,
                                  status=PlacementStatus.superseded))  # fmt: skip
        self.s.flush()
        return e


@pytest.fixture
def world(db_session) -> World:
    w = World(db_session)
    for obj in (w.cup, w.towel):
        for k in range(3):
            w.episode(w.human, obj, placed=[2.0 + k, 4.0 + k, 6.0 + k], outcome=Outcome.success,
                      status=LabelStatus.auto)  # fmt: skip
            w.last_bot = w.episode(w.bot, obj, placed=[10.0 + k, 30.0], status=LabelStatus.reviewed)
    return w


def test_auto_and_reviewed_stream(world: World) -> None:
    w = world
    pending = w.episode(w.bot, w.cup, placed=[5.0], status=LabelStatus.pending)
    flagged = w.episode(w.bot, w.cup, placed=[5.0], status=LabelStatus.flagged)
    running = w.episode(w.bot, w.cup, placed=[], state=EpisodeState.running)
    system = w.episode(
        w.bot, w.towel, placed=[], outcome=Outcome.system, status=LabelStatus.pending
    )
    table = load_episodes(w.s, campaign_id=w.campaign.id, stream=LabelStream.auto_and_reviewed)
    assert table.reference == "human-ref"
    scored = {e.episode_id: e for e in table.episodes}
    assert len(scored) == 13  # 12 labelled + the system episode, passed through
    assert scored[system.uid].outcome == "system"
    reasons = {x.episode_id: x.reason for x in table.excluded}
    assert set(reasons) == {pending.uid, flagged.uid, running.uid}
    assert "pending" in reasons[pending.uid] and "flagged" in reasons[flagged.uid]
    assert "not closed" in reasons[running.uid]
    bot = next(e for e in table.episodes if e.policy == "bot-1" and e.outcome != "system")
    # times from the reviewer's confirmed rows (not the superseded one), counts
    # and duration (clock_end − clock_start) from the operator's log
    assert bot.placements_s[1] == 30.0 and bot.placements_s[0] >= 10.0
    assert bot.duration_s == 50.0 and bot.items == 3 and bot.outcome == "ran_out_of_time"
    assert bot.tote_placement == "left" and bot.external_camera == "right"
    cup = next(e for e in table.episodes if e.object == "cup")
    assert cup.object_tags == ("rigid", "small")
    human = next(e for e in table.episodes if e.policy == "human-ref")
    assert human.reference and human.placements_s[0] >= 2.0


def test_the_envelope_count_is_read_and_an_uncounted_episode_stays_unknown(
    world: World,
) -> None:
    w = world
    counted = w.episode(w.bot, w.cup, placed=[5.0], status=LabelStatus.reviewed)
    counted.envelope_interventions = 6
    system = w.episode(w.bot, w.cup, placed=[], outcome=Outcome.system)
    system.envelope_interventions = 2
    w.s.flush()
    table = load_episodes(w.s, campaign_id=w.campaign.id, stream=LabelStream.auto_and_reviewed)
    by = {e.episode_id: e.envelope_interventions for e in table.episodes}
    assert by[counted.uid] == 6 and by[system.uid] == 2
    # the world's other episodes were recorded without a count: None, not 0
    assert w.last_bot.envelope_interventions is None and by[w.last_bot.uid] is None


def test_reviewed_only_and_count_mismatch(world: World) -> None:
    w = world
    bad = w.episode(w.bot, w.cup, placed=[5.0, 9.0], status=LabelStatus.reviewed)
    # the reviewer confirmed two placements but the operator now logs three
    bad.placed = 3
    w.s.flush()
    table = load_episodes(w.s, campaign_id=w.campaign.id, stream=LabelStream.reviewed_only)
    assert {e.policy for e in table.episodes} == {"bot-1"}  # the human labels were auto
    reasons = {x.episode_id: x.reason for x in table.excluded}
    assert "2 reviewer placements (confirmed) but the operator logged 3 placed" in reasons[bad.uid]
    assert sum("label status auto" in r for r in reasons.values()) == 6


def test_detector_only_reconciles_counts(world: World) -> None:
    w = world
    over = w.episode(w.bot, w.cup, placed=[5.0], detector=[5.0, 7.0, 8.0, 9.0], lost=1,
                     status=LabelStatus.needs_review)  # fmt: skip
    under = w.episode(w.bot, w.towel, placed=[5.0, 7.0, 8.0], detector=[5.0],
                      outcome=Outcome.success, status=LabelStatus.reviewed)  # fmt: skip
    table = load_episodes(w.s, campaign_id=w.campaign.id, stream=LabelStream.detector_only)
    eps = {e.episode_id: e for e in table.episodes}
    # over-count: room for items − lost − dropped = 2 placements; latest extras dropped
    assert eps[over.uid].placements_s == (5.0, 7.0)
    # under-count on a success: for the detector the episode stopped with items left
    assert eps[under.uid].placements_s == (5.0,)
    assert eps[under.uid].outcome == "operator_stop"
    assert any("detector counts differ" in n for n in table.notes)
    assert len(eps) == 14


def test_build_snapshot(world: World) -> None:
    w = world
    protocol = AnalysisProtocol(tau=60.0, bootstrap=100, seed=2)
    snap = build_snapshot(
        w.s, campaign_id=w.campaign.id, stream=LabelStream.auto_and_reviewed, protocol=protocol
    )
    assert isinstance(snap, AnalysisSnapshot) and snap.id is not None
    assert snap.label_stream == LabelStream.auto_and_reviewed
    assert snap.result["schema"] == SCHEMA
    assert snap.protocol["tau"] == 60.0 and snap.protocol["label_stream"] == "auto_and_reviewed"
    assert snap.protocol["campaign_id"] == w.campaign.id
    assert len(snap.data_version) == 64 and snap.code_version.startswith("proctor-")
    names = [p["policy"] for p in snap.result["policies"]]
    assert names == ["human-ref", "bot-1"]
    json.dumps(snap.result, allow_nan=False)
    # read back from the database: the JSON survived the column type
    w.s.expire_all()
    again = w.s.get(AnalysisSnapshot, snap.id)
    assert again.result["policies"][1]["hrt"] == snap.result["policies"][1]["hrt"]
    # the same data hash twice; a moved placement changes it
    second = build_snapshot(
        w.s, campaign_id=w.campaign.id, stream=LabelStream.auto_and_reviewed, protocol=protocol
    )
    assert second.data_version == snap.data_version
    ev = (
        w.s.query(PlacementEvent)
        .filter_by(episode_id=w.last_bot.id, source=PlacementSource.reviewer,
                   status=PlacementStatus.confirmed)
        .first()
    )  # fmt: skip
    ev.t_s += 0.25
    w.s.flush()
    third = build_snapshot(
        w.s, campaign_id=w.campaign.id, stream=LabelStream.auto_and_reviewed, protocol=protocol
    )
    assert third.data_version != snap.data_version


def test_campaign_tau_is_the_default_protocol(world: World) -> None:
    snap = build_snapshot(
        world.s, campaign_id=world.campaign.id, stream=LabelStream.auto_and_reviewed
    )
    assert snap.protocol["tau"] == 60.0 and snap.protocol["bootstrap"] == 2000
    assert snap.campaign_id == world.campaign.id


def test_campaign_protocol_extra(world: World) -> None:
    world.campaign.protocol_extra = {
        "analysis": {"bootstrap": 150, "seed": 9, "success_at": [5, 20]}
    }
    world.s.flush()
    snap = build_snapshot(world.s, campaign_id=world.campaign.id, stream=LabelStream.reviewed_only)
    assert snap.protocol["bootstrap"] == 150 and snap.protocol["seed"] == 9
    assert snap.protocol["success_at"] == [5.0, 20.0]
    # the reference's labels were all auto: in this stream it has no episodes,
    # so the leaderboard has no HRT and says why
    assert snap.result["protocol"]["reference"] is None
    assert any("human-ref has no scored episodes" in n for n in snap.result["notes"])
    world.campaign.protocol_extra = {"analysis": {"bootstrap": 0}}
    with pytest.raises(UsageError, match=r"protocol_extra\.analysis: bootstrap"):
        build_snapshot(world.s, campaign_id=world.campaign.id, stream=LabelStream.reviewed_only)


def test_episodes_not_yet_readable_are_excluded_and_two_references_are_noted(
    world: World,
) -> None:
    w = world
    unlogged = w.episode(w.bot, w.cup, placed=[5.0])
    unlogged.outcome = None
    unclocked = w.episode(w.bot, w.towel, placed=[5.0])
    unclocked.clock_end_s = None
    second = f.policy(w.s, "human-2", kind=PolicyKind.reference)
    w.episode(second, w.cup, placed=[2.0, 4.0, 6.0], outcome=Outcome.success)
    w.s.flush()
    table = load_episodes(w.s, campaign_id=w.campaign.id, stream=LabelStream.auto_and_reviewed)
    reasons = {x.episode_id: x.reason for x in table.excluded}
    assert reasons == {
        unlogged.uid: "no operator log (outcome and counts)",
        unclocked.uid: "no clock times",
    }
    assert table.reference is None
    assert any("more than one reference policy in scope" in n for n in table.notes)


def test_recompute_and_staleness_live_in_the_analysis_layer(world: World) -> None:
    """Turning stored episodes into snapshot rows is proctor.analysis.store's job: it
    skips an unchanged stream, and a moved placement makes the board stale."""
    w = world
    protocol = AnalysisProtocol(tau=60.0, bootstrap=50, seed=2)
    streams = (LabelStream.auto_and_reviewed,)
    first = recompute(w.s, campaign_id=w.campaign.id, streams=streams, protocol=protocol)
    assert [(o.stream, o.status) for o in first] == [(LabelStream.auto_and_reviewed, "created")]
    again = recompute(w.s, campaign_id=w.campaign.id, streams=streams, protocol=protocol)
    assert [o.status for o in again] == ["unchanged"]
    assert again[0].snapshot_id == first[0].snapshot_id
    assert stale_campaigns(w.s) == []
    ev = (
        w.s.query(PlacementEvent)
        .filter_by(episode_id=w.last_bot.id, source=PlacementSource.reviewer,
                   status=PlacementStatus.confirmed)
        .first()
    )  # fmt: skip
    ev.t_s += 0.25
    w.s.flush()
    assert stale_campaigns(w.s) == [w.campaign.id]
    third = recompute(w.s, campaign_id=w.campaign.id, streams=streams, protocol=protocol)
    assert third[0].status == "created" and third[0].snapshot_id != first[0].snapshot_id
    with pytest.raises(UsageError, match="campaign_id"):
        recompute(w.s, campaign_id=w.campaign.id + 1000)


# what turns stored episodes into a snapshot; the web schedules and reads only
_COMPUTING = {"build_snapshot", "load_episodes", "snapshot_result", "analyze", "data_version"}


def test_the_web_snapshot_package_does_not_compute() -> None:
    root = Path(__file__).resolve().parents[2] / "proctor" / "web" / "snapshots"
    found = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("analysis"):
                found += [(path.name, a.name) for a in node.names if a.name in _COMPUTING]
    assert found == []


def test_each_episode_carries_its_stations_name_and_site(world: World) -> None:
    w = world
    at_a = Station(name="cell-a", site="lab-a", cell_profile="droid-fr3")
    bare = Station(name="cell-b")  # declared no site
    w.s.add_all([at_a, bare])
    w.s.flush()
    one = w.episode(w.bot, w.cup, placed=[5.0])
    two = w.episode(w.bot, w.cup, placed=[5.0])
    one.station_id, two.station_id = at_a.id, bare.id
    w.s.flush()
    table = load_episodes(w.s, campaign_id=w.campaign.id, stream=LabelStream.auto_and_reviewed)
    by = {e.episode_id: (e.station, e.site) for e in table.episodes}
    assert by[one.uid] == ("cell-a", "lab-a")
    assert by[two.uid] == ("cell-b", None)
    assert by[w.last_bot.uid] == (None, None)  # recorded by no station


def test_a_policy_that_voids_its_episodes_shows_its_own_faults_on_the_board(
    world: World,
) -> None:
    """Issue 29 item 3 / hardware review #4: a policy that drives a joint into
    its limit every episode. Its first system endings are free (requeued,
    excluded from the score) and the rest charged as safety stops; either way
    the share of its episodes that ended in a fault of its own doing is on its
    board row, over every episode it ran — here 3 free + 1 charged of 10."""
    from proctor.core.db.models import EpisodeEvent

    w = world
    voids = []
    for _ in range(3):
        ep = w.episode(w.bot, w.cup, placed=[], outcome=Outcome.system)
        w.s.add(EpisodeEvent(episode_id=ep.id, kind="system_fault", message="joint limit",
                             details={"fault": "policy_motion"}))  # fmt: skip
        voids.append(ep)
    charged = w.episode(w.bot, w.cup, placed=[], outcome=Outcome.safety)
    charge = {"fault": "policy_motion", "free_protocol_faults": 3}
    w.s.add(EpisodeEvent(episode_id=charged.id, kind="protocol_fault_charged", message="charged",
                         details=charge))  # fmt: skip
    # a system ending that is not the policy's (a camera stalled): not counted
    stalled = w.episode(w.bot, w.towel, placed=[], outcome=Outcome.system)
    w.s.add(EpisodeEvent(episode_id=stalled.id, kind="system_fault", message="camera",
                         details={}))  # fmt: skip
    w.s.flush()
    table = load_episodes(w.s, campaign_id=w.campaign.id, stream=LabelStream.auto_and_reviewed)
    by = {e.episode_id: e.policy_fault for e in table.episodes}
    assert [by[e.uid] for e in voids] == ["policy_motion"] * 3
    assert by[charged.uid] == "policy_motion" and by[stalled.uid] is None
    result = build_snapshot(
        w.s,
        campaign_id=w.campaign.id,
        stream=LabelStream.auto_and_reviewed,
        protocol=AnalysisProtocol(tau=60.0, bootstrap=100, seed=2),
    ).result
    bot = next(p for p in result["policies"] if p["policy"] == "bot-1")
    # 6 world episodes + 3 free + 1 charged + 1 stalled = 11 run, 4 its own faults
    assert bot["policy_faults"]["episodes"] == 11 and bot["policy_faults"]["faults"] == 4
    assert bot["policy_faults"]["by_class"] == [{"class": "policy_motion", "count": 4}]
    assert bot["policy_faults"]["share"]["estimate"] == pytest.approx(4 / 11)
    human = next(p for p in result["policies"] if p["policy"] == "human-ref")
    assert human["policy_faults"]["faults"] == 0
