"""Simulated episodes with ground truth: what the detector is calibrated and
scored on.

Every episode goes through the station's real episode runner on the
simulated cell (virtual clock), with a scripted demo policy served over the
real policy wire on loopback, and is archived like any other recording
(telemetry Parquet, manifest, the cell's ground truth) into the given
database and artifact store. The operator's log is filled from the cell's
ground truth by the station's labelled demo helper (``proctor.station.demo_log``).

Telemetry only: the detector never looks at video, so by default the cell is
built *without cameras* and the demo policy is served with metadata that
asks for no images (``TelemetryOnlyDemoPolicy``). The physics, the control
loop and the recorder are the same as in a recorded demo, and the
trajectory is identical (cameras only observe the world), at a fraction of
the cost. Pass ``cameras=True`` for episodes with video (the review UI's
tests need some).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import sqlalchemy as sa
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db import session_scope
from proctor.core.db.engine import ProctorSession
from proctor.core.db.models import Assignment, Campaign, Policy
from proctor.core.db.types import utcnow
from proctor.core.domain import AssignmentStatus, Outcome, PolicyKind, Side
from proctor.core.work import Work
from proctor.policywire.serving.demo import DEMO_PROFILES, DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.station import episodes as station_episodes
from proctor.station.config import StationConfig
from proctor.station.demo_log import close_with_ground_truth
from proctor.station.episode_runner import EpisodeRunner
from proctor.station.profiles import build_cell
from proctor.station.sim.objects import OBJECTS

PROFILES: tuple[str, ...] = tuple(DEMO_PROFILES)
OBJECT_NAMES: tuple[str, ...] = tuple(OBJECTS)


class TelemetryOnlyDemoPolicy(DemoPolicy):
    """A demo policy that declares it needs no camera images.

    The scripted controllers steer by the simulated cell's privileged
    observation and never look at images, so asking for none changes nothing
    they do; it lets the cell run without rendering or encoding video."""

    def metadata(self) -> dict[str, Any]:
        return {
            "image_resolution": None,
            "needs_wrist_camera": False,
            "n_external_cameras": 0,
            "needs_stereo_camera": False,
            "needs_session_id": True,
            "action_space": "cartesian_position",
        }


@dataclass(frozen=True)
class EpisodeSpec:
    """One simulated rollout to run."""

    profile: str
    object_name: str
    items: int
    tote_side: Side
    camera_side: Side
    sim_seed: int
    per_item_cap_s: float = 30.0

    def __post_init__(self) -> None:
        if self.profile not in DEMO_PROFILES:
            raise ValueError(f"profile: unknown demo profile {self.profile!r}")
        if self.object_name not in OBJECTS:
            raise ValueError(f"object: the simulated cell has no {self.object_name!r}")


def corpus_plan(
    episodes: int,
    *,
    seed: int = 0,
    items: Sequence[int] = (1, 2, 3),
    profiles: Sequence[str] = PROFILES,
    objects: Sequence[str] = OBJECT_NAMES,
    per_item_cap_s: float = 30.0,
) -> list[EpisodeSpec]:
    """``episodes`` rollouts spread evenly over every (profile, object) cell
    (each cell once per round of ``len(profiles) × len(objects)``, in a
    shuffled order), with item counts, tote and camera sides and sim seeds
    drawn from ``seed``."""
    if episodes < 1:
        raise ValueError(f"episodes: must be at least 1, got {episodes}")
    rng = np.random.default_rng(seed)
    cells = [(p, o) for p in profiles for o in objects]
    order: list[int] = []
    while len(order) < episodes:
        # every cell once per round, in a fresh order each round
        order.extend(int(k) for k in rng.permutation(len(cells)))
    out = []
    for k in order[:episodes]:
        profile, obj = cells[k]
        out.append(
            EpisodeSpec(
                profile=profile,
                object_name=obj,
                items=int(rng.choice(list(items))),
                tote_side=Side.left if rng.random() < 0.5 else Side.right,
                camera_side=Side.left if rng.random() < 0.5 else Side.right,
                sim_seed=int(rng.integers(0, 2**31 - 1)),
                per_item_cap_s=per_item_cap_s,
            )
        )
    return out


@dataclass
class SimulatedEpisode:
    spec: EpisodeSpec
    uid: str
    episode_id: int
    proposed: Outcome
    ground_truth: dict[str, Any] = field(repr=False)

    @property
    def true_placements_s(self) -> list[float]:
        return [float(t) for t in self.ground_truth["placements_s"]]


@contextmanager
def _demo_servers(profiles: set[str], blind: bool) -> Iterator[dict[str, str]]:
    cls = TelemetryOnlyDemoPolicy if blind else DemoPolicy
    with ExitStack() as stack:
        urls = {}
        for name in sorted(profiles):
            server = stack.enter_context(PolicyServer(cls(name)))
            urls[name] = server.url
        yield urls


# a simulated episode's slot: (campaign id, assignment id, run code)
Link = tuple[int, int, str]


def _link_campaign(session: ProctorSession, plan: Sequence[EpisodeSpec]) -> dict[int, Link]:
    """A campaign with a policy per demo profile and an assignment per spec,
    so that the analysis can read the simulated episodes like a campaign's."""
    campaign = Campaign(
        name=f"simulated-{secrets.token_hex(4)}",
        description="simulated episodes (proctor.demo.simulated_episodes)",
        items_per_episode=max(s.items for s in plan),
        per_item_cap_s=plan[0].per_item_cap_s,
        tau_s=60.0,
        episodes_per_cell=max(
            1, len(plan) // max(1, len({(s.profile, s.object_name) for s in plan}))
        ),
    )
    session.add(campaign)
    session.flush()
    policies: dict[str, Policy] = {}
    for name in sorted({s.profile for s in plan}):
        pname = f"demo-{name}"
        policy = session.scalar(sa.select(Policy).where(Policy.name == pname))
        if policy is None:
            kind = PolicyKind.reference if DEMO_PROFILES[name].reference else PolicyKind.policy
            policy = Policy(name=pname, kind=kind, description=DEMO_PROFILES[name].description)
            session.add(policy)
            session.flush()
        policies[name] = policy
    links: dict[int, Link] = {}
    for i, spec in enumerate(plan):
        spec_obj = OBJECTS[spec.object_name]
        obj = station_episodes.ensure_object_type(
            session,
            name=spec.object_name,
            display_name=spec_obj.display_name,
            tags=list(spec_obj.tags),
            prompt=spec_obj.prompt,
        )
        a = Assignment(
            campaign_id=campaign.id,
            run_code=f"S-{secrets.token_hex(5).upper()}",
            endpoint_handle=secrets.token_urlsafe(16),
            policy_id=policies[spec.profile].id,
            object_type_id=obj.id,
            tote_side=spec.tote_side,
            camera_side=spec.camera_side,
            block_index=i,
            slot=0,
            sequence=i,
        )
        session.add(a)
        session.flush()
        links[i] = (campaign.id, a.id, a.run_code)
    return links


def simulate(
    plan: Sequence[EpisodeSpec],
    *,
    sessions: sessionmaker[ProctorSession],
    store: ArtifactStore,
    spool_root: Path,
    cameras: bool = False,
    link_campaign: bool = False,
    links: Mapping[int, Link] | None = None,
    station_name: str = "sim-annotator",
    progress: Callable[[SimulatedEpisode], None] | None = None,
) -> list[SimulatedEpisode]:
    """Run ``plan`` on one simulated cell, closing each episode with the
    ground-truth operator log. Returns the episodes in plan order.
    ``link_campaign``: make a campaign with a slot per episode first;
    ``links``: slots made already (plan index → campaign, slot, run code)."""
    if not plan:
        return []
    # one telemetry segment a minute: a simulation needs no crash-safe spool,
    # and fewer segment files cost less (the recorded samples are the same)
    config = StationConfig(name=station_name, spool_dir=spool_root, segment_s=60.0)
    if links is None:
        links = {}
        if link_campaign:
            with session_scope(sessions) as s:
                links = _link_campaign(s, plan)

    def new_runner() -> EpisodeRunner:
        cell = build_cell("sim", config)
        if not cameras:
            cell.cameras = {}
        runner = EpisodeRunner(
            cell, config=config, sessions=sessions, store=store, spool_root=spool_root
        )
        runner.open()
        return runner

    out: list[SimulatedEpisode] = []
    runner = new_runner()
    try:
        with _demo_servers({s.profile for s in plan}, blind=not cameras) as urls:
            for i, spec in enumerate(plan):
                if runner.arm_error is not None:
                    # the operator's recovery after a safety stop; the homing below
                    # lifts the tool clear of the totes first, so it succeeds from anywhere
                    runner.recover()
                campaign_id, assignment_id, run_code = links.get(i, (None, None, None))
                work = Work(
                    run_code=run_code or f"S-{i:06d}",
                    object_name=spec.object_name,
                    items=spec.items,
                    per_item_cap_s=spec.per_item_cap_s,
                    tote_side=spec.tote_side,
                    camera_side=spec.camera_side,
                    policy_url=urls[spec.profile],
                    sim_seed=spec.sim_seed,
                    assignment_id=assignment_id,
                    campaign_id=campaign_id,
                )
                # the stand-in operator homes explicitly (nothing homes on its own)
                runner.home(cell_clear=True, open_gripper=True)
                runner.arm(work)
                runner.start(background=False)
                last = runner.last
                assert last is not None
                scene = runner.cell.scene
                truth = scene.ground_truth() if scene is not None else {}
                ids: list[int] = []

                def write_log(
                    s: ProctorSession,
                    uid: str,
                    ids: list[int] = ids,
                    slot: int | None = assignment_id,
                ) -> Any:
                    ep = close_with_ground_truth(s, store=store, uid=uid)
                    ids.append(ep.id)
                    if slot is not None:
                        # the slot is settled by the episode, as a station's completion
                        # settles it: the analysis counts only a done slot's episode
                        a = s.get(Assignment, slot)
                        assert a is not None
                        a.status, a.completed_at = AssignmentStatus.done, utcnow()
                    return ep

                runner.close_with(write_log)
                done = SimulatedEpisode(spec, last.uid, ids[0], last.proposed, truth)
                out.append(done)
                if progress is not None:
                    progress(done)
    finally:
        runner.close()
    return out


def simulate_corpus(
    folder: Path, episodes: int, seed: int, *, workers: int | None = None, show: bool = True
) -> None:
    """``episodes`` of ``corpus_plan`` simulated into ``folder`` (``corpus.db``
    and ``artifacts/``): what ``proctor calibrate`` sweeps and the annotator's
    acceptance tests measure.

    The episodes are independent (each its own cell, seed and policy
    connection), so ``workers`` processes (default: one per CPU) each run an
    interleaved share of the plan on a cell of their own, writing into the one
    database (SQLite in WAL mode takes their short transactions in turn). The
    slots are made first, in plan order, so an episode's slot says where it
    stands in the plan whichever process ran it. With a progress bar when
    ``show``."""
    from rich.progress import Progress

    from proctor.core.db import migrate
    from proctor.core.db.engine import make_engine, make_session_factory

    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'corpus.db'}"
    migrate.upgrade(url)
    plan = corpus_plan(episodes, seed=seed)
    engine = make_engine(url)
    try:
        with session_scope(make_session_factory(engine)) as s:
            links = _link_campaign(s, plan)
    finally:
        engine.dispose()
    n = max(1, min(workers or os.cpu_count() or 1, len(plan)))
    shares = [
        ([plan[i] for i in range(k, len(plan), n)], [links[i] for i in range(k, len(plan), n)])
        for k in range(n)
    ]
    pool = _Workers(url, folder, shares)
    try:
        with Progress(disable=not show) as progress:
            task = progress.add_task("simulating episodes", total=len(plan))
            finished = pool.wait(len(plan), lambda: progress.update(task, advance=1))
    finally:
        pool.stop()
    failed = pool.failed()
    if failed or finished < len(plan):
        raise RuntimeError(
            f"simulating the corpus failed: {', '.join(failed) or 'a worker stopped early'}; "
            f"{finished} of {len(plan)} episodes done (each worker's traceback is above)"
        )


class _Workers:
    """``simulate_corpus``'s processes: started with their shares, counted
    as their episodes finish, stopped (all of them) once one fails."""

    def __init__(
        self, url: str, folder: Path, shares: list[tuple[list[EpisodeSpec], list[Link]]]
    ) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a process with threads
        self.done = ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_simulate_part,
                args=(url, folder, k, share_plan, share_links, self.done),
                name=f"simulate-{k}",
            )
            for k, (share_plan, share_links) in enumerate(shares)
        ]
        self.complete = False
        for proc in self.procs:
            proc.start()

    def wait(self, total: int, tick: Callable[[], None]) -> int:
        """Episodes finished, up to ``total``: fewer when a worker failed."""
        finished = 0
        while finished < total:
            try:
                self.done.get(timeout=1.0)
            except queue.Empty:
                if self.failed():
                    return finished  # its episodes will not come
                if all(p.exitcode == 0 for p in self.procs):
                    finished += self._drain(tick)
                    self.complete = finished >= total
                    return finished
                continue
            finished += 1
            tick()
        self.complete = True
        return finished

    def _drain(self, tick: Callable[[], None]) -> int:
        """What the queue holds once every worker has ended: all there is."""
        n = 0
        while True:
            try:
                self.done.get_nowait()
            except queue.Empty:
                return n
            n += 1
            tick()

    def failed(self) -> list[str]:
        return [f"{p.name} (exit {p.exitcode})" for p in self.procs if p.exitcode not in (None, 0)]

    def stop(self) -> None:
        """Join every worker; terminate those still running unless every
        episode finished (one failed, or the caller was interrupted)."""
        for proc in self.procs:
            if proc.is_alive() and not self.complete:
                proc.terminate()
            proc.join()


def _simulate_part(
    url: str, folder: Path, k: int, plan: list[EpisodeSpec], links: list[Link], done: Any
) -> None:
    """One worker of ``simulate_corpus``: its share of the plan on a cell of its own."""
    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db.engine import make_engine, make_session_factory

    engine = make_engine(url)
    try:
        simulate(
            plan,
            sessions=make_session_factory(engine),
            store=LocalArtifactStore(folder / "artifacts"),
            spool_root=folder / f"spool-{k}",
            links=dict(enumerate(links)),
            progress=lambda _e: done.put(1),
        )
    finally:
        engine.dispose()
    shutil.rmtree(folder / f"spool-{k}", ignore_errors=True)
