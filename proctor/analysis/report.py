"""The result JSON (what ``proctor analyze --json`` writes and a leaderboard
snapshot stores); the schema is documented in proctor/analysis/README.md.

Numbers that do not exist (a median never reached, an unbounded MTBF/A, an
interval of an undefined value) are ``null``; curve arrays are rounded to 6
decimals to keep the file small.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

import numpy as np

from proctor.analysis import metrics
from proctor.analysis.bootstrap import Interval
from proctor.analysis.claims import MetricRanking, ObjectPairTest, SuccessTest
from proctor.analysis.episodes import EpisodeTable
from proctor.analysis.interaction import InteractionResult
from proctor.analysis.latency import Latency
from proctor.analysis.results import (
    AtT,
    Breakdown,
    Curve,
    Leaderboard,
    ObjectResult,
    PairResult,
    PolicyFaults,
    PolicyResult,
    Sweep,
)
from proctor.analysis.snapshot import SCHEMA
from proctor.analysis.throughput import CoverageWarning

# every key the result JSON uses (proctor/analysis/README.md; a test checks a real
# result against it): policy names must not be one of them, so that no name
# can be mistaken for a part of the result (proctor.runner.manifest)
RESULT_KEYS = frozenset(
    {
        *("schema", "code_version", "data_version", "protocol", "objects", "configurations"),
        *("policies", "pairs", "letters", "letters_completion", "matrix", "excluded", "notes"),
        *("tau", "bootstrap", "ks_resamples", "seed", "alpha", "reference", "success_at"),
        *("power_target", "rho", "interval", "tau_source", "source", "label_stream"),
        *("campaign_id", "object", "tags", "policy", "rank", "episodes", "operations"),
        *("objects_missing", "rmst", "rmst_pooled", "hrt", "uph", "completion", "mtbfa"),
        *("hard_failure_rate", "failure_modes", "ghosts_per_operation", "drops_per_operation"),
        *("lost_per_operation", "safety_stops_per_episode", "timeouts_per_episode"),
        *("operator_stops_per_episode", "envelope_interventions_per_episode"),
        *("auc_vs_reference", "median", "per_object"),
        *("per_configuration", "per_tag", "tau_sweep", "binary", "successes", "success_rate"),
        *("completion_mean", "estimate", "ci", "plateau", "km", "pp", "qq", "t", "cdf", "lo"),
        *("hi", "n_risk", "ref", "model", "p", "last_reachable", "key", "tote_placement"),
        *("external_camera", "same_side", "a", "b", "macro_ks", "statistic", "p_bonferroni"),
        *("resamples", "logrank", "chi2", "observed_a", "expected_a", "rmst_diff", "auc"),
        *("completion_welch", "df", "significant", "verdict", "winner", "power", "n_per_cell"),
        *("power_at_current_n", "n_needed_per_cell", "more_episodes_per_cell", "effect"),
        *("m_bar", "rho_estimated", "deff", "episode_id", "reason"),
        *("latency", "p50_ms", "p95_ms", "p99_ms", "server_p50_ms", "stale_action_rate"),
        *("calls", "calls_per_episode", "server_calls", "actions", "stale_actions"),
        *("over_budget", "sites", "stations", "per_site", "per_station"),
        *("policy_faults", "faults", "by_class", "class", "count", "share"),
        *("interaction_factors", "hrt_interactions", "interactions", "factor", "levels"),
        *("per_level", "permutations", "note"),
        *("method", "unstudentized", "p_normal", "variance_robust", "operation_level"),
        *("variance", "rmst_diff_bonferroni", "p_permutation", "p_wild"),
        *("success_barnard", "per_object_tests", "ks", "letters_per_object", "rankings"),
        *("metric", "higher_is_better", "top1_share", "replicates"),
        *("hrt_coverage_warning", "min_episodes_per_cell", "threshold", "measured_at"),
        *("coverage", "text", "sequential"),
        # every metric row's keys (proctor.analysis.metrics): a new row adds its own
        *(key for m in metrics.METRICS for key in m.json_path),
    }
)


def data_version(table: EpisodeTable) -> str:
    """SHA-256 of the exact input: every episode's fields (sorted by id; not
    its per-call table, see ``_scored``), the reference and the exclusions;
    equal inputs give equal hashes whatever their order."""
    payload = {
        "episodes": sorted(
            (_scored(asdict(e)) for e in table.episodes),
            key=lambda d: (d["episode_id"], d["policy"]),
        ),
        "reference": table.reference,
        "excluded": sorted(asdict(x)["episode_id"] + "|" + x.reason for x in table.excluded),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=list)
    return hashlib.sha256(text.encode()).hexdigest()


def _scored(record: dict[str, Any]) -> dict[str, Any]:
    """An episode's record as the interchange file carries it: without the
    per-call table, which stays in the store (an export re-analysed from its
    file has the same data version; latency is reported from the store only)."""
    record.pop("calls", None)
    # a format-1 episode (no block or sequence) hashes as it did before format 2
    for name in ("block", "sequence"):
        if record.get(name) is None:
            record.pop(name, None)
    return record


def _num(x: float | None, digits: int | None = None) -> float | None:
    if x is None:
        return None
    x = float(x)
    if not np.isfinite(x):
        return None
    return round(x, digits) if digits is not None else x


def _arr(a: np.ndarray, digits: int = 6) -> list[float | None]:
    return [_num(v, digits) for v in np.asarray(a, dtype=float)]


def _iv(x: Interval | None) -> dict[str, Any] | None:
    return None if x is None else x.as_json()


def _at(values: tuple[AtT, ...]) -> list[dict[str, Any]]:
    return [{"t": v.t, **v.value.as_json()} for v in values]


def _curve(c: Curve) -> dict[str, Any]:
    return {
        "t": _arr(c.t),
        "cdf": _arr(c.cdf),
        "lo": _arr(c.lo),
        "hi": _arr(c.hi),
        "n_risk": _arr(c.n_risk, 3),
    }


def _sweep(s: Sweep) -> dict[str, Any]:
    return {"tau": _arr(s.tau), "uph": _arr(s.uph), "mtbfa": _arr(s.mtbfa)}


def _object(r: ObjectResult) -> dict[str, Any]:
    return {
        "object": r.object,
        "tags": list(r.tags),
        "episodes": r.episodes,
        "operations": r.operations,
        "rmst": _iv(r.rmst),
        "hrt": _iv(r.hrt),
        "uph": _iv(r.uph),
        "mtbfa": _iv(r.mtbfa),
        "completion": _iv(r.completion),
        "median": _iv(r.median),
        "plateau": _iv(r.plateau),
        "hard_failure_rate": _iv(r.hard_failure_rate),
        "success_at": _at(r.success_at),
        "auc_vs_reference": _iv(r.auc_vs_reference),
        "km": _curve(r.km),
        "pp": None if r.pp is None else {"ref": _arr(r.pp.ref), "model": _arr(r.pp.model)},
        "qq": (
            None
            if r.qq is None
            else {
                "p": _arr(r.qq.p),
                "ref": _arr(r.qq.ref),
                "model": _arr(r.qq.model),
                "last_reachable": _num(r.qq.last_reachable, 6),
            }
        ),
        "tau_sweep": _sweep(r.sweep),
        "notes": list(r.notes),
    }


def _breakdown(b: Breakdown) -> dict[str, Any]:
    out: dict[str, Any] = {
        "key": b.key,
        "episodes": b.episodes,
        "objects": list(b.objects),
        "completion": _iv(b.completion),
        "hrt": _iv(b.hrt),
        "rmst": _iv(b.rmst),
    }
    if b.tote_placement is not None:
        out["tote_placement"] = b.tote_placement
        out["external_camera"] = b.external_camera
        out["same_side"] = b.tote_placement == b.external_camera
    return out


def _policy(r: PolicyResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "policy": r.policy,
        "reference": r.is_reference,
        "rank": r.rank,
        "letters": r.letters,
        "episodes": r.episodes,
        "operations": r.operations,
        "objects": list(r.objects),
        "objects_missing": list(r.objects_missing),
        "failure_modes": {},
    }
    for m in metrics.METRICS:  # read when called: a row added at run time is written
        if m.part_of_record:
            continue  # written with the record it belongs to
        parent = out
        for key in m.json_path[:-1]:
            parent = parent.setdefault(key, {})
        parent[m.json_path[-1]] = _iv(m.read(r))
    return out | {
        "success_at": _at(r.success_at),
        "per_object": [_object(o) for o in r.per_object],
        "per_configuration": [_breakdown(b) for b in r.per_configuration],
        "per_tag": [_breakdown(b) for b in r.per_tag],
        "per_site": [_breakdown(b) for b in r.per_site],
        "per_station": [_breakdown(b) for b in r.per_station],
        "tau_sweep": _sweep(r.sweep),
        "binary": {
            "successes": r.binary.successes,
            "episodes": r.binary.episodes,
            "success_rate": {
                "estimate": r.binary.success_posterior.mean,
                "ci": [r.binary.success_posterior.lo, r.binary.success_posterior.hi],
            },
            "completion_mean": {
                "estimate": r.binary.completion_posterior.mean,
                "ci": [r.binary.completion_posterior.lo, r.binary.completion_posterior.hi],
            },
        },
        "notes": list(r.notes),
        "latency": _latency(r.latency),
        "hrt_interactions": [_interaction(x) for x in r.hrt_interactions],
        "policy_faults": _policy_faults(r.policy_faults),
        "hrt_coverage_warning": _coverage_warning(r.hrt_coverage_warning),
    }


def _coverage_warning(x: CoverageWarning | None) -> dict[str, Any] | None:
    """docs/methods.md §4, "Interval coverage" (None: every cell is large enough)."""
    if x is None:
        return None
    return {
        "min_episodes_per_cell": x.min_episodes_per_cell,
        "threshold": x.threshold,
        "measured_at": x.measured_at,
        "coverage": x.coverage,
        "text": x.text,
    }


def _policy_faults(x: PolicyFaults | None) -> dict[str, Any] | None:
    """Faults of the policy's own doing that the score excludes (None: not computed)."""
    if x is None:
        return None
    return {
        "episodes": x.episodes,
        "faults": x.faults,
        "by_class": [{"class": c, "count": n} for c, n in x.by_class],
        "share": _iv(x.share),
    }


def _latency(x: Latency | None) -> dict[str, Any] | None:
    """docs/methods.md §4, "Latency": round trips in ms (None: no call recorded)."""
    if x is None:
        return None
    return {
        "p50_ms": _num(x.p50_ms, 3),
        "p95_ms": _num(x.p95_ms, 3),
        "p99_ms": _num(x.p99_ms, 3),
        "server_p50_ms": _num(x.server_p50_ms, 3),
        "stale_action_rate": _num(x.stale_action_rate, 6),
        "calls": x.calls,
        "calls_per_episode": _num(x.calls_per_episode, 3),
        "episodes": x.episodes,
        "server_calls": x.server_calls,
        "actions": x.actions,
        "stale_actions": x.stale_actions,
        "over_budget": x.over_budget,
    }


def _interaction(x: InteractionResult) -> dict[str, Any]:
    return {
        "factor": x.factor,
        "effect": x.effect,
        "policies": list(x.policies),
        "objects": list(x.objects),
        "levels": list(x.levels),
        "per_level": [_num(v) for v in x.per_level],
        "statistic": _num(x.statistic),
        "p": x.p,
        "permutations": x.permutations,
        "note": x.note,
    }


def _success(x: SuccessTest | None) -> dict[str, Any] | None:
    """Barnard's exact test on per-episode success (proctor.analysis.claims)."""
    if x is None:
        return None
    return {
        "successes": [x.successes_a, x.successes_b],
        "episodes": [x.episodes_a, x.episodes_b],
        "statistic": _num(x.statistic),
        "p": _num(x.p),
        "p_bonferroni": _num(x.p_bonferroni),
    }


def _object_pair(x: ObjectPairTest) -> dict[str, Any]:
    return {
        "object": x.object,
        "ks": {"statistic": _num(x.ks_statistic), "p": x.ks_p, "p_bonferroni": x.ks_p_bonferroni},
        "success_barnard": _success(x.success),
        "rmst_diff": _iv(x.rmst_diff),
        "significant": x.significant,
    }


def _ranking(r: MetricRanking) -> dict[str, Any]:
    return {
        "metric": r.metric,
        "higher_is_better": r.higher_is_better,
        "replicates": r.replicates,
        "policies": [
            {"policy": p, "estimate": _num(r.estimates[p]), "top1_share": r.top1_share[p]}
            for p in r.order
        ],
    }


def _pair(p: PairResult) -> dict[str, Any]:
    return {
        "a": p.a,
        "b": p.b,
        "objects": list(p.objects),
        "macro_ks": {
            "method": "studentized",
            "statistic": p.macro_ks.statistic,
            "p": p.macro_ks.p,
            # the two references p is the larger of (docs/methods.md §5)
            "p_permutation": p.macro_ks.p_permutation,
            "p_wild": p.macro_ks.p_wild,
            "p_bonferroni": p.ks_p_bonferroni,
            "resamples": p.macro_ks.replicates,
            "per_object": [
                {"object": o, "statistic": d} for o, d in sorted(p.macro_ks.per_object.items())
            ],
            # the unstudentized macro D on the same relabellings (not the board's test)
            "unstudentized": {"statistic": p.macro_ks.raw_statistic, "p": p.macro_ks.raw_p},
        },
        "logrank": {
            "method": "episode_clustered",
            "chi2": p.logrank.chi2,
            "p": p.logrank.p,
            "p_permutation": p.logrank.p_permutation,
            "p_wild": p.logrank.p_wild,
            "p_normal": p.logrank.p_normal,
            "p_bonferroni": p.logrank_p_bonferroni,
            "observed_a": p.logrank.observed,
            "expected_a": p.logrank.expected,
            "variance_robust": p.logrank.variance,
            "resamples": p.logrank.replicates,
            # operations as independent subjects (R's survdiff): not the board's test
            "operation_level": {
                "chi2": p.logrank_operations.chi2,
                "p": p.logrank_operations.p,
                "variance": p.logrank_operations.variance,
            },
        },
        "rmst_diff": _iv(p.rmst_diff),
        "rmst_diff_bonferroni": _iv(p.rmst_diff_bonferroni),
        "auc": _iv(p.auc),
        "completion_welch": (
            None
            if p.completion_welch is None
            else {
                "t": _num(p.completion_welch.t),
                "df": _num(p.completion_welch.df),
                "p": _num(p.completion_welch.p),
                "p_bonferroni": _num(p.completion_welch.p_bonferroni),
            }
        ),
        "significant": p.significant,
        "interactions": [_interaction(x) for x in p.interactions],
        "verdict": p.verdict,
        "winner": p.winner,
        "success_barnard": _success(p.success_barnard),
        "per_object_tests": [_object_pair(x) for x in p.per_object_tests],
        "power": (
            None
            if p.power is None
            else {
                "n_per_cell": p.power.n_per_cell,
                "power_at_current_n": p.power.power_at_current_n,
                "alpha": p.power.alpha,
                "n_needed_per_cell": p.power.n_needed,
                "more_episodes_per_cell": p.power.more_episodes_per_cell,
                "effect": p.power.effect,
                "m_bar": p.power.m_bar,
                "rho": p.power.rho,
                "rho_estimated": p.power.rho_estimated,
                "deff": p.power.deff,
            }
        ),
    }


def _matrix(lb: Leaderboard) -> dict[str, Any]:
    names = [p.policy for p in lb.policies]
    index = {n: k for k, n in enumerate(names)}
    k = len(names)
    p_bonf: list[list[float | None]] = [[None] * k for _ in range(k)]
    verdicts: list[list[str | None]] = [[None] * k for _ in range(k)]
    winners: list[list[str | None]] = [[None] * k for _ in range(k)]
    for pr in lb.pairs:
        i, j = index[pr.a], index[pr.b]
        for x, y in ((i, j), (j, i)):
            p_bonf[x][y] = pr.ks_p_bonferroni
            verdicts[x][y] = pr.verdict
            winners[x][y] = pr.winner
    return {"policies": names, "p_bonferroni": p_bonf, "verdict": verdicts, "winner": winners}


def to_json(
    lb: Leaderboard,
    *,
    code_version: str | None = None,
    data_version: str | None = None,
    extra_protocol: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The full result as JSON-ready data (see proctor/analysis/README.md)."""
    pr = lb.protocol
    protocol = {
        "tau": pr.tau,
        "bootstrap": pr.bootstrap,
        "ks_resamples": pr.resamples,
        "seed": pr.seed,
        "alpha": pr.alpha,
        "reference": lb.reference,
        "success_at": list(pr.success_at),
        "power_target": pr.power_target,
        "rho": pr.rho,
        "interaction_factors": list(pr.interaction_factors),
        "interval": (
            "episode-clustered bootstrap: expanded percentile (episode jackknife) for "
            "RMST and HRT, percentile for the rest"
        ),
        **(extra_protocol or {}),
    }
    return {
        "schema": SCHEMA,
        "code_version": code_version,
        "data_version": data_version,
        "protocol": protocol,
        "objects": [{"object": o, "tags": list(lb.object_tags.get(o, ()))} for o in lb.objects],
        "configurations": list(lb.configurations),
        "sites": list(lb.sites),
        "stations": list(lb.stations),
        "policies": [_policy(p) for p in lb.policies],
        "pairs": [_pair(p) for p in lb.pairs],
        "letters": dict(lb.letters),
        "letters_completion": dict(lb.letters_completion),
        "letters_per_object": [
            {"object": o, "letters": dict(v)} for o, v in lb.letters_per_object.items()
        ],
        "rankings": [_ranking(r) for r in lb.rankings],
        "matrix": _matrix(lb),
        "excluded": [
            {"episode_id": x.episode_id, "policy": x.policy, "object": x.object, "reason": x.reason}
            for x in lb.excluded
        ],
        "notes": list(lb.notes),
    }
