"""Scripted demo policies and a near-optimal "human reference" agent.

They are served over the real policy wire (``proctor policy serve-demo``)
and drive the simulated cell like a policy would: Cartesian-position action
chunks at 15 Hz. They cheat in one documented way: they read the simulated
cell's privileged ``sim/…`` observation keys (where the items and bins are,
the episode's seed and time) instead of looking at the images, so a demo
policy refuses to run on a cell that does not send them (a real station).

Each controller loops pick → carry → release, with a personality: speed,
aim error, hover height, dwell times, hesitation, path jitter and, for the
hasty ones, a risky diagonal approach that can clip a bin wall (a collision
reflex: safety stop). The profiles are tuned so that on the simulated cell:

* ``reference`` — a practised teleoperator: quick, precise, calm. Fastest.
* ``swift`` vs ``steady`` — the crossing pair: swift places its successes
  sooner but misses, drops and occasionally crashes; steady is slow but
  rarely fails, so their time-to-success CDFs cross.
* ``balanced`` vs ``dawdler`` — close in everything but hesitation; needs
  many episodes to separate.
* ``clumsy`` — aims poorly: many regrasps, some items never placed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proctor.policywire.serving import dialects as serving_dialects
from proctor.policywire.wire import keys

CONTROL_HZ = 15.0  # DROID's control rate: the station's default control_hz
DOWN = (math.pi, 0.0, 0.0)  # roll, pitch, yaw: the fingers pointing at the table
_HELD = keys.ItemState.held.code


@dataclass(frozen=True)
class DemoProfile:
    name: str
    description: str
    speed: float  # m/s while carrying or travelling
    descent_speed: float  # m/s in and out of the bins
    aim_sigma: float  # m: aim error per attempt
    hover: float  # m above the bin rim while travelling
    grasp_dwell_s: float  # waiting with closed fingers before lifting
    release_dwell_s: float  # waiting with open fingers before leaving
    pause_prob: float = 0.0  # chance of hesitating before an item
    pause_mean_s: float = 0.0
    risky_prob: float = 0.0  # chance of a diagonal approach that may clip a wall
    jitter: float = 0.0  # m: noise on every commanded position
    recovers_drops: bool = True  # goes back for items dropped on the table, first
    decel: float = 2.5  # m/s²: how gently it brings a move to rest (hasty ones stop short)
    careful_near_walls: bool = True  # creeps down when the fingers come close to a wall
    release_early: bool = False  # opens the fingers while still moving in: items fly a little
    drop_spread: float = 0.55  # where in the target bin it lets go, as a fraction of its half size
    chunk: int = 10  # actions per reply
    # the wire it is served on: "roboarena", "openpi" (metadata styles of the openpi
    # protocol) or "positronic_v1" (served by positronic_server.PositronicServer)
    dialect: str = "roboarena"
    image_size: tuple[int, int] | None = (96, 128)  # what the server asks for (H, W)
    reference: bool = False


DEMO_PROFILES: dict[str, DemoProfile] = {
    p.name: p
    for p in (
        DemoProfile(
            name="reference",
            description="near-optimal 'human reference' teleoperator: quick, precise, calm",
            speed=0.85,
            descent_speed=0.32,
            aim_sigma=0.002,
            hover=0.05,
            grasp_dwell_s=0.15,
            release_dwell_s=0.10,
            chunk=4,  # a person reacts continuously: short chunks
            reference=True,
        ),
        DemoProfile(
            name="swift",
            description="fast but unreliable: hurried aim, low hover, risky approaches",
            speed=1.0,
            descent_speed=0.32,
            aim_sigma=0.006,
            hover=0.02,
            grasp_dwell_s=0.02,
            release_dwell_s=0.0,
            risky_prob=0.006,
            jitter=0.002,
            recovers_drops=False,
            decel=6.0,
            release_early=True,
            drop_spread=0.9,
        ),
        DemoProfile(
            name="steady",
            description="slow but steady: careful aim, long dwells, the odd pause",
            speed=0.28,
            descent_speed=0.12,
            aim_sigma=0.003,
            hover=0.08,
            grasp_dwell_s=0.5,
            release_dwell_s=0.35,
            pause_prob=0.2,
            pause_mean_s=1.5,
            jitter=0.001,
            dialect="positronic_v1",
        ),
        DemoProfile(
            name="balanced",
            description="middle of the road",
            speed=0.55,
            descent_speed=0.22,
            aim_sigma=0.006,
            hover=0.05,
            grasp_dwell_s=0.25,
            release_dwell_s=0.15,
            pause_prob=0.15,
            pause_mean_s=1.0,
            risky_prob=0.002,
            jitter=0.002,
        ),
        DemoProfile(
            name="dawdler",
            description="like balanced, but hesitates a little more often",
            speed=0.55,
            descent_speed=0.22,
            aim_sigma=0.006,
            hover=0.05,
            grasp_dwell_s=0.25,
            release_dwell_s=0.15,
            pause_prob=0.3,
            pause_mean_s=1.2,
            risky_prob=0.002,
            jitter=0.002,
            dialect="openpi",
        ),
        DemoProfile(
            name="clumsy",
            description="poor aim and shaky hands: many regrasps, some items never placed",
            speed=0.6,
            descent_speed=0.25,
            aim_sigma=0.016,
            hover=0.04,
            grasp_dwell_s=0.2,
            release_dwell_s=0.1,
            pause_prob=0.1,
            pause_mean_s=1.0,
            risky_prob=0.004,
            jitter=0.004,
            recovers_drops=False,
            decel=4.0,
            careful_near_walls=False,
        ),
    )
}


def demo_profile(name: str) -> DemoProfile:
    try:
        return DEMO_PROFILES[name]
    except KeyError:
        raise ValueError(
            f"demo profile '{name}' is unknown; known: {', '.join(DEMO_PROFILES)}"
        ) from None


# -- plans --------------------------------------------------------------------


@dataclass
class Move:
    target: np.ndarray  # (3,)
    speed: float
    tol: float = 0.008
    # wait for the arm to get there before the next segment: a position-controlled
    # arm lags its targets and would cut the corner (into a bin wall) otherwise
    settle: bool = True


@dataclass
class Hold:
    """Stay put for ``dwell_s`` with the fingers commanded to ``grip``."""

    grip: float
    dwell_s: float
    started: float | None = None  # episode time of its first emitted row


Segment = Move | Hold


class MissingSimKeys(ValueError):
    pass


@dataclass
class ScriptedController:
    """One episode's controller (one connection)."""

    profile: DemoProfile
    seed_salt: int = 0
    rng: np.random.Generator | None = None
    mode: str = ""
    plan: list[Segment] = field(default_factory=list)
    plan_started: float = 0.0
    grip_cmd: float = 0.0
    calls: int = 0
    # attempts per item; an item tried this often is left for later (or for good, if dropped)
    attempts: dict[int, int] = field(default_factory=dict)
    target: int | None = None

    def reset(self) -> None:
        self.rng = None
        self.mode = ""
        self.plan = []
        self.grip_cmd = 0.0
        self.attempts = {}
        self.target = None

    # -- the protocol -------------------------------------------------------
    def infer(self, obs: dict[str, Any]) -> dict[str, Any]:
        missing = [k for k in (keys.SIM_ITEMS, keys.SIM_TARGET_BIN, keys.SIM_TIME) if k not in obs]
        if missing:
            raise MissingSimKeys(
                "demo policies need the simulated cell's privileged observation keys "
                f"(missing {', '.join(missing)}); they cannot run on a real station"
            )
        if self.rng is None:
            seed = int(np.asarray(obs.get(keys.SIM_SEED, [0])).ravel()[0])
            self.rng = np.random.default_rng([self.seed_salt, seed & 0xFFFFFFFF])
        self.calls += 1
        tcp = np.asarray(obs[keys.OBS_CARTESIAN_POSITION], dtype=np.float64)[:3]
        grip = float(np.asarray(obs[keys.OBS_GRIPPER_POSITION]).ravel()[0])
        items = np.asarray(obs[keys.SIM_ITEMS], dtype=np.float64)
        t = float(np.asarray(obs[keys.SIM_TIME]).ravel()[0])
        holding = bool((items[:, 3] == _HELD).any()) if len(items) else False
        mode = "holding" if holding else "empty"

        stalled = t - self.plan_started > 15.0
        if mode != self.mode or stalled:
            self._replan(mode, obs, tcp, grip, items, t)
        self._advance(tcp, t)
        if not self.plan and mode == "empty":
            # the pick ended with nothing in hand: a missed grasp (or a slip): again
            self._replan(mode, obs, tcp, grip, items, t)
        return {keys.REPLY_ACTIONS: self._emit(tcp, t)}

    # -- planning -----------------------------------------------------------
    def _replan(
        self,
        mode: str,
        obs: dict[str, Any],
        tcp: np.ndarray,
        grip: float,
        items: np.ndarray,
        t: float,
    ) -> None:
        p = self.profile
        rng = self.rng
        assert rng is not None  # set on the first call
        rim = float(np.asarray(obs.get(keys.SIM_BIN_HEIGHT, [0.08])).ravel()[0])
        travel = rim + p.hover
        plan: list[Segment] = []
        self.mode = mode
        self.plan_started = t
        if mode == "holding":
            target_bin = np.asarray(obs[keys.SIM_TARGET_BIN], dtype=np.float64)
            cx, cy, hx, hy = target_bin
            spread = p.drop_spread
            drop = np.array(
                [cx + rng.uniform(-spread, spread) * hx, cy + rng.uniform(-spread, spread) * hy]
            )
            self.grip_cmd = 1.0  # keep holding it
            plan.append(Hold(1.0, p.grasp_dwell_s))
            if tcp[2] < travel - 0.02:
                plan.append(Move(np.array([tcp[0], tcp[1], travel]), p.descent_speed))
            plan.append(
                Move(np.array([drop[0], drop[1], travel]), p.speed, settle=not p.release_early)
            )
            plan.append(
                Move(
                    np.array([drop[0], drop[1], rim + 0.03]),
                    p.descent_speed,
                    tol=0.03 if p.release_early else 0.008,
                    settle=not p.release_early,
                )
            )
            plan.append(Hold(0.0, 0.45 + p.release_dwell_s))  # the fingers take ~0.45 s to let go
            plan.append(Move(np.array([drop[0], drop[1], travel]), p.descent_speed))
            self.plan = plan
            return

        codes = items[:, 3] if len(items) else np.empty(0)
        tries = np.array([self.attempts.get(i, 0) for i in range(len(codes))], dtype=int)
        dropped = np.flatnonzero((codes == keys.ItemState.dropped.code) & (tries < 3))
        if p.recovers_drops and len(dropped):
            pickable = dropped  # clear up the table before it is forgotten
        else:
            in_source = np.flatnonzero(codes == keys.ItemState.source.code)
            # items that keep slipping away are tried again only after the others
            fresh = in_source[tries[in_source] < 4] if len(in_source) else in_source
            pickable = fresh if len(fresh) else in_source
        if grip > 0.08 or self.grip_cmd > 0.0:
            plan.append(Hold(0.0, 0.5))  # open before going for the next one
        if len(pickable) == 0:
            # nothing left to pick: wait at the travel height
            plan.append(Move(np.array([tcp[0], tcp[1], max(tcp[2], travel)]), p.descent_speed))
            self.plan = plan
            return
        d = np.hypot(items[pickable, 0] - tcp[0], items[pickable, 1] - tcp[1])
        # the nearest of the top few, with a human-like bit of arbitrariness
        order = pickable[np.argsort(d)]
        choice = int(order[min(len(order) - 1, int(rng.integers(0, 2)))])
        self.attempts[choice] = self.attempts.get(choice, 0) + 1
        self.target = choice
        item = items[choice]
        aim = item[:2] + rng.normal(0.0, p.aim_sigma, size=2)
        # fingertips a few millimetres above the floor, never into it
        z_grasp = max(float(item[2]), 0.012)
        if p.pause_prob and rng.random() < p.pause_prob:
            plan.append(Hold(0.0, float(rng.exponential(p.pause_mean_s))))
        if p.risky_prob and rng.random() < p.risky_prob:
            # straight at the item: fast, and through the wall if it is in the way
            plan.append(Move(np.array([aim[0], aim[1], z_grasp + 0.01]), p.speed, settle=False))
        else:
            if tcp[2] < travel - 0.02 and math.hypot(*(aim - tcp[:2])) > 0.02:
                plan.append(Move(np.array([tcp[0], tcp[1], travel]), p.descent_speed))
            plan.append(Move(np.array([aim[0], aim[1], travel]), p.speed))
        descent = p.descent_speed
        if p.careful_near_walls and _near_wall(obs, aim, 0.035):
            descent = min(descent, 0.15)
        plan.append(Move(np.array([aim[0], aim[1], z_grasp]), descent, tol=0.004))
        plan.append(Hold(1.0, 0.6 + p.grasp_dwell_s))  # closing takes ~0.6 s
        plan.append(Move(np.array([aim[0], aim[1], travel]), p.descent_speed))
        self.plan = plan

    def _advance(self, tcp: np.ndarray, t: float) -> None:
        """Drop the segments the observation shows are done."""
        while self.plan:
            seg = self.plan[0]
            if isinstance(seg, Move):
                if float(np.linalg.norm(seg.target - tcp)) > max(
                    seg.tol, 2.5 * self.profile.jitter
                ):
                    return
            elif seg.started is None or t < seg.started + seg.dwell_s:
                return
            if isinstance(seg, Hold):
                self.grip_cmd = seg.grip
            self.plan.pop(0)

    def _emit(self, tcp: np.ndarray, t: float) -> np.ndarray:
        p = self.profile
        rng = self.rng
        assert rng is not None
        dt = 1.0 / CONTROL_HZ
        rows = np.empty((p.chunk, 7))
        pos = tcp.copy()
        grip = self.grip_cmd
        i_seg = 0
        remaining: float | None = None
        for k in range(p.chunk):
            t_row = t + k * dt
            while i_seg < len(self.plan):
                seg = self.plan[i_seg]
                if isinstance(seg, Move):
                    step = seg.target - pos
                    dist = float(np.linalg.norm(step))
                    if dist <= 1e-6:
                        i_seg += 1
                        continue
                    # slow towards the end of the move, as a person (or a planner) would
                    speed = min(seg.speed, max(0.02, math.sqrt(2 * p.decel * dist)))
                    if dist <= speed * dt:
                        pos = seg.target.copy()
                        if seg.settle:
                            i_seg = len(self.plan)  # hold here until the arm arrives
                    else:
                        pos = pos + step * (speed * dt / dist)
                    break
                # a hold: stay for its dwell
                if seg.started is None:
                    seg.started = t_row
                grip = seg.grip
                if remaining is None:
                    remaining = seg.started + seg.dwell_s - t_row
                if remaining > 0:
                    remaining -= dt
                    break
                remaining = None
                i_seg += 1
            target = pos + (rng.normal(0.0, p.jitter, size=3) if p.jitter else 0.0)
            rows[k, :3] = target
            rows[k, 3:6] = DOWN
            rows[k, 6] = grip
        return rows


def _near_wall(obs: dict[str, Any], xy: np.ndarray, margin: float) -> bool:
    """Whether (x, y) lies within ``margin`` of either bin's walls."""
    for key in (keys.SIM_SOURCE_BIN, keys.SIM_TARGET_BIN):
        if key not in obs:
            continue
        cx, cy, hx, hy = (float(v) for v in np.asarray(obs[key]).ravel()[:4])
        dx, dy = abs(xy[0] - cx) - hx, abs(xy[1] - cy) - hy
        if dx <= 0 and dy <= 0:
            if min(-dx, -dy) < margin:
                return True
        elif math.hypot(max(dx, 0.0), max(dy, 0.0)) < margin:
            return True
    return False


class DemoPolicy:
    """A ``ServedPolicy``: the profile's metadata and a controller per connection."""

    def __init__(self, profile: DemoProfile | str, seed: int = 0) -> None:
        self.profile = demo_profile(profile) if isinstance(profile, str) else profile
        self.seed = seed

    def metadata(self) -> dict[str, Any]:
        p = self.profile
        declared = {
            "image_resolution": list(p.image_size) if p.image_size else None,
            "needs_wrist_camera": True,
            "n_external_cameras": 1,
            "needs_stereo_camera": False,
            "needs_session_id": True,
            "action_space": "cartesian_position",
        }
        # as a server of the profile's dialect declares it (openpi's is free-form)
        return serving_dialects.get(p.dialect).served_metadata(declared, action_horizon=p.chunk)

    def new_session(self) -> _DemoSession:
        salt = (self.seed * 1_000_003 + sum(map(ord, self.profile.name))) & 0xFFFFFFFF
        return _DemoSession(ScriptedController(self.profile, seed_salt=salt))


class _DemoSession:
    def __init__(self, controller: ScriptedController) -> None:
        self.controller = controller

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        return self.controller.infer(observation)

    def reset(self, message: dict[str, Any]) -> None:
        self.controller.reset()


def demo_serve(
    policy: DemoPolicy, host: str = "127.0.0.1", port: int = 0, fault: Any = None
) -> Any:
    """The server for a demo policy, on the wire its profile names (not started).
    ``fault`` (a ``server.Fault``) drills the openpi server only."""
    p = policy.profile
    return serving_dialects.get(p.dialect).serve(
        policy, host=host, port=port, fault=fault, image_size=p.image_size, action_fps=CONTROL_HZ
    )
