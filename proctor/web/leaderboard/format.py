"""How numbers are printed on the pages (one place, so tests can check a
rendered number against the snapshot's value with the same rule)."""

from __future__ import annotations

import math
from typing import Any

DASH = "—"


def _ok(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def num(x: Any, digits: int = 1) -> str:
    return f"{x:.{digits}f}" if _ok(x) else DASH


def pct(x: Any, digits: int = 1) -> str:
    """A fraction as a percentage."""
    return f"{100.0 * x:.{digits}f}" if _ok(x) else DASH


def pvalue(p: Any, at_floor: bool = False) -> str:
    """A p-value as the board prints it. ``at_floor``: it is the smallest the
    test's resamples allow (1/(R + 1), times the pairs under Bonferroni), so
    the truth is that or less: "≤ 0.005", never an exact-looking "0.005"."""
    if not _ok(p):
        return DASH
    if at_floor and p < 1.0:  # a floor Bonferroni capped at 1 says nothing
        return f"≤ {p:.3f}" if p >= 0.001 else f"≤ {p:.1e}"
    if p < 0.001:
        return "< 0.001"
    return f"{p:.3f}"


def at_resampling_floor(p: Any, resamples: int | None) -> bool:
    """Whether the unadjusted p ``p`` of a test with ``resamples`` resamples
    is the smallest it can be, ``1 / (resamples + 1)`` (no resample as extreme)."""
    if not _ok(p) or not resamples:
        return False
    return bool(p <= 1.0 / (resamples + 1) * (1 + 1e-9))


def short_hash(h: str | None, n: int = 12) -> str:
    return (h or "")[:n]


def seconds(x: Any) -> str:
    if not _ok(x):
        return DASH
    return f"{x:.1f}"


def bar(iv: Any, scale_max: float) -> dict[str, float] | None:
    """Geometry (percent of the cell width) of an interval bar with whiskers."""
    if iv is None or not _ok(getattr(iv, "estimate", None)) or scale_max <= 0:
        return None

    def at(v: Any) -> float:
        return max(0.0, min(100.0, 100.0 * float(v) / scale_max))

    out = {"est": at(iv.estimate)}
    if _ok(iv.lo) and _ok(iv.hi):
        out["lo"], out["hi"] = at(iv.lo), at(iv.hi)
    return out


def num3(x: Any) -> str:
    return num(x, 3)


FORMATS = {
    "num": num,
    "num3": num3,
    "pct": pct,
    "pvalue": pvalue,
    "short_hash": short_hash,
    "bar": bar,
}
