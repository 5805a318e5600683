"""``proctor station commission``: measure the cell, step by step, and store
it as the commissioned-cell file (``proctor.station.commissioning.cell_file``).

The steps, in order (each value can instead be given as an option, which is
how the tests and a scripted re-commissioning run it):

1. **TCP and payload**: entered from the gripper's and coupling's data
   (``--tcp``, ``--payload-mass``, ``--payload-com``); the arm is connected
   with them, so franky configures them and they are read back from the
   robot's own state before anything is touched (an error stops here). The
   touch points below are then measured at the true tool centre point.
1b. **TCP pivot check** (optional; ``--pivot``/``--no-pivot``, or the flange
   poses as ``--pivot-pose``): the operator holds the fingertip centre on one
   fixed point from ≥ 4 orientations, tilted about two axes (hand-guiding,
   Enter at each); the flange's pose is read at each (``O_T_EE`` with the
   configured TCP removed), the TCP and the point are solved by least squares
   and the typed TCP is refused if they differ by more than 5 mm.
2. **Table plane**: the operator guides the closed fingertips onto the table
   at ≥ 3 points (hand-guiding: the pilot's buttons) and presses Enter at each;
   the TCP position is read from the arm.
3. **Totes**: two opposite inner corners of each tote's rim, touched the same
   way; the rim height is their height above the table.
4. **Workspace box**: proposed from the totes and the table (the totes'
   span plus a margin, from just above the table), accepted or typed.
5. **Home pose**: the operator guides the arm to it; the joints are read and
   must lie inside the joint limits (nothing is clipped).
6. **Cameras**: a reference frame of each camera, saved beside the file,
   and its serial. Camera extrinsics are not measured (no fiducial detector).
7. **Gripper closed reading** (optional, only on the operator's
   confirmation: the fingers move; ``--measure-closed``/``--no-measure-closed``,
   or the value as ``--closed-counts``): the empty 2F-85 closes and its gPO is
   read; the profiles hand it to the gripper's ``closed_counts``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import typer

from proctor.core.domain import Side
from proctor.core.errors import ConfigError, UsageError
from proctor.station.cell import Cell
from proctor.station.commissioning.cell_file import (
    CameraReference,
    CommissionedCell,
    Payload,
    TablePlane,
    Tcp,
    TcpPivot,
    Tote,
    check_joint_vector,
    flange_pose,
)
from proctor.station.drivers.gripper.base import GripperCommand
from proctor.station.framing import save_image

# how far the proposed workspace box reaches beyond the totes (m), and how
# high above the table it starts and ends
WORKSPACE_MARGIN_M = 0.05
WORKSPACE_FLOOR_M = 0.01
WORKSPACE_HEIGHT_M = 0.5
DEFAULT_TABLE_POINTS = 4
PIVOT_TOUCHES = 4


@dataclass
class Inputs:
    """Values given up front; every one left None is measured or asked."""

    tcp: Tcp | None = None
    payload: Payload | None = None
    table_points: list[tuple[float, float, float]] | None = None
    totes: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)
    tote_height: float | None = None
    tote_wall: float = 0.008
    workspace_min: tuple[float, float, float] | None = None
    workspace_max: tuple[float, float, float] | None = None
    home_q: tuple[float, ...] | None = None  # None: guide the arm there
    # the pivot check: flange poses given (x,y,z,qx,qy,qz,qw), or whether to
    # touch them (None: ask)
    pivot_poses: list[tuple[float, ...]] | None = None
    pivot: bool | None = None
    # the gripper's closed reading: given, or whether to measure it (None: ask)
    closed_counts: int | None = None
    measure_closed: bool | None = None
    note: str = ""


class Operator:
    """The person at the cell: ``say`` shows text, ``wait`` waits for Enter,
    ``ask`` reads a value (with a default). Non-interactive, a wait or an ask
    without a default is refused, naming the option that would answer it."""

    def __init__(
        self,
        interactive: bool,
        echo: Callable[[str], None] = typer.echo,
        prompt: Callable[[str, str], str] | None = None,
    ) -> None:
        self.interactive = interactive
        self.say = echo
        self._prompt = prompt or (lambda text, default: typer.prompt(text, default=default))

    def wait(self, text: str, option: str) -> None:
        if not self.interactive:
            raise UsageError(f"commission: {text} — give {option} or run it interactively")
        self._prompt(f"{text} [Enter]", "")

    def ask(self, text: str, default: str | None, option: str) -> str:
        if not self.interactive:
            if default is None:
                raise UsageError(f"commission: {text} — give {option}")
            self.say(f"{text}: {default}")
            return default
        return self._prompt(text, default or "")


def numbers(text: str, size: int | None, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.replace(";", ",").split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{what}: expected numbers separated by commas, got {text!r}") from None
    if size is not None and len(values) != size:
        raise UsageError(f"{what}: expected {size} numbers, got {len(values)}")
    return values


def _tcp_position(cell: Cell) -> tuple[float, float, float]:
    x, y, z = cell.arm.read_state().ee_pose[:3]
    return float(x), float(y), float(z)


def _confirmed(op: Operator, choice: bool | None, text: str, option: str) -> bool:
    """The operator's yes to an optional step: the option's, or asked, an
    explicit yes only (nothing optional happens by default, and nothing
    moves the gripper's fingers unconfirmed)."""
    if choice is not None:
        return choice
    answer = op.ask(f"{text} (y/n)", "n", option)
    return answer.strip().lower() in ("y", "yes")


def measure_pivot(cell: Cell, inputs: Inputs, op: Operator) -> TcpPivot | None:
    """The pivot check of the typed TCP (``TcpPivot``), or None when skipped."""
    tcp = inputs.tcp
    assert tcp is not None  # commission() checks it first
    if inputs.pivot_poses is not None:
        poses = inputs.pivot_poses
    elif not _confirmed(op, inputs.pivot, "check the typed TCP by a pivot", "--pivot"):
        op.say("TCP pivot check: skipped")
        return None
    else:
        op.say(
            "TCP pivot check: hold the fingertip centre on one fixed point (a cone tip, "
            "a marked dot) and change the tool's orientation between touches, tilting it "
            "at least 20° about two different axes."
        )
        poses = []
        for i in range(PIVOT_TOUCHES):
            op.wait(f"touch the point, orientation {i + 1} of {PIVOT_TOUCHES}", "--pivot-pose")
            poses.append(flange_pose(cell.arm.read_state().ee_pose, tcp))
    pivot = TcpPivot.solve(poses)
    pivot.check(tcp)
    op.say(
        f"TCP pivot check: [{', '.join(f'{1000 * v:.1f}' for v in pivot.tcp_xyz)}] mm "
        f"(typed [{', '.join(f'{1000 * v:.1f}' for v in tcp.xyz)}] mm), "
        f"residual {1000 * pivot.residual_m:.2f} mm"
    )
    return pivot


def measure_closed_counts(cell: Cell, inputs: Inputs, op: Operator) -> int | None:
    """The 2F-85's gPO with the empty fingers closed, or None when skipped."""
    if inputs.closed_counts is not None:
        return inputs.closed_counts
    measure = getattr(cell.gripper, "measure_closed_counts", None)
    if measure is None:
        op.say("gripper closed reading: not measured (the gripper's driver cannot)")
        return None
    text = "close the empty gripper to read its fully-closed position? THE FINGERS MOVE"
    if not _confirmed(op, inputs.measure_closed, text, "--measure-closed"):
        op.say("gripper closed reading: skipped")
        return None
    if cell.gripper.needs_activation():
        raise UsageError(
            "commission: the gripper is not activated; activate it first "
            "(`proctor station gripper-activate`)"
        )
    counts = int(measure())
    cell.gripper.send(GripperCommand(position=0.0))  # open again, as it started
    op.say(f"gripper closed reading: gPO {counts}")
    return counts


def measure_table(cell: Cell, inputs: Inputs, op: Operator) -> TablePlane:
    if inputs.table_points is not None:
        return TablePlane.fit(inputs.table_points)
    op.say("Table plane: guide the closed fingertips onto the table, spread wide apart.")
    points = []
    for i in range(DEFAULT_TABLE_POINTS):
        op.wait(f"touch the table at point {i + 1} of {DEFAULT_TABLE_POINTS}", "--table-point")
        points.append(_tcp_position(cell))
        op.say(f"  point {i + 1}: {', '.join(f'{v:.4f}' for v in points[-1])}")
    return TablePlane.fit(points)


def measure_tote(cell: Cell, side: str, inputs: Inputs, table: TablePlane, op: Operator) -> Tote:
    if side in inputs.totes:
        cx, cy, hx, hy = inputs.totes[side]
        height = inputs.tote_height
        if height is None:
            raise UsageError("commission: --tote needs --tote-height (rim above the table, m)")
        return Tote(cx, cy, hx, hy, height, inputs.tote_wall)
    corners = []
    for which in ("one inner corner of", "the opposite inner corner of"):
        op.wait(f"touch {which} the {side} tote's rim", f"--tote {side}=cx,cy,half_x,half_y")
        corners.append(np.asarray(_tcp_position(cell)))
    a, b = corners
    centre = 0.5 * (a + b)
    height = inputs.tote_height
    if height is None:
        height = float(np.mean([table.distance(a), table.distance(b)]))
    half_x, half_y = 0.5 * abs(a[0] - b[0]), 0.5 * abs(a[1] - b[1])
    if min(half_x, half_y) < 0.02:
        raise ConfigError(f"totes.{side}: the two corners are not opposite ({a} vs {b})")
    return Tote(float(centre[0]), float(centre[1]), half_x, half_y, height, inputs.tote_wall)


def propose_workspace(
    table: TablePlane, totes: dict[str, Tote]
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    m = WORKSPACE_MARGIN_M
    xs = [t.cx + s * (t.half_x + m) for t in totes.values() for s in (-1, 1)]
    ys = [t.cy + s * (t.half_y + m) for t in totes.values() for s in (-1, 1)]
    lo_x, hi_x, lo_y, hi_y = min(xs), max(xs), min(ys), max(ys)
    floor = max(table.z_at(x, y) for x in (lo_x, hi_x) for y in (lo_y, hi_y)) + WORKSPACE_FLOOR_M
    return (lo_x, lo_y, floor), (hi_x, hi_y, floor + WORKSPACE_HEIGHT_M)


def measure_workspace(
    table: TablePlane, totes: dict[str, Tote], inputs: Inputs, op: Operator
) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    proposed_lo, proposed_hi = propose_workspace(table, totes)

    def pick(given: tuple[float, float, float] | None, proposed: tuple[float, ...], name: str):  # type: ignore[no-untyped-def]
        if given is not None:
            return given
        text = ", ".join(f"{v:.3f}" for v in proposed)
        answer = op.ask(f"{name} (x, y, z in m)", text, f"--{name.replace('_', '-')}")
        return numbers(answer, 3, name)

    return (
        pick(inputs.workspace_min, proposed_lo, "workspace_min"),
        pick(inputs.workspace_max, proposed_hi, "workspace_max"),
    )


def measure_home(cell: Cell, inputs: Inputs, op: Operator) -> tuple[float, ...]:
    if inputs.home_q is not None:
        q = inputs.home_q
    else:
        op.wait("guide the arm to its home pose, clear above the totes", "--home-q")
        q = tuple(float(v) for v in cell.arm.read_state().q)
    c = cell.arm.config
    check_joint_vector("home_q", q, c.q_min, c.q_max)
    return q


def capture_cameras(cell: Cell, out: Path, op: Operator) -> dict[str, CameraReference]:
    refs = {}
    for name, camera in cell.cameras.items():
        camera.read(timeout_s=2.0)  # the first frame after a start can be stale
        frame = camera.read(timeout_s=2.0)
        image = f"{out.stem}.{name}.png"
        save_image(out.parent / image, frame.image)
        # the RealSense driver reads the device's serial at connect; UVC has none
        serial = getattr(camera, "device_serial", None)
        refs[name] = CameraReference(serial=serial, image=image)
        op.say(f"  camera {name}: serial {serial or '(none)'}, reference {image}")
    return refs


def commission(cell: Cell, inputs: Inputs, op: Operator, out: Path) -> CommissionedCell:
    """Measure the connected ``cell`` and store it at ``out``."""
    if inputs.tcp is None or inputs.payload is None:
        raise UsageError("commission: the TCP and payload come first (--tcp, --payload-mass)")
    op.say(
        f"TCP {list(inputs.tcp.as_tuple())} and payload {inputs.payload.mass} kg: "
        "configured through franky and read back at connect"
    )
    pivot = measure_pivot(cell, inputs, op)
    table = measure_table(cell, inputs, op)
    op.say(f"table plane: normal {[round(v, 4) for v in table.normal]}, z≈{table.z_at(0.5, 0):.4f}")
    totes = {side.value: measure_tote(cell, side.value, inputs, table, op) for side in Side}
    lo, hi = measure_workspace(table, totes, inputs, op)
    home_q = measure_home(cell, inputs, op)
    cameras = capture_cameras(cell, out, op)
    closed_counts = measure_closed_counts(cell, inputs, op)
    result = CommissionedCell(
        table=table,
        totes=totes,
        workspace_min=lo,
        workspace_max=hi,
        home_q=home_q,
        tcp=inputs.tcp,
        payload=inputs.payload,
        cameras=cameras,
        tcp_pivot=pivot,
        gripper_closed_counts=closed_counts,
        commissioned_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        note=inputs.note,
        path=out,
    )
    c = cell.arm.config
    result.check(c.q_min, c.q_max)
    result.save(out)
    op.say(f"commissioned cell written to {out}")
    return result


# -- the CLI command (registered on `proctor station`) ---------------------------


def _parse_tote(text: str) -> tuple[str, tuple[float, float, float, float]]:
    side, _, box = text.partition("=")
    if side not in (Side.left.value, Side.right.value) or not box:
        raise UsageError(f"--tote: expected left=cx,cy,half_x,half_y or right=…, got {text!r}")
    cx, cy, hx, hy = numbers(box, 4, f"--tote {side}")
    return side, (cx, cy, hx, hy)


def _inputs(
    tcp: str | None,
    payload_mass: float | None,
    payload_com: str,
    table_point: list[str] | None,
    tote: list[str] | None,
    tote_height: float | None,
    workspace_min: str | None,
    workspace_max: str | None,
    home_q: str | None,
    op: Operator,
    pivot_pose: list[str] | None = None,
    pivot: bool | None = None,
    closed_counts: int | None = None,
    measure_closed: bool | None = None,
) -> Inputs:
    if tcp is None:
        tcp = op.ask("TCP: flange → fingertip centre, x, y, z [m] (+ quaternion)", None, "--tcp")
    values = numbers(tcp, None, "--tcp")
    if len(values) not in (3, 7):
        raise UsageError("--tcp: give x, y, z or x, y, z, qx, qy, qz, qw")
    the_tcp = Tcp(values[:3], values[3:] if len(values) == 7 else (0.0, 0.0, 0.0, 1.0))  # type: ignore[arg-type]
    if payload_mass is None:
        payload_mass = float(op.ask("payload on the flange, kg", None, "--payload-mass"))
    return Inputs(
        tcp=the_tcp,
        payload=Payload(payload_mass, numbers(payload_com, 3, "--payload-com")),  # type: ignore[arg-type]
        table_points=[numbers(p, 3, "--table-point") for p in table_point] if table_point else None,  # type: ignore[misc]
        totes=dict(_parse_tote(t) for t in tote or []),
        tote_height=tote_height,
        workspace_min=numbers(workspace_min, 3, "--workspace-min") if workspace_min else None,  # type: ignore[arg-type]
        workspace_max=numbers(workspace_max, 3, "--workspace-max") if workspace_max else None,  # type: ignore[arg-type]
        home_q=None if home_q in (None, "guide") else numbers(home_q, 7, "--home-q"),  # type: ignore[arg-type]
        pivot_poses=[numbers(p, 7, "--pivot-pose") for p in pivot_pose] if pivot_pose else None,
        pivot=pivot,
        closed_counts=closed_counts,
        measure_closed=measure_closed,
    )


def commission_command(
    ctx: typer.Context,
    profile: Annotated[str, typer.Option("--profile", help="real or twin.")] = "real",
    config: Annotated[
        Path | None, typer.Option("--config", help="Station config file (TOML).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="The file to write (default: the config's `commissioned`)."),
    ] = None,
    tcp: Annotated[str | None, typer.Option(help="Flange → TCP: x,y,z[,qx,qy,qz,qw] (m).")] = None,
    payload_mass: Annotated[float | None, typer.Option(help="Mass on the flange (kg).")] = None,
    payload_com: Annotated[
        str, typer.Option(help="Its centre of mass in the flange frame: x,y,z (m).")
    ] = "0,0,0",
    table_point: Annotated[
        list[str] | None, typer.Option(help="A table point x,y,z (repeat ≥ 3 times).")
    ] = None,
    tote: Annotated[
        list[str] | None, typer.Option(help="left=cx,cy,half_x,half_y (and right=…).")
    ] = None,
    tote_height: Annotated[float | None, typer.Option(help="Tote rim above the table (m).")] = None,
    workspace_min: Annotated[str | None, typer.Option(help="x,y,z (m).")] = None,
    workspace_max: Annotated[str | None, typer.Option(help="x,y,z (m).")] = None,
    home_q: Annotated[
        str | None, typer.Option(help="7 joint angles (rad), or 'current' for where the arm is.")
    ] = None,
    pivot_pose: Annotated[
        list[str] | None,
        typer.Option(
            help="A flange pose x,y,z,qx,qy,qz,qw (base frame) with the fingertip on the "
            "pivot point (repeat ≥ 4 times): the TCP pivot check without touching."
        ),
    ] = None,
    pivot: Annotated[
        bool | None,
        typer.Option("--pivot/--no-pivot", help="Run the TCP pivot check (default: ask)."),
    ] = None,
    closed_counts: Annotated[
        int | None,
        typer.Option(help="The 2F-85's gPO with the empty fingers closed, if known (1–255)."),
    ] = None,
    measure_closed: Annotated[
        bool | None,
        typer.Option(
            "--measure-closed/--no-measure-closed",
            help="Close the empty gripper to read closed_counts: the fingers move (default: ask).",
        ),
    ] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive/--non-interactive", help="Prompt the operator.")
    ] = True,
) -> None:
    """Measure the cell (table, totes, workspace, home, TCP and payload,
    camera references) into the commissioned-cell file."""
    from proctor.core.cli_context import cli_context
    from proctor.station.config import load_station_config
    from proctor.station.device_lock import station_devices
    from proctor.station.profiles import build_cell

    if profile not in ("real", "twin"):
        raise UsageError(f"--profile: commissioning measures a real or twin cell, not '{profile}'")
    op = Operator(interactive)
    cfg = load_station_config(config)
    target = out or cfg.commissioned
    if target is None:
        raise UsageError("commission: name the file with --out or `commissioned` in the config")
    inputs = _inputs(
        tcp,
        payload_mass,
        payload_com,
        table_point,
        tote,
        tote_height,
        workspace_min,
        workspace_max,
        None if home_q == "current" else home_q,
        op,
        pivot_pose,
        pivot,
        closed_counts,
        measure_closed,
    )
    # re-commissioning measures afresh: the old file's values must not
    # configure the arm; the entered TCP and payload do
    section = cfg.profile_section(profile)
    arm = dict(section.get("arm", {}))
    arm.update(
        tcp=list(inputs.tcp.as_tuple()),  # type: ignore[union-attr]
        payload_mass=inputs.payload.mass,  # type: ignore[union-attr]
        payload_com=list(inputs.payload.com),  # type: ignore[union-attr]
    )
    cfg = cfg.model_copy(update={"commissioned": None, profile: {**section, "arm": arm}})
    devices = station_devices(
        cli_context(ctx).settings(), cfg, "`proctor station commission`"
    ).acquire()
    try:
        cell = build_cell(profile, cfg)
    except BaseException:
        devices.release()
        raise
    try:
        cell.connect()
        if home_q == "current":
            inputs.home_q = tuple(float(v) for v in cell.arm.read_state().q)
        commission(cell, inputs, op, Path(target))
    finally:
        cell.close()
        devices.release()
