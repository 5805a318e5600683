"""Macro RMST and HRT as :class:`~proctor.analysis.intervals.Resampled`
statistics of cells, their intervals, and the board's small-cell warning
(docs/methods.md §4, "Interval coverage").

Macro RMST = mean over the policy's cells of RMST(τ); HRT = mean over objects
of 100 · RMST_ref,o / RMST_m,o. Replicate b pairs column b of every cell (the
cells are resampled independently, so this is resampling both arms). The
jackknife leaves one episode of one cell out at a time; only that cell's
term of the macro mean moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proctor.analysis.bootstrap import Interval
from proctor.analysis.cells import CellWork
from proctor.analysis.intervals import HRT_INTERVAL, RMST_INTERVAL, Resampled, interval_method


def macro_rmst(
    cells: Sequence[CellWork],
    tau: float | None = None,
    *,
    jackknife: bool = True,
    se: bool = True,
) -> Resampled:
    """Mean over ``cells`` of RMST(τ) (one cell: that cell's RMST); the
    jackknife and the standard errors only where asked for (their cost is
    one more KM pass, and a product over the episodes, per cell)."""
    k = len(cells)
    rm = [c.rmst(tau) for c in cells]
    total = np.mean(rm, axis=0)
    theta = float(total[0])
    jack: tuple[np.ndarray, ...] = ()
    if jackknife:
        jack = tuple(
            theta + (c.jackknife_rmst(tau) - r[0]) / k for c, r in zip(cells, rm, strict=True)
        )
    if not se:
        return Resampled(theta, total[1:], jack)
    # cells independent: Var(mean) = Σ Var_o / k²
    sd = np.sqrt(np.sum([c.rmst_variance(tau) for c in cells], axis=0)) / k
    return Resampled(theta, total[1:], jack, float(sd[0]), sd[1:])


def macro_hrt(
    pairs: Sequence[tuple[CellWork, CellWork]], *, jackknife: bool = True, se: bool = True
) -> Resampled:
    """Mean over objects of 100 · RMST_ref / RMST_m; ``pairs`` is
    (reference cell, policy cell) per object."""
    k = len(pairs)
    per_object = []
    jack: list[np.ndarray] = []
    var = np.zeros(pairs[0][1].weights.shape[1]) if pairs else np.zeros(1)
    for ref, cell in pairs:
        r, m = ref.rmst(), cell.rmst()
        h = 100.0 * r / m
        per_object.append(h)
        if jackknife:
            jack.append((100.0 * r[0] / cell.jackknife_rmst() - h[0]) / k)
            jack.append((100.0 * ref.jackknife_rmst() / m[0] - h[0]) / k)
        if se:
            # the delta method per object: Var(h) = h² (Var R / R² + Var M / M²)
            var = var + h**2 * (ref.rmst_variance() / r**2 + cell.rmst_variance() / m**2) / k**2
    total = np.mean(per_object, axis=0)
    theta = float(total[0])
    jk = tuple(theta + j for j in jack)
    if not se:
        return Resampled(theta, total[1:], jk)
    sd = np.sqrt(var)
    return Resampled(theta, total[1:], jk, float(sd[0]), sd[1:])


def interval(x: Resampled, alpha: float, method: str) -> Interval:
    return interval_method(method).compute(x, alpha)


def hrt_interval(
    pairs: Sequence[tuple[CellWork, CellWork]], alpha: float, method: str = HRT_INTERVAL
) -> Interval:
    """The board's HRT interval: ``pairs`` is (reference cell, policy cell)
    per object."""
    m = interval_method(method)
    return m.compute(macro_hrt(pairs, jackknife=m.jackknife, se=m.se), alpha)


def rmst_interval(cells: Sequence[CellWork], alpha: float, method: str = RMST_INTERVAL) -> Interval:
    """The board's macro (or one cell's) RMST interval."""
    m = interval_method(method)
    return m.compute(macro_rmst(cells, jackknife=m.jackknife, se=m.se), alpha)


# --- the board's warning below the cell size where coverage falls short ---

# benchmarks/coverage.py, the tables in docs/methods.md §4 ("Interval
# coverage"): the coverage of the board's 95 % HRT interval (HRT_INTERVAL)
# measured at these episodes per cell on the PhAIL-like models, the worse of
# its two policies (500 trials a size, Monte Carlo SE ≈ 0.01–0.016). A change
# of method or model re-measures it and updates both.
MEASURED_HRT_COVERAGE: dict[int, float] = {3: 0.910, 5: 0.910, 10: 0.866, 20: 0.858, 40: 0.918}
# the nominal level of the interval the table measured (α = 0.05)
MEASURED_LEVEL = 0.95
# below this coverage the board says so beside the interval
COVERAGE_FLOOR = 0.93


def coverage_threshold() -> int | None:
    """The smallest tabulated cell size from which every measured coverage
    (at it and above) reaches :data:`COVERAGE_FLOOR`; cells with fewer
    episodes get the warning. None: not even the largest measured size
    reaches it, and every cell gets the warning."""
    sizes = sorted(MEASURED_HRT_COVERAGE)
    ok = None
    for n in reversed(sizes):
        if MEASURED_HRT_COVERAGE[n] < COVERAGE_FLOOR:
            break
        ok = n
    return ok


@dataclass(frozen=True)
class CoverageWarning:
    """An HRT interval resting on a cell below :func:`coverage_threshold`:
    its smallest cell, and the coverage measured at the nearest tabulated
    size at or below it (None: smaller than any measured)."""

    min_episodes_per_cell: int
    threshold: int | None
    measured_at: int | None
    coverage: float | None
    # the nominal level of this board's intervals (1 − α); the table measured
    # MEASURED_LEVEL's only, so at another level it says nothing about this one
    level: float = MEASURED_LEVEL

    @property
    def text(self) -> str:
        where = f"a cell of {self.min_episodes_per_cell} episode(s)"
        if not math.isclose(self.level, MEASURED_LEVEL):
            return (
                f"HRT from {where}: the coverage of its {_pct(self.level)} interval is not "
                f"measured (docs/methods.md §4 measured the {_pct(MEASURED_LEVEL)} interval: "
                f"{', '.join(f'{v:.0%} at {n}' for n, v in sorted(MEASURED_HRT_COVERAGE.items()))} "
                "episodes per cell)"
            )
        if self.coverage is None or self.measured_at is None:
            cov = f"coverage not measured below {min(MEASURED_HRT_COVERAGE)} episodes per cell"
        else:
            cov = (
                f"its {_pct(MEASURED_LEVEL)} interval covered {self.coverage:.0%} of the time at "
                f"{self.measured_at} episodes per cell"
            )
        if self.threshold is None:
            enough = (
                f"no measured size (up to {max(MEASURED_HRT_COVERAGE)} episodes per cell) "
                f"reached {COVERAGE_FLOOR:.0%}"
            )
        else:
            enough = (
                f"{self.threshold} or more episodes per cell cover at least {COVERAGE_FLOOR:.0%}"
            )
        return f"HRT from {where}: {cov} (docs/methods.md §4); {enough}"


def _pct(level: float) -> str:
    """An interval's level as the board writes it: ``0.95`` → ``95 %``."""
    return f"{round(level * 100, 2):g} %"


def coverage_warning(
    min_episodes_per_cell: int, level: float = MEASURED_LEVEL
) -> CoverageWarning | None:
    """The warning for an HRT whose smallest cell (policy or reference) has
    ``min_episodes_per_cell`` episodes and whose interval is at ``level``
    (1 − α); None at or above the threshold. An interval at another level than
    the one measured always gets it: its coverage is unknown."""
    threshold = coverage_threshold()
    measured = math.isclose(level, MEASURED_LEVEL)
    if measured and threshold is not None and min_episodes_per_cell >= threshold:
        return None
    below = [n for n in MEASURED_HRT_COVERAGE if n <= min_episodes_per_cell]
    at = max(below) if below else None
    return CoverageWarning(
        min_episodes_per_cell=min_episodes_per_cell,
        threshold=threshold,
        measured_at=at if measured else None,
        coverage=None if at is None or not measured else MEASURED_HRT_COVERAGE[at],
        level=level,
    )
