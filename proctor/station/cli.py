"""``proctor station`` (``proctor policy`` is the policy wire's own:
``proctor.policywire.cli``)."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from proctor.core import episode_record
from proctor.core.errors import ProctorError, UsageError
from proctor.policywire.cli_options import (
    ActionUnitsOpt,
    ApiKeyEnvOpt,
    DialectOpt,
    ExteriorNumberingOpt,
    action_units_option,
    api_key,
    dialect_option,
    policy_url,
)
from proctor.policywire.handshake import auth_headers

log = logging.getLogger(__name__)

station_app = typer.Typer(rich_markup_mode=None, help="The station daemon.", no_args_is_help=True)

# how long `proctor station run` lets the local API's connections close on
# SIGTERM before it stops the arm and closes the daemon (the systemd unit's
# TimeoutStopSec allows for it)
API_SHUTDOWN_GRACE_S = 5  # s (uvicorn takes whole seconds)

ProfileOpt = Annotated[str, typer.Option("--profile", help="Station profile: sim, twin or real.")]
StationConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", help="Station config file (TOML); defaults when omitted."),
]


def _settings(ctx: typer.Context) -> Any:
    from proctor.core.cli_context import cli_context

    return cli_context(ctx).settings()


@station_app.command()
def run(
    ctx: typer.Context,
    profile: ProfileOpt = "sim",
    config: StationConfigOpt = None,
    port: Annotated[
        int | None, typer.Option(help="Local API port (overrides [api] port; 0: any free).")
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            help="The server's origin (https://…): talk to it over the station API only, "
            "keeping a local ledger (overrides [uplink] server; needs no database URL; "
            "the token comes from PROCTOR_STATION_TOKEN)."
        ),
    ] = None,
    campaign: Annotated[
        str | None,
        typer.Option(help="The campaign (id or name) to claim runs of, with --server."),
    ] = None,
) -> None:
    """Start the station daemon and its local API for the operator console.

    Runs come from a work source: --server and --campaign (the station API; the
    token in PROCTOR_STATION_TOKEN, issued by `proctor station enrol` on the
    server), or the config's [work]. With neither, the station claims no runs.
    """
    import uvicorn

    from proctor.core.station_key import ensure_station_key
    from proctor.station.config import load_station_config
    from proctor.station.console_api import create_app
    from proctor.station.device_lock import HARDWARE_PROFILES, station_devices
    from proctor.station.logs import configure_logging

    settings = _settings(ctx)
    configure_logging(settings.log_level)
    # The 100 Hz telemetry and 15 Hz action loop share one interpreter with
    # uvicorn, the camera readers, the encoders, the Modbus poller and the
    # policy worker. A thread that wants the GIL waits up to the switch
    # interval (5 ms by default) for the holder to let go: a 1 ms interval
    # bounds that wait for the control thread, at the cost of more frequent
    # switches (franky's 1 kHz loop runs in C++ without the GIL and needs none
    # of this). Review finding #23.
    sys.setswitchinterval(0.001)
    log.info("interpreter switch interval %.1f ms", sys.getswitchinterval() * 1000)
    cfg = load_station_config(config)
    # before any driver opens: a key file others can read stops the daemon here
    key = ensure_station_key(settings.station_key_path)
    log.info("local API key file %s", settings.station_key_path)  # its path, never the key
    if profile == "sim" and "clock" not in cfg.sim:
        # a daemon serves a person at the console: the simulated cell runs in real time
        # unless its config asks for the virtual clock
        cfg = cfg.model_copy(update={"sim": {**cfg.sim, "clock": "monotonic"}})
    if port is not None:
        cfg = cfg.model_copy(update={"api": cfg.api.model_copy(update={"port": port})})
    if server is not None or campaign is not None or cfg.uplink is not None:
        daemon = _remote_daemon(cfg, profile, settings, server, campaign)
    else:
        daemon = _database_daemon(cfg, profile, settings)
    for r in daemon.recovered:
        typer.echo(
            f"recovered interrupted episode {r.uid}: {r.telemetry_rows} telemetry rows, "
            f"frames {r.frames}" + (f" ({'; '.join(r.notes)})" if r.notes else "")
        )
    devices = None
    if profile in HARDWARE_PROFILES:
        # held until the process ends (the kernel drops it on any exit)
        devices = station_devices(settings, cfg, f"the station daemon {cfg.name}").acquire()
    daemon.open()
    server_ = uvicorn.Server(
        uvicorn.Config(
            create_app(daemon, key=key),
            host=cfg.api.host,
            port=cfg.api.port,
            log_level="warning",
            lifespan="off",
            # on SIGTERM a console connection that does not close must not hold
            # up daemon.close(), which stops the arm
            timeout_graceful_shutdown=API_SHUTDOWN_GRACE_S,
        )
    )
    try:
        _serve(server_, daemon, f"station {cfg.name} ({profile})")
    finally:
        if devices is not None:
            devices.release()


def _database_daemon(cfg: Any, profile: str, settings: Any) -> Any:
    """A single-host station: episodes go straight into the configured database."""
    from proctor.core.artifacts import open_store
    from proctor.core.db.opening import open_sessions
    from proctor.station.config import spool_root
    from proctor.station.daemon import StationDaemon

    return StationDaemon(
        cfg,
        profile,
        sessions=open_sessions(settings),
        store=open_store(settings.artifacts_location),
        spool_root=spool_root(settings, cfg.name, cfg),
    )


def _remote_daemon(
    cfg: Any, profile: str, settings: Any, server: str | None, campaign: str | None
) -> Any:
    """A station host that reaches the server over the station API only: no
    database URL is opened (or needed); the token comes from the environment."""
    from proctor.station.uplink.remote import open_configured_station

    daemon = open_configured_station(
        cfg, profile, data_dir=settings.data_dir, server=server, campaign=campaign
    )
    where = server or (cfg.uplink.server if cfg.uplink else "")
    which = campaign or (cfg.uplink.campaign if cfg.uplink else "")
    typer.echo(f"station {cfg.name}: uplink to {where}, campaign {which}")
    return daemon


def _serve(server: Any, daemon: Any, who: str) -> None:
    def announce() -> None:
        while not server.started:
            time.sleep(0.05)
        sock = server.servers[0].sockets[0]
        host, bound = sock.getsockname()[:2]
        typer.echo(f"{who} listening on http://{host}:{bound}", err=False)
        sys.stdout.flush()

    import threading

    threading.Thread(target=announce, daemon=True).start()
    try:
        server.run()
    finally:
        daemon.close()


@station_app.command()
def episode(
    ctx: typer.Context,
    policy: Annotated[
        str,
        typer.Option(
            help="The policy server's WebSocket URL (ws://…; for positronic_v1, "
            "/api/v1/session is added to a URL with no path)."
        ),
    ],
    object_name: Annotated[str, typer.Option("--object", help="Object type, e.g. spoons.")],
    profile: ProfileOpt = "sim",
    dialect: DialectOpt = None,
    exterior_numbering: ExteriorNumberingOpt = None,
    action_units: ActionUnitsOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    items: Annotated[int, typer.Option(help="Items set out in the source bin.")] = 8,
    seed: Annotated[int | None, typer.Option(help="Simulated cell seed.")] = None,
    per_item_cap: Annotated[float, typer.Option(help="Time budget per item, s.")] = 30.0,
    tote: Annotated[str, typer.Option(help="Target tote side: left or right.")] = "left",
    camera: Annotated[str, typer.Option(help="Exterior camera side: left or right.")] = "right",
    config: StationConfigOpt = None,
    ground_truth_log: Annotated[
        bool,
        typer.Option(
            "--ground-truth-log",
            help="DEMO/TEST ONLY: close the episode with a log filled from the simulator's "
            "ground truth (labelled as such) instead of waiting for an operator.",
        ),
    ] = False,
    home_first: Annotated[
        bool,
        typer.Option(
            "--home-first",
            help="Home the arm before the episode (it lifts straight up, then moves across "
            "the cell). Passing this confirms that the cell is clear: nobody inside, nothing "
            "in the arm's way. Without it the arm must already stand at home.",
        ),
    ] = False,
    open_gripper: Annotated[
        bool,
        typer.Option(
            "--open-gripper",
            help="With --home-first: also open the gripper at home (whatever it holds drops).",
        ),
    ] = False,
) -> None:
    """Run one episode headless and print where it was recorded."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from proctor.core.artifacts import open_store
    from proctor.core.db.opening import open_sessions
    from proctor.core.work import Work
    from proctor.station.config import load_station_config, spool_root
    from proctor.station.episode_runner import EpisodeRunner, RunnerState
    from proctor.station.profiles import build_cell
    from proctor.station.work_source import new_run_code

    if ground_truth_log and profile != "sim":
        raise UsageError("--ground-truth-log: only the simulated cell has a ground truth")
    if open_gripper and not home_first:
        raise UsageError("--open-gripper: only with --home-first")
    chosen = dialect_option(dialect)
    if policy.startswith(("ws://", "wss://")):  # anything else: Work says what is wrong
        policy = policy_url("--policy", policy, chosen)
    settings = _settings(ctx)
    cfg = load_station_config(config)
    work = Work(
        run_code=new_run_code(),
        object_name=object_name,
        items=items,
        per_item_cap_s=per_item_cap,
        tote_side=tote,  # type: ignore[arg-type]
        camera_side=camera,  # type: ignore[arg-type]
        policy_url=policy,
        sim_seed=seed if seed is not None else (0 if profile == "sim" else None),
        dialect=chosen,
        exterior_numbering=exterior_numbering,
        action_units=action_units_option(action_units, chosen),
        policy_headers=auth_headers(chosen, api_key(api_key_env)),
    )
    if profile == "sim":
        from proctor.station.sim.objects import object_spec

        object_spec(object_name)  # a clear error before anything is built
    sessions = open_sessions(settings)
    store = open_store(settings.artifacts_location)
    cell = build_cell(profile, cfg)
    runner = EpisodeRunner(
        cell,
        config=cfg,
        sessions=sessions,
        store=store,
        spool_root=spool_root(settings, cfg.name, cfg),
    )
    runner.open()
    try:
        if home_first:
            typer.echo("homing the arm (you confirmed the cell is clear)")
            runner.home(cell_clear=True, open_gripper=open_gripper)
        uid = runner.arm(work)
        typer.echo(
            f"episode {uid}: run {work.run_code}, {items} {object_name}, "
            f"budget {work.budget_s:g} s, seed {work.sim_seed}"
        )
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[clock]}"),
            TimeElapsedColumn(),
            transient=True,
        ) as progress:
            task = progress.add_task("running", total=work.budget_s, clock="")
            runner.start(background=True)
            while runner.state in (RunnerState.running, RunnerState.finishing):
                st = runner.status()
                elapsed = st.get("elapsed_s", 0.0)
                progress.update(
                    task,
                    completed=elapsed,
                    clock=f"{elapsed:6.1f} s on the station clock",
                    description=runner.state.value,
                )
                time.sleep(0.1)
            runner.wait()
        last = runner.last
        if last is None or last.uid != uid:
            raise ProctorError(f"episode {uid}: the runner stopped without a result")
        typer.echo(f"ended: proposed outcome {last.proposed.value} — {last.reason}")
        typer.echo(
            f"recorded {last.duration_s:.1f} s: telemetry {last.telemetry_rows} rows at "
            f"{last.telemetry_rate_hz:.1f} Hz; frames {last.frames}; "
            f"dropped {last.dropped_frames}; policy calls {last.policy_calls}"
            + (f" (latency p50 {last.latency_p50_s * 1000:.1f} ms)" if last.latency_p50_s else "")
        )
        for name, sha in sorted(last.artifacts.items()):
            path = store.local_path(sha)
            typer.echo(f"  {name:22s} {sha}  {path if path is not None else store.uri_for(sha)}")
        for note in last.notes:
            typer.echo(f"  note: {note}")
        if ground_truth_log:
            from proctor.station.demo_log import GROUND_TRUTH_LABEL, close_with_ground_truth

            _, _, outcome = runner.close_with(
                lambda s, u: close_with_ground_truth(s, store=store, uid=u)
            )
            typer.echo(f"closed with outcome {outcome.value} [{GROUND_TRUTH_LABEL}]")
        else:
            typer.echo(
                f"awaiting the operator's log: proctor station log {uid} --placed N --lost N "
                "--dropped N --outcome OUTCOME"
            )
    finally:
        runner.close()


@station_app.command("log")
def log_cmd(
    ctx: typer.Context,
    episode_uid: Annotated[str, typer.Argument(help="The episode's id.")],
    placed: Annotated[int, typer.Option(help="Items placed in the target bin.")],
    lost: Annotated[int, typer.Option(help="Items lost outside the workspace.")],
    dropped: Annotated[int, typer.Option(help="Items dropped in the workspace, uncollected.")],
    outcome: Annotated[
        str, typer.Option(help="success, ran_out_of_time, operator_stop, safety or system.")
    ],
    notes: Annotated[str, typer.Option(help="Free text.")] = "",
) -> None:
    """Save an episode's post-rollout log (the operator's counts and outcome)."""
    from proctor.core.db import session_scope
    from proctor.core.db.opening import open_sessions
    from proctor.station import episodes

    settings = _settings(ctx)
    sessions = open_sessions(settings)
    entry = episode_record.OperatorLog.parse(
        {"placed": placed, "lost": lost, "dropped": dropped, "outcome": outcome, "notes": notes}
    )
    with session_scope(sessions) as s:
        ep = episodes.submit_log(s, uid=episode_uid, log=entry)
        typer.echo(f"episode {ep.uid}: closed ({ep.outcome.value if ep.outcome else '?'})")


@station_app.command()
def recover(
    ctx: typer.Context,
    config: StationConfigOpt = None,
) -> None:
    """Finish episodes a killed daemon left behind (also done when the daemon starts)."""
    from proctor.core.artifacts import open_store
    from proctor.core.db.opening import open_sessions
    from proctor.station.config import load_station_config, spool_root
    from proctor.station.recovery import recover_interrupted

    settings = _settings(ctx)
    cfg = load_station_config(config)
    found = recover_interrupted(
        sessions=open_sessions(settings),
        store=open_store(settings.artifacts_location),
        station_name=cfg.name,
        spool_root=spool_root(settings, cfg.name, cfg),
    )
    if not found:
        typer.echo("nothing to recover")
    for r in found:
        typer.echo(
            f"recovered {r.uid}: {r.telemetry_rows} telemetry rows, frames {r.frames}"
            + (f" ({'; '.join(r.notes)})" if r.notes else "")
        )


# -- hardware profiles: pre-flight and teleoperation ----------------------------
from proctor.station.commissioning.procedure import commission_command as _commission  # noqa: E402
from proctor.station.gripper_activation import gripper_activate as _gripper_activate  # noqa: E402
from proctor.station.preflight import check as _preflight_check  # noqa: E402
from proctor.station.teleop.cli import teleop as _teleop  # noqa: E402

station_app.command("check")(_preflight_check)
station_app.command("commission")(_commission)
station_app.command("gripper-activate")(_gripper_activate)
station_app.command("teleop")(_teleop)

# -- the admin's side, on the server: stations' credentials ----------------------
from proctor.station.enrol_cli import enrol as _enrol  # noqa: E402
from proctor.station.enrol_cli import token_app as _token_app  # noqa: E402

station_app.command("enrol")(_enrol)
station_app.add_typer(_token_app, name="token")
