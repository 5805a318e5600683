"""The episode-clustered variance of a Kaplan–Meier RMST(τ), for every
weighted replicate at once (the studentized interval's denominator,
proctor.analysis.intervals; docs/methods.md §4, "Interval coverage").

The infinitesimal jackknife: RMST = t₁ + Σ_k width_k S_k with
S_k = Π_{j ≤ k} (1 − h_j) and the hazard h_j = d_j / Y_j, so

    ∂RMST/∂h_j = −A_j / (1 − h_j),   A_j = ∫_{t_j}^τ S(u) du,
    ∂h_j/∂w_e = (d_ej − h_j Y_ej) / Y_j,

where d_ej and Y_ej are episode e's successes at t_j and operations at risk
there. Episode e's influence is U_e = Σ_j g_j (d_ej − h_j Y_ej) with
g_j = −A_j / ((1 − h_j) Y_j) — all its operations together, the cluster —
and a replicate with multiplicities w_e has variance Σ_e w_e U_e², every
quantity read from that replicate's own KM. With one operation an episode it
is, up to cross terms of order 1/n², the Greenwood-type RMST variance
Σ_j A_j² d_j / (Y_j (Y_j − d_j)) (Klein & Moeschberger 2003, §4.5);
clustering enters through the cross products of one episode's operations.

References: Efron (1982), The Jackknife, the Bootstrap and Other Resampling
Plans, ch. 6 (the infinitesimal jackknife); Lin & Wei (1989), JASA 84:1074
(cluster-robust variance from summed influence).
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from proctor.analysis.km import RiskSet


def _cumsum_rows(x: np.ndarray, *, reverse: bool = False) -> np.ndarray:
    """Cumulative sum down the rows, in place: numpy's accumulate along axis
    0 of a wide array is slow (not vectorized across columns, as in
    km.survival); adding whole rows is."""
    rows = range(x.shape[0] - 2, -1, -1) if reverse else range(1, x.shape[0])
    step = 1 if reverse else -1
    for j in rows:
        np.add(x[j], x[j + step], out=x[j])
    return x


def rmst_variance(rs: RiskSet, weights: np.ndarray, s: np.ndarray, tau: float) -> np.ndarray:
    """Var(RMST(τ)) per replicate: ``weights`` (E, R) episode multiplicities,
    ``s`` (J, R) their survival (``km.survival(rs, weights)``). Shape (R,)."""
    w = np.ascontiguousarray(weights, dtype=float)
    m = int(np.searchsorted(rs.grid, tau, side="right"))
    if m == 0 or rs.n_episodes == 0:
        return np.zeros(w.shape[1])
    events = rs.events[:m]
    # an episode's operations at risk at t_j: its count less those that left
    # before (``left``: censored exits, and successes one row later), so
    # Y_ej = n_e − Σ_{i ≤ j} left_ie; kept sparse (episodes × times is dense,
    # its step structure is not)
    shifted = sparse.vstack([sparse.csr_matrix((1, rs.n_episodes)), rs.events[:-1]], format="csr")
    left = (rs.exits + shifted).tocsr()[:m]
    d = np.asarray(events @ w)
    y = _cumsum_rows(np.asarray(left @ w))
    np.subtract(rs.n_ops @ w, y, out=y)
    live = y > 0
    h = np.divide(d, y, out=np.zeros_like(d), where=live)
    widths = np.diff(np.append(rs.grid[:m], tau))
    # A_j = Σ_{k ≥ j} width_k S_k: a reversed cumulative sum over the rows
    a = _cumsum_rows(widths[:, None] * s[:m], reverse=True)
    # g_j = −A_j / ((1 − h_j) Y_j). A time at which every operation at risk
    # succeeds ends S at 0: its own derivative is left out (A_j is 0 there,
    # the term 0/0)
    denom = (1.0 - h) * y
    g = np.divide(a, denom, out=np.zeros_like(a), where=live & (denom > 1e-12 * np.maximum(y, 1)))
    np.negative(g, out=g)
    # U_e = Σ_j g_j d_ej − Σ_j (g h)_j Y_ej, and with Y_ej = n_e − Σ_{i ≤ j} left_ie
    # the second sum is n_e Σ_j (g h)_j − Σ_i left_ie Σ_{j ≥ i} (g h)_j
    tail = _cumsum_rows(g * h, reverse=True)
    u = np.asarray(events.T @ g)
    u -= rs.n_ops[:, None] * tail[0]
    u += np.asarray(left.T @ tail)
    return np.einsum("er,er,er->r", w, u, u)
