"""The simulated cell: a kinematic bin-to-bin world.

A Franka FR3 (real kinematics, velocity and acceleration limits) with a
2F-85-like gripper over a table with two bins. Items of one object type lie
in the source bin; a grasp succeeds with a probability that depends on the
object and on how well the fingers were aimed; held items travel with the
tool and may slip (more at speed); an item released (or slipping) falls
ballistically and lands in the target bin (a placement), back in the source
bin, on the table inside the workspace (dropped: pickable again) or outside
it (lost). Touching a bin wall or the floor faster than the reflex speed is
a collision reflex: the arm stops with an error, like the real robot's
safety stop. Everything random is drawn from generators seeded by the
episode's sim seed; the world logs the ground truth of everything that
happened for the annotator to be scored against.

The world is advanced lazily to the clock's time on every access, in fixed
physics steps on a grid anchored at the world's creation, so that the same
commands at the same clock times give the same trajectory. The fingers'
events (touching an item, stalling on it, opening past it, a slip) are
solved within a step, so the ground truth's times are not on that grid;
what the gripper *reports* is sampled from the fingers' path by its driver
(``proctor.station.sim.gripper``), late and coarse like a polled 2F-85. Camera frames are
taken as immutable snapshots at the physics step that crosses each frame
time and rendered elsewhere (``proctor.station.sim.render``), off the control thread.
"""

from __future__ import annotations

import bisect
import math
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from proctor.core.clock import Clock, VirtualClock
from proctor.core.domain import Side
from proctor.policywire.wire import keys
from proctor.station.drivers.arm.base import ArmCommand, ArmCommandKind, ArmConfig, ArmFault
from proctor.station.sim import kinematics as kin
from proctor.station.sim.objects import ObjectSpec, object_spec

G = 9.81
LAYOUT_FORMAT = "proctor.cell_layout/1"
HOME_Q = np.array(ArmConfig.home_q)
_INV_DQ_MAX = 1.0 / kin.DQ_MAX
_INV_DDQ_MAX = 1.0 / kin.DDQ_MAX
Q_MIN = np.array(ArmConfig.q_min)
Q_MAX = np.array(ArmConfig.q_max)
# the reach a Cartesian pose target is clipped into (base frame, m)
CARTESIAN_BOX = ((0.15, -0.65, 0.0), (0.85, 0.65, 0.75))


@dataclass(frozen=True)
class Bin:
    """A tote on the table: inner rectangle, wall height and thickness (m)."""

    cx: float
    cy: float
    half_x: float = 0.15
    half_y: float = 0.12
    height: float = 0.08
    wall: float = 0.008

    def inside(self, x: float, y: float, margin: float = 0.0) -> bool:
        return abs(x - self.cx) <= self.half_x - margin and abs(y - self.cy) <= self.half_y - margin

    def wall_distance(self, x: float, y: float) -> float:
        """Distance from (x, y) to the nearest wall's centre line (inside or outside)."""
        dx = abs(x - self.cx) - (self.half_x + self.wall / 2)
        dy = abs(y - self.cy) - (self.half_y + self.wall / 2)
        if dx <= 0 and dy <= 0:  # within the outer rectangle: nearest wall inward
            return min(-dx, -dy)
        return math.hypot(max(dx, 0.0), max(dy, 0.0))

    def as_array(self) -> np.ndarray:
        return np.array([self.cx, self.cy, self.half_x, self.half_y])


@dataclass(frozen=True)
class Layout:
    """The spatial configuration: target tote side × exterior camera side."""

    tote_side: Side
    camera_side: Side
    source: Bin
    target: Bin
    # the table, and the workspace an item may land in and still be picked
    table_x: tuple[float, float] = (0.12, 0.88)
    table_y: tuple[float, float] = (-0.62, 0.62)
    work_x: tuple[float, float] = (0.25, 0.80)
    work_y: tuple[float, float] = (-0.45, 0.45)

    @classmethod
    def make(cls, tote_side: Side, camera_side: Side) -> Layout:
        # +y is the robot's left; bins 0.5 m in front of the base
        y = 0.23
        target_y = y if tote_side == Side.left else -y
        return cls(
            tote_side=Side(tote_side),
            camera_side=Side(camera_side),
            source=Bin(0.50, -target_y),
            target=Bin(0.50, target_y),
        )

    def in_workspace(self, x: float, y: float) -> bool:
        """Where the arm can still pick an item up from the table."""
        return self.work_x[0] <= x <= self.work_x[1] and self.work_y[0] <= y <= self.work_y[1]

    def on_table(self, x: float, y: float) -> bool:
        return self.table_x[0] <= x <= self.table_x[1] and self.table_y[0] <= y <= self.table_y[1]

    @property
    def rim_height(self) -> float:
        return max(self.source.height, self.target.height)

    def describe(self) -> dict[str, Any]:
        """The layout as the episode manifest records it (``layout``, format
        ``proctor.cell_layout/1``): robot base frame, metres, +y the robot's left."""

        def box(b: Bin) -> list[float]:
            return [round(v, 6) for v in (b.cx, b.cy, b.half_x, b.half_y)]

        return {
            "format": LAYOUT_FORMAT,
            "frame": "robot base, m",
            "tote_side": self.tote_side.value,
            "camera_side": self.camera_side.value,
            "source_bin": box(self.source),
            "target_bin": box(self.target),
            "bin_height": self.rim_height,
            "bin_wall": max(self.source.wall, self.target.wall),
            "table": {"x": list(self.table_x), "y": list(self.table_y)},
            "workspace": {"x": list(self.work_x), "y": list(self.work_y)},
        }


@dataclass
class Item:
    index: int
    pos: np.ndarray  # (3,) centre
    yaw: float
    state: keys.ItemState
    # while falling: (t_land, landing position, state on landing)
    fall: tuple[float, np.ndarray, keys.ItemState] | None = None
    fall_start: tuple[float, np.ndarray, np.ndarray] | None = None  # t0, p0, v0


@dataclass(frozen=True)
class Snapshot:
    """What a camera needs to draw one frame; immutable, safe to hand to another thread."""

    t: float
    index: int
    layout: Layout
    spec: ObjectSpec
    origins: np.ndarray  # (8, 3) joint origins and TCP
    tool: np.ndarray  # (4, 4) TCP transform
    gripper: float  # finger position
    items: np.ndarray  # (N, 5): x, y, z, yaw, ItemState code


@dataclass(frozen=True)
class SimParams:
    """The [sim] section's physics knobs (see proctor.station.profiles.sim)."""

    physics_hz: float = 100.0  # integration steps per second
    v_max: float = 1.0  # m/s: the station's Cartesian speed limit (FR3 allows 3 m/s)
    a_max: float = 4.0  # m/s²
    w_max: float = 2.5  # rad/s
    # contact with a wall or the floor above this TCP speed is a collision reflex
    reflex_speed: float = 0.35  # m/s
    finger_radius: float = 0.012  # m: half the fingers' footprint around the TCP
    gripper_stroke_s: float = 0.57  # s: 85 mm at 150 mm/s
    # once the fingers touch an item they close on at this fraction of their
    # speed while the pads (and a soft item) compress under the grip force
    squeeze_speed: float = 0.25
    floor_clearance: float = 0.004  # m: the fingertips touch the floor below this TCP height
    time_constant: float = 0.04  # s: position-tracking gain of the arm's internal controller
    # the physics itself holds every command's tool speed cap (a catch-all the
    # real arm does not have for velocity commands): the envelope's tests turn
    # it off, so that they see what the envelope alone lets through
    enforce_tool_speed: bool = True


@dataclass
class _Grasp:
    """How the held item sits in the fingers (finger positions, 0 open … 1 closed)."""

    contact: float  # where the closing fingers first touch it: 1 − width / 85 mm
    stall: float  # where they stop, squeezing it under the grip force
    free_below: float  # opening past this, the item comes free of the fingers


@dataclass
class GroundTruthEvent:
    t: float  # station clock
    kind: str  # grasp | grasp_miss | release | slip | placed | returned | dropped | lost | contact
    item: int | None
    x: float
    y: float
    z: float
    details: dict[str, Any] = field(default_factory=dict)


class CameraSink:
    """Where the world delivers snapshots for one camera (bounded queue)."""

    def __init__(self, name: str, fps: float, virtual: bool, capacity: int) -> None:
        self.name = name
        self.period = 1.0 / fps
        self.virtual = virtual
        self.frames: queue.Queue[Snapshot] = queue.Queue(maxsize=capacity)
        self.next_index = 0
        self.next_t: float | None = None
        self.dropped = 0  # snapshots the queue had no room for (real-time mode)

    def offer(self, snap: Snapshot) -> None:
        if self.virtual:
            # virtual time waits for the consumer: a simulated camera never
            # drops a frame because the encoder is slower than the simulator
            try:
                self.frames.put(snap, timeout=10.0)
                return
            except queue.Full:
                pass
        else:
            try:
                self.frames.put_nowait(snap)
                return
            except queue.Full:
                pass
        self.dropped += 1


class SimWorld:
    def __init__(self, clock: Clock, params: SimParams | None = None) -> None:
        self.clock = clock
        self.params = params or SimParams()
        self.dt = 1.0 / self.params.physics_hz
        self.lock = threading.RLock()
        self._t0 = clock.now()
        self._k = 0  # physics steps taken since _t0
        # arm
        self.q = HOME_Q.copy()
        self.dq = np.zeros(7)
        self._twist = np.zeros(6)
        self.command: ArmCommand | None = None
        self._target_rot: np.ndarray | None = None
        self.error: str | None = None
        self._stopping = False
        self._speed_scale = 1.0
        self._fk()
        self._tcp_prev = self.tcp.copy()
        # gripper
        self.grip = 0.0
        self.grip_target = 0.0
        self.grip_speed = 1.0
        self.grip_force = 0.5
        self.grip_activated = False
        self.grip_fault: str | None = None
        self.held: int | None = None
        self._grasp: _Grasp | None = None  # how the held item sits in the fingers
        self._grasp_rolled = False  # this closure has met its item (or missed it)
        # the fingers' true path, as (time, position) breakpoints (linear between),
        # and the stretches they sat stalled on an item: what the driver samples
        self._finger_t: list[float] = [self._t0]
        self._finger_g: list[float] = [0.0]
        self._stalls: list[list[float]] = []
        # scene
        self.layout = Layout.make(Side.left, Side.right)
        self.spec = object_spec("spoons")
        self.items: list[Item] = []
        self.seed: int | None = None
        self._rng = np.random.default_rng(0)
        self.events: list[GroundTruthEvent] = []
        self.t_episode: float | None = None
        self.sinks: list[CameraSink] = []
        self.on_reset: list[Callable[[], None]] = []

    # -- time ---------------------------------------------------------------
    @property
    def t(self) -> float:
        return self._t0 + self._k * self.dt

    @property
    def virtual(self) -> bool:
        return isinstance(self.clock, VirtualClock)

    def advance_to(self, t: float) -> None:
        """Integrate up to the last grid step at or before ``t``."""
        with self.lock:
            n = math.floor((t - self._t0) / self.dt + 1e-6) - self._k
            for _ in range(max(0, n)):
                self._step()

    def sync(self) -> None:
        self.advance_to(self.clock.now())

    # -- scene --------------------------------------------------------------
    def reset_scene(
        self, object_name: str, items: int, tote_side: Side, camera_side: Side, seed: int
    ) -> None:
        """Lay out a fresh episode: items scattered in the source bin, gripper
        empty, ground truth cleared. The arm stays where it is (the runner homes it)."""
        with self.lock:
            self.sync()
            self.spec = object_spec(object_name)
            self.layout = Layout.make(Side(tote_side), Side(camera_side))
            self.seed = int(seed)
            ss = np.random.SeedSequence(self.seed)
            layout_rng, self._rng = (np.random.default_rng(s) for s in ss.spawn(2))
            src = self.layout.source
            margin = min(self.spec.radius, 0.05) + 0.01
            self.items = []
            for i in range(items):
                x = src.cx + layout_rng.uniform(-1, 1) * (src.half_x - margin)
                y = src.cy + layout_rng.uniform(-1, 1) * (src.half_y - margin)
                # stacked items sit a little higher; the top of the pile is what gets picked
                z = self.spec.height / 2 + self.spec.height * (i // 6)
                self.items.append(
                    Item(
                        i,
                        np.array([x, y, z]),
                        layout_rng.uniform(-math.pi, math.pi),
                        keys.ItemState.source,
                    )
                )
            self.held = None
            self._grasp = None
            self._end_stall(self.t)
            self.events = []
            self.t_episode = None
            if self.grip > 0.5:
                self.grip_target = 0.0
            for hook in self.on_reset:
                hook()

    def ground_truth(self) -> dict[str, Any]:
        with self.lock:
            t0 = self.t_episode if self.t_episode is not None else self._t0
            counts = {s.value: 0 for s in keys.ItemState}
            for it in self.items:
                counts[(it.fall[2] if it.fall else it.state).value] += 1
            events = sorted(self.events, key=lambda e: e.t)
            placements = [e for e in events if e.kind == "placed"]
            return {
                "format": "proctor.sim_ground_truth/1",
                "object": self.spec.name,
                "items": len(self.items),
                "seed": self.seed,
                "tote_side": self.layout.tote_side.value,
                "camera_side": self.layout.camera_side.value,
                "t_start": t0,
                # a placement's time is when the item left the fingers (the release or slip)
                "placements_s": sorted(round(e.details["t_release"] - t0, 6) for e in placements),
                "final": counts,
                "events": [
                    {
                        "t": round(e.t, 6),
                        "t_s": round(e.t - t0, 6),
                        "kind": e.kind,
                        "item": e.item,
                        "xyz": [round(e.x, 5), round(e.y, 5), round(e.z, 5)],
                        **({"details": e.details} if e.details else {}),
                    }
                    for e in events
                ],
            }

    def all_handled(self) -> bool:
        """The source bin is empty, the gripper is empty and nothing is falling.

        Items dropped on the table are failures the operator counts; the
        simulated operator does not wait for them to be recovered."""
        with self.lock:
            self.sync()
            busy = (keys.ItemState.source, keys.ItemState.held)
            return not any(it.fall is not None or it.state in busy for it in self.items)

    def items_array(self) -> np.ndarray:
        """(N, 4): x, y, z, state code (the destination state while an item falls)."""
        out = np.empty((len(self.items), 4))
        for i, it in enumerate(self.items):
            out[i, :3] = it.pos
            out[i, 3] = (it.fall[2] if it.fall else it.state).code
        return out

    # -- arm ----------------------------------------------------------------
    def _fk(self) -> None:
        self.origins, self.axes, self.tool = kin.forward(self.q)
        self._jac: np.ndarray | None = None
        self._ee_pose: np.ndarray | None = None

    @property
    def jac(self) -> np.ndarray:
        if self._jac is None:
            self._jac = kin.jacobian(self.origins, self.axes)
        return self._jac

    @property
    def tcp(self) -> np.ndarray:
        return self.tool[:3, 3]

    def ee_pose(self) -> np.ndarray:
        if self._ee_pose is None:  # once per arm motion step, however many readers
            self._ee_pose = np.concatenate(
                [self.tool[:3, 3], kin.matrix_to_quat(self.tool[:3, :3])]
            )
        return self._ee_pose.copy()

    def tcp_velocity(self) -> np.ndarray:
        return self.jac @ self.dq

    def tcp_speed(self) -> float:
        if not self.dq.any():
            return 0.0
        v = self.jac[:3] @ self.dq
        return math.sqrt(float(v @ v))

    def clip_command(self, command: ArmCommand) -> ArmCommand:
        """The command the arm accepts: joint targets within limits, poses within
        reach, speeds within the station's limits."""
        p = self.params
        target = command.target.copy()
        kind = command.kind
        if kind == ArmCommandKind.joint_position:
            target = np.clip(target, Q_MIN, Q_MAX)
        elif kind == ArmCommandKind.joint_velocity:
            # all joints alike, as the physics does: clipping each joint on its
            # own would change the direction the envelope checked
            over = float((np.abs(target) * _INV_DQ_MAX).max())
            if over > 1.0:
                target = target / over
        elif kind == ArmCommandKind.cartesian_pose:
            target[:3] = np.clip(target[:3], *CARTESIAN_BOX)
            target[3:] = target[3:] / np.linalg.norm(target[3:])
        else:
            v, w = target[:3], target[3:]
            nv, nw = np.linalg.norm(v), np.linalg.norm(w)
            if nv > p.v_max:
                target[:3] = v * (p.v_max / nv)
            if nw > p.w_max:
                target[3:] = w * (p.w_max / nw)
        return replace(command, target=target)

    def command_arm(self, command: ArmCommand, speed_scale: float = 1.0) -> ArmCommand:
        """Start ``command``; ``speed_scale`` (0, 1] lowers the speed limits of a
        position command (homing moves slowly, as the real arm's does)."""
        with self.lock:
            self.sync()
            if self.error is not None:
                raise ArmFault(f"arm in error, recover first: {self.error}")
            sent = self.clip_command(command)
            self._speed_scale = min(max(float(speed_scale), 0.01), 1.0)
            cartesian = (ArmCommandKind.cartesian_pose, ArmCommandKind.cartesian_velocity)
            if sent.kind in cartesian and (
                self.command is None or self.command.kind not in cartesian
            ):
                # start from the motion the arm already has
                self._twist = self.tcp_velocity()
            self.command = sent
            self._target_rot = None
            self._stopping = False
            return sent

    def stop_arm(self) -> None:
        with self.lock:
            self.sync()
            self.command = None
            self._stopping = True

    def recover(self) -> None:
        with self.lock:
            self.sync()
            self.error = None
            self.command = None
            self.dq[:] = 0
            self._twist[:] = 0

    def _desired_dq(self) -> np.ndarray:
        p = self.params
        cmd = self.command
        if cmd is None:
            return np.zeros(7)
        if cmd.kind == ArmCommandKind.joint_position:
            e = cmd.target - self.q
            if not self.dq.any() and float(np.abs(e).max()) < 1e-7:
                return np.zeros(7)  # there, at rest
            # the fastest speed that can still stop in time, at most e / τ
            speed = np.minimum.reduce(
                [
                    kin.DQ_MAX * self._speed_scale,
                    np.sqrt(2 * kin.DDQ_MAX * 0.8 * np.abs(e)),
                    np.abs(e) / p.time_constant,
                ]
            )
            return np.sign(e) * speed
        if cmd.kind == ArmCommandKind.joint_velocity:
            return cmd.target
        if cmd.kind == ArmCommandKind.cartesian_pose:
            e = cmd.target[:3] - self.tool[:3, 3]
            dist = math.sqrt(float(e @ e))
            if self._target_rot is None:
                self._target_rot = kin.quat_to_matrix(cmd.target[3:])
            r_err = kin.rotation_error(self._target_rot, self.tool[:3, :3])
            ang = math.sqrt(float(r_err @ r_err))
            if dist < 1e-6 and ang < 1e-5 and not self._twist.any() and not self.dq.any():
                return np.zeros(7)  # there, at rest
            scale = self._speed_scale
            speed = min(
                p.v_max * scale,
                math.sqrt(2 * p.a_max * 0.8 * dist),
                dist / p.time_constant,
                cmd.max_tool_speed or math.inf,
            )
            desired = np.zeros(6)
            if dist > 1e-9:
                desired[:3] = e * (speed / dist)
            if ang > 1e-9:
                desired[3:] = r_err * (min(p.w_max * scale, ang / p.time_constant) / ang)
        else:
            desired = cmd.target
        # acceleration limit in Cartesian space (linear part)
        dv = desired - self._twist
        lin = math.sqrt(float(dv[:3] @ dv[:3]))
        if lin > p.a_max * self.dt:
            dv[:3] *= p.a_max * self.dt / lin
        self._twist = self._twist + dv
        if not self._twist.any():
            return np.zeros(7)
        return kin.dls(self.jac, self._twist)

    def _step_arm(self) -> None:
        p = self.params
        if self.error is not None:
            self.dq[:] = 0
            return
        stopped = self._stopping and self.command is None
        desired = np.zeros(7) if stopped else self._desired_dq()
        # velocity and acceleration limits scale all joints alike, so the
        # tool keeps its direction (what the robot's own controller does)
        over = float((np.abs(desired) * _INV_DQ_MAX).max())
        if over > 1.0:
            desired = desired / over
        step = desired - self.dq
        # a stop brakes three times harder than normal motion accelerates
        over = float((np.abs(step) * _INV_DDQ_MAX).max()) / (
            self.dt * (3.0 if self._stopping else 1.0)
        )
        if over > 1.0:
            step = step / over
        dq = self.dq + step
        if float(np.abs(dq).max()) < 1e-9:
            if not self.dq.any():
                return
            dq[:] = 0.0
        q = self.q + dq * self.dt
        at_limit = (q < Q_MIN) | (q > Q_MAX)
        if at_limit.any():
            q = np.clip(q, Q_MIN, Q_MAX)
            dq[at_limit] = 0
        cap = self.command.max_tool_speed if self.command is not None else None
        if cap is not None and p.enforce_tool_speed:
            # the command's tool speed cap (the station's envelope), for every
            # kind of command and after the joint limits (a joint stopped at its
            # limit can leave the others moving the tool faster): the joints
            # slow down together, the tool keeps its direction
            v = self.jac[:3] @ dq
            speed = math.sqrt(float(v @ v))
            if speed > cap:
                dq = dq * (cap / speed)
                q = np.clip(self.q + dq * self.dt, Q_MIN, Q_MAX)
        old_tcp = self.tcp.copy()
        origins, axes, tool = kin.forward(q)
        new_tcp = tool[:3, 3]
        contact = self._contact(old_tcp, new_tcp)
        if contact is not None:
            d = new_tcp - old_tcp
            speed = math.sqrt(float(d @ d)) / self.dt
            self.dq[:] = 0
            self._twist[:] = 0
            if speed > p.reflex_speed:
                self.error = (
                    # libfranka's flag for a collision reflex, as the real arm reports it
                    f"cartesian_reflex: contact with the {contact} at {speed:.2f} m/s "
                    f"(limit {p.reflex_speed:.2f} m/s)"
                )
                self.command = None
                self._log("contact", None, new_tcp, {"with": contact, "speed": round(speed, 3)})
            return  # blocked: the arm does not move into the obstacle
        self.q, self.dq = q, dq
        self.origins, self.axes, self.tool = origins, axes, tool
        self._jac = None
        self._ee_pose = None
        if self._stopping and not self.dq.any():
            self._stopping = False

    def _contact(self, old: np.ndarray, new: np.ndarray) -> str | None:
        """What the fingers would run into moving old → new (only moves that go deeper)."""
        p = self.params
        if new[2] < p.floor_clearance and new[2] < old[2]:
            inside = self.layout.source.inside(new[0], new[1]) or self.layout.target.inside(
                new[0], new[1]
            )
            return "bin floor" if inside else "table"
        for name, b in (("source", self.layout.source), ("target", self.layout.target)):
            if new[2] >= b.height:
                continue
            reach = b.wall / 2 + p.finger_radius
            d_new = b.wall_distance(new[0], new[1])
            if d_new >= reach:
                continue
            d_old = b.wall_distance(old[0], old[1])
            if new[2] > old[2] and d_new >= d_old - 1e-5:
                # rising along a wall (or brushing it by a few µm of path error
                # on the way up) never pushes into it: how a stuck tool gets out
                continue
            was_in = d_old < reach and old[2] < b.height
            # into the wall, sideways or from above; moving out of it is allowed
            if not was_in or d_new < d_old - 1e-9 or new[2] < old[2] - 1e-9:
                return f"{name} bin wall"
        return None

    # -- gripper ------------------------------------------------------------
    # The fingers' physics, on the station clock to the microsecond rather than
    # on the 100 Hz physics grid: within a step the fingers move at a constant
    # speed, so the instants they touch an item, stall on it, and open wide
    # enough to let it go are solved exactly. The ground truth's times are
    # those instants. What the gripper *reports* (position, object flag) is
    # sampled from the finger log below by the driver (``proctor.station.sim.gripper``)
    # the way a 2F-85 is polled over Modbus: late, at ≈ 50 Hz, in 8-bit steps.

    def command_gripper(self, position: float, speed: float, force: float) -> None:
        with self.lock:
            self.sync()
            if position > self.grip_target + 1e-9 and self.held is None:
                self._grasp_rolled = False
            grasp = self._grasp
            if grasp is not None and position < grasp.contact <= self.grip_target:
                # a new goal below the item: the gripper reports "moving" at once
                self._end_stall(self.t)
            self.grip_target = position
            self.grip_speed = speed
            self.grip_force = force

    def finger_position_at(self, t: float) -> float:
        """The fingers' true position at station time ``t`` (at most the
        world's time, and within the last few seconds of finger motion)."""
        times, values = self._finger_t, self._finger_g
        i = bisect.bisect_right(times, t)
        if i == 0:
            return values[0]
        if i == len(times):
            return values[-1]
        t0, t1 = times[i - 1], times[i]
        g0, g1 = values[i - 1], values[i]
        return g0 + (g1 - g0) * (t - t0) / (t1 - t0) if t1 > t0 else g1

    def stalled_on_object(self, t: float, detect_s: float = 0.0) -> bool:
        """Whether at ``t`` the fingers had sat stalled on an item for at least
        ``detect_s`` (the gripper's own object detection needs that long)."""
        for t_on, t_off in reversed(self._stalls):
            if t_on + detect_s <= t < t_off:
                return True
            if t_off <= t:
                break
        return False

    def _finger_point(self, t: float, g: float) -> None:
        times = self._finger_t
        if times and t <= times[-1] + 1e-12:
            self._finger_g[-1] = g
            return
        times.append(t)
        self._finger_g.append(g)
        if len(times) > 1024:  # the driver looks back a few tens of milliseconds
            del times[:512], self._finger_g[:512]

    def _end_stall(self, t: float) -> None:
        if self._stalls and self._stalls[-1][1] == math.inf:
            self._stalls[-1][1] = t

    def _step_gripper(self) -> None:
        p = self.params
        if not self.grip_activated or self.grip_fault:
            return
        t_end = self.t
        t = t_end - self.dt
        g = g_start = self.grip
        rate = (0.2 + 0.8 * self.grip_speed) / p.gripper_stroke_s
        slip_at = self._slip_time(t) if self.held is not None else None
        hold = self.spec.hold_position
        events: list[tuple[float, float]] = []
        for _ in range(16):  # a handful of events a step at most
            grasp = self._grasp
            goal, r = self._finger_goal(grasp, g, rate)
            if abs(goal - g) <= 1e-12:  # at rest for the rest of the step
                g = goal
                if slip_at is None:
                    break
                t, slip_at = slip_at, None
                events.append((t, g))
                self._release(self.held, "slip", t)  # type: ignore[arg-type]
                continue
            ev_g, kind = goal, "goal"
            if self.held is None and not self._grasp_rolled and g < hold <= goal:
                ev_g, kind = hold, "touch"
            elif grasp is not None and goal < grasp.free_below < g:
                ev_g, kind = grasp.free_below, "free"
            t_ev = t + abs(ev_g - g) / r
            if slip_at is not None and slip_at <= min(t_ev, t_end):
                g += math.copysign(r * (slip_at - t), goal - g)
                t, slip_at = slip_at, None
                events.append((t, g))
                self._release(self.held, "slip", t)  # type: ignore[arg-type]
                continue
            if t_ev > t_end:
                g += math.copysign(r * (t_end - t), goal - g)
                break
            g, t = ev_g, t_ev
            events.append((t, g))
            if kind == "touch":
                self._maybe_grasp(t)
            elif kind == "free":
                slip_at = None
                self._release(self.held, "release", t)  # type: ignore[arg-type]
            else:
                self._maybe_stall(t, goal, grasp)
        if g != g_start or events:
            if self._finger_t[-1] < t_end - self.dt - 1e-12:
                self._finger_point(t_end - self.dt, g_start)  # at rest until this step
            for te, ge in events:
                self._finger_point(te, ge)
            self._finger_point(t_end, g)
        self.grip = g

    def _finger_goal(self, grasp: _Grasp | None, g: float, rate: float) -> tuple[float, float]:
        """Where the fingers are heading from ``g`` in this stretch, and how fast."""
        target = self.grip_target
        if grasp is not None and target >= grasp.contact:
            # closing on the item: full speed to the touch, then slowly
            # squeezing it up to where the force balances (or the target)
            if g < grasp.contact - 1e-12:
                return grasp.contact, rate
            return min(target, grasp.stall), rate * self.params.squeeze_speed
        return target, rate

    def _maybe_stall(self, t: float, goal: float, grasp: _Grasp | None) -> None:
        """The fingers reached ``goal`` at ``t``: if that is the squeeze's end
        on a held item, they stall there, which the gripper detects as an object."""
        if (
            grasp is not None
            and self.held is not None
            and goal == grasp.stall
            and not (self._stalls and self._stalls[-1][1] == math.inf)
        ):
            self._stalls.append([t, math.inf])
            if len(self._stalls) > 64:
                del self._stalls[:32]

    def _slip_time(self, t_start: float) -> float | None:
        """When (if at all) the held item slips out during this step: hazard
        ``slip_rate · (1 + (v / 0.5 m/s)²)`` per second, v the tool's speed."""
        speed = self.tcp_speed()
        hazard = self.spec.slip_rate * (1 + (speed / 0.5) ** 2)
        chance = 1 - math.exp(-hazard * self.dt)
        u = self._rng.random()
        if u >= chance:
            return None
        return t_start + self.dt * (u / chance)  # uniform within the step, given a slip

    def _maybe_grasp(self, t: float) -> None:
        """Roll the grasp when the closing fingers reach the item's width."""
        spec = self.spec
        if self._grasp_rolled:
            return
        self._grasp_rolled = True
        tcp = self.tcp
        best, best_d = None, math.inf
        for it in self.items:
            if it.fall is not None or it.state not in (
                keys.ItemState.source,
                keys.ItemState.dropped,
            ):
                continue
            d = math.hypot(it.pos[0] - tcp[0], it.pos[1] - tcp[1])
            dz = tcp[2] - it.pos[2]
            if d < spec.radius and -spec.height < dz < spec.height / 2 + 0.02 and d < best_d:
                best, best_d = it, d
        if best is None:
            return
        speed = self.tcp_speed()
        # aim error, and a moving hand closes on a moving target
        chance = spec.grasp_base * math.exp(-0.5 * (best_d / spec.grasp_tolerance) ** 2)
        chance *= math.exp(-speed / 0.15)
        details: dict[str, Any] = {"aim_error_m": round(best_d, 4), "p": round(chance, 3)}
        if self._rng.random() < chance:
            details["from"] = best.state.value
            self.held = best.index
            best.state = keys.ItemState.held
            # how far the fingers squeeze it (pads and a soft item compress in
            # proportion to the force), and how far past its width they must
            # open before it comes free: an item held off-centre or tilted in
            # the pads, or cloth springing back after the squeeze, stays in the
            # fingers a little longer, differently every grasp
            squeeze = spec.squeeze * self.grip_force / 0.5
            clearance = spec.release_clearance * self._rng.uniform(0.15, 1.0)
            self._grasp = _Grasp(
                contact=spec.hold_position,
                stall=min(spec.hold_position + squeeze, 0.995),
                free_below=spec.hold_position - clearance,
            )
            details["squeeze"] = round(squeeze, 4)
            details["free_below"] = round(self._grasp.free_below, 4)
            self._log("grasp", best.index, best.pos, details, t=t)
        else:
            # the fingers push it aside
            push = self._rng.normal(0, 0.012, size=2)
            best.pos[:2] += push
            self._settle(best)
            self._log("grasp_miss", best.index, best.pos, details, t=t)

    def _release(self, index: int, kind: str, t: float) -> None:
        """The item leaves the fingers at station time ``t`` (within this step)."""
        it = self.items[index]
        self.held = None
        self._grasp = None
        self._end_stall(t)
        v = self.tcp_velocity()[:3]
        # where the tool was at that instant, between the step's two poses
        frac = min(max((t - (self.t - self.dt)) / self.dt, 0.0), 1.0)
        at = self._tcp_prev + (self.tcp - self._tcp_prev) * frac
        it.pos[:] = at - [0.0, 0.0, self.spec.height * 0.3]
        z0 = float(it.pos[2])
        floor = self.spec.height / 2
        t_fall = math.sqrt(max(2 * (z0 - floor), 0.0) / G)
        land = it.pos.copy()
        land[:2] += v[:2] * t_fall
        land[2] = floor
        dest = self._classify_landing(land, v)
        it.state = dest  # destination (keeps `held` out of the counts)
        it.fall = (t + t_fall, land, dest)
        it.fall_start = (t, it.pos.copy(), v.copy())
        self._log(kind, index, it.pos, {"lands": dest.value, "t_fall": round(t_fall, 4)}, t=t)
        outcome = {
            keys.ItemState.placed: "placed",
            keys.ItemState.source: "returned",
            keys.ItemState.dropped: "dropped",
            keys.ItemState.lost: "lost",
        }[dest]
        self._log(outcome, index, land, {"t_release": round(t, 6), "cause": kind}, t=t)

    def _classify_landing(self, land: np.ndarray, v: np.ndarray) -> keys.ItemState:
        lay = self.layout
        for b, state in ((lay.target, keys.ItemState.placed), (lay.source, keys.ItemState.source)):
            r = min(self.spec.radius, 0.04)
            if b.inside(land[0], land[1], margin=r * 0.25):
                land[0] = min(max(land[0], b.cx - b.half_x + r * 0.5), b.cx + b.half_x - r * 0.5)
                land[1] = min(max(land[1], b.cy - b.half_y + r * 0.5), b.cy + b.half_y - r * 0.5)
                return state
            if b.wall_distance(land[0], land[1]) < b.wall + r * 0.5:
                # on the rim: it tips one way or the other
                if self._rng.random() < 0.5:
                    land[0] = min(max(land[0], b.cx - b.half_x + r), b.cx + b.half_x - r)
                    land[1] = min(max(land[1], b.cy - b.half_y + r), b.cy + b.half_y - r)
                    return state
                out = np.sign(land[:2] - [b.cx, b.cy]) * (b.wall + r)
                land[:2] += out
        # on the table it slides on (friction μ ≈ 0.4), then is either still
        # within the arm's reach (dropped: pickable) or not (lost)
        vh = math.hypot(v[0], v[1])
        if vh > 1e-6:
            slide = self.spec.rolls * vh * vh / (2 * 0.4 * G)
            land[0] += v[0] / vh * slide
            land[1] += v[1] / vh * slide
        return keys.ItemState.dropped if lay.in_workspace(land[0], land[1]) else keys.ItemState.lost

    def _settle(self, it: Item) -> None:
        """Keep an item that was pushed inside the container it was in."""
        for b in (self.layout.source, self.layout.target):
            if b.inside(it.pos[0], it.pos[1], margin=-0.05):
                m = min(self.spec.radius, 0.04) * 0.5
                it.pos[0] = min(max(it.pos[0], b.cx - b.half_x + m), b.cx + b.half_x - m)
                it.pos[1] = min(max(it.pos[1], b.cy - b.half_y + m), b.cy + b.half_y - m)
                return

    def _step_items(self) -> None:
        t = self.t
        if self.held is not None:
            it = self.items[self.held]
            it.pos[:] = self.tcp - [0.0, 0.0, self.spec.height * 0.3]
        for it in self.items:
            if it.fall is None:
                continue
            t_land, land, _ = it.fall
            if t >= t_land - 1e-9:
                it.pos[:] = land
                it.fall = None
                it.fall_start = None
            elif it.fall_start is not None:
                t0, p0, _ = it.fall_start
                s = t - t0
                frac = min(1.0, s / max(t_land - t0, 1e-6))
                it.pos[:2] = p0[:2] + (land[:2] - p0[:2]) * frac
                it.pos[2] = p0[2] - 0.5 * G * s * s

    # -- stepping -----------------------------------------------------------
    def _step(self) -> None:
        self._k += 1
        self._tcp_prev = self.tool[:3, 3].copy()
        self._step_arm()
        self._step_gripper()
        self._step_items()
        if self.sinks:
            t = self.t
            for sink in self.sinks:
                if sink.next_t is None:
                    sink.next_t = t
                if t >= sink.next_t - 1e-9:
                    sink.offer(self.snapshot(sink.next_index))
                    sink.next_index += 1
                    # next frame on the camera's own grid, never in the past
                    sink.next_t += sink.period
                    if sink.next_t <= t:
                        sink.next_t = t + sink.period

    def snapshot(self, index: int) -> Snapshot:
        items = np.empty((len(self.items), 5))
        for i, it in enumerate(self.items):
            items[i, :3] = it.pos
            items[i, 3] = it.yaw
            items[i, 4] = it.state.code
        return Snapshot(
            t=self.t,
            index=index,
            layout=self.layout,
            spec=self.spec,
            origins=self.origins.copy(),
            tool=self.tool.copy(),
            gripper=self.grip,
            items=items,
        )

    def add_sink(self, sink: CameraSink) -> None:
        with self.lock:
            self.sinks.append(sink)

    def remove_sink(self, sink: CameraSink) -> None:
        with self.lock:
            if sink in self.sinks:
                self.sinks.remove(sink)

    def _log(
        self,
        kind: str,
        item: int | None,
        pos: np.ndarray,
        details: dict[str, Any],
        t: float | None = None,
    ) -> None:
        self.events.append(
            GroundTruthEvent(
                self.t if t is None else t,
                kind,
                item,
                float(pos[0]),
                float(pos[1]),
                float(pos[2]),
                details,
            )
        )
