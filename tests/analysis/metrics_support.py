"""A statistic added as one row of the metric table, for the tests that show
it reaches every reader (tests/analysis/test_snapshot.py,
tests/web/test_leaderboard_metrics.py)."""

from __future__ import annotations

from proctor.analysis import metrics
from proctor.analysis.bootstrap import Interval
from proctor.analysis.results import PolicyResult


def double_uph(r: PolicyResult) -> Interval:
    """The recipe's example statistic: twice the UPH."""
    return Interval(2 * r.uph.estimate, 2 * r.uph.lo, 2 * r.uph.hi)


DUMMY = metrics.Metric(
    name="double_uph",
    json_path=("double_uph",),
    read=double_uph,
    label="2×UPH",
    unit="operations per half hour",
    higher_is_better=True,
    description="twice the UPH (a test's statistic)",
    interval="percentile",
    cli_label="2×UPH",
    board_cell="double-uph",
)
