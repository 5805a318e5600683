"""The release detector: candidate releases (and slips) from gripper telemetry.

Pure numpy over the recorded columns (``proctor.core.recording.keys``); no database.

A *closure* is a stretch where the gripper's reported target is above
``target_closed``. Within a closure the item counts as *held* from the
first sample where the gripper flags an object, or where the fingers sit
still (a plateau: moved less than ``plateau_tol`` over
``plateau_window_s``) inside the holding band (``band_low`` … ``closed_band``:
stopped on something, not closed on nothing). A closure that held an item
ends in one of two ways:

* **release** — the target falls (the falling edge) and the fingers open
  past ``release_open`` below the plateau within ``settle_s``: the item
  left the fingers at that crossing. A hold shorter than ``min_hold_s``, or
  fingers that never open (a target flicker), give no candidate;
* **slump** — with the target still high, the fingers rise above the
  plateau by ``slump_rise`` (towards fully closed) without a release
  command: the item slipped out (an accidental drop).

A closure that never held anything (a missed grasp: the fingers run into
the fully-closed band) gives no candidate.

Per candidate the features are the tool position at the release, its
velocity, the predicted landing point of a ballistic fall, the zone
(target bin / source bin / elsewhere) of both, the hold duration, the
displacement since the grasp, the height and the running ledger of how
many candidates the target zone has received so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from proctor.annotator.config import CellLayout, ClassifierThresholds, DetectorThresholds
from proctor.core.errors import UsageError
from proctor.core.recording import keys

G = 9.81
DETECTOR_NAME = "release-detector/1"


class Zone:
    target = "target"
    source = "source"
    elsewhere = "elsewhere"


@dataclass(frozen=True)
class Signals:
    """The columns the detector reads, times re-based to the episode start."""

    t: np.ndarray  # s since the episode's start
    target: np.ndarray  # gripper target, 0 open … 1 closed
    position: np.ndarray  # measured finger position
    object_flag: np.ndarray | None  # bool: fingers stopped on an object (None: not recorded)
    x: np.ndarray
    y: np.ndarray
    z: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.t)
        for name in ("target", "position", "x", "y", "z"):
            if len(getattr(self, name)) != n:
                raise UsageError(
                    f"telemetry: column {name} has {len(getattr(self, name))} rows, t has {n}"
                )

    @classmethod
    def from_table(cls, table: pa.Table, *, t0: float) -> Signals:
        """From a recorded telemetry table; ``t0`` is the episode's start (station clock)."""
        names = set(table.column_names)
        needed = (
            keys.T,
            keys.GRIPPER_TARGET,
            keys.GRIPPER_POSITION,
            keys.EE_X,
            keys.EE_Y,
            keys.EE_Z,
        )
        missing = [c for c in needed if c not in names]
        if missing:
            raise UsageError(f"telemetry: missing column(s) {', '.join(missing)}")

        def col(name: str) -> np.ndarray:
            return table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)

        t = col(keys.T)
        order = np.argsort(t, kind="stable")
        if np.any(np.diff(t) < 0):
            t = t[order]
        else:
            order = None
        flag = None
        if keys.GRIPPER_OBJECT in names:
            flag = table.column(keys.GRIPPER_OBJECT).to_numpy(zero_copy_only=False).astype(bool)

        def ordered(a: np.ndarray) -> np.ndarray:
            return a if order is None else a[order]

        return cls(
            t=t - t0,
            target=ordered(col(keys.GRIPPER_TARGET)),
            position=ordered(col(keys.GRIPPER_POSITION)),
            object_flag=None if flag is None else ordered(flag),
            x=ordered(col(keys.EE_X)),
            y=ordered(col(keys.EE_Y)),
            z=ordered(col(keys.EE_Z)),
        )


@dataclass
class Candidate:
    kind: str  # "release" | "slump"
    t_s: float
    i: int  # sample index of the event
    features: dict[str, Any] = field(default_factory=dict)
    zone: str = Zone.elsewhere


def _zone(layout: CellLayout, x: float, y: float) -> tuple[str, float, float]:
    """(zone, signed distance to the target rim, to the source rim)."""
    d_t = layout.target.signed_distance(x, y)
    d_s = layout.source.signed_distance(x, y)
    if d_t >= 0:
        return Zone.target, d_t, d_s
    if d_s >= 0:
        return Zone.source, d_t, d_s
    return Zone.elsewhere, d_t, d_s


def _velocity(sig: Signals, i: int, span_s: float = 0.03) -> tuple[float, float]:
    """Tool velocity (x, y) around sample ``i`` by a central difference."""
    t = sig.t
    lo = int(np.searchsorted(t, t[i] - span_s, side="left"))
    hi = int(np.searchsorted(t, t[i] + span_s, side="right")) - 1
    lo, hi = max(lo, 0), min(hi, len(t) - 1)
    if hi <= lo or t[hi] <= t[lo]:
        return 0.0, 0.0
    dt = t[hi] - t[lo]
    return float((sig.x[hi] - sig.x[lo]) / dt), float((sig.y[hi] - sig.y[lo]) / dt)


def _finite(a: np.ndarray) -> np.ndarray:
    """NaNs (samples a device did not report) carried forward, leading ones backward."""
    a = np.asarray(a, dtype=np.float64)
    bad = ~np.isfinite(a)
    if not bad.any():
        return a
    if bad.all():
        return np.zeros_like(a)
    idx = np.where(~bad, np.arange(len(a)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = a[idx]
    first = int(np.argmax(~bad))
    out[:first] = a[first]
    return out


def detect(
    sig: Signals,
    layout: CellLayout,
    th: DetectorThresholds,
    cls: ClassifierThresholds | None = None,
) -> list[Candidate]:
    """Every release and slump candidate in ``sig``, in time order, with features."""
    cls = cls or ClassifierThresholds()
    n = len(sig.t)
    if n < 2:
        return []
    t = sig.t
    target = _finite(sig.target)
    pos = _finite(sig.position)
    flag = sig.object_flag
    dt = float(np.median(np.diff(t)))
    w = max(1, round(th.plateau_window_s / dt))
    moved = np.full(n, np.inf)
    moved[w:] = np.abs(pos[w:] - pos[:-w])
    plateau = (moved < th.plateau_tol) & (pos > th.band_low) & (pos < th.closed_band)
    holding_now = plateau if flag is None else (plateau | flag)

    closed = target >= th.target_closed
    # closures: [start, end) where the target is high
    edges = np.diff(closed.astype(np.int8))
    starts = list(np.flatnonzero(edges == 1) + 1)
    ends = list(np.flatnonzero(edges == -1) + 1)
    if closed[0]:
        starts.insert(0, 0)
    if closed[-1]:
        ends.append(n)

    out: list[Candidate] = []
    for s, e in zip(starts, ends, strict=True):
        held_idx = np.flatnonzero(holding_now[s:e])
        if len(held_idx) == 0:
            continue
        i_h = s + int(held_idx[0])
        # the plateau level: where the fingers stopped on the item
        k_end = min(e, i_h + w + 1)
        p_hold = float(np.median(pos[i_h:k_end]))
        # a slump: the fingers rise above the plateau with the target still high
        rise = np.flatnonzero(pos[i_h:e] > p_hold + th.slump_rise)
        if len(rise):
            j = i_h + int(rise[0])
            i_ev = max(j - 1, i_h)  # the last sample still on the plateau
            t_ev = float(t[i_ev]) + th.slump_lag_s
            hold_s = float(t[i_ev] - t[i_h])
            if hold_s >= th.min_hold_s:
                out.append(_candidate("slump", sig, i_ev, t_ev, i_h, hold_s, p_hold, layout, cls))
            continue
        if e >= n:
            continue  # still closed when the recording ended: no release
        hold_s = float(t[e] - t[i_h])
        if hold_s < th.min_hold_s:
            continue
        # the fingers must open past the release point within the settling window
        limit = int(np.searchsorted(t, t[e] + th.settle_s, side="right"))
        opened = np.flatnonzero(pos[e - 1 : limit] < p_hold - th.release_open)
        if len(opened) == 0:
            continue
        i_ev = e - 1 + int(opened[0])
        t_ev = float(t[i_ev]) + th.release_lag_s
        out.append(_candidate("release", sig, i_ev, t_ev, i_h, hold_s, p_hold, layout, cls))

    target_count = 0
    for c in out:
        if c.zone == Zone.target:
            target_count += 1
        c.features["target_ledger"] = target_count
    return out


def _candidate(
    kind: str,
    sig: Signals,
    i: int,
    t_ev: float,
    i_grasp: int,
    hold_s: float,
    p_hold: float,
    layout: CellLayout,
    cls: ClassifierThresholds,
) -> Candidate:
    # features where the item left the fingers: at the event's time, lag included
    i = min(max(int(np.searchsorted(sig.t, t_ev - 1e-9)), 0), len(sig.t) - 1)
    x, y, z = float(sig.x[i]), float(sig.y[i]), float(sig.z[i])
    vx, vy = _velocity(sig, i)
    fall = max(z - cls.item_drop_offset, 0.0)
    t_fall = math.sqrt(2 * fall / G)
    lx, ly = x + vx * t_fall, y + vy * t_fall
    zone_here, dt_here, ds_here = _zone(layout, x, y)
    zone_land, dt_land, ds_land = _zone(layout, lx, ly)
    disp = math.hypot(x - float(sig.x[i_grasp]), y - float(sig.y[i_grasp]))
    features = {
        "x": round(x, 4),
        "y": round(y, 4),
        "z": round(z, 4),
        "vx": round(vx, 4),
        "vy": round(vy, 4),
        "landing_x": round(lx, 4),
        "landing_y": round(ly, 4),
        "zone_at_release": zone_here,
        "zone_landing": zone_land,
        "target_rim_distance": round(dt_land if cls.use_landing else dt_here, 4),
        "source_rim_distance": round(ds_land if cls.use_landing else ds_here, 4),
        "hold_s": round(hold_s, 4),
        "grasp_t_s": round(float(sig.t[i_grasp]), 4),
        "displacement_m": round(disp, 4),
        "height_m": round(z, 4),
        "hold_position": round(p_hold, 4),
    }
    return Candidate(
        kind=kind,
        t_s=round(t_ev, 4),
        i=i,
        features=features,
        zone=zone_land if cls.use_landing else zone_here,
    )
