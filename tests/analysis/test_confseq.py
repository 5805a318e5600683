"""The empirical-Bernstein confidence sequence (proctor/analysis/confseq.py,
docs/methods.md §10 "Direction"): a closed form by hand, then its
time-uniform coverage and its power by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from proctor.analysis.confseq import betting_confidence_sequence, eb_confidence_sequence


def test_a_constant_half_by_hand() -> None:
    # X_i = ½: μ̂_i = ½ for all i, so v_i = 4(X_i − μ̂_{i−1})² = 0, and
    # σ̂²_{i−1} = (¼ + 0)/i, so λ_i = min(√(2 L · 4i / (i log(1 + i))), ¾)
    # = min(√(8 L / log(1 + i)), ¾) = ¾ (8 L / log(1 + i) > 9/16 for every
    # i below e^{52}), L = log(2/α). Then the centre is ½ and the width
    # L / (¾ t) = 4 L / (3 t): at α = 0.05, t = 100, 4 · 3.68888 / 300 = 0.049185.
    lo, hi = eb_confidence_sequence(np.full(100, 0.5), 0.05)
    width = 4 * math.log(40) / (3 * np.arange(1, 101))
    assert lo == pytest.approx(np.clip(0.5 - width, 0, 1), abs=1e-12)
    assert hi == pytest.approx(np.clip(0.5 + width, 0, 1), abs=1e-12)
    assert hi[-1] - 0.5 == pytest.approx(0.049185, abs=1e-6)


def test_one_outlier_after_halves_by_hand() -> None:
    # X_1…X_99 = ½, X_100 = 1, α = 0.05, L = log 40 = 3.688879:
    # μ̂_99 = ½, so v_100 = 4 (1 − ½)² = 1; σ̂²_99 = ¼/100 and λ_100 =
    # min(√(2L / (0.0025 · 100 · log 101)), ¾) = min(2.53, ¾) = ¾; ψ(¾) =
    # (log 4 − ¾)/4 = 0.159074. Σλ = 75, centre (¾ · ½ · 99 + ¾ · 1)/75 = 0.505,
    # width (L + 1 · 0.159074)/75 = 0.051306: C_100 = [0.453694, 0.556306].
    # The running intersection keeps C_99's upper end, ½ + 4L/(3 · 99) = 0.549682.
    lo, hi = eb_confidence_sequence(np.concatenate([np.full(99, 0.5), [1.0]]), 0.05)
    assert lo[-1] == pytest.approx(0.453694, abs=1e-6)
    assert hi[-1] == pytest.approx(0.549682, abs=1e-6)


@pytest.mark.parametrize(
    ("name", "draw", "mean"),
    [
        ("Bernoulli(0.3)", lambda rng, n: (rng.random(n) < 0.3).astype(float), 0.3),
        ("Beta(2, 5)", lambda rng, n: rng.beta(2.0, 5.0, size=n), 2 / 7),
        ("near ½, small spread", lambda rng, n: 0.5 + 0.1 * (rng.random(n) - 0.5), 0.5),
    ],
)
def test_it_covers_the_mean_at_every_time_at_least_one_minus_alpha(
    name: str, draw: object, mean: float
) -> None:
    """2000 streams of 1000 observations: the share of streams whose
    sequence ever misses the mean is at most α (+2 SE)."""
    rng = np.random.default_rng(3)
    streams, n, alpha = 2000, 1000, 0.05
    x = np.stack([draw(rng, n) for _ in range(streams)])  # type: ignore[operator]
    lo, hi = eb_confidence_sequence(x, alpha)
    missed = ((lo > mean) | (hi < mean)).any(axis=1).mean()
    assert missed <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / streams), (name, missed)


def test_it_closes_in_on_a_mean_away_from_the_null() -> None:
    # mean 0.6 vs the null ½ (a per-pair difference of 0.2 on the [−1, 1] scale)
    rng = np.random.default_rng(4)
    x = np.clip(0.6 + 0.15 * rng.standard_normal((500, 400)), 0, 1)
    lo, _ = eb_confidence_sequence(x, 0.05)
    assert (lo[:, -1] > 0.5).mean() > 0.95


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        eb_confidence_sequence(np.array([0.5]), 1.5)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        eb_confidence_sequence(np.array([1.5]), 0.05)


# --- the hedged-capital (betting) sequence the direction uses --------------------


def test_betting_zeros_by_hand() -> None:
    # d_i = 0, α = 0.05, L = log 40: μ̂ = 0, σ̂²_{i−1} = 1/i, so
    # λ̃_i = √(2L / log(1 + i)) ≥ 1.27 for i ≤ 100, above every cap met here.
    # At δ₀ = 0.05: λ⁺ = 0.75/1.05, λ⁻ = 0.75/0.95, and
    # K_100 = ½ (1 − 0.05 · 0.75/1.05)^100 + ½ (1 + 0.05 · 0.75/0.95)^100
    #       = ½ · 0.02634 + ½ · 48.00 = 24.0 ≥ 20: rejected.
    # At δ₀ = 0.0475: ½ (1 − 0.0475 · 0.75/1.0475)^100 + ½ (1 + 0.0475 · 0.75/0.9525)^100
    #       = ½ · 0.0314 + ½ · 39.33 = 19.68 < 20: kept. The grid's step is
    # 0.0025: the set's ends lie in (0.0475, 0.05), and the sequence reports
    # the first rejected grid points, [−0.05, 0.05] (never narrower than the set).
    k = 0.5 * (1 - 0.05 * 0.75 / 1.05) ** 100 + 0.5 * (1 + 0.05 * 0.75 / 0.95) ** 100
    assert k == pytest.approx(24.0, abs=0.05)
    lo, hi = betting_confidence_sequence(np.zeros(100), 0.05)
    assert (lo[-1], hi[-1]) == pytest.approx((-0.05, 0.05), abs=1e-9)


def test_betting_covers_the_mean_at_every_time() -> None:
    """500 streams of 400 differences each, skewed and bounded: the share
    whose sequence ever misses the mean is at most α (+2 SE)."""
    rng = np.random.default_rng(5)
    streams, alpha, missed = 500, 0.05, 0
    mean = 0.2 * (2 / 7)  # the uniform part has mean 0
    for _ in range(streams):
        # a mixture: 20 % of pairs Beta(2, 5) on [0, 1], the rest 0 ± 0.05 uniform
        heavy = rng.random(400) < 0.2
        d = np.where(heavy, rng.beta(2.0, 5.0, 400), 0.1 * (rng.random(400) - 0.5))
        lo, hi = betting_confidence_sequence(d, alpha)
        missed += bool(((lo > mean + 1e-9) | (hi < mean - 1e-9)).any())
    assert missed / streams <= alpha + 2 * math.sqrt(alpha * (1 - alpha) / streams), missed


def test_betting_is_narrower_than_empirical_bernstein_near_zero() -> None:
    """A small, steady difference (mean 0.03, SD 0.04 on [−1, 1]), as two
    policies' per-episode scores give when τ is many times an operation:
    the betting sequence excludes 0 within 300 pairs in most streams, the
    empirical-Bernstein one on (1 + d)/2 in almost none."""
    rng = np.random.default_rng(6)
    bet = eb = 0
    for _ in range(200):
        d = np.clip(0.03 + 0.04 * rng.standard_normal(300), -1, 1)
        bet += betting_confidence_sequence(d, 0.05)[0][-1] > 0
        eb += eb_confidence_sequence((d + 1) / 2, 0.05)[0][-1] > 0.5
    assert bet >= 180 and eb <= 20, (bet, eb)


def test_betting_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="alpha"):
        betting_confidence_sequence(np.array([0.0]), 0.0)
    with pytest.raises(ValueError, match=r"\[−1, 1\]"):
        betting_confidence_sequence(np.array([1.5]), 0.05)
