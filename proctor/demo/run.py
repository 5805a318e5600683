"""The demo, step by step (see ``proctor.demo`` for what is real and what
stands in for a person)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from proctor.core import station_credentials
from proctor.core.artifacts import ArtifactStore, open_store
from proctor.core.audit import Actor
from proctor.core.db import migrate
from proctor.core.db.engine import ProctorSession, make_engine, make_session_factory, session_scope
from proctor.core.db.models import Assignment, Episode
from proctor.core.domain import AssignmentStatus, EndpointDialect, LabelStream, Outcome
from proctor.core.errors import NotFound, ProctorError
from proctor.core.settings import Settings
from proctor.demo import pipeline, world
from proctor.demo.checkpoint import CHECKPOINT_ARM
from proctor.demo.report import print_leaderboard, verdict_counts
from proctor.demo.servers import PolicyServers, WebServer, free_port, start_policy_servers
from proctor.demo.stations import StationJob, StationPool
from proctor.demo.uploaded import RunnerHost, start_runner_host, upload_checkpoint_arm


@dataclass(frozen=True)
class DemoOptions:
    episodes_per_cell: int = 6
    seed: int = 1
    stations: int = 2
    items: int = 8
    per_item_cap_s: float = 30.0
    # the RMST integration cap; default: the episode's time budget (items × cap),
    # as PhAIL does, so a ghost costs what a whole episode could have cost
    tau_s: float | None = None
    serve: bool = True
    host: str = "127.0.0.1"
    port: int = 8000


@dataclass
class DemoResult:
    campaign_id: int
    campaign_name: str
    episodes: int
    labels: dict[str, int]
    verdicts: dict[str, int]
    snapshot_ids: dict[str, int | None]
    result: dict[str, Any] | None
    admin: str
    admin_password: str | None
    origin: str
    timings_s: dict[str, float] = field(default_factory=dict)


class _Context:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.engine: Engine = make_engine(settings.db_url)
        self.sessions: sessionmaker[ProctorSession] = make_session_factory(self.engine)
        self.store: ArtifactStore = open_store(settings.artifacts_location)


def _with_loopback_policies(settings: Settings) -> Settings:
    """The demo serves its policies on loopback, so its gateway must connect
    there: private endpoints are allowed for it, explicitly (they are not by
    default outside tests; see proctor/core/netguard.py)."""
    submissions = settings.submissions
    if submissions.allow_private_endpoints is False:
        raise ProctorError(
            "submissions.allow_private_endpoints is false, but the demo serves its policies "
            "on loopback; leave it unset (or true) for the demo"
        )
    return settings.model_copy(
        update={"submissions": submissions.model_copy(update={"allow_private_endpoints": True})}
    )


def run_demo(settings: Settings, options: DemoOptions, console: Console) -> DemoResult:
    if options.episodes_per_cell < 1:
        raise ProctorError("--episodes must be at least 1")
    if options.stations < 1:
        raise ProctorError("--stations must be at least 1")
    settings = _with_loopback_policies(settings)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    console.print(f"[bold]proctor demo[/bold] · data in {settings.data_dir.resolve()}")
    # the conformance check sends one malformed request on purpose (a server must
    # answer it with an error text); the demo servers' log of it is noise here
    logging.getLogger("proctor.policywire.serving.openpi").setLevel(logging.CRITICAL)
    migrate.upgrade(settings.db_url)
    settings = with_own_secret_key(settings)
    ctx = _Context(settings)

    from proctor.web.app import create_app

    port = options.port if options.serve else free_port(options.host)
    web = WebServer(create_app(settings), host=options.host, port=port).start()
    policies: PolicyServers | None = None
    pool: StationPool | None = None
    runner: RunnerHost | None = None
    try:
        served = tuple(arm for arm in world.ARMS if arm != CHECKPOINT_ARM)
        policies = start_policy_servers(served, seed=options.seed)
        runner = start_runner_host(settings, ctx.sessions, ctx.store)
        accounts, campaign_id, campaign_name, slots = _register(
            ctx, options, policies, console, origin=web.origin
        )
        timings["setup"] = time.monotonic() - t0

        t = time.monotonic()
        tokens = _enrol_stations(ctx, [f"demo-sim-{i + 1}" for i in range(options.stations)])
        pool = StationPool(
            [
                StationJob(
                    server=web.origin,
                    # each campaign's station hosts start with empty ledgers
                    data_dir=str(settings.data_dir.resolve() / "stations" / f"c{campaign_id}"),
                    campaign_id=campaign_id,
                    station_name=name,
                    token=token,
                )
                for name, token in tokens.items()
            ]
        )
        _run_stations(ctx, pool, campaign_id=campaign_id, slots=slots, console=console)
        pool = None
        timings["episodes"] = time.monotonic() - t

        t = time.monotonic()
        _post_process(ctx, campaign_id=campaign_id, console=console)
        timings["annotate_review"] = time.monotonic() - t

        t = time.monotonic()
        with console.status("closing the campaign, verifying the allocation, releasing"):
            pipeline.close_and_release(ctx.sessions, campaign_id=campaign_id)
        with console.status("computing the leaderboard snapshots (every label stream)"):
            outcomes = pipeline.score_campaign(ctx.sessions, campaign_id=campaign_id)
        timings["scoring"] = time.monotonic() - t
        snapshot_ids = {o.stream.value: o.snapshot_id for o in outcomes}  # type: ignore[attr-defined]
        for o in outcomes:
            if o.status == "failed":  # type: ignore[attr-defined]
                console.print(f"[yellow]{o.stream.value}: not scored: {o.message}[/yellow]")  # type: ignore[attr-defined]

        result = _headline(ctx, campaign_id)
        if result is not None:
            print_leaderboard(
                console,
                result,
                title=f"Leaderboard · campaign {campaign_name} · labels: auto + reviewed",
            )
        labels = pipeline.label_summary(ctx.sessions, campaign_id=campaign_id)
        with session_scope(ctx.sessions) as s:
            episodes = s.scalar(
                sa.select(sa.func.count())
                .select_from(Episode)
                .where(Episode.campaign_id == campaign_id)
            )
        timings["total"] = time.monotonic() - t0
        demo = DemoResult(
            campaign_id=campaign_id,
            campaign_name=campaign_name,
            episodes=int(episodes or 0),
            labels=dict(labels),
            verdicts={} if result is None else dict(verdict_counts(result)),
            snapshot_ids=snapshot_ids,
            result=result,
            admin=accounts.admin,
            admin_password=accounts.admin_password,
            origin=web.origin,
            timings_s=timings,
        )
        console.print(
            f"{demo.episodes} episodes in {timings['episodes']:.0f} s; "
            f"whole demo {timings['total']:.0f} s"
        )
        if options.serve:
            _hint(console, demo)
            web.wait()
        return demo
    finally:
        if pool is not None:
            pool.stop()
        if policies is not None:
            policies.stop()
        if runner is not None:
            runner.stop()
        web.stop()
        ctx.engine.dispose()


def _enrol_stations(ctx: _Context, names: list[str]) -> dict[str, str]:
    """The demo's stations, enrolled as an admin enrols a station host: each
    proves itself to the gateway with its own token, as in production. A
    demo run again in the same data folder revokes the last run's tokens."""
    actor = Actor(label="proctor demo")
    tokens: dict[str, str] = {}
    with session_scope(ctx.sessions) as s:
        for name in names:
            with contextlib.suppress(NotFound):  # a station never enrolled here
                station_credentials.revoke(s, name=name, actor=actor)
            tokens[name] = station_credentials.enrol(s, name=name, profile="sim", actor=actor).token
    return tokens


def _register(
    ctx: _Context, options: DemoOptions, policies: PolicyServers, console: Console, *, origin: str
) -> tuple[world.Accounts, int, str, int]:
    from proctor.policywire.conformance.check import CheckOptions, check_endpoint
    from proctor.policywire.serving.demo import demo_profile
    from proctor.scheduler.protocol import parse_protocol
    from proctor.scheduler.service import Actor, create_campaign, start_campaign
    from proctor.web.auth.passwords import Passwords

    passwords = Passwords.for_settings(ctx.settings)
    with session_scope(ctx.sessions) as s:
        accounts = world.ensure_accounts(s, hash_password=passwords.hash)
        world.ensure_objects(s)
        rows = world.ensure_policies(s)
        policy_ids = {arm: row.id for arm, row in rows.items()}

    # each endpoint earns its place the way a submitter's does: the station's
    # real client runs the conformance check against it
    with Progress(
        TextColumn("conformance checks"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
    ) as progress:
        task = progress.add_task("check", total=len(policies.servers), last="")
        for arm in policies.servers:
            url = policies.url(arm)
            dialect = EndpointDialect(demo_profile(arm).dialect)
            report = check_endpoint(url, options=CheckOptions(dialect=dialect))
            with session_scope(ctx.sessions) as s:
                from proctor.core.db.models import Policy

                world.register_endpoint(
                    s,
                    policy=s.get(Policy, policy_ids[arm]),  # type: ignore[arg-type]
                    url=url,
                    dialect=dialect,
                    report=report.to_json(),
                    passed=report.passed,
                )
            if not report.passed:
                raise ProctorError(
                    f"demo policy '{arm}' failed its conformance check: {report.summary}"
                )
            progress.update(task, advance=1, last=f"{arm}: {report.summary}")

    # the last arm comes as a lab's checkpoint: uploaded, served by the runner host
    upload_checkpoint_arm(
        ctx.settings,
        ctx.sessions,
        origin=origin,
        submitter=accounts.submitter,
        seed=options.seed,
        console=console,
    )

    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    name = f"demo-s{options.seed}-{stamp}"
    protocol = parse_protocol(
        {
            "name": name,
            "description": (
                "proctor demo on the simulated cell. The allocation seed is derived from "
                f"--seed {options.seed} so the demo can be replayed; a real campaign's seed "
                "is secret until it closes."
            ),
            "items_per_episode": options.items,
            "per_item_cap_s": options.per_item_cap_s,
            "tau_s": options.tau_s or options.items * options.per_item_cap_s,
            "episodes_per_cell": options.episodes_per_cell,
            "reference": world.POLICY_NAMES[world.REFERENCE],
            "policies": [world.POLICY_NAMES[a] for a in world.ARMS if a != world.REFERENCE],
            "objects": list(world.OBJECTS),
        },
        source="demo protocol",
    )
    actor = Actor(label="proctor demo")
    seed = hashlib.sha256(f"proctor-demo/{options.seed}".encode()).hexdigest()
    with session_scope(ctx.sessions) as s:
        campaign = create_campaign(s, protocol=protocol, actor=actor)
        campaign_id = campaign.id
    with session_scope(ctx.sessions) as s:
        started = start_campaign(s, campaign=campaign_id, actor=actor, seed=seed)
    console.print(
        f"campaign [bold]{name}[/bold]: {len(world.ARMS)} arms (blinded) × "
        f"{len(world.OBJECTS)} objects × {options.episodes_per_cell} episodes = "
        f"{started.slots} runs in {started.blocks} blocks; commitment {started.commitment[:16]}…"
    )
    return accounts, campaign_id, name, started.slots


class RemainingColumn(ProgressColumn):
    """Time left at the average pace since the start: elapsed × left / done.

    Rich's own estimate is the pace over the last 30 s, a window that holds
    only a few episodes; the average since the start is steadier. It follows
    the machine: on a loaded one every simulated episode takes longer, and
    so does the estimate (README: what the demo's time depends on)."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed
        if not task.completed or elapsed is None or task.total is None:
            return Text("estimating time left", style="progress.remaining")
        left = elapsed * (task.total - task.completed) / task.completed
        return Text(f"≈ {_duration(left)} left", style="progress.remaining")


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(0, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _run_stations(
    ctx: _Context, pool: StationPool, *, campaign_id: int, slots: int, console: Console
) -> None:
    with Progress(
        TextColumn("rollouts"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        RemainingColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
    ) as progress:
        task = progress.add_task("runs", total=slots, info="")
        pool.start()
        try:
            while pool.alive():
                time.sleep(0.5)
                done, info = _progress(ctx, campaign_id)
                progress.update(task, completed=done, info=info)
                pool.poll()
                _raise_station_errors(pool)
            pool.join()
            done, info = _progress(ctx, campaign_id)
            progress.update(task, completed=done, info=info)
        except BaseException:
            pool.stop()
            raise
    _raise_station_errors(pool)
    done, _ = _progress(ctx, campaign_id)
    if done < slots:
        raise ProctorError(
            f"only {done} of {slots} runs completed: the stations found no more work "
            "(skipped runs wait before they are retried); see `proctor campaign status`"
        )


def _raise_station_errors(pool: StationPool) -> None:
    for r in pool.finished:
        if r.error:
            pool.stop()
            raise ProctorError(f"station {r.station_name} failed: {r.error}")


def _progress(ctx: _Context, campaign_id: int) -> tuple[int, str]:
    with session_scope(ctx.sessions) as s:
        done = s.scalar(
            sa.select(sa.func.count())
            .select_from(Assignment)
            .where(
                Assignment.campaign_id == campaign_id,
                Assignment.status == AssignmentStatus.done,
                Assignment.replaces_id.is_(None),
            )
        )
        replaced_done = s.scalar(
            sa.select(sa.func.count())
            .select_from(Assignment)
            .where(
                Assignment.campaign_id == campaign_id,
                Assignment.status == AssignmentStatus.done,
                Assignment.replaces_id.is_not(None),
            )
        )
        outcomes = dict(
            s.execute(
                sa.select(Episode.outcome, sa.func.count())
                .where(Episode.campaign_id == campaign_id, Episode.outcome.is_not(None))
                .group_by(Episode.outcome)
            ).all()
        )
    info = " ".join(f"{o.value}:{outcomes[o]}" for o in Outcome if outcomes.get(o))
    return int(done or 0) + int(replaced_done or 0), info


def _post_process(ctx: _Context, *, campaign_id: int, console: Console) -> None:
    with session_scope(ctx.sessions) as s:
        total = s.scalar(
            sa.select(sa.func.count())
            .select_from(Episode)
            .where(Episode.campaign_id == campaign_id)
        )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
    )
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("annotating", total=total, last="")
        counts = pipeline.annotate_campaign(
            ctx.sessions,
            ctx.store,
            campaign_id=campaign_id,
            tick=lambda last: progress.update(task, advance=1, last=last),
        )
    console.print(
        f"annotator: {counts.get('auto', 0)} episodes auto-labelled (detector agrees with the "
        f"operator's count), {counts.get('needs_review', 0)} queued for review"
    )
    queued = counts.get("needs_review", 0)
    if queued:
        with Progress(*columns, console=console) as progress:
            task = progress.add_task(
                "automatic reviewer (demo stand-in, uses the simulator's ground truth)",
                total=queued,
                last="",
            )
            pipeline.review_campaign(
                ctx.sessions,
                ctx.store,
                campaign_id=campaign_id,
                tick=lambda last: progress.update(task, advance=1, last=last),
            )


def _headline(ctx: _Context, campaign_id: int) -> dict[str, Any] | None:
    from proctor.web.snapshots.service import latest_row, read_result

    with session_scope(ctx.sessions) as s:
        row = latest_row(s, campaign_id=campaign_id, stream=LabelStream.auto_and_reviewed)
        if row is None:
            return None
        return read_result(s, row.id)


def _hint(console: Console, demo: DemoResult) -> None:
    console.print(
        f"\n[bold green]open {demo.origin}/leaderboard[/bold green] — the leaderboard; "
        "policy pages and the run explorer link from it."
    )
    if demo.admin_password:
        console.print(
            f"log in as [bold]{demo.admin}[/bold] / [bold]{demo.admin_password}[/bold] for the "
            "operator console, the review queue and admin pages (shown once; "
            "`proctor user` manages accounts). Ctrl-C stops the server."
        )
    else:
        console.print(
            f"log in as [bold]{demo.admin}[/bold] (password from your first demo run) for the "
            "operator console and review queue. Ctrl-C stops the server."
        )


def with_own_secret_key(settings: Settings) -> Settings:
    """The demo's data folder is a small deployment of its own: unless
    PROCTOR_SECRET_KEY is set, its sessions are signed with a random key kept
    in that folder (``secret_key``, mode 0600, made on the first run and
    reused after), never with the published development key."""
    if settings.secret_key is not None:
        return settings
    from pydantic import SecretStr

    from proctor.web.auth.sessions import data_dir_secret_key

    key = data_dir_secret_key(settings.data_dir)
    return settings.model_copy(update={"secret_key": SecretStr(key)})
