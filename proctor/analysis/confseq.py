"""Anytime-valid confidence sequences for the mean of bounded observations
(docs/methods.md §10, "Direction"), from Waudby-Smith & Ramdas, "Estimating
means of bounded random variables by betting", JRSS B 86 (2024):
:func:`betting_confidence_sequence` (hedged capital, §4, Thm 3), which the
sequential verdict's direction reads, and the predictable plug-in
empirical-Bernstein CS (§3.2, Thm 2) below, kept as the closed-form
reference the betting sequence is compared with in the tests.

For X_1, X_2, … in [0, 1] with E[X_i | X_1…X_{i−1}] = μ,

    C_t = [ μ̃_t − w_t, μ̃_t + w_t ],
    μ̃_t = Σ λ_i X_i / Σ λ_i,
    w_t = (log(2/α) + Σ v_i ψ(λ_i)) / Σ λ_i,
    v_i = 4 (X_i − μ̂_{i−1})²,   ψ(λ) = (−log(1 − λ) − λ) / 4,
    λ_i = min(√(2 log(2/α) / (σ̂²_{i−1} i log(1 + i))), C),
    μ̂_i = (½ + Σ_{j≤i} X_j) / (i + 1),  σ̂²_i = (¼ + Σ_{j≤i} (X_j − μ̂_j)²) / (i + 1),

satisfies P(∃t: μ ∉ C_t) ≤ α: each side is Ville's inequality on the
supermartingale Π exp(λ_i (X_i − μ) − v_i ψ(λ_i)) at α/2 (Fan, Grama & Liu's
inequality makes every factor's conditional mean ≤ 1). λ_i uses X_1…X_{i−1}
only, so any stopping, and the running intersection of the C_t, keep the
level.
"""

from __future__ import annotations

import math

import numpy as np

LAMBDA_CAP = 0.75  # C above, one of the two caps the paper suggests (½, ¾): with
# the score spread the pair differences have, λ reaches the cap after a few
# dozen pairs, and ¾ names a clear direction in fewer pairs than ½


def eb_confidence_sequence(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The running intersection of the C_t for each row of ``x`` (values in
    [0, 1], shape (S, T) or (T,)): (lower, upper), each of ``x``'s shape,
    clipped to [0, 1]."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    arr = np.asarray(x, dtype=float)
    one_d = arr.ndim == 1
    x2 = np.atleast_2d(arr)
    if x2.size and (np.nanmin(x2) < 0 or np.nanmax(x2) > 1):
        raise ValueError("eb_confidence_sequence: observations must lie in [0, 1]")
    t = np.arange(1, x2.shape[1] + 1, dtype=float)
    mu_hat = (0.5 + np.cumsum(x2, axis=1)) / (t + 1)
    mu_prev = np.concatenate([np.full((x2.shape[0], 1), 0.5), mu_hat[:, :-1]], axis=1)
    sig_hat = (0.25 + np.cumsum((x2 - mu_hat) ** 2, axis=1)) / (t + 1)
    sig_prev = np.concatenate([np.full((x2.shape[0], 1), 0.25), sig_hat[:, :-1]], axis=1)
    log_term = math.log(2 / alpha)
    lam = np.minimum(np.sqrt(2 * log_term / (sig_prev * t * np.log1p(t))), LAMBDA_CAP)
    v = 4 * (x2 - mu_prev) ** 2
    psi = (-np.log1p(-lam) - lam) / 4
    lam_sum = np.cumsum(lam, axis=1)
    centre = np.cumsum(lam * x2, axis=1) / lam_sum
    width = (log_term + np.cumsum(v * psi, axis=1)) / lam_sum
    lower = np.maximum.accumulate(np.clip(centre - width, 0.0, 1.0), axis=1)
    upper = np.minimum.accumulate(np.clip(centre + width, 0.0, 1.0), axis=1)
    return (lower[0], upper[0]) if one_d else (lower, upper)


GRID = 801  # candidate means on [−1, 1]: steps of 0.0025


def betting_confidence_sequence(
    d: np.ndarray, alpha: float, *, grid: int = GRID
) -> tuple[np.ndarray, np.ndarray]:
    """The hedged-capital confidence sequence of Waudby-Smith & Ramdas
    (2024, §4, Thm 3) for the mean of d_1, d_2, … in [−1, 1]: the running
    set of candidate means δ₀ (a grid on [−1, 1]) never rejected by

        K_t(δ₀) = ½ Π (1 + λ⁺_i (d_i − δ₀)) + ½ Π (1 − λ⁻_i (d_i − δ₀)) ≥ 1/α,
        λ^±_i = min(λ̃_i, C / (1 ± δ₀)),
        λ̃_i = √(2 log(2/α) / (σ̂²_{i−1} i log(1 + i))),
        σ̂²_i = (1 + Σ_{j≤i} (d_j − μ̂_j)²) / (i + 1),  μ̂_i = Σ_{j≤i} d_j / (i + 1).

    At the true mean both products are non-negative martingales (each
    factor > 1 − C > 0 and has conditional mean 1; λ uses the past only),
    so their average is one and Ville's inequality gives P(∃t: δ ∉ C_t) ≤ α.
    It bets on d itself, with the candidate's own room to lose (1 ± δ₀), so
    near δ₀ = 0 its stake may reach C where the empirical-Bernstein sequence
    on (1 + d)/2 is held to C/2: a direction is named in fewer pairs.
    Returns (lower, upper) after each observation; the ends are the first
    rejected grid points outside the kept set (conservative by at most one
    step), and an empty set gives lower > upper."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must be in (0, 1), got {alpha}")
    x = np.asarray(d, dtype=float)
    if x.ndim != 1:
        raise ValueError("betting_confidence_sequence: one sequence at a time")
    if x.size and (x.min() < -1 or x.max() > 1):
        raise ValueError("betting_confidence_sequence: observations must lie in [−1, 1]")
    t = np.arange(1, x.size + 1, dtype=float)
    mu_hat = np.cumsum(x) / (t + 1)
    sig_hat = (1.0 + np.cumsum((x - mu_hat) ** 2)) / (t + 1)
    sig_prev = np.concatenate([[1.0], sig_hat[:-1]])
    lam = np.sqrt(2 * math.log(2 / alpha) / (sig_prev * t * np.log1p(t)))[:, None]
    m = np.linspace(-1.0, 1.0, grid)[None, :]
    # d − δ₀ ≥ −(1 + δ₀): at δ₀ = −1 the upward bet cannot lose, any stake is safe
    room_up = LAMBDA_CAP / np.maximum(1 + m, 1e-12)
    room_down = LAMBDA_CAP / np.maximum(1 - m, 1e-12)
    step = x[:, None] - m
    log_up = np.cumsum(np.log1p(np.minimum(lam, room_up) * step), axis=0)
    log_down = np.cumsum(np.log1p(-np.minimum(lam, room_down) * step), axis=0)
    log_k = np.logaddexp(log_up, log_down) - math.log(2)
    rejected = np.maximum.accumulate(log_k >= math.log(1 / alpha), axis=0)
    kept = ~rejected
    grid_row = m[0]
    # the set's true ends lie between the outermost kept grid point and the
    # next, rejected one: report that next one (conservative by one step,
    # never narrower than the set)
    first = np.maximum(np.argmax(kept, axis=1) - 1, 0)
    last = np.minimum(grid - 1 - np.argmax(kept[:, ::-1], axis=1) + 1, grid - 1)
    lower = np.where(kept.any(axis=1), grid_row[first], 1.0)
    upper = np.where(kept.any(axis=1), grid_row[last], -1.0)
    return lower, upper
