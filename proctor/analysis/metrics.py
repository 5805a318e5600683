"""One table of a policy's interval metrics: where each is computed, how it
is written in the result JSON, and how the CLI table and the board show it.

The CLI's leaderboard table, the result JSON's policy record, the typed
snapshot the web reads (``proctor.analysis.snapshot``) and the board's
columns and API rows all iterate ``METRICS``; none names a metric by its
key. Adding a statistic is a formula (``leaderboard._policy_result``), a
field (``results.PolicyResult``) and a row here (proctor/analysis/README.md,
"Adding a statistic").
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from proctor.analysis.bootstrap import Interval
from proctor.analysis.results import PolicyResult

# where the board links a metric's cell: the policy's per-object table, its
# time-to-success curves, or its episodes
Link = Literal["per_object", "cdf", "episodes"]


@dataclass(frozen=True)
class Metric:
    # the key of the board's API row (and of ``PolicySnapshot.metrics``)
    name: str
    # where the result JSON's policy record holds it: ("hrt",) or a group
    # ("failure_modes", "drops_per_operation")
    json_path: tuple[str, ...]
    # reads the computed value from the analysis result (None: undefined,
    # such as the reference's own HRT)
    read: Callable[[PolicyResult], Interval | None]
    label: str  # the board's column header
    unit: str
    # True: larger is better; False: smaller is better; None: neither
    higher_is_better: bool | None
    description: str
    interval: str  # the method behind its interval (docs/methods.md §4)
    percent: bool = False  # shown ×100
    digits: int = 1
    cli_label: str | None = None  # a column of `proctor analyze`'s table
    board_cell: str | None = None  # a column of the board (its data-cell key)
    link: Link = "episodes"
    # written by the record it belongs to (its JSON parent is not a group of
    # metrics), so the result JSON's policy writer leaves it alone
    part_of_record: bool = False


def _failure_mode(name: str) -> Callable[[PolicyResult], Interval | None]:
    def read(r: PolicyResult) -> Interval | None:
        value: Interval = getattr(r.failure_modes, name)
        return value

    return read


def _policy_faults_share(r: PolicyResult) -> Interval | None:
    return None if r.policy_faults is None else r.policy_faults.share


_PERCENTILE = "episode-clustered bootstrap, percentile"
_EXPANDED = "episode-clustered bootstrap, expanded percentile (episode jackknife)"

# order: the board's and the CLI table's column order
METRICS: tuple[Metric, ...] = (
    Metric(
        name="hrt",
        json_path=("hrt",),
        read=operator.attrgetter("hrt"),
        label="HRT %",
        unit="%",
        higher_is_better=True,
        description="Human-Relative Throughput, %: reference RMST / policy RMST per object, "
        "macro over objects (100 % = as fast as the human reference)",
        interval=_EXPANDED,
        cli_label="HRT %",
        board_cell="hrt",
        link="per_object",
    ),
    Metric(
        name="rmst",
        json_path=("rmst",),
        read=operator.attrgetter("rmst"),
        label="RMST s",
        unit="s",
        higher_is_better=False,
        description="Restricted mean time to success per operation, macro over objects",
        interval=_EXPANDED,
        cli_label="RMST s",
        board_cell="rmst",
        link="cdf",
    ),
    Metric(
        name="rmst_pooled",
        json_path=("rmst_pooled",),
        read=operator.attrgetter("rmst_pooled"),
        label="RMST pooled s",
        unit="s",
        higher_is_better=False,
        description="RMST of all the policy's operations pooled, replicates stratified by cell",
        interval=_PERCENTILE,
    ),
    Metric(
        name="completion",
        json_path=("completion",),
        read=operator.attrgetter("completion"),
        label="Completion %",
        unit="share",
        higher_is_better=True,
        description="Placed / presented items",
        interval=_PERCENTILE,
        percent=True,
        cli_label="completion",
        board_cell="completion",
    ),
    Metric(
        name="hard_failure_rate",
        json_path=("hard_failure_rate",),
        read=operator.attrgetter("hard_failure_rate"),
        label="Hard failures %",
        unit="per operation",
        higher_is_better=False,
        description="Ghosts (drops, losses, safety stops) per operation",
        interval=_PERCENTILE,
        percent=True,
        cli_label="hard failures",
    ),
    Metric(
        name="ghosts_per_operation",
        json_path=("failure_modes", "ghosts_per_operation"),
        read=_failure_mode("ghosts_per_operation"),
        label="Ghosts /op",
        unit="per operation",
        higher_is_better=False,
        description="Operations that ended in a ghost failure, per operation",
        interval=_PERCENTILE,
    ),
    Metric(
        name="drops_per_operation",
        json_path=("failure_modes", "drops_per_operation"),
        read=_failure_mode("drops_per_operation"),
        label="Drops %/op",
        unit="per operation",
        higher_is_better=False,
        description="Items dropped per operation",
        interval=_PERCENTILE,
        percent=True,
        board_cell="drops",
    ),
    Metric(
        name="lost_per_operation",
        json_path=("failure_modes", "lost_per_operation"),
        read=_failure_mode("lost_per_operation"),
        label="Lost /op",
        unit="per operation",
        higher_is_better=False,
        description="Items lost (out of reach) per operation",
        interval=_PERCENTILE,
    ),
    Metric(
        name="safety_stops_per_episode",
        json_path=("failure_modes", "safety_stops_per_episode"),
        read=_failure_mode("safety_stops_per_episode"),
        label="Safety stops /ep",
        unit="per episode",
        higher_is_better=False,
        description="Safety stops per episode",
        interval=_PERCENTILE,
        digits=2,
        board_cell="safety",
    ),
    Metric(
        name="timeouts_per_episode",
        json_path=("failure_modes", "timeouts_per_episode"),
        read=_failure_mode("timeouts_per_episode"),
        label="Timeouts /ep",
        unit="per episode",
        higher_is_better=False,
        description="Episodes ended by the time budget, per episode",
        interval=_PERCENTILE,
        digits=2,
    ),
    Metric(
        name="envelope_interventions_per_episode",
        json_path=("failure_modes", "envelope_interventions_per_episode"),
        read=_failure_mode("envelope_interventions_per_episode"),
        label="Envelope /ep",
        unit="per episode",
        higher_is_better=False,
        description="Commands the station's safety envelope clamped or stopped, per episode "
        "(episodes whose station counted them; — where none did)",
        interval=_PERCENTILE,
        digits=2,
        board_cell="envelope",
    ),
    Metric(
        name="interventions_per_episode",
        json_path=("failure_modes", "operator_stops_per_episode"),
        read=_failure_mode("operator_stops_per_episode"),
        label="Interventions /ep",
        unit="per episode",
        higher_is_better=False,
        description="Operator stops per episode (safety stops count under hard failures)",
        interval=_PERCENTILE,
        digits=2,
        board_cell="interventions",
    ),
    Metric(
        name="policy_faults_per_episode",
        json_path=("policy_faults", "share"),
        read=_policy_faults_share,
        label="Own faults %",
        unit="per episode",
        higher_is_better=False,
        description="Episodes that ended in a fault of the policy's own doing that the score "
        "excludes (a malformed reply, its server failing, an arm fault after its own motion "
        "such as a joint driven into its limit), over every episode it ran; past a free "
        "allowance they are charged as safety stops",
        interval="Wilson 95 %",
        percent=True,
        board_cell="own-faults",
        part_of_record=True,
    ),
    Metric(
        name="uph",
        json_path=("uph",),
        read=operator.attrgetter("uph"),
        label="UPH",
        unit="operations per hour",
        higher_is_better=True,
        description="Units per hour: successful operations per hour of robot time",
        interval=_PERCENTILE,
    ),
    Metric(
        name="mtbfa",
        json_path=("mtbfa",),
        read=operator.attrgetter("mtbfa"),
        label="MTBF/A s",
        unit="s",
        higher_is_better=True,
        description="Mean time between failures or assists (null: no failure, unbounded)",
        interval=_PERCENTILE,
    ),
    Metric(
        name="auc_vs_reference",
        json_path=("auc_vs_reference",),
        read=operator.attrgetter("auc_vs_reference"),
        label="AUC vs reference",
        unit="probability",
        higher_is_better=True,
        description="P(T_policy < T_reference) + ½ ties, macro over objects",
        interval=_PERCENTILE,
        digits=3,
    ),
    Metric(
        name="median",
        json_path=("median",),
        read=operator.attrgetter("median"),
        label="Median s",
        unit="s",
        higher_is_better=False,
        description="Median time to success (null: never reached)",
        interval=_PERCENTILE,
        digits=2,
    ),
)


def by_name() -> dict[str, Metric]:
    return {m.name: m for m in METRICS}


def board_metrics() -> tuple[Metric, ...]:
    return tuple(m for m in METRICS if m.board_cell is not None)


def cli_metrics() -> tuple[Metric, ...]:
    return tuple(m for m in METRICS if m.cli_label is not None)
