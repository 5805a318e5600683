"""Kaplan–Meier for many weighted resamples at once (docs/methods.md §3).

S(t) = Π over success times t_j ≤ t of (1 − d_j / n_j), F = 1 − S.

Ghosts (T = +∞) stay in the risk set at every finite t and never count as
events, so F plateaus at 1 − (ghost share of the tail). Censored operations
are at risk at their own time and leave just after it (the usual convention:
a censoring tied with an event is still at risk for that event).

Every bootstrap replicate of a cell is the same set of episodes with integer
multiplicities (how often each episode was drawn). A :class:`RiskSet` holds,
per episode, how many successes fall on each grid time and how many
operations leave the risk set before each grid time, as sparse matrices; a
stack of R weight vectors (one column per replicate) then gives every
replicate's d_j and n_j with two sparse–dense products, and S for all
replicates in one pass over the grid. A replicate's KM only jumps at times
present in it, a subset of the grid, so evaluating on the full grid is exact.

Reference: Kaplan & Meier (1958), JASA 53:457; for the resampling, Efron &
Tibshirani (1993) ch. 6.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from proctor.analysis.operations import Operations

# below this many replicates numpy's accumulate is faster than a row loop;
# above it the row loop wins (accumulate is not vectorized across columns)
_ROW_LOOP_MIN_COLUMNS = 64


@dataclass(frozen=True)
class RiskSet:
    """The operations of E episodes, arranged for weighted KM on ``grid``.

    ``events[j, e]``: successes of episode e at ``grid[j]``;
    ``exits[j, e]``: *censored* operations of e at risk at ``grid[j-1]`` but
    not at ``grid[j]`` (row 0: those never at risk on the grid); a success at
    ``grid[j-1]`` leaves at row j too, which :func:`survival` adds from
    ``events`` (so this product only touches the censored operations);
    ``n_ops[e]``: operations of e.
    """

    grid: np.ndarray
    events: sparse.csr_matrix
    exits: sparse.csr_matrix
    n_ops: np.ndarray

    @property
    def n_episodes(self) -> int:
        return int(self.n_ops.shape[0])

    @property
    def n_grid(self) -> int:
        return int(self.grid.shape[0])


def risk_set(
    ops: Operations,
    *,
    grid: np.ndarray | None = None,
    t_max: float | None = None,
) -> RiskSet:
    """Index ``ops`` on ``grid`` (default: its distinct success times).

    With ``t_max``, the grid stops at ``t_max`` (enough for RMST, F(t) and the
    KS sup on [0, t_max]). A supplied grid must contain every success time of
    ``ops`` up to its own end (e.g. the union grid of several cells).
    """
    time = ops.time
    succ = ops.event
    if grid is None:
        grid = np.unique(time[succ])
    grid = np.asarray(grid, dtype=float)
    if t_max is not None:
        grid = grid[grid <= t_max]
    n_grid = grid.shape[0]
    n_ep = ops.n_episodes

    on_grid = succ & (time <= (grid[-1] if n_grid else -np.inf))
    j_event = np.searchsorted(grid, time[on_grid], side="left")
    if n_grid and not np.array_equal(grid[j_event], time[on_grid]):
        raise ValueError("risk_set: a success time is missing from the supplied grid")
    events = sparse.csr_matrix(
        (np.ones(j_event.shape[0]), (j_event, ops.episode[on_grid])), shape=(n_grid, n_ep)
    )
    # an operation is at risk at grid[j] iff its time >= grid[j]; it leaves at
    # the first grid index past its time
    leave = np.searchsorted(grid, time, side="right")
    # successes on the grid leave through ``events``; successes past the
    # grid's end never leave within it, like ghosts
    inside = (leave < n_grid) & ~succ
    exits = sparse.csr_matrix(
        (np.ones(int(inside.sum())), (leave[inside], ops.episode[inside])), shape=(n_grid, n_ep)
    )
    events.sum_duplicates()
    exits.sum_duplicates()
    n_ops = np.bincount(ops.episode, minlength=n_ep).astype(float)
    return RiskSet(grid=grid, events=events, exits=exits, n_ops=n_ops)


def survival(rs: RiskSet, weights: np.ndarray | None = None) -> np.ndarray:
    """S at every grid time for every replicate.

    ``weights``: (E, R) episode multiplicities, one column per replicate
    (default: the observed data, R = 1). Returns S with shape (J, R).
    """
    if weights is None:
        weights = np.ones((rs.n_episodes, 1))
    w = np.ascontiguousarray(weights, dtype=float)
    if w.shape[0] != rs.n_episodes:
        raise ValueError(f"weights have {w.shape[0]} rows for {rs.n_episodes} episodes")
    n_rep = w.shape[1]
    if rs.n_grid == 0:
        return np.ones((0, n_rep))
    d = np.asarray(rs.events @ w)
    x = np.asarray(rs.exits @ w)
    x[1:] += d[:-1]  # successes at grid[j-1] leave the risk set at grid[j]
    total = np.einsum("e,er->r", rs.n_ops, w)  # not @ (see rmst)
    row_loop = n_rep >= _ROW_LOOP_MIN_COLUMNS
    if row_loop:
        for j in range(1, x.shape[0]):
            np.add(x[j], x[j - 1], out=x[j])
    else:
        np.cumsum(x, axis=0, out=x)
    np.subtract(total[None, :], x, out=x)  # x is now n_j, the number at risk
    # d_j <= n_j, so where n_j == 0 the hazard is 0/tiny = 0
    np.maximum(x, np.finfo(float).tiny, out=x)
    np.divide(d, x, out=d)
    np.subtract(1.0, d, out=d)
    if row_loop:
        for j in range(1, d.shape[0]):
            np.multiply(d[j], d[j - 1], out=d[j])
    else:
        np.cumprod(d, axis=0, out=d)
    return d


@dataclass(frozen=True)
class KMCurve:
    """One observed Kaplan–Meier curve: S and its counting process at the
    distinct success times."""

    t: np.ndarray
    survival: np.ndarray
    n_risk: np.ndarray
    n_event: np.ndarray

    @property
    def cdf(self) -> np.ndarray:
        return 1.0 - self.survival

    @property
    def plateau(self) -> float:
        """F at the last success time: 1 − F(∞) is the ghost-and-tail share."""
        return float(1.0 - self.survival[-1]) if self.t.size else 0.0


def kaplan_meier(ops: Operations) -> KMCurve:
    """The observed KM curve of ``ops`` (all operations weight 1)."""
    rs = risk_set(ops)
    s = survival(rs)[:, 0]
    n_event = rs.events @ np.ones(rs.n_episodes)
    return KMCurve(t=rs.grid, survival=s, n_risk=at_risk(rs), n_event=n_event)


def at_risk(rs: RiskSet, weights: np.ndarray | None = None) -> np.ndarray:
    """n_j, the (weighted) number of operations at risk at each grid time;
    ``weights``: (E,) episode multiplicities (default: all 1)."""
    w = np.ones(rs.n_episodes) if weights is None else np.asarray(weights, dtype=float)
    d = rs.events @ w
    x = rs.exits @ w
    x[1:] += d[:-1]
    return (rs.n_ops @ w) - np.cumsum(x)


# --- projections of S (docs/methods.md §4); every function takes S as (J, R) ---


def survival_at(grid: np.ndarray, s: np.ndarray, t: float) -> np.ndarray:
    """S(t) for every replicate: the value at the last grid time <= t."""
    j = int(np.searchsorted(grid, t, side="right")) - 1
    if j < 0:
        return np.ones(s.shape[1])
    return s[j].copy()


def rmst(grid: np.ndarray, s: np.ndarray, tau: float) -> np.ndarray:
    """RMST(τ) = ∫₀^τ S(t) dt per replicate (S is a right-continuous step
    function, 1 before the first grid time). Ghosts, never leaving the risk
    set, contribute their full τ: E[min(T, τ)] with T = ∞ ↦ τ."""
    m = int(np.searchsorted(grid, tau, side="right"))
    if m == 0:
        return np.full(s.shape[1], float(tau))
    knots = grid[:m]
    widths = np.diff(np.append(knots, tau))
    # einsum, not @: a BLAS gemv here wakes OpenBLAS worker threads that spin
    # on a small shared machine for no gain
    return knots[0] + np.einsum("j,jr->r", widths, s[:m])


def quantile_time(grid: np.ndarray, s: np.ndarray, p: float) -> np.ndarray:
    """inf{t : F(t) >= p} per replicate; +inf where F never reaches p."""
    if grid.size == 0:
        # a cell with no success (all censored, only ghosts): F stays 0, so
        # no quantile is reached; argmax over an empty grid would raise
        return np.full(s.shape[1], np.inf)
    reached = (1.0 - s) >= p - 1e-12
    first = np.argmax(reached, axis=0)
    return np.where(reached.any(axis=0), grid[first], np.inf)


def auc_against(
    grid_ref: np.ndarray,
    s_ref: np.ndarray,
    grid_m: np.ndarray,
    s_m: np.ndarray,
) -> np.ndarray:
    """P(T_m < T_ref) + ½ P(T_m = T_ref) from two KM curves, per replicate
    (the columns of ``s_ref`` and ``s_m`` are paired).

    = Σ over the reference's jumps ΔF_ref(t)·[F_m(t−) + F_m(t)]/2
      + (1 − F_ref(∞))·[1 + F_m(∞)]/2,

    i.e. the area under the P-P curve (F_ref(t), F_m(t)) with its knots joined
    by straight lines and closed to (1, 1): mass the curves never reach (ghosts,
    and the tail beyond the last success) is placed at +∞, tied there.
    """
    n_rep = s_ref.shape[1]
    if s_ref.shape[0] == 0:
        last_m = s_m[-1] if s_m.shape[0] else np.ones(n_rep)
        return 0.5 * (2.0 - last_m)
    # S_m just after each of the reference's times (row -1 of the padded
    # array is S = 1, before the model's first time), and just before it
    right = np.searchsorted(grid_m, grid_ref, side="right") - 1
    left = np.searchsorted(grid_m, grid_ref, side="left") - 1
    padded = np.vstack([s_m, np.ones((1, n_rep))]) if s_m.shape[0] else np.ones((1, n_rep))
    # F_m(t−) + F_m(t) = 2 − S_m(t−) − S_m(t); halved below
    mid = padded[left]
    mid += padded[right]
    np.subtract(2.0, mid, out=mid)
    # ΔF_ref at each time = S_ref(previous) − S_ref(t)
    jumps = np.empty_like(s_ref)
    jumps[0] = 1.0 - s_ref[0]
    np.subtract(s_ref[:-1], s_ref[1:], out=jumps[1:])
    area = 0.5 * np.einsum("jr,jr->r", jumps, mid)
    last_m = s_m[-1] if s_m.shape[0] else np.ones(n_rep)
    return area + s_ref[-1] * 0.5 * (2.0 - last_m)
