"""Kaplan–Meier, log-rank, RMST and median against published values.

Classic single-event survival data go through the interchange format with
items = 1 (docs/methods.md §8), exactly as a user would feed them to
``proctor analyze``. Every pinned number names its source; where no
published value exists the arithmetic is shown.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from proctor.analysis.km import kaplan_meier, quantile_time, risk_set, rmst, survival
from proctor.analysis.significance import logrank
from tests.analysis.helpers import arm_operations, load, survival_csv

# Freireich et al. (1963), Blood 21:699 — remission times (weeks) of 42
# leukaemia patients; the "Gehan" data (R MASS::gehan). 0 = censored.
SIX_MP = (
    [6, 6, 6, 6, 7, 9, 10, 10, 11, 13, 16, 17, 19, 20, 22, 23, 25, 32, 32, 34, 35],
    [1, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0],
)
PLACEBO = (
    [1, 1, 2, 2, 3, 4, 4, 5, 5, 8, 8, 8, 8, 11, 11, 12, 12, 15, 17, 22, 23],
    [1] * 21,
)
# Embury et al. (1977) via Miller (1981) — R survival::aml (weeks)
MAINTAINED = (
    [9, 13, 13, 18, 23, 28, 31, 34, 45, 48, 161],
    [1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 0],
)
NONMAINTAINED = (
    [5, 5, 8, 8, 12, 16, 23, 27, 30, 33, 43, 45],
    [1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1],
)


@pytest.fixture
def gehan(tmp_path: Path):
    return load(survival_csv(tmp_path / "gehan.csv", {"6mp": SIX_MP, "placebo": PLACEBO}))


@pytest.fixture
def aml(tmp_path: Path):
    return load(
        survival_csv(
            tmp_path / "aml.csv", {"maintained": MAINTAINED, "nonmaintained": NONMAINTAINED}
        )
    )


def test_six_mp_kaplan_meier_table(gehan) -> None:
    km = kaplan_meier(arm_operations(gehan, "6mp"))
    # Kleinbaum & Klein, Survival Analysis: A Self-Learning Text (3rd ed.),
    # ch. 2, KM table of the 6-MP group: t(j), n(j), m(j), S(t(j))
    assert km.t.tolist() == [6, 7, 10, 13, 16, 22, 23]
    assert km.n_risk.tolist() == [21, 17, 15, 12, 11, 7, 6]
    assert km.n_event.tolist() == [3, 1, 1, 1, 1, 1, 1]
    np.testing.assert_allclose(
        km.survival, [0.857, 0.807, 0.753, 0.690, 0.627, 0.538, 0.448], atol=5e-4
    )


def test_placebo_kaplan_meier_table(gehan) -> None:
    km = kaplan_meier(arm_operations(gehan, "placebo"))
    # same source, placebo group (no censoring: S = share still in remission)
    assert km.t.tolist() == [1, 2, 3, 4, 5, 8, 11, 12, 15, 17, 22, 23]
    np.testing.assert_allclose(
        km.survival,
        [0.905, 0.810, 0.762, 0.667, 0.571, 0.381, 0.286, 0.190, 0.143, 0.095, 0.048, 0.0],
        atol=5e-4,
    )


def test_six_mp_log_rank(gehan) -> None:
    lr = logrank([(arm_operations(gehan, "6mp"), arm_operations(gehan, "placebo"))])
    # R: survdiff(Surv(time, cens) ~ treat, data = gehan):
    #   treat=6-MP  N=21 Observed 9 Expected 19.3 ... Chisq= 16.8 on 1 df, p= 4.17e-05
    assert lr.observed == 9
    assert lr.expected == pytest.approx(19.3, abs=0.05)
    assert lr.chi2 == pytest.approx(16.8, abs=0.05)
    assert lr.p == pytest.approx(4.17e-05, rel=0.01)


def test_aml_kaplan_meier_and_log_rank(aml) -> None:
    km = kaplan_meier(arm_operations(aml, "maintained"))
    # R: summary(survfit(Surv(time, status) ~ x, data = aml)), x=Maintained
    assert km.t.tolist() == [9, 13, 18, 23, 31, 34, 48]
    assert km.n_risk.tolist() == [11, 10, 8, 7, 5, 4, 2]
    np.testing.assert_allclose(
        km.survival, [0.909, 0.818, 0.716, 0.614, 0.491, 0.368, 0.184], atol=5e-4
    )
    lr = logrank([(arm_operations(aml, "maintained"), arm_operations(aml, "nonmaintained"))])
    # R: survdiff(Surv(time, status) ~ x, data = aml):
    #   x=Maintained 11 7 10.69 ...; Chisq= 3.4 on 1 degrees of freedom, p= 0.0653
    assert lr.observed == 7
    assert lr.expected == pytest.approx(10.69, abs=0.005)
    assert lr.chi2 == pytest.approx(3.4, abs=0.05)
    assert lr.p == pytest.approx(0.0653, abs=5e-5)


def test_aml_restricted_mean_and_median(aml) -> None:
    ops_m = arm_operations(aml, "maintained")
    ops_n = arm_operations(aml, "nonmaintained")
    # R: print(survfit(Surv(time, status) ~ x, aml), rmean = ...): the
    # nonmaintained curve reaches 0 at 45, so its restricted mean for any cap
    # >= 45 is its mean, printed as *rmean 22.70833; medians 31 and 23.
    rs_n = risk_set(ops_n)
    s_n = survival(rs_n)
    assert rmst(rs_n.grid, s_n, 161.0)[0] == pytest.approx(22.70833, abs=5e-6)
    assert quantile_time(rs_n.grid, s_n, 0.5)[0] == 23
    rs_m = risk_set(ops_m)
    s_m = survival(rs_m)
    assert quantile_time(rs_m.grid, s_m, 0.5)[0] == 31
    # maintained, capped at τ = 161, by hand with exact fractions: S = 10/11
    # from 9, 9/11 from 13, 63/88 from 18, 27/44 from 23, 27/55 from 31,
    # 81/220 from 34, 81/440 from 48 (flat to 161: the last time is censored)
    by_hand = (
        9 + 4 * 10 / 11 + 5 * 9 / 11 + 5 * 63 / 88 + 8 * 27 / 44 + 3 * 27 / 55
        + 14 * 81 / 220 + 113 * 81 / 440
    )  # fmt: skip
    assert rmst(rs_m.grid, s_m, 161.0)[0] == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(52.645455, abs=1e-6)


def test_six_mp_rmst_by_hand(gehan) -> None:
    rs = risk_set(arm_operations(gehan, "6mp"))
    s = survival(rs)
    # No published RMST at this τ; by hand from the KM table above, exact
    # fractions: S = 18/21 on [6,7), ×16/17 on [7,10), ×14/15 on [10,13),
    # ×11/12 on [13,16), ×10/11 on [16,22), ×6/7 on [22,23).
    s1 = 18 / 21
    s2 = s1 * 16 / 17
    s3 = s2 * 14 / 15
    s4 = s3 * 11 / 12
    s5 = s4 * 10 / 11
    s6 = s5 * 6 / 7
    by_hand = 6 * 1 + 1 * s1 + 3 * s2 + 3 * s3 + 3 * s4 + 6 * s5 + 1 * s6  # = 17.9092…
    assert rmst(rs.grid, s, 23.0)[0] == pytest.approx(by_hand, rel=1e-12)
    assert by_hand == pytest.approx(17.909244, abs=1e-6)
    # the median is the first time S <= 0.5: S(23) = 0.448 (the table above)
    assert quantile_time(rs.grid, s, 0.5)[0] == 23
