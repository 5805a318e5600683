"""Telemetry and frame tables as JSON columns for the pages' plots.

Times are re-based to the episode's start (``clock_start_s`` on the station
clock), the time base of the MP4s (``pts_s = t - clock_start``), of
placement events and of detector candidates, so one number positions the
video, the cursor and every marker.

Downsampling keeps extremes: the rows are cut into equal buckets and each
bucket contributes its minimum and its maximum per column (in the order they
occurred), placed at the bucket's first and middle time. A 50 ms gripper
spike in a 4-minute episode survives at 2000 points; a sample's time may
shift by up to one bucket width, which the response reports
(``bucket_s``); ask for a narrower window (``start``/``end``) to see exact
samples.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from proctor.core.errors import UsageError
from proctor.core.recording import keys

# the float columns a page may ask for, and their units
PLOTTABLE: dict[str, str] = {
    **{c: "rad" for c in keys.JOINT_POSITION},
    **{c: "rad/s" for c in keys.JOINT_VELOCITY},
    keys.EE_X: "m",
    keys.EE_Y: "m",
    keys.EE_Z: "m",
    keys.EE_SPEED: "m/s",
    keys.GRIPPER_TARGET_REQUESTED: "0 open … 1 closed",
    keys.GRIPPER_TARGET: "0 open … 1 closed",
    keys.GRIPPER_POSITION: "0 open … 1 closed",
    keys.POLICY_LATENCY: "s",
    keys.GRIPPER_OBJECT: "bool",
}
# what the explorer plots when it names no columns
DEFAULT_COLUMNS: tuple[str, ...] = (
    keys.GRIPPER_TARGET_REQUESTED,
    keys.GRIPPER_TARGET,
    keys.GRIPPER_POSITION,
    keys.EE_Z,
    keys.EE_SPEED,
    keys.POLICY_LATENCY,
    keys.GRIPPER_OBJECT,
)
MAX_POINTS = 20_000
MIN_POINTS = 10


@dataclass(frozen=True)
class Series:
    t: list[float | None]
    columns: dict[str, list[float | None]]
    rows: int  # rows in the window before downsampling
    downsampled: bool
    bucket_s: float | None


def parse_columns(raw: str | None) -> tuple[str, ...]:
    if raw is None or not raw.strip():
        return DEFAULT_COLUMNS
    names = tuple(dict.fromkeys(c.strip() for c in raw.split(",") if c.strip()))
    unknown = [c for c in names if c not in PLOTTABLE]
    if unknown:
        raise UsageError(
            f"columns: unknown {', '.join(unknown)}; choose from {', '.join(PLOTTABLE)}"
        )
    return names


def _json_floats(a: np.ndarray, digits: int) -> list[float | None]:
    rounded = np.round(a.astype(float), digits)
    return [None if not math.isfinite(v) else v for v in rounded.tolist()]


def _column(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    # booleans become 0/1; nulls NaN
    return table.column(name).to_numpy(zero_copy_only=False).astype(float)


def series(
    table: pa.Table,
    *,
    t0: float,
    columns: tuple[str, ...],
    start: float | None,
    end: float | None,
    max_points: int,
) -> Series:
    """The requested columns over [start, end] (episode seconds), at most
    ``max_points`` samples per column."""
    if not MIN_POINTS <= max_points <= MAX_POINTS:
        raise UsageError(f"max_points: must be between {MIN_POINTS} and {MAX_POINTS}")
    if start is not None and end is not None and end <= start:
        raise UsageError("end: must be after start")
    t = table.column(keys.T).to_numpy(zero_copy_only=False).astype(float) - t0
    lo = 0 if start is None else int(np.searchsorted(t, start, side="left"))
    hi = len(t) if end is None else int(np.searchsorted(t, end, side="right"))
    t = t[lo:hi]
    data = {c: _column(table, c)[lo:hi] for c in columns}
    n = len(t)
    if n <= max_points:
        return Series(
            t=_json_floats(t, 4),
            columns={c: _json_floats(v, 5) for c, v in data.items()},
            rows=n,
            downsampled=False,
            bucket_s=None,
        )
    buckets = max_points // 2
    edges = np.linspace(0, n, buckets + 1).astype(int)
    starts, stops = edges[:-1], edges[1:]
    # bucket index of every row; reduceat works on contiguous runs
    t_first = t[starts]
    t_mid = t[(starts + stops - 1) // 2]
    out_t = np.empty(2 * buckets)
    out_t[0::2], out_t[1::2] = t_first, t_mid
    out: dict[str, list[float | None]] = {}
    for name, v in data.items():
        out[name] = _json_floats(_min_max(v, starts, stops), 5)
    width = float((t[-1] - t[0]) / buckets) if n > 1 else None
    return Series(
        t=_json_floats(out_t, 4),
        columns=out,
        rows=n,
        downsampled=True,
        bucket_s=width,
    )


def _min_max(v: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> np.ndarray:
    """Per bucket, (min, max) in the order they occur; NaN where a bucket has
    no finite value."""
    finite = np.isfinite(v)
    lo_v = np.where(finite, v, np.inf)
    hi_v = np.where(finite, v, -np.inf)
    mins = np.minimum.reduceat(lo_v, starts)
    maxs = np.maximum.reduceat(hi_v, starts)
    # where each extreme sits, to keep their order (a rise stays a rise)
    idx = np.arange(len(v))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        bucket = np.repeat(np.arange(len(starts)), stops - starts)
        at_min = np.where(lo_v == mins[bucket], idx, len(v))
        at_max = np.where(hi_v == maxs[bucket], idx, len(v))
    first_min = np.minimum.reduceat(at_min, starts)
    first_max = np.minimum.reduceat(at_max, starts)
    empty = ~np.isfinite(mins)
    mins[empty] = np.nan
    maxs[empty] = np.nan
    out = np.empty(2 * len(starts))
    min_first = first_min <= first_max
    out[0::2] = np.where(min_first, mins, maxs)
    out[1::2] = np.where(min_first, maxs, mins)
    return out


def frame_columns(table: pa.Table) -> dict[str, Any]:
    """A camera's frame table: index, presentation time and capture time."""
    pts = table.column(keys.FRAME_PTS).to_numpy(zero_copy_only=False).astype(float)
    frame = table.column(keys.FRAME).to_numpy(zero_copy_only=False)
    return {
        "frames": len(pts),
        "frame": frame.astype(int).tolist(),
        "pts_s": [round(float(x), 6) for x in pts],
    }
