"""``proctor campaign``: create, start, status, close, reveal, unblind, release,
list, free-station.

These commands act on the configured database directly, as an admin would
through the API; each is one transaction and every state change is written
to the audit log under ``cli:<login name>``.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from proctor.core.errors import ProctorError, UsageError

if TYPE_CHECKING:
    from proctor.core.audit import Actor
    from proctor.core.db.engine import ProctorSession
    from proctor.scheduler.service import CampaignReport

campaign_app = typer.Typer(
    rich_markup_mode=None,
    help="Campaigns: create, start, status, close, reveal, unblind, release.",
    no_args_is_help=True,
)

CampaignArg = Annotated[str, typer.Argument(help="Campaign name or id.", show_default=False)]


@contextmanager
def _session(ctx: typer.Context, *, create: bool = False) -> Iterator[ProctorSession]:
    """The command's one transaction; ``create``: the command makes something, so
    a data folder with no database yet gets one (a reading command refuses)."""
    from proctor.core.cli_context import cli_context
    from proctor.core.db.opening import command_session

    with command_session(cli_context(ctx).settings(), create=create) as session:
        yield session


def _actor() -> Actor:
    from proctor.core.audit import Actor

    try:
        who = getpass.getuser()
    except (KeyError, OSError):  # no login name in a bare container
        who = "unknown"
    return Actor(label=f"cli:{who}")


def _console() -> Any:
    from rich.console import Console

    console = Console(highlight=False)
    # piped or captured: wide enough that names and hashes are never cut
    return console if console.is_terminal else Console(highlight=False, width=200)


def _split_config(text: str) -> dict[str, str]:
    tote, sep, camera = text.partition(":")
    if not sep:
        raise UsageError(f"--config: '{text}' must be TOTE:CAMERA, e.g. left:right")
    return {"tote": tote.strip(), "camera": camera.strip()}


_NEEDED = " Required without a protocol file."
# the protocol's required fields, by the option that gives each
_OPTION_OF = {
    "name": "--name",
    "reference": "--reference",
    "policies": "--policy",
    "objects": "--object",
    "items_per_episode": "--items",
    "per_item_cap_s": "--cap",
    "tau_s": "--tau",
    "episodes_per_cell": "--episodes-per-cell",
}


@campaign_app.command()
def create(
    ctx: typer.Context,
    protocol_file: Annotated[
        Path | None,
        typer.Argument(
            help="Protocol TOML (see proctor/scheduler/protocol.py); options override it."
        ),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Campaign name." + _NEEDED)] = None,
    reference: Annotated[
        str | None, typer.Option(help="The human reference's policy name." + _NEEDED)
    ] = None,
    policy: Annotated[
        list[str] | None, typer.Option("--policy", help="A policy taking part (repeat)." + _NEEDED)
    ] = None,
    obj: Annotated[
        list[str] | None, typer.Option("--object", help="An object type (repeat)." + _NEEDED)
    ] = None,
    items: Annotated[int | None, typer.Option(help="Items per episode." + _NEEDED)] = None,
    cap: Annotated[float | None, typer.Option(help="Per-item time cap, seconds." + _NEEDED)] = None,
    tau: Annotated[
        float | None, typer.Option(help="RMST integration cap τ, seconds." + _NEEDED)
    ] = None,
    episodes_per_cell: Annotated[
        int | None, typer.Option(help="Target episodes per (policy, object) cell." + _NEEDED)
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option("--config", help="A spatial configuration TOTE:CAMERA (repeat; default all)."),
    ] = None,
    description: Annotated[str | None, typer.Option(help="Free text.")] = None,
) -> None:
    """Create a draft campaign from a protocol file and/or options."""
    from proctor.scheduler import service
    from proctor.scheduler.protocol import load_protocol, parse_protocol

    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "reference": reference,
        "policies": list(policy) if policy else None,
        "objects": list(obj) if obj else None,
        "items_per_episode": items,
        "per_item_cap_s": cap,
        "tau_s": tau,
        "episodes_per_cell": episodes_per_cell,
        "spatial_configs": [_split_config(c) for c in config] if config else None,
    }
    if protocol_file is not None:
        protocol = load_protocol(protocol_file, options)
    else:
        missing = [option for field, option in _OPTION_OF.items() if options[field] is None]
        if missing:
            raise UsageError(
                f"{', '.join(missing)}: required without a protocol file "
                "(proctor campaign create PROTOCOL.toml takes them from the file)"
            )
        protocol = parse_protocol(
            {k: v for k, v in options.items() if v is not None}, source="options"
        )
    with _session(ctx, create=True) as session:
        c = service.create_campaign(session, protocol=protocol, actor=_actor())
        arms, objects = len(c.policies), len(c.objects)
        cid, cname = c.id, c.name
    slots = arms * objects * protocol.episodes_per_cell
    typer.echo(
        f"created campaign {cid} '{cname}' (draft): {arms} arms incl. the reference × "
        f"{objects} objects × {protocol.episodes_per_cell} episodes = {slots} episodes, "
        f"{len(protocol.spatial_configs)} spatial configurations; "
        f"start it with `proctor campaign start {cname}`"
    )


@campaign_app.command()
def start(ctx: typer.Context, campaign: CampaignArg) -> None:
    """Seal a fresh allocation seed, publish its commitment, write the allocation."""
    from proctor.scheduler import service

    with _session(ctx) as session:
        result = service.start_campaign(session, campaign=campaign, actor=_actor())
    typer.echo(
        f"campaign {result.campaign_id} running: "
        f"{result.slots} episodes in {result.blocks} blocks\n"
        f"seed commitment (SHA-256): {result.commitment}\n"
        f"protocol digest (SHA-256): {result.protocol_digest}\n"
        "publish both; the seed is revealed when the campaign closes"
    )


@campaign_app.command()
def status(
    ctx: typer.Context,
    campaign: CampaignArg,
    identities: Annotated[
        bool,
        typer.Option(
            "--identities", help="Name the arms (audited while the campaign is unreleased)."
        ),
    ] = False,
) -> None:
    """Per-cell progress and balance across spatial configurations."""
    from proctor.scheduler import service

    with _session(ctx) as session:
        report = service.campaign_status(
            session, campaign=campaign, identities=identities, actor=_actor()
        )
    _print_status(report)


def _print_status(r: CampaignReport) -> None:
    from rich.table import Table

    console = _console()
    console.print(f"[bold]{r.name}[/bold] (id {r.id}) — {r.status.value}")
    console.print(
        f"items {r.items_per_episode} × cap {r.per_item_cap_s:g} s, τ {r.tau_s:g} s, "
        f"target {r.episodes_per_cell} per cell"
    )
    if r.cell_profiles is not None:
        console.print(f"stations of cell profile {', '.join(r.cell_profiles)} only")
    if r.commitment:
        console.print(f"seed commitment {r.commitment}")
    if r.seed:
        console.print(f"seed (revealed) {r.seed}")
    console.print(
        f"episodes: {r.done} done, {r.claimed} running, {r.pending} pending, "
        f"{r.requeued} requeued (system), {r.skipped} skipped (pre-flight) — "
        f"blocks complete {r.blocks_complete}/{r.blocks}"
    )
    objects = list(dict.fromkeys(c.object_name for c in r.cells))
    arms = list(dict.fromkeys(c.arm for c in r.cells))
    cells = {(c.arm, c.object_name): c for c in r.cells}
    progress = Table(title="Per-cell progress (done/target, + running)")
    progress.add_column("arm" if not r.identities else "policy")
    for o in objects:
        progress.add_column(o, justify="right")
    progress.add_column("requeued", justify="right")
    progress.add_column("skipped", justify="right")
    for arm in arms:
        row = [arm + (" (reference)" if cells[(arm, objects[0])].is_reference else "")]
        waiting = next((cells[(arm, o)].waiting for o in objects if cells[(arm, o)].waiting), None)
        if waiting:
            row[0] += f" — {waiting}"
        for o in objects:
            c = cells[(arm, o)]
            row.append(f"{c.done}/{c.target}" + (f" +{c.claimed}" if c.claimed else ""))
        row.append(str(sum(cells[(arm, o)].requeued for o in objects)))
        row.append(str(sum(cells[(arm, o)].skipped for o in objects)))
        progress.add_row(*row)
    console.print(progress)

    balance = Table(title=f"Balance across spatial configurations (spread {r.config_spread})")
    balance.add_column("configuration")
    balance.add_column("blocks", justify="right")
    balance.add_column("complete", justify="right")
    balance.add_column("episodes done", justify="right")
    for cfg in r.configs:
        balance.add_row(
            cfg.config, str(cfg.blocks_planned), str(cfg.blocks_complete), str(cfg.done)
        )
    console.print(balance)


@campaign_app.command()
def close(ctx: typer.Context, campaign: CampaignArg) -> None:
    """Stop handing out work and reveal the allocation seed."""
    from proctor.scheduler import service

    with _session(ctx) as session:
        seed = service.close_campaign(session, campaign=campaign, actor=_actor())
    typer.echo(
        f"closed; allocation seed: {seed}\ncheck it with `proctor campaign reveal {campaign}`"
    )


@campaign_app.command()
def reveal(ctx: typer.Context, campaign: CampaignArg) -> None:
    """Print the revealed seed, and re-derive the allocation from it to check the log."""
    import json

    from proctor.scheduler import service

    with _session(ctx) as session:
        r = service.reveal_allocation(session, campaign=campaign)
    typer.echo(f"seed:            {r.seed}")
    typer.echo(
        f"commitment:      {r.commitment} "
        f"({'matches' if r.commitment_verified else 'DOES NOT MATCH'} SHA-256 of the seed)"
    )
    typer.echo(f"protocol digest: {r.protocol_digest}")
    typer.echo(f"protocol:        {json.dumps(r.protocol, sort_keys=True)}")
    typer.echo(
        f"allocation:      {r.slots_checked} slots re-derived"
        f"{', all match the log' if not r.mismatches else ''}; "
        f"{r.replacements} replacement slots (requeued/skipped) outside the derivation"
    )
    for m in r.mismatches[:20]:
        typer.echo(f"  mismatch: {m}")
    if not r.verified:
        wrong = "" if r.commitment_verified else ", and the commitment is wrong"
        raise ProctorError(
            f"the allocation log does not match the revealed seed "
            f"({len(r.mismatches)} mismatches{wrong})"
        )


@campaign_app.command()
def unblind(
    ctx: typer.Context,
    campaign: CampaignArg,
    reason: Annotated[str, typer.Option(help="Why (written to the audit log).")],
    run_code: Annotated[
        list[str] | None, typer.Option("--run-code", help="Only these run codes (repeat).")
    ] = None,
) -> None:
    """Who ran under which run code. An admin action, written to the audit log."""
    from rich.table import Table

    from proctor.scheduler import service

    with _session(ctx) as session:
        runs = service.unblind(
            session, campaign=campaign, actor=_actor(), reason=reason, run_codes=run_code or ()
        )
    table = Table(title=f"Unblinded: {len(runs)} runs")
    for col in ("run code", "seq", "block", "status", "object", "configuration", "policy", "owner"):
        table.add_column(col)
    for r in runs:
        table.add_row(
            r.run_code,
            str(r.sequence),
            str(r.block_index),
            r.status.value,
            r.object_name,
            r.config,
            r.policy_name + (" (reference)" if r.is_reference else ""),
            r.owner or "",
        )
    _console().print(table)


@campaign_app.command()
def release(ctx: typer.Context, campaign: CampaignArg) -> None:
    """Make the campaign's identities public (after it closed)."""
    from proctor.scheduler import service

    with _session(ctx) as session:
        service.release_campaign(session, campaign=campaign, actor=_actor())
    typer.echo("released: policy identities are public for this campaign")


@campaign_app.command("free-station")
def free_station(
    ctx: typer.Context,
    campaign: CampaignArg,
    station: Annotated[str, typer.Argument(help="The station's name.", show_default=False)],
) -> None:
    """Hand back the runs a dead station still holds (audited)."""
    from proctor.scheduler import claims

    with _session(ctx) as session:
        released, requeued = claims.free_station(
            session, campaign=campaign, station=station, actor=_actor()
        )
    typer.echo(
        f"{released} held runs back to pending; {requeued} with an episode requeued as fresh slots"
    )


@campaign_app.command("list")
def list_(ctx: typer.Context) -> None:
    """All campaigns."""
    from rich.table import Table

    from proctor.scheduler import service

    with _session(ctx) as session:
        rows = [
            (c.id, c.name, c.status.value, c.seed_commitment or "")
            for c in service.list_campaigns(session)
        ]
    table = Table()
    for col in ("id", "name", "status", "seed commitment"):
        table.add_column(col)
    for row in rows:
        table.add_row(*(str(x) for x in row))
    _console().print(table)
