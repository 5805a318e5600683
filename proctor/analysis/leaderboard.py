"""The whole analysis of an episode table: every cell, every policy, every
pair (docs/methods.md §2–§6, §9).

Aggregation choices (written down in proctor/analysis/README.md):

* Policy-level RMST, HRT, UPH, MTBF/A, F(t), AUC: macro means over the
  objects the policy was run on, equal weights (HRT: over objects that also
  have reference episodes). ``rmst_pooled`` is the KM of all the policy's
  operations pooled, with replicates stratified by cell.
* Completion and failure rates: pooled ratios (Σ numerator / Σ denominator)
  over the policy's episodes, replicates stratified by cell.
* Every interval: episode-clustered bootstrap, both arms resampled
  independently for ratios and differences; the policy's and each object's
  RMST and HRT by the methods that covered best in benchmarks/coverage.py,
  percentile for the rest (proctor.analysis.throughput; docs/methods.md §4,
  "Interval coverage").
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from proctor.analysis.binary import bayesian_bootstrap_mean, beta_posterior, welch_t
from proctor.analysis.bootstrap import Interval, child_rng, percentile_interval, pointwise_band
from proctor.analysis.cells import CellWork, build_cell
from proctor.analysis.claims import (
    MetricRanking,
    letters_per_object,
    object_pair_test,
    rank_metric,
    success_test,
)
from proctor.analysis.cld import compact_letters
from proctor.analysis.episodes import (
    SUCCESS,
    Episode,
    EpisodeTable,
    resolve_reference,
    scored,
)
from proctor.analysis.interaction import InteractionResult, interaction_test
from proctor.analysis.km import at_risk, auc_against, quantile_time, risk_set, rmst, survival
from proctor.analysis.latency import latency
from proctor.analysis.notes import NOT_COMPARED
from proctor.analysis.operations import concat_operations
from proctor.analysis.planning import BridgeModel, ObjectEffect, indicator_icc
from proctor.analysis.policy_faults import policy_faults
from proctor.analysis.results import (
    AnalysisProtocol,
    AtT,
    BinarySummary,
    Breakdown,
    Curve,
    FailureModes,
    Leaderboard,
    ObjectResult,
    PairResult,
    PolicyResult,
    PowerPrediction,
    PPData,
    QQData,
    Sweep,
    WelchTest,
)
from proctor.analysis.significance import (
    bonferroni,
    clustered_logrank,
    logrank,
    studentized_macro_ks_test,
    two_arm_survival,
    verdict,
)
from proctor.analysis.throughput import coverage_warning, hrt_interval, rmst_interval

QQ_PROBABILITIES = np.round(np.arange(0.02, 0.99, 0.02), 2)


def default_tau(table: EpisodeTable) -> tuple[float, str]:
    """τ when none is given: the protocol's time budget — the largest
    ``budget_s`` in the table (the longest an operation could be watched) —
    or, without budgets, the longest episode. Returns (τ, where it came from)."""
    budgets = [e.budget_s for e in table.episodes if e.budget_s is not None]
    if budgets:
        return float(max(budgets)), "largest budget_s"
    durations = [e.duration_s for e in table.episodes]
    if not durations or max(durations) <= 0:
        raise ValueError("tau: cannot default τ without budgets or durations; pass --tau")
    return float(max(durations)), "longest episode (no budget_s)"


def budget_overrun_note(table: EpisodeTable, tau: float) -> str | None:
    """A note when τ defaulted to the budget and some episodes ran past their
    own ``budget_s``: what they did after τ is not scored, which a user
    comparing with a survival package fed the raw durations would not expect."""
    over = [e for e in table.episodes if e.budget_s is not None and e.duration_s > e.budget_s]
    if not over:
        return None
    longest = max(over, key=lambda e: e.duration_s - (e.budget_s or 0.0))
    return (
        f"{len(over)} episode(s) ran past their budget_s (longest: {longest.episode_id}, "
        f"{longest.duration_s:g} s of {longest.budget_s:g} s); τ defaulted to the budget, "
        f"{tau:g} s, so time after it is not scored (pass --tau to choose)"
    )


def analyze(table: EpisodeTable, protocol: AnalysisProtocol) -> Leaderboard:
    """Score every policy of ``table`` under ``protocol``.

    Raises ValueError when there is nothing to score or the reference is
    contradictory."""
    kept, system = scored(table.episodes)
    if not kept:
        raise ValueError("no episodes to score (all are system faults or excluded)")
    reference = resolve_reference(kept, protocol.reference or table.reference)
    notes: list[str] = list(table.notes)
    if reference is None:
        notes.append(
            "no reference policy: HRT and AUC vs the reference are omitted "
            "(name one with --reference or mark its episodes reference=true)"
        )

    by_cell: dict[tuple[str, str], list[Episode]] = defaultdict(list)
    for e in kept:
        by_cell[(e.policy, e.object)].append(e)
    objects = tuple(sorted({o for _, o in by_cell}))
    policies = sorted({p for p, _ in by_cell})
    tags = _object_tags(kept)

    cells = {
        key: build_cell(
            key[0], key[1], eps, tau=protocol.tau, replicates=protocol.bootstrap, seed=protocol.seed
        )
        for key, eps in sorted(by_cell.items())
    }
    ref_cells: dict[str, CellWork] = {}
    if reference is not None:
        ref_cells = {o: cells[(reference, o)] for o in objects if (reference, o) in cells}
    ref_rmst = {o: c.rmst() for o, c in ref_cells.items()}

    configurations = sorted({c for e in kept if (c := e.configuration) is not None})
    sites = sorted({x for e in kept if (x := e.site) is not None})
    stations = sorted({x for e in kept if (x := e.station) is not None})
    policy_results = {
        p: _policy_result(
            p,
            [cells[(p, o)] for o in objects if (p, o) in cells],
            objects=objects,
            reference=reference,
            ref_cells=ref_cells,
            ref_rmst=ref_rmst,
            protocol=protocol,
            tags=tags,
            configurations=configurations,
            sites=sites,
            stations=stations,
        )
        for p in policies
    }

    # ranking: by HRT, or by macro RMST without a reference; reference first
    def rank_key(p: str) -> tuple[int, float]:
        r = policy_results[p]
        if r.is_reference:
            return (0, 0.0)
        if r.hrt is not None and r.hrt.estimate is not None:
            return (1, -r.hrt.estimate)
        # without an HRT (no reference, or none on its objects): after those
        # with one, by macro RMST
        return (2, r.rmst.estimate if r.rmst.estimate is not None else math.inf)

    order = sorted(policies, key=lambda p: (*rank_key(p), p))
    objects_of = {p: {o for q, o in by_cell if q == p} for p in policies}
    comparable = []
    for a, b in itertools.combinations(order, 2):
        if objects_of[a] & objects_of[b]:
            comparable.append((a, b))
        else:
            notes.append(NOT_COMPARED.render(a=a, b=b))
    n_pairs = len(comparable)
    pairs = [
        replace(
            _pair_result(a, b, cells, objects, protocol, n_pairs),
            interactions=_interactions(kept, (a, b), "rmst_difference", protocol),
        )
        for a, b in comparable
    ]
    letters = compact_letters(order, [(pr.a, pr.b) for pr in pairs if pr.significant])
    letters_completion = compact_letters(
        order,
        [
            (pr.a, pr.b)
            for pr in pairs
            if pr.completion_welch is not None and pr.completion_welch.p_bonferroni < protocol.alpha
        ],
    )
    ranked: list[PolicyResult] = []
    rank = 0
    for p in order:
        r = replace(
            policy_results[p],
            # over every episode it ran: the system endings are its record too
            policy_faults=policy_faults([e for e in table.episodes if e.policy == p]),
        )
        if not r.is_reference:
            rank += 1
        hrt_tests = (
            _interactions(kept, (p, reference), "hrt", protocol)
            if reference is not None and not r.is_reference
            else ()
        )
        ranked.append(
            replace(
                r,
                rank=None if r.is_reference else rank,
                letters=letters[p],
                hrt_interactions=hrt_tests,
            )
        )
    excluded = (*table.excluded, *system)
    by_object_letters = letters_per_object(
        order, {(pr.a, pr.b): pr.per_object_tests for pr in pairs}
    )
    rankings = _rankings(order, cells, objects, policy_results, ref_cells, ref_rmst, protocol)
    return Leaderboard(
        protocol=protocol,
        reference=reference,
        objects=objects,
        object_tags=tags,
        policies=tuple(ranked),
        pairs=tuple(pairs),
        letters=letters,
        letters_completion=letters_completion,
        excluded=excluded,
        notes=tuple(notes),
        configurations=tuple(configurations),
        sites=tuple(sites),
        stations=tuple(stations),
        letters_per_object=by_object_letters,
        rankings=rankings,
    )


def _rankings(
    order: list[str],
    cells: dict[tuple[str, str], CellWork],
    objects: tuple[str, ...],
    results: dict[str, PolicyResult],
    ref_cells: dict[str, CellWork],
    ref_rmst: dict[str, np.ndarray],
    protocol: AnalysisProtocol,
) -> tuple[MetricRanking, ...]:
    """The non-reference policies ranked under each aggregation rule, from
    the bootstrap replicates the intervals use (proctor.analysis.claims)."""
    models = [p for p in order if not results[p].is_reference]
    mine = {p: [cells[(p, o)] for o in objects if (p, o) in cells] for p in models}
    out = []
    hrt = {
        p: np.mean([_hrt(ref_rmst[c.object], c.rmst()) for c in cs if c.object in ref_rmst], axis=0)
        for p, cs in mine.items()
        if any(c.object in ref_rmst for c in cs)
    }
    if hrt:
        out.append(rank_metric("hrt", hrt, higher_is_better=True))
    pooled = {}
    for p, cs in mine.items():
        prs = risk_set(concat_operations([c.ops for c in cs]))
        pooled[p] = rmst(prs.grid, survival(prs, np.vstack([c.weights for c in cs])), protocol.tau)
    if pooled:
        out.append(rank_metric("rmst_pooled", pooled, higher_is_better=False))
    auc = {
        p: np.mean([_auc(ref_cells[c.object], c) for c in cs if c.object in ref_cells], axis=0)
        for p, cs in mine.items()
        if any(c.object in ref_cells for c in cs)
    }
    if auc:
        out.append(rank_metric("auc_vs_reference", auc, higher_is_better=True))
    for t in protocol.success_at:
        at = {p: np.mean([1.0 - c.survival_at(t) for c in cs], axis=0) for p, cs in mine.items()}
        if at:
            out.append(rank_metric(f"success_at_{t:g}", at, higher_is_better=True))
    return tuple(out)


def _interactions(
    kept: Sequence[Episode], policies: tuple[str, str], effect: str, protocol: AnalysisProtocol
) -> tuple[InteractionResult, ...]:
    """The pre-registered interaction tests of one pair or one policy's HRT."""
    out = []
    for factor in protocol.interaction_factors:
        result = interaction_test(
            kept,
            policies=policies,
            factor=factor,
            effect=effect,
            tau=protocol.tau,
            permutations=protocol.resamples,
            rng=child_rng(protocol.seed, "interaction", effect, factor, *sorted(policies)),
        )
        if result is not None:
            out.append(result)
    return tuple(out)


def _object_tags(episodes: Sequence[Episode]) -> dict[str, tuple[str, ...]]:
    tags: dict[str, set[str]] = defaultdict(set)
    for e in episodes:
        tags[e.object].update(e.object_tags)
    return {o: tuple(sorted(t)) for o, t in sorted(tags.items())}


def _interval(reps: np.ndarray, alpha: float) -> Interval:
    """Column 0 is the estimate, the rest the replicates."""
    return percentile_interval(float(reps[0]), reps[1:], alpha)


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _hrt(ref: np.ndarray, model: np.ndarray) -> np.ndarray:
    return 100.0 * ref / model


def _mtbfa(rm: np.ndarray, s_tau: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(s_tau > 0, rm / np.where(s_tau > 0, s_tau, 1.0), np.inf)


def _curve(cell: CellWork, alpha: float) -> Curve:
    s = cell.s
    lo, hi = pointwise_band(s[:, 1:], alpha)
    n_risk = at_risk(cell.rs)
    return Curve(
        t=np.concatenate([[0.0], cell.rs.grid]),
        cdf=np.concatenate([[0.0], 1.0 - s[:, 0]]),
        lo=np.concatenate([[0.0], lo]),
        hi=np.concatenate([[0.0], hi]),
        n_risk=np.concatenate([[cell.rs.n_ops.sum()], n_risk]),
    )


def _pp(ref: CellWork, cell: CellWork) -> PPData:
    grid = np.union1d(ref.rs.grid, cell.rs.grid)
    f_ref = 1.0 - _observed_survival_at(ref, grid)
    f_m = 1.0 - _observed_survival_at(cell, grid)
    return PPData(ref=np.concatenate([[0.0], f_ref]), model=np.concatenate([[0.0], f_m]))


def _observed_survival_at(cell: CellWork, times: np.ndarray) -> np.ndarray:
    """The observed S of a cell at arbitrary times (step function)."""
    j = np.searchsorted(cell.rs.grid, times, side="right") - 1
    s0 = np.concatenate([[1.0], cell.s[:, 0]])
    return s0[j + 1]


def _qq(ref: CellWork, cell: CellWork) -> QQData:
    def q(c: CellWork) -> np.ndarray:
        f = 1.0 - c.s[:, 0]
        out = np.full(QQ_PROBABILITIES.shape, np.nan)
        for k, p in enumerate(QQ_PROBABILITIES):
            hit = np.nonzero(f >= p - 1e-12)[0]
            if hit.size:
                out[k] = c.rs.grid[hit[0]]
        return out

    return QQData(
        p=QQ_PROBABILITIES.copy(),
        ref=q(ref),
        model=q(cell),
        last_reachable=float(cell.plateau()[0]),
    )


def _sweep_taus(protocol: AnalysisProtocol) -> np.ndarray:
    k = protocol.sweep_points
    return np.linspace(protocol.tau / k, protocol.tau, k)


def _sweep(cells: Sequence[CellWork], protocol: AnalysisProtocol) -> Sweep:
    taus = _sweep_taus(protocol)
    uph = np.zeros((len(cells), taus.size))
    mtb = np.zeros((len(cells), taus.size))
    for i, c in enumerate(cells):
        for k, t in enumerate(taus):
            rm = float(rmst(c.rs.grid, c.s[:, :1], t)[0])
            s_t = float(c.survival_at(t)[0])
            uph[i, k] = 3600.0 / rm
            mtb[i, k] = rm / s_t if s_t > 0 else np.inf
    return Sweep(tau=taus, uph=uph.mean(axis=0), mtbfa=mtb.mean(axis=0))


def _object_result(
    cell: CellWork,
    *,
    ref_cell: CellWork | None,
    ref_rmst: np.ndarray | None,
    protocol: AnalysisProtocol,
    tags: tuple[str, ...],
) -> ObjectResult:
    a = protocol.alpha
    rm = cell.rmst()
    s_tau = cell.survival_at(protocol.tau)
    counts = cell.episode_counts()
    w = cell.per_episode
    notes = []
    if cell.n_episodes < 2:
        notes.append("fewer than 2 episodes: intervals are degenerate")
    if cell.rs.n_grid == 0:
        notes.append("no successful operation: F = 0, RMST = τ, median undefined")
    median = cell.quantile(0.5)
    if not np.isfinite(median[0]):
        notes.append("median not reached: F stays below 0.5")
    mtbfa = _mtbfa(rm, s_tau)
    if not np.isfinite(mtbfa[0]):
        notes.append("MTBF/A unbounded: every operation succeeded by τ")
    hrt = auc = None
    pp = qq = None
    if ref_cell is not None and ref_rmst is not None:
        hrt = hrt_interval([(ref_cell, cell)], a)
        auc = _interval(_auc(ref_cell, cell), a)
        pp = _pp(ref_cell, cell)
        qq = _qq(ref_cell, cell)
    return ObjectResult(
        object=cell.object,
        tags=tags,
        episodes=cell.n_episodes,
        operations=cell.n_operations,
        rmst=rmst_interval([cell], a),
        hrt=hrt,
        uph=_interval(3600.0 / rm, a),
        mtbfa=_interval(mtbfa, a),
        completion=_interval(_ratio(w(counts["placed"]), w(counts["items"])), a),
        median=_interval(median, a),
        plateau=_interval(cell.plateau(), a),
        hard_failure_rate=_interval(_ratio(w(counts["ghosts"]), w(counts["operations"])), a),
        success_at=tuple(
            AtT(t, _interval(1.0 - cell.survival_at(t), a)) for t in protocol.success_at
        ),
        auc_vs_reference=auc,
        km=_curve(cell, a),
        pp=pp,
        qq=qq,
        sweep=_sweep([cell], protocol),
        notes=tuple(notes),
    )


def _auc(ref: CellWork, model: CellWork) -> np.ndarray:
    """P(T_model < T_ref) + ½ ties, per replicate (column-paired)."""
    key = ("auc", ref.policy, ref.object)
    if key not in model._cache:
        model._cache[key] = auc_against(ref.rs.grid, ref.s, model.rs.grid, model.s)
    return model._cache[key]


def _pooled_sums(cells: Sequence[CellWork], key: str) -> np.ndarray:
    return np.sum([c.per_episode(c.episode_counts()[key]) for c in cells], axis=0)


def _policy_result(
    policy: str,
    cells: list[CellWork],
    *,
    objects: tuple[str, ...],
    reference: str | None,
    ref_cells: dict[str, CellWork],
    ref_rmst: dict[str, np.ndarray],
    protocol: AnalysisProtocol,
    tags: dict[str, tuple[str, ...]],
    configurations: list[str],
    sites: list[str],
    stations: list[str],
) -> PolicyResult:
    a = protocol.alpha
    yardstick = ref_rmst if reference is not None else {}
    is_ref = policy == reference
    notes: list[str] = []
    mine = tuple(c.object for c in cells)
    missing = tuple(o for o in objects if o not in mine)
    if missing:
        notes.append(f"not run on {', '.join(missing)}: macro scores average the other objects")
    per_object = tuple(
        _object_result(
            c,
            ref_cell=ref_cells.get(c.object) if reference is not None else None,
            ref_rmst=ref_rmst.get(c.object) if reference is not None else None,
            protocol=protocol,
            tags=tags.get(c.object, ()),
        )
        for c in cells
    )
    uph = np.mean([3600.0 / c.rmst() for c in cells], axis=0)
    mtbfa = np.mean([_mtbfa(c.rmst(), c.survival_at(protocol.tau)) for c in cells], axis=0)
    hrt = auc = small_cells = None
    with_ref = [c for c in cells if c.object in ref_cells]
    if reference is not None:
        if with_ref:
            hrt = hrt_interval([(ref_cells[c.object], c) for c in with_ref], a)
            if is_ref:
                hrt = Interval(100.0, None, None)
            else:
                small_cells = coverage_warning(
                    min(
                        n for c in with_ref for n in (c.n_episodes, ref_cells[c.object].n_episodes)
                    ),
                    level=1 - a,
                )
            auc = _interval(np.mean([_auc(ref_cells[c.object], c) for c in with_ref], axis=0), a)
        else:
            notes.append("no reference episodes on this policy's objects: HRT undefined")

    # pooled KM across objects, replicates stratified by cell
    pooled_ops = concat_operations([c.ops for c in cells])
    pooled_rs = risk_set(pooled_ops)
    pooled_s = survival(pooled_rs, np.vstack([c.weights for c in cells]))
    pooled_rmst = rmst(pooled_rs.grid, pooled_s, protocol.tau)
    median_pooled = quantile_time(pooled_rs.grid, pooled_s, 0.5)

    def rate(num: str, den: str) -> Interval:
        return _interval(_ratio(_pooled_sums(cells, num), _pooled_sums(cells, den)), a)

    counted = int(sum(c.episode_counts()["envelope_counted"].sum() for c in cells))
    failure = FailureModes(
        ghosts_per_operation=rate("ghosts", "operations"),
        drops_per_operation=rate("dropped_ops", "operations"),
        lost_per_operation=rate("lost_ops", "operations"),
        safety_stops_per_episode=rate("safety", "episodes"),
        timeouts_per_episode=rate("timeout", "episodes"),
        operator_stops_per_episode=rate("operator_stop", "episodes"),
        # no episode counted: the rate does not exist (unknown is not zero)
        envelope_interventions_per_episode=(
            rate("envelope", "envelope_counted") if counted else Interval(None, None, None)
        ),
    )
    envelope_note = _envelope_note(counted, sum(c.n_episodes for c in cells))
    if envelope_note is not None:
        notes.append(envelope_note)
    episodes = [e for c in cells for e in c.episodes]
    return PolicyResult(
        policy=policy,
        is_reference=is_ref,
        rank=None,
        letters="",
        episodes=len(episodes),
        operations=sum(c.n_operations for c in cells),
        objects=mine,
        objects_missing=missing,
        rmst=rmst_interval(cells, a),
        rmst_pooled=_interval(pooled_rmst, a),
        hrt=hrt,
        hrt_coverage_warning=small_cells,
        uph=_interval(uph, a),
        mtbfa=_interval(mtbfa, a),
        completion=rate("placed", "items"),
        hard_failure_rate=failure.ghosts_per_operation,
        failure_modes=failure,
        auc_vs_reference=auc,
        median=_interval(median_pooled, a),
        success_at=tuple(
            AtT(t, _interval(np.mean([1.0 - c.survival_at(t) for c in cells], axis=0), a))
            for t in protocol.success_at
        ),
        per_object=per_object,
        per_configuration=_per_configuration(
            policy, cells, configurations, ref_rmst if reference is not None else {}, protocol
        ),
        per_tag=_per_tag(cells, tags, ref_rmst if reference is not None else {}, protocol),
        per_site=_per_group(policy, cells, sites, _site, yardstick, protocol, label="site"),
        per_station=_per_group(
            policy, cells, stations, _station, yardstick, protocol, label="station"
        ),
        sweep=_sweep(cells, protocol),
        binary=_binary(episodes, protocol),
        notes=tuple(notes),
        latency=latency([e.calls for e in episodes]),
    )


def _envelope_note(counted: int, episodes: int) -> str | None:
    """Say when envelope interventions per episode rests on fewer episodes than
    the other rates (stations that did not count them: unknown, not zero)."""
    if counted == episodes:
        return None
    if counted == 0:
        return "envelope interventions not recorded for these episodes"
    return (
        f"envelope interventions per episode over the {counted} of {episodes} episodes "
        "whose station counted them"
    )


def _per_configuration(
    policy: str,
    cells: list[CellWork],
    configurations: list[str],
    ref_rmst: dict[str, np.ndarray],
    protocol: AnalysisProtocol,
) -> tuple[Breakdown, ...]:
    """Completion and HRT per spatial configuration (``_per_group``), each
    naming its tote placement and camera side."""
    out = []
    for b in _per_group(
        policy, cells, configurations, _configuration, ref_rmst, protocol, label="configuration"
    ):
        first = next(e for c in cells for e in c.episodes if e.configuration == b.key)
        out.append(
            replace(b, tote_placement=first.tote_placement, external_camera=first.external_camera)
        )
    return tuple(out)


def _configuration(e: Episode) -> str | None:
    return e.configuration


def _site(e: Episode) -> str | None:
    return e.site


def _station(e: Episode) -> str | None:
    return e.station


def _per_group(
    policy: str,
    cells: list[CellWork],
    keys: Sequence[str],
    key_of: Callable[[Episode], str | None],
    ref_rmst: dict[str, np.ndarray],
    protocol: AnalysisProtocol,
    *,
    label: str,
) -> tuple[Breakdown, ...]:
    """Completion, RMST and HRT of the policy's episodes whose ``key_of`` is
    each of ``keys`` (a spatial configuration, a site, a station); keys it has
    no episode under are left out. Sub-cells (object × key) are resampled on
    their own, under random streams named by ``label``; the reference's RMST
    stays the whole reference cell, so every key of a policy is measured
    against the same yardstick (the reference's own breakdown shows how much
    the key moves the human)."""
    out = []
    a = protocol.alpha
    for key in keys:
        subs = []
        objs_list = []
        for c in cells:
            eps = [e for e in c.episodes if key_of(e) == key]
            if eps:
                subs.append(
                    build_cell(
                        policy,
                        f"{c.object}|{key}",  # names the random stream only
                        eps,
                        tau=protocol.tau,
                        replicates=protocol.bootstrap,
                        seed=protocol.seed,
                        label=label,
                    )
                )
                objs_list.append(c.object)
        if not subs:
            continue
        objs = tuple(objs_list)
        with_ref = [(s, o) for s, o in zip(subs, objs, strict=True) if o in ref_rmst]
        hrt = (
            _interval(np.mean([_hrt(ref_rmst[o], s.rmst()) for s, o in with_ref], axis=0), a)
            if with_ref
            else None
        )
        out.append(
            Breakdown(
                key=key,
                episodes=sum(s.n_episodes for s in subs),
                objects=objs,
                completion=_interval(
                    _ratio(_pooled_sums(subs, "placed"), _pooled_sums(subs, "items")), a
                ),
                hrt=hrt,
                rmst=_interval(np.mean([s.rmst() for s in subs], axis=0), a),
            )
        )
    return tuple(out)


def _per_tag(
    cells: list[CellWork],
    tags: dict[str, tuple[str, ...]],
    ref_rmst: dict[str, np.ndarray],
    protocol: AnalysisProtocol,
) -> tuple[Breakdown, ...]:
    a = protocol.alpha
    all_tags = sorted({t for c in cells for t in tags.get(c.object, ())})
    out = []
    for tag in all_tags:
        subs = [c for c in cells if tag in tags.get(c.object, ())]
        with_ref = [c for c in subs if c.object in ref_rmst]
        out.append(
            Breakdown(
                key=tag,
                episodes=sum(c.n_episodes for c in subs),
                objects=tuple(c.object for c in subs),
                completion=_interval(
                    _ratio(_pooled_sums(subs, "placed"), _pooled_sums(subs, "items")), a
                ),
                hrt=(
                    _interval(
                        np.mean([_hrt(ref_rmst[c.object], c.rmst()) for c in with_ref], axis=0),
                        a,
                    )
                    if with_ref
                    else None
                ),
                rmst=_interval(np.mean([c.rmst() for c in subs], axis=0), a),
            )
        )
    return tuple(out)


def _binary(episodes: list[Episode], protocol: AnalysisProtocol) -> BinarySummary:
    successes = sum(e.outcome == SUCCESS for e in episodes)
    post = beta_posterior(successes, len(episodes), 1 - protocol.alpha)
    # the Bayesian bootstrap over episodes, not a Dirichlet over the data's
    # distinct levels: that prior grows with n and pulls the mean (§7)
    rng = child_rng(protocol.seed, "dirichlet", episodes[0].policy if episodes else "")
    completion = [e.placed / e.items for e in episodes]
    cpost = bayesian_bootstrap_mean(completion, rng=rng, level=1 - protocol.alpha)
    return BinarySummary(
        successes=successes,
        episodes=len(episodes),
        success_posterior=post,
        completion_posterior=cpost,
    )


def _pair_result(
    a: str,
    b: str,
    cells: dict[tuple[str, str], CellWork],
    objects: tuple[str, ...],
    protocol: AnalysisProtocol,
    n_pairs: int,
) -> PairResult:
    shared = tuple(o for o in objects if (a, o) in cells and (b, o) in cells)
    alpha = protocol.alpha
    first, second = sorted((a, b))
    if not shared:
        raise ValueError(f"policies {a!r} and {b!r} share no object: they cannot be compared")
    strata = {o: (cells[(a, o)].ops, cells[(b, o)].ops) for o in shared}
    ks = studentized_macro_ks_test(
        strata,
        tau=protocol.tau,
        replicates=protocol.resamples,
        rngs={o: child_rng(protocol.seed, "ks", first, second, o) for o in shared},
    )
    lr = clustered_logrank(
        list(strata.values()),
        replicates=protocol.resamples,
        rngs=[child_rng(protocol.seed, "logrank", first, second, o) for o in shared],
    )
    rmst_diff = np.mean([cells[(a, o)].rmst() - cells[(b, o)].rmst() for o in shared], axis=0)
    auc = np.mean([_auc(cells[(b, o)], cells[(a, o)]) for o in shared], axis=0)
    p_bonf = bonferroni(ks.p, n_pairs)
    significant = p_bonf < alpha
    # the direction is error-controlled at the family's level: the interval
    # of ΔRMST at α/pairs must exclude 0 (docs/methods.md §5)
    rmst_bonf = _interval(rmst_diff, alpha / max(n_pairs, 1))
    v, w = verdict(significant, float(rmst_diff[0]), float(auc[0]), (rmst_bonf.lo, rmst_bonf.hi))
    winner = {"a": a, "b": b}.get(w) if w else None
    ca = [e.placed / e.items for o in shared for e in cells[(a, o)].episodes]
    cb = [e.placed / e.items for o in shared for e in cells[(b, o)].episodes]
    welch = None
    if len(ca) >= 2 and len(cb) >= 2:
        wt = welch_t(ca, cb)
        welch = WelchTest(wt.statistic, wt.df, wt.p, bonferroni(wt.p, n_pairs))
    power = None
    success = success_test(
        [e for o in shared for e in cells[(a, o)].episodes],
        [e for o in shared for e in cells[(b, o)].episodes],
        n_pairs,
    )
    per_object_tests = tuple(
        object_pair_test(
            o,
            (ks.object_statistic[o], ks.object_p[o]),
            (cells[(a, o)].episodes, cells[(b, o)].episodes),
            cells[(a, o)].rmst() - cells[(b, o)].rmst(),
            comparisons=n_pairs,
            alpha=alpha,
        )
        for o in shared
    )
    if not significant:
        # the alpha this leaderboard resolves pairs at (Bonferroni over pairs)
        power = _power(a, b, shared, cells, protocol, alpha / max(n_pairs, 1))
    return PairResult(
        a=a,
        b=b,
        objects=shared,
        macro_ks=ks,
        ks_p_bonferroni=p_bonf,
        logrank=lr,
        logrank_p_bonferroni=bonferroni(lr.p, n_pairs),
        logrank_operations=logrank(list(strata.values())),
        rmst_diff=_interval(rmst_diff, alpha),
        rmst_diff_bonferroni=rmst_bonf,
        auc=_interval(auc, alpha),
        completion_welch=welch,
        significant=significant,
        verdict=v,
        winner=winner,
        power=power,
        success_barnard=success,
        per_object_tests=per_object_tests,
    )


def pair_effects(
    a_cells: dict[str, CellWork],
    b_cells: dict[str, CellWork],
    *,
    tau: float,
    rho: float | None,
) -> tuple[list[ObjectEffect], float, bool]:
    """The bridge model's inputs for one pair, per shared object: pooled F and
    ΔF = F_A − F_B at the pooled success times in [0, τ], m̄ and ρ (estimated
    from the indicators 1{T <= t} at the pooled quartiles of success times
    unless given). Returns (effects, ρ used, whether ρ was estimated)."""
    effects = []
    rhos = []
    for o in sorted(set(a_cells) & set(b_cells)):
        ca, cb = a_cells[o], b_cells[o]
        pooled = concat_operations([ca.ops, cb.ops])
        n = pooled.n_episodes
        w_a = np.zeros((n, 1))
        w_a[: ca.n_episodes] = 1.0
        _, s_a, s_b = two_arm_survival(pooled, w_a, 1.0 - w_a, tau)
        rs = risk_set(pooled, t_max=tau)
        s_pool = survival(rs)[:, 0]
        if rho is None:
            succ = pooled.time[pooled.event & (pooled.time <= tau)]
            qs = np.quantile(succ, [0.25, 0.5, 0.75]) if succ.size else []
            r = indicator_icc(pooled.time, pooled.event, pooled.episode, list(qs))
            rhos.append(r)
        effects.append(
            ObjectEffect(
                object=o,
                f_pooled=1.0 - s_pool,
                delta=(1.0 - s_a[:, 0]) - (1.0 - s_b[:, 0]),
                m_bar=len(pooled) / n,
                rho=0.0,
            )
        )
    used = rho if rho is not None else (float(np.mean(rhos)) if rhos else 0.0)
    effects = [ObjectEffect(e.object, e.f_pooled, e.delta, e.m_bar, used) for e in effects]
    return effects, used, rho is None


def _power(
    a: str,
    b: str,
    shared: tuple[str, ...],
    cells: dict[tuple[str, str], CellWork],
    protocol: AnalysisProtocol,
    alpha: float,
) -> PowerPrediction:
    effects, rho, estimated = pair_effects(
        {o: cells[(a, o)] for o in shared},
        {o: cells[(b, o)] for o in shared},
        tau=protocol.tau,
        rho=protocol.rho,
    )
    first, second = sorted((a, b))
    model = BridgeModel(
        effects, sims=protocol.power_sims, rng=child_rng(protocol.seed, "power", first, second)
    )
    n_now = float(np.mean([cells[(p, o)].n_episodes for p in (a, b) for o in shared]))
    needed = model.n_needed(alpha=alpha, target=protocol.power_target)
    m_bar = float(np.mean([e.m_bar for e in effects]))
    return PowerPrediction(
        n_per_cell=n_now,
        power_at_current_n=model.power(n_now, alpha),
        alpha=alpha,
        n_needed=needed,
        more_episodes_per_cell=None if needed is None else max(0, math.ceil(needed - n_now)),
        effect=model.effect,
        m_bar=m_bar,
        rho=rho,
        rho_estimated=estimated,
        deff=1.0 + (m_bar - 1.0) * rho,
    )
