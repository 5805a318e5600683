"""Synthetic PhAIL-like cohorts: episodes from a known generative model, for
benchmarks, simulations and demos (never for scores of real policies).

An episode presents ``items`` items with a budget of ``budget_per_item`` s
each. Attempts run back to back; each attempt lasts
``scale × z × LogNormal(0, sigma)`` seconds where z ~ Gamma(k, 1/k) is the
episode's shared slowness (the within-episode correlation the clustered
bootstrap exists for). An attempt ends as a success (a placement), a drop,
a loss, or a safety stop (which ends the episode). The episode ends when
every item is handled (``success``), at the budget (``ran_out_of_time``), or
at a safety stop. Failed attempts take time too, which the next success's
inter-success time absorbs — as on the real station.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from proctor.analysis.episodes import RAN_OUT_OF_TIME, SAFETY, SUCCESS, SYSTEM, Episode


@dataclass(frozen=True)
class PolicyModel:
    """How one policy behaves (per object: a multiplier on its speed)."""

    name: str
    scale_s: float  # median attempt duration on a speed-1 object
    sigma: float = 0.6  # log-normal spread of attempt durations
    frailty_shape: float = 4.0  # Gamma shape of the per-episode slowness (inf: none)
    # the slowness drawn anew after every success instead of once an episode:
    # each operation's time has the same law, without the within-episode
    # correlation (the "steady" arm of the hidden nulls, benchmarks/robustness.py)
    frailty_per_operation: bool = False
    p_drop: float = 0.04
    p_lost: float = 0.01
    p_safety: float = 0.005  # per attempt
    p_system: float = 0.0  # per episode: an infrastructure fault
    object_speed: Mapping[str, float] = field(default_factory=dict)
    # multiplier on attempt time when the camera and tote are on opposite sides
    opposite_side_slowdown: float = 1.0
    reference: bool = False


def simulate_episode(
    model: PolicyModel,
    obj: str,
    *,
    items: int,
    budget_per_item: float,
    rng: np.random.Generator,
    episode_id: str,
    tote: str | None = None,
    camera: str | None = None,
    tags: tuple[str, ...] = (),
) -> Episode:
    budget = items * budget_per_item
    if rng.random() < model.p_system:
        t_end = float(rng.uniform(0.1, budget))
        return Episode(
            episode_id,
            model.name,
            obj,
            items,
            t_end,
            (),
            0,
            0,
            SYSTEM,
            budget_s=budget,
            tote_placement=tote,
            external_camera=camera,
            reference=model.reference,
            object_tags=tags,
        )

    def slowness() -> float:
        if not np.isfinite(model.frailty_shape):
            return 1.0
        return float(rng.gamma(model.frailty_shape, 1.0 / model.frailty_shape))

    z = slowness()
    speed = model.object_speed.get(obj, 1.0)
    if tote is not None and camera is not None and tote != camera:
        speed *= model.opposite_side_slowdown
    t = 0.0
    placements: list[float] = []
    lost = dropped = 0
    outcome = SUCCESS
    end = None
    handled = 0
    while handled < items:
        dt = model.scale_s * speed * z * float(rng.lognormal(0.0, model.sigma))
        if t + dt > budget:
            outcome, end = RAN_OUT_OF_TIME, budget
            break
        t += dt
        u = rng.random()
        if u < model.p_safety:
            outcome, end = SAFETY, t
            break
        u -= model.p_safety
        if u < model.p_drop:
            dropped += 1
        elif u < model.p_drop + model.p_lost:
            lost += 1
        else:
            placements.append(round(t, 3))
            if model.frailty_per_operation:
                z = slowness()
        handled += 1
    duration = round(end if end is not None else t, 3)
    # rounding can tie two placements: keep them strictly increasing
    fixed: list[float] = []
    for s in placements:
        fixed.append(s if not fixed or s > fixed[-1] else round(fixed[-1] + 0.001, 3))
    duration = max(duration, fixed[-1] if fixed else duration)
    return Episode(
        episode_id=episode_id,
        policy=model.name,
        object=obj,
        items=items,
        duration_s=duration,
        placements_s=tuple(fixed),
        lost=lost,
        dropped=dropped,
        outcome=outcome,
        budget_s=budget,
        tote_placement=tote,
        external_camera=camera,
        reference=model.reference,
        object_tags=tags,
    )


def cohort(
    models: Sequence[PolicyModel],
    objects: Mapping[str, tuple[str, ...]],
    *,
    episodes_per_cell: int | Mapping[str, int],
    rng: np.random.Generator,
    items: tuple[int, int] = (5, 10),
    budget_per_item: float = 30.0,
    configurations: bool = True,
) -> list[Episode]:
    """Episodes for every (policy, object) cell. ``objects`` maps object →
    tags; ``items`` is an inclusive range; with ``configurations`` each
    episode gets a random (tote, camera) side pair."""
    out: list[Episode] = []
    sides = ("left", "right")
    for m in models:
        n = (
            episodes_per_cell
            if isinstance(episodes_per_cell, int)
            else episodes_per_cell.get(m.name, 0)
        )
        for obj, tags in objects.items():
            for k in range(n):
                tote = camera = None
                if configurations:
                    tote = sides[int(rng.integers(2))]
                    camera = sides[int(rng.integers(2))]
                out.append(
                    simulate_episode(
                        m,
                        obj,
                        items=int(rng.integers(items[0], items[1] + 1)),
                        budget_per_item=budget_per_item,
                        rng=rng,
                        episode_id=f"{m.name}-{obj}-{k:03d}",
                        tote=tote,
                        camera=camera,
                        tags=tags,
                    )
                )
    return out


PHAIL_OBJECTS: dict[str, tuple[str, ...]] = {
    "spoons": ("rigid",),
    "towels": ("deformable",),
    "scissors": ("articulated",),
    "batteries": ("rigid", "small"),
}


def phail_like_models() -> list[PolicyModel]:
    """A human reference and four policies whose spread loosely follows the
    PhAIL paper's Table 2 (reference ≈ 3 s per item, policies 5–15× slower,
    one close pair, one clearly worst)."""
    speeds = {"spoons": 1.0, "towels": 1.3, "scissors": 1.15, "batteries": 0.9}
    return [
        PolicyModel(
            "human",
            2.7,
            sigma=0.35,
            frailty_shape=12.0,
            p_drop=0.003,
            p_lost=0.0,
            p_safety=0.0,
            object_speed=speeds,
            reference=True,
        ),
        PolicyModel(
            "alpha",
            14.0,
            p_drop=0.04,
            p_safety=0.006,
            object_speed=speeds,
            opposite_side_slowdown=1.1,
        ),
        PolicyModel(
            "beta",
            14.5,
            p_drop=0.035,
            p_safety=0.005,
            object_speed={**speeds, "towels": 1.6},
            opposite_side_slowdown=1.4,
        ),
        PolicyModel("gamma", 19.0, sigma=0.9, p_drop=0.057, p_safety=0.0, object_speed=speeds),
        PolicyModel("delta", 30.0, p_drop=0.05, p_safety=0.02, p_system=0.02, object_speed=speeds),
    ]
