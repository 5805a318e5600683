"""Failure-mode proposals from telemetry: moments where the recording alone
makes a behavioural failure evident. Pure numpy over ``Signals``; no database.

Three rules, each found by name in ``RULES`` (the taxonomy's
``proposed_from`` maps a rule to the mode it proposes):

* ``closed_on_nothing`` — a closure (gripper target high) in which the
  fingers never held anything (no object flag, no plateau inside the holding
  band) and ran into the fully-closed band: a missed grasp. The moment is
  the first sample in the closed band.
* ``lost_in_transit`` — the release detector's *slump*: with the target
  still high, the fingers rose off the plateau they held the item on; the
  item came out of the fingers without a release command. The moment is the
  last sample on the plateau.
* ``no_motion`` — the tool moved slower than ``still_speed`` for at least
  ``still_s`` seconds in a row (not counting the first ``warmup_s`` of the
  episode, where the policy may still be loading). The moment is the start
  of the stillness.

How well they agree with what really happened is measured on the simulated
cell's ground truth (``proctor.annotator.proposal_scores``; docs/methods.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proctor.annotator.config import CellLayout, Thresholds
from proctor.annotator.detector import Signals, detect

PROPOSER_LABEL = "failure-proposer/1"


@dataclass(frozen=True)
class ProposalThresholds:
    # the tool counts as still below this speed (m/s)
    still_speed: float = 0.005
    # stillness this long is a stall (s)
    still_s: float = 5.0
    # the episode's first seconds are not a stall (the policy warming up)
    warmup_s: float = 2.0


@dataclass(frozen=True)
class Proposal:
    rule: str
    t_s: float
    evidence: dict[str, Any] = field(default_factory=dict)


Rule = Callable[[Signals, CellLayout, Thresholds, ProposalThresholds], list[Proposal]]


def _closures(target: np.ndarray, level: float) -> list[tuple[int, int]]:
    closed = target >= level
    edges = np.diff(closed.astype(np.int8))
    starts = [int(i) for i in np.flatnonzero(edges == 1) + 1]
    ends = [int(i) for i in np.flatnonzero(edges == -1) + 1]
    if len(closed) and closed[0]:
        starts.insert(0, 0)
    if len(closed) and closed[-1]:
        ends.append(len(closed))
    return list(zip(starts, ends, strict=True))


def closed_on_nothing(
    sig: Signals, layout: CellLayout, th: Thresholds, pth: ProposalThresholds
) -> list[Proposal]:
    det = th.detector
    pos = np.nan_to_num(sig.position, nan=0.0)
    in_band = (pos > det.band_low) & (pos < det.closed_band)
    out = []
    for s, e in _closures(np.nan_to_num(sig.target, nan=0.0), det.target_closed):
        flagged = sig.object_flag is not None and bool(np.any(sig.object_flag[s:e]))
        full = np.flatnonzero(pos[s:e] >= det.closed_band)
        if flagged or len(full) == 0:
            continue
        i_full = s + int(full[0])
        # fingers that stopped in the band before closing held something (then slipped)
        if _plateau_before(pos, in_band, s, i_full, sig.t, det.plateau_window_s, det.plateau_tol):
            continue
        out.append(
            Proposal(
                "closed_on_nothing",
                float(sig.t[i_full]),
                {
                    "closure_start_s": round(float(sig.t[s]), 4),
                    "finger_position": float(pos[i_full]),
                },
            )
        )
    return out


def _plateau_before(
    pos: np.ndarray,
    in_band: np.ndarray,
    s: int,
    e: int,
    t: np.ndarray,
    window_s: float,
    tol: float,
) -> bool:
    if e - s < 2:
        return False
    dt = float(np.median(np.diff(t[s : e + 1]))) if e > s else 0.0
    w = max(1, round(window_s / dt)) if dt > 0 else 1
    seg = pos[s:e]
    if len(seg) <= w:
        return False
    moved = np.abs(seg[w:] - seg[:-w])
    return bool(np.any((moved < tol) & in_band[s + w : e]))


def lost_in_transit(
    sig: Signals, layout: CellLayout, th: Thresholds, pth: ProposalThresholds
) -> list[Proposal]:
    return [
        Proposal(
            "lost_in_transit",
            float(c.t_s),
            {"lands": c.zone, "hold_s": round(float(c.features.get("hold_s", 0.0)), 4)},
        )
        for c in detect(sig, layout, th.detector, th.classifier)
        if c.kind == "slump"
    ]


def no_motion(
    sig: Signals, layout: CellLayout, th: Thresholds, pth: ProposalThresholds
) -> list[Proposal]:
    t = sig.t
    if len(t) < 3:
        return []
    xyz = np.stack([sig.x, sig.y, sig.z], axis=1)
    dt = np.diff(t)
    step = np.linalg.norm(np.diff(xyz, axis=0), axis=1)
    speed = np.where(dt > 0, step / np.where(dt > 0, dt, 1.0), 0.0)
    still = np.concatenate([[False], speed < pth.still_speed]) & (t >= pth.warmup_s)
    out = []
    edges = np.diff(np.concatenate([[0], still.astype(np.int8), [0]]))
    for s, e in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
        # the stretch runs from the sample before the first still step to its last sample
        t0, t1 = float(t[max(int(s) - 1, 0)]), float(t[int(e) - 1])
        if t1 - t0 >= pth.still_s:
            out.append(Proposal("no_motion", t0, {"still_s": round(t1 - t0, 3)}))
    return out


RULES: dict[str, Rule] = {
    "closed_on_nothing": closed_on_nothing,
    "lost_in_transit": lost_in_transit,
    "no_motion": no_motion,
}


def propose(
    sig: Signals,
    layout: CellLayout,
    thresholds: Thresholds,
    pth: ProposalThresholds | None = None,
    *,
    rules: tuple[str, ...] | None = None,
) -> list[Proposal]:
    """Every rule's proposals on one episode, in time order."""
    pth = pth or ProposalThresholds()
    names = rules if rules is not None else tuple(RULES)
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise ValueError(f"rules: unknown {', '.join(unknown)} (known: {', '.join(RULES)})")
    found = [p for n in names for p in RULES[n](sig, layout, thresholds, pth)]
    return sorted(found, key=lambda p: (p.t_s, p.rule))
