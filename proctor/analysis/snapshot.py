"""The result JSON read back as one typed, versioned value.

``proctor analyze --json`` and a leaderboard snapshot store the dict that
``proctor.analysis.report.to_json`` writes; whatever reads it again (the
web's board, policy and comparison pages) reads it through ``read_snapshot``
and gets frozen dataclasses, never ``doc["…"]``. Reading is strict: a key the
types do not declare, a missing key or a value of the wrong type is an error
naming its path (``policies[2].failure_modes.drops_per_operation``), so a
writer and this reader cannot drift apart silently.

Versions: the document's ``schema`` names its version. An older document is
brought to the current one by the explicit steps in ``MIGRATIONS`` (each says
what the version after it added), never by defaults scattered over readers.

A policy's interval metrics are the rows of ``proctor.analysis.metrics``:
they are read into ``PolicySnapshot.metrics`` by name, so a new statistic
needs no field here, and a document written before its row was added reads
it as not computed (None): the writer iterates the same table, so only an
older document can lack one.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

from proctor.analysis import metrics as metric_table

SCHEMA_V1 = "proctor.analysis/1"
SCHEMA_V2 = "proctor.analysis/2"
SCHEMA = "proctor.analysis/3"


_ABSENT = object()


class SnapshotError(ValueError):
    """The document is not a result JSON this code can read (the message names the path)."""


@dataclass(frozen=True)
class IntervalSnapshot:
    """An estimate with its interval; JSON ``{"estimate": x, "ci": [lo, hi]}``."""

    estimate: float | None
    lo: float | None
    hi: float | None

    @classmethod
    def from_json(cls, raw: Any, path: str) -> IntervalSnapshot:
        if type(raw) is dict and len(raw) == 2:
            # the common case, checked in one go (a board holds hundreds)
            estimate, ci = raw.get("estimate", _ABSENT), raw.get("ci")
            if (
                type(ci) is list
                and len(ci) == 2
                and all(v is None or type(v) is float for v in (estimate, ci[0], ci[1]))
            ):
                return cls(estimate=estimate, lo=ci[0], hi=ci[1])
        data = _mapping(raw, path)
        _exact_keys(data, {"estimate", "ci"}, path)
        ci = data["ci"]
        if not isinstance(ci, list) or len(ci) != 2:
            raise SnapshotError(f"{path}.ci: expected [lo, hi], got {ci!r}")
        return cls(
            estimate=_decode(float | None, data["estimate"], f"{path}.estimate"),
            lo=_decode(float | None, ci[0], f"{path}.ci[0]"),
            hi=_decode(float | None, ci[1], f"{path}.ci[1]"),
        )


@dataclass(frozen=True)
class AtSnapshot:
    """F(t) at one declared time; JSON ``{"t": t, "estimate": x, "ci": [lo, hi]}``."""

    t: float
    value: IntervalSnapshot

    @classmethod
    def from_json(cls, raw: Any, path: str) -> AtSnapshot:
        data = dict(_mapping(raw, path))
        if "t" not in data:
            raise SnapshotError(f"{path}.t: missing")
        t = _decode(float, data.pop("t"), f"{path}.t")
        return cls(t=t, value=IntervalSnapshot.from_json(data, path))


@dataclass(frozen=True)
class ProtocolSnapshot:
    tau: float
    bootstrap: int
    ks_resamples: int
    seed: int
    alpha: float
    reference: str | None
    success_at: list[float]
    power_target: float
    rho: float | None
    interaction_factors: list[str]
    interval: str
    # written by whoever ran the analysis (`proctor analyze`, the snapshot store)
    tau_source: str | None = None
    source: str | None = None
    label_stream: str | None = None
    campaign_id: int | None = None
    subset: dict[str, str] | None = None


@dataclass(frozen=True)
class ObjectTags:
    object: str
    tags: list[str]


@dataclass(frozen=True)
class CurveSnapshot:
    t: list[float | None]
    cdf: list[float | None]
    lo: list[float | None]
    hi: list[float | None]
    n_risk: list[float | None]


@dataclass(frozen=True)
class PPSnapshot:
    ref: list[float | None]
    model: list[float | None]


@dataclass(frozen=True)
class QQSnapshot:
    p: list[float | None]
    ref: list[float | None]
    model: list[float | None]
    last_reachable: float | None


@dataclass(frozen=True)
class SweepSnapshot:
    tau: list[float | None]
    uph: list[float | None]
    mtbfa: list[float | None]


@dataclass(frozen=True)
class ObjectSnapshot:
    object: str
    tags: list[str]
    episodes: int
    operations: int
    rmst: IntervalSnapshot | None
    hrt: IntervalSnapshot | None
    uph: IntervalSnapshot | None
    mtbfa: IntervalSnapshot | None
    completion: IntervalSnapshot | None
    median: IntervalSnapshot | None
    plateau: IntervalSnapshot | None
    hard_failure_rate: IntervalSnapshot | None
    success_at: list[AtSnapshot]
    auc_vs_reference: IntervalSnapshot | None
    km: CurveSnapshot
    pp: PPSnapshot | None
    qq: QQSnapshot | None
    tau_sweep: SweepSnapshot
    notes: list[str]


@dataclass(frozen=True)
class BreakdownSnapshot:
    key: str
    episodes: int
    objects: list[str]
    completion: IntervalSnapshot | None
    hrt: IntervalSnapshot | None
    rmst: IntervalSnapshot | None
    tote_placement: str | None = None
    external_camera: str | None = None
    same_side: bool | None = None


@dataclass(frozen=True)
class BinarySnapshot:
    successes: int
    episodes: int
    success_rate: IntervalSnapshot
    completion_mean: IntervalSnapshot


@dataclass(frozen=True)
class LatencySnapshot:
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    server_p50_ms: float | None
    stale_action_rate: float | None
    calls: int
    calls_per_episode: float | None
    episodes: int
    server_calls: int
    actions: int
    stale_actions: int
    over_budget: int


@dataclass(frozen=True)
class InteractionSnapshot:
    factor: str
    effect: str
    policies: list[str]
    objects: list[str]
    levels: list[str]
    per_level: list[float | None]
    statistic: float | None
    p: float | None
    permutations: int
    note: str | None


@dataclass(frozen=True)
class FaultCount:
    class_: str = field(metadata={"json": "class"})
    count: int = 0


@dataclass(frozen=True)
class PolicyFaultsSnapshot:
    episodes: int
    faults: int
    by_class: list[FaultCount]
    share: IntervalSnapshot | None


@dataclass(frozen=True)
class CoverageWarningSnapshot:
    min_episodes_per_cell: int
    threshold: int | None
    measured_at: int | None
    coverage: float | None
    text: str


@dataclass(frozen=True)
class PolicySnapshot:
    policy: str
    reference: bool
    rank: int | None
    letters: str
    episodes: int
    operations: int
    objects: list[str]
    objects_missing: list[str]
    success_at: list[AtSnapshot]
    per_object: list[ObjectSnapshot]
    per_configuration: list[BreakdownSnapshot]
    per_tag: list[BreakdownSnapshot]
    per_site: list[BreakdownSnapshot]
    per_station: list[BreakdownSnapshot]
    tau_sweep: SweepSnapshot
    binary: BinarySnapshot
    notes: list[str]
    latency: LatencySnapshot | None
    hrt_interactions: list[InteractionSnapshot]
    policy_faults: PolicyFaultsSnapshot | None
    hrt_coverage_warning: CoverageWarningSnapshot | None
    # name → interval, one per row of proctor.analysis.metrics.METRICS
    metrics: dict[str, IntervalSnapshot | None] = field(
        default_factory=dict, metadata={"metrics": True}
    )

    def metric(self, name: str) -> IntervalSnapshot | None:
        return self.metrics[name]

    @classmethod
    def from_json(cls, raw: Any, path: str) -> PolicySnapshot:
        # copies of the record and its failure modes, so that the metrics read
        # here can be set aside without touching the (cached) document
        data = dict(_mapping(raw, path))
        modes = data.get("failure_modes")
        if modes is not None:
            modes = dict(_mapping(modes, f"{path}.failure_modes"))
            data["failure_modes"] = modes
        values: dict[str, IntervalSnapshot | None] = {}
        for m in metric_table.METRICS:
            values[m.name] = _take_metric(data, m.json_path, m.part_of_record, path)
        if "failure_modes" in data:
            # every failure mode is a metric row: nothing else may sit there
            leftover = data.pop("failure_modes")
            if leftover:
                raise SnapshotError(f"{path}.failure_modes: unknown key(s) {sorted(leftover)}")
        built = _decode_fields(cls, data, path, skip={"metrics"})
        return dataclasses.replace(built, metrics=values)


@dataclass(frozen=True)
class KSPerObject:
    object: str
    statistic: float


@dataclass(frozen=True)
class StatP:
    statistic: float | None
    p: float | None


@dataclass(frozen=True)
class MacroKSSnapshot:
    # "studentized"; "unstudentized" in results written before the board's
    # test was studentized (their p is the unstudentized one's)
    method: str
    statistic: float
    p: float
    p_permutation: float | None
    p_wild: float | None
    p_bonferroni: float
    resamples: int | None
    per_object: list[KSPerObject]
    unstudentized: StatP | None


@dataclass(frozen=True)
class OperationLevelLogrank:
    chi2: float
    p: float
    variance: float


@dataclass(frozen=True)
class LogrankSnapshot:
    # "episode_clustered"; "operation_level" in results written before the
    # board's log-rank was clustered by episode (only chi2, p and the counts)
    method: str
    chi2: float
    p: float
    p_permutation: float | None
    p_wild: float | None
    p_normal: float | None
    p_bonferroni: float
    observed_a: float
    expected_a: float
    variance_robust: float | None
    resamples: int | None
    operation_level: OperationLevelLogrank | None


@dataclass(frozen=True)
class WelchSnapshot:
    t: float | None
    df: float | None
    p: float | None
    p_bonferroni: float | None


@dataclass(frozen=True)
class SuccessSnapshot:
    successes: list[int]
    episodes: list[int]
    statistic: float | None
    p: float | None
    p_bonferroni: float | None


@dataclass(frozen=True)
class KSTest:
    statistic: float | None
    p: float | None
    p_bonferroni: float | None


@dataclass(frozen=True)
class ObjectPairSnapshot:
    object: str
    ks: KSTest
    success_barnard: SuccessSnapshot | None
    rmst_diff: IntervalSnapshot | None
    significant: bool


@dataclass(frozen=True)
class PowerSnapshot:
    n_per_cell: float
    power_at_current_n: float
    alpha: float
    n_needed_per_cell: int | None
    more_episodes_per_cell: int | None
    effect: float
    m_bar: float
    rho: float
    rho_estimated: bool
    deff: float


@dataclass(frozen=True)
class PairSnapshot:
    a: str
    b: str
    objects: list[str]
    macro_ks: MacroKSSnapshot
    logrank: LogrankSnapshot
    rmst_diff: IntervalSnapshot
    rmst_diff_bonferroni: IntervalSnapshot | None
    auc: IntervalSnapshot
    completion_welch: WelchSnapshot | None
    significant: bool
    interactions: list[InteractionSnapshot]
    verdict: str
    winner: str | None
    success_barnard: SuccessSnapshot | None
    per_object_tests: list[ObjectPairSnapshot]
    power: PowerSnapshot | None
    # `proctor analyze --sequential`: the pair's anytime-valid run
    # (``proctor.analysis.sequential``'s own JSON, docs/methods.md §10)
    sequential: dict[str, Any] | None = None


@dataclass(frozen=True)
class ObjectLetters:
    object: str
    letters: dict[str, str]


@dataclass(frozen=True)
class RankedPolicy:
    policy: str
    estimate: float | None
    top1_share: float


@dataclass(frozen=True)
class RankingSnapshot:
    metric: str
    higher_is_better: bool
    replicates: int
    policies: list[RankedPolicy]


@dataclass(frozen=True)
class MatrixSnapshot:
    policies: list[str]
    p_bonferroni: list[list[float | None]]
    verdict: list[list[str | None]]
    winner: list[list[str | None]]


@dataclass(frozen=True)
class ExclusionSnapshot:
    episode_id: str
    policy: str
    object: str
    reason: str


@dataclass(frozen=True)
class PairStopSnapshot:
    """A pair an adaptive campaign resolved: after which block its e-process
    crossed 1/α, with the pair's episodes then (docs/methods.md §11)."""

    a: str
    b: str
    resolved_after_block: int
    episodes: int
    e_value: float


@dataclass(frozen=True)
class PolicyStopSnapshot:
    policy: str
    after_block: int
    no_slots_from_block: int


@dataclass(frozen=True)
class EarlyStopsSnapshot:
    """An adaptive campaign's committed rule and what it stopped."""

    rule: str
    alpha: float
    lag_blocks: int
    sentinels: list[str]
    blocks_read_through: int | None  # None: every block; -1: none yet
    pairs: list[PairStopSnapshot]
    stopped: list[PolicyStopSnapshot]


@dataclass(frozen=True)
class TrendDriftSnapshot:
    """A sentinel's throughput against its start order (docs/methods.md §12)."""

    test: str
    mann_kendall_s: float
    variance: float | None  # None: written before the seasonal test
    z: float
    p: float
    flagged: bool
    direction: str | None  # "slower" / "faster" over time, when flagged
    episodes: list[str]  # in start order
    s_by_object: dict[str, float]  # empty: written before the seasonal test


@dataclass(frozen=True)
class StationDriftSnapshot:
    """A sentinel's throughput between stations."""

    test: str
    statistic: float
    df: int | None  # None: written before the stratified test (Kruskal–Wallis H)
    p: float
    flagged: bool
    median_throughput: dict[str, float]
    episodes: dict[str, list[str]]


@dataclass(frozen=True)
class DriftSnapshot:
    policy: str
    level: float
    flagged: bool
    certifies_no_drift: bool  # always false: not flagged is not shown stationary
    trend: TrendDriftSnapshot | None
    stations: StationDriftSnapshot | None


@dataclass(frozen=True)
class LeaderboardSnapshot:
    schema: str
    code_version: str | None
    data_version: str | None
    protocol: ProtocolSnapshot
    objects: list[ObjectTags]
    configurations: list[str]
    sites: list[str]
    stations: list[str]
    policies: list[PolicySnapshot]
    pairs: list[PairSnapshot]
    letters: dict[str, str]
    letters_completion: dict[str, str]
    letters_per_object: list[ObjectLetters]
    rankings: list[RankingSnapshot]
    matrix: MatrixSnapshot
    excluded: list[ExclusionSnapshot]
    notes: list[str]
    # added by the snapshot store from the campaign's state (an adaptive
    # campaign's stops, drift sentinels' tests); absent (None) on a result
    # scored without a campaign (``proctor analyze``)
    early_stops: EarlyStopsSnapshot | None = None
    drift: list[DriftSnapshot] | None = None

    def policy(self, name: str) -> PolicySnapshot:
        for p in self.policies:
            if p.policy == name:
                return p
        raise KeyError(name)


# --- versions ---------------------------------------------------------------


def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 1 grew during its life; version 2 is version 1 with every key
    present. These are the keys a version-1 document may lack, each with the
    value that means "not computed when it was written"."""
    doc.setdefault("letters_per_object", [])
    doc.setdefault("rankings", [])
    doc.setdefault("sites", [])
    doc.setdefault("stations", [])
    doc["protocol"].setdefault("reference", None)
    doc["protocol"].setdefault("interval", "")
    doc["protocol"].setdefault("interaction_factors", [])
    for p in doc.get("policies", []):
        p.setdefault("latency", None)
        p.setdefault("policy_faults", None)
        p.setdefault("hrt_coverage_warning", None)
        p.setdefault("hrt_interactions", [])
        p.setdefault("per_site", [])
        p.setdefault("per_station", [])
        p["failure_modes"].setdefault("envelope_interventions_per_episode", None)
    for q in doc.get("pairs", []):
        ks = q["macro_ks"]
        ks.setdefault("method", "unstudentized")
        for key in ("p_permutation", "p_wild", "resamples", "unstudentized"):
            ks.setdefault(key, None)
        logrank = q["logrank"]
        logrank.setdefault("method", "operation_level")
        for key in ("p_permutation", "p_wild", "p_normal", "variance_robust", "resamples"):
            logrank.setdefault(key, None)
        logrank.setdefault("operation_level", None)
        q.setdefault("rmst_diff_bonferroni", None)
        q.setdefault("success_barnard", None)
        q.setdefault("per_object_tests", [])
        q.setdefault("interactions", [])
    doc["schema"] = SCHEMA_V2
    return doc


# what the drift tests were called before they were stratified by object
_OLD_TREND_TEST = "Mann–Kendall"
_OLD_STATION_TEST = "Kruskal–Wallis"


def _v2_to_v3(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 3 types the drift sentinels' tests. A version-2 document may
    carry them as they were before they were stratified by object: the trend
    without ``test``, ``variance`` and ``s_by_object``, the station test as
    ``kruskal_wallis_h`` without ``test`` and ``df``, and no
    ``certifies_no_drift``. Those are named here, once, instead of by every
    page that shows them."""
    for d in doc.get("drift") or []:
        d.setdefault("certifies_no_drift", False)
        trend = d.get("trend")
        if trend is not None:
            trend.setdefault("test", _OLD_TREND_TEST)
            trend.setdefault("variance", None)
            trend.setdefault("s_by_object", {})
        st = d.get("stations")
        if st is not None and "kruskal_wallis_h" in st:
            st["statistic"] = st.pop("kruskal_wallis_h")
            st.setdefault("test", _OLD_STATION_TEST)
            st.setdefault("df", None)
    doc["schema"] = SCHEMA
    return doc


# schema → the step that brings it one version forward
MIGRATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    SCHEMA_V1: _v1_to_v2,
    SCHEMA_V2: _v2_to_v3,
}


def migrate(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` brought to the current ``SCHEMA``: a copy when a step runs (the
    steps write into it), ``doc`` itself when it is current (nothing here or
    in the reader writes into a document)."""
    if doc.get("schema") == SCHEMA and isinstance(doc, dict):
        return doc
    out = _deep_copy(doc)
    seen: set[str] = set()
    while out.get("schema") != SCHEMA:
        schema = out.get("schema")
        step = MIGRATIONS.get(str(schema))
        if step is None or schema in seen:
            raise SnapshotError(
                f"schema: '{schema}' is not a result JSON this code reads "
                f"(reads {SCHEMA} and {', '.join(MIGRATIONS)})"
            )
        seen.add(str(schema))
        try:
            out = step(out)
        except (KeyError, TypeError, AttributeError) as exc:
            raise SnapshotError(
                f"(document): not a well-formed {schema} result ({type(exc).__name__}: {exc})"
            ) from None
    return out


def read_snapshot(doc: Mapping[str, Any]) -> LeaderboardSnapshot:
    """The typed result of a result JSON of any version this code reads."""
    if not isinstance(doc, Mapping):
        raise SnapshotError(f"(document): expected an object, got {type(doc).__name__}")
    return _decode(LeaderboardSnapshot, migrate(doc), "")


# --- the strict decoder -------------------------------------------------------

T = TypeVar("T")


def _deep_copy(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _deep_copy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_deep_copy(v) for v in x]
    return x


def _mapping(raw: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict) and not isinstance(raw, Mapping):
        raise SnapshotError(f"{path or '(document)'}: expected an object, got {raw!r:.60}")
    return raw


def _exact_keys(data: Mapping[str, Any], keys: set[str], path: str) -> None:
    unknown = sorted(set(data) - keys)
    if unknown:
        raise SnapshotError(f"{path}: unknown key(s) {unknown}")
    missing = sorted(keys - set(data))
    if missing:
        raise SnapshotError(f"{path}: missing key(s) {missing}")


def _take_metric(
    data: dict[str, Any], json_path: tuple[str, ...], part_of_record: bool, path: str
) -> IntervalSnapshot | None:
    """A metric's interval at ``json_path`` in a policy record, removed from
    ``data`` (the caller's copies of the record and its failure modes) unless
    another record of the policy owns it."""
    where = f"{path}.{'.'.join(json_path)}"
    parent: Any = data
    for key in json_path[:-1]:
        if parent is None:
            return None  # an optional record that is absent: the metric is undefined
        parent = _mapping(parent, where).get(key)
    if parent is None:
        return None
    parent = _mapping(parent, where)
    if json_path[-1] not in parent:
        # a document written before this metric's row was added: not computed
        # then (the writer iterates the same table, so a current one has it)
        return None
    value = parent[json_path[-1]] if part_of_record else _pop(parent, json_path[-1])
    return None if value is None else IntervalSnapshot.from_json(value, where)


def _pop(parent: Mapping[str, Any], key: str) -> Any:
    assert isinstance(parent, dict)
    return parent.pop(key)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _decode_fields(cls: type[T], data: Mapping[str, Any], path: str, skip: set[str]) -> T:
    hints = _hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.name not in skip]  # type: ignore[arg-type]
    json_names = {f.metadata.get("json", f.name): f for f in fields}
    unknown = sorted(set(data) - set(json_names))
    if unknown:
        raise SnapshotError(f"{path or '(document)'}: unknown key(s) {unknown}")
    kwargs: dict[str, Any] = {}
    for key, f in json_names.items():
        where = f"{path}.{key}" if path else key
        if key not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SnapshotError(f"{where}: missing")
            continue
        kwargs[f.name] = _decode(hints[f.name], data[key], where)
    return cls(**kwargs)


_OPTIONAL_FLOAT = float | None


def _is_number_or_null(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


_SHAPES: dict[Any, tuple[Any, tuple[Any, ...]]] = {}


def _shape(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """``tp``'s origin and arguments, looked up once per type."""
    try:
        return _SHAPES[tp]
    except KeyError:
        _SHAPES[tp] = (typing.get_origin(tp), typing.get_args(tp))
        return _SHAPES[tp]


# scalar types and the values that need no more checking (the rest go the long way)
_FAST: dict[Any, Callable[[Any], bool]] = {
    float: lambda v: type(v) is float,
    float | None: lambda v: v is None or type(v) is float,
    int: lambda v: type(v) is int,
    int | None: lambda v: v is None or type(v) is int,
    str: lambda v: type(v) is str,
    str | None: lambda v: v is None or type(v) is str,
    bool: lambda v: type(v) is bool,
}


def _decode(tp: Any, raw: Any, path: str) -> Any:
    fast = _FAST.get(tp)
    if fast is not None and fast(raw):
        return raw
    origin, args = _shape(tp)
    if origin in (Union, types.UnionType):
        if raw is None:
            if type(None) in args:
                return None
            raise SnapshotError(f"{path}: null where {tp} is expected")
        (inner,) = [a for a in args if a is not type(None)]
        return _decode(inner, raw, path)
    if origin is list:
        if not isinstance(raw, list):
            raise SnapshotError(f"{path}: expected a list, got {raw!r:.60}")
        (item,) = args
        if item == _OPTIONAL_FLOAT:
            # a curve's thousands of points: checked in one pass (the rest, one by one)
            if all(v is None or type(v) is float for v in raw):
                return list(raw)
            if all(_is_number_or_null(v) for v in raw):
                return [None if v is None else float(v) for v in raw]
        return [_decode(item, v, f"{path}[{k}]") for k, v in enumerate(raw)]
    if origin is dict:
        _key_t, value_t = args
        data = _mapping(raw, path)
        if value_t is Any:
            return dict(data)
        return {str(k): _decode(value_t, v, f"{path}.{k}") for k, v in data.items()}
    if tp is Any:
        return raw
    if dataclasses.is_dataclass(tp):
        custom = getattr(tp, "from_json", None)
        if custom is not None:
            return custom(raw, path)
        return _decode_fields(tp, _mapping(raw, path), path, skip=set())  # type: ignore[arg-type]
    return _scalar(tp, raw, path)


def _scalar(tp: Any, raw: Any, path: str) -> Any:
    if tp is bool:
        if isinstance(raw, bool):
            return raw
    elif tp is int:
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
    elif tp is float:
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return float(raw)
    elif tp is str:
        if isinstance(raw, str):
            return raw
    else:
        raise SnapshotError(f"{path}: no reader for type {tp}")
    raise SnapshotError(f"{path}: expected {tp.__name__}, got {raw!r:.60}")
