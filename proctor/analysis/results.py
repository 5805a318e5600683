"""Result dataclasses of a leaderboard run (what :mod:`proctor.analysis.leaderboard`
returns and :mod:`proctor.analysis.report` turns into the JSON the web reads)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from proctor.analysis.binary import Posterior
from proctor.analysis.bootstrap import Interval
from proctor.analysis.claims import MetricRanking, ObjectPairTest, SuccessTest
from proctor.analysis.episodes import Exclusion
from proctor.analysis.interaction import InteractionResult, factor_named
from proctor.analysis.latency import Latency
from proctor.analysis.significance import ClusteredLogRank, LogRank, StudentizedKS
from proctor.analysis.throughput import CoverageWarning


@dataclass(frozen=True)
class AnalysisProtocol:
    """Everything a result depends on besides the data; disclosed with it.

    ``tau``: RMST integration cap (s). ``bootstrap``: replicates for every
    interval; ``ks_resamples``: label permutations for each macro-KS p-value
    (default: ``bootstrap``). ``success_at``: thresholds t for F(t).
    ``rho``: intra-episode correlation for the power model (None: estimated
    from the data). ``sweep_points``: τ values in the (UPH, MTBF/A) sweep.
    """

    tau: float
    bootstrap: int = 2000
    ks_resamples: int | None = None
    seed: int = 0
    alpha: float = 0.05
    reference: str | None = None
    success_at: tuple[float, ...] = (10.0, 30.0, 60.0)
    power_target: float = 0.8
    power_sims: int = 1000
    rho: float | None = None
    sweep_points: int = 10
    # scene factors whose interaction with each pair (and each policy's HRT)
    # is tested: named before the data are seen (proctor.analysis.interaction)
    interaction_factors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.tau > 0 and np.isfinite(self.tau)):
            raise ValueError(f"tau: must be a positive number of seconds, got {self.tau}")
        if self.seed < 0:
            # numpy's seed sequences take none, and would say so without a name
            raise ValueError(f"seed: must be a non-negative integer, got {self.seed}")
        if self.bootstrap < 1:
            raise ValueError(f"bootstrap: must be at least 1, got {self.bootstrap}")
        if self.ks_resamples is not None and self.ks_resamples < 1:
            raise ValueError(f"ks_resamples: must be at least 1, got {self.ks_resamples}")
        if not 0 < self.alpha < 1:
            raise ValueError(f"alpha: must be in (0, 1), got {self.alpha}")
        if not all(t > 0 and np.isfinite(t) for t in self.success_at):
            raise ValueError("success_at: thresholds must be finite and positive")
        if not 0 < self.power_target < 1:
            raise ValueError(f"power_target: must be in (0, 1), got {self.power_target}")
        if self.rho is not None and not 0 <= self.rho <= 1:
            raise ValueError(f"rho: must be in [0, 1], got {self.rho}")
        if self.sweep_points < 2:
            raise ValueError("sweep_points: need at least 2")
        object.__setattr__(self, "interaction_factors", tuple(self.interaction_factors))
        for name in self.interaction_factors:
            factor_named(name)  # an unknown factor is refused here, naming it

    @property
    def resamples(self) -> int:
        return self.ks_resamples if self.ks_resamples is not None else self.bootstrap


@dataclass(frozen=True)
class Curve:
    """A KM CDF with its pointwise band: F(t) for t ≥ each ``t`` until the
    next one (``t[0] = 0``, F = 0 there unless a success is at 0)."""

    t: np.ndarray
    cdf: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    n_risk: np.ndarray


@dataclass(frozen=True)
class PPData:
    """P-P curve vs the reference: points (F_ref(t), F_m(t)) over the union of
    both cells' success times, from (0, 0); area under it (closed to (1, 1))
    is the AUC, its largest vertical distance to the diagonal the KS gap."""

    ref: np.ndarray
    model: np.ndarray


@dataclass(frozen=True)
class QQData:
    """Q-Q curve vs the reference: quantiles Q(p) = inf{t: F(t) >= p} at
    probabilities ``p``; ``model`` is NaN beyond the model's last reachable
    quantile F_m(∞) (``last_reachable``), ``ref`` NaN beyond the reference's."""

    p: np.ndarray
    ref: np.ndarray
    model: np.ndarray
    last_reachable: float


@dataclass(frozen=True)
class Sweep:
    """UPH(τ') = 3600/RMST(τ') and MTBF/A(τ') = RMST(τ')/(1 − F(τ')) as the
    integration cap τ' sweeps (point estimates; inf where F(τ') = 1)."""

    tau: np.ndarray
    uph: np.ndarray
    mtbfa: np.ndarray


@dataclass(frozen=True)
class AtT:
    t: float
    value: Interval


@dataclass(frozen=True)
class ObjectResult:
    object: str
    tags: tuple[str, ...]
    episodes: int
    operations: int
    rmst: Interval
    hrt: Interval | None
    uph: Interval
    mtbfa: Interval
    completion: Interval
    median: Interval
    plateau: Interval
    hard_failure_rate: Interval
    success_at: tuple[AtT, ...]
    auc_vs_reference: Interval | None
    km: Curve
    pp: PPData | None
    qq: QQData | None
    sweep: Sweep
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FailureModes:
    """Hard failures split by mechanism (PhAIL App. F): drops and losses per
    operation (ghosts), safety stops per episode (a ghost each), and the
    censored endings (timeouts, operator stops) per episode. Beside them, not a
    failure: the commands the station's safety envelope clamped or stopped, per
    episode, over the episodes whose station counted them (docs/methods.md §4)."""

    ghosts_per_operation: Interval
    drops_per_operation: Interval
    lost_per_operation: Interval
    safety_stops_per_episode: Interval
    timeouts_per_episode: Interval
    operator_stops_per_episode: Interval
    envelope_interventions_per_episode: Interval


@dataclass(frozen=True)
class PolicyFaults:
    """Endings of the policy's own doing that are not scored as its failures
    (``proctor.analysis.policy_faults``): over the episodes it ran, scored
    and ``system`` alike."""

    episodes: int
    faults: int
    by_class: tuple[tuple[str, int], ...]
    share: Interval  # faults / episodes, Wilson 95 %


@dataclass(frozen=True)
class Breakdown:
    """Completion and HRT of one policy on a subset of its episodes: one
    spatial configuration, the objects carrying one tag, one site or one station."""

    key: str
    episodes: int
    objects: tuple[str, ...]
    completion: Interval
    hrt: Interval | None
    rmst: Interval
    tote_placement: str | None = None
    external_camera: str | None = None


@dataclass(frozen=True)
class BinarySummary:
    """§7 views: episode success (outcome ``success``) with its Beta(1+s,
    1+n−s) posterior, and the Bayesian bootstrap (Dirichlet weights over the
    episodes) of mean per-episode completion."""

    successes: int
    episodes: int
    success_posterior: Posterior
    completion_posterior: Posterior


@dataclass(frozen=True)
class PolicyResult:
    policy: str
    is_reference: bool
    rank: int | None
    letters: str
    episodes: int
    operations: int
    objects: tuple[str, ...]
    objects_missing: tuple[str, ...]
    rmst: Interval
    rmst_pooled: Interval
    hrt: Interval | None
    uph: Interval
    mtbfa: Interval
    completion: Interval
    hard_failure_rate: Interval
    failure_modes: FailureModes
    auc_vs_reference: Interval | None
    median: Interval
    success_at: tuple[AtT, ...]
    per_object: tuple[ObjectResult, ...]
    per_configuration: tuple[Breakdown, ...]
    per_tag: tuple[Breakdown, ...]
    sweep: Sweep
    binary: BinarySummary
    notes: tuple[str, ...] = ()
    # round trips, the server's share and stale actions over the scored episodes
    latency: Latency | None = None
    # per site and per station the episodes ran at (those that declared one)
    per_site: tuple[Breakdown, ...] = ()
    per_station: tuple[Breakdown, ...] = ()
    # the pre-registered factors' tests of this policy's HRT (against the reference)
    hrt_interactions: tuple[InteractionResult, ...] = ()
    # faults of its own doing that the score excludes (None: not computed)
    policy_faults: PolicyFaults | None = None
    # its HRT rests on a cell smaller than the measured coverage allows
    # (docs/methods.md §4, "Interval coverage"); None: no such cell
    hrt_coverage_warning: CoverageWarning | None = None


@dataclass(frozen=True)
class PowerPrediction:
    """The bridge model's answer for one pair (docs/methods.md §6)."""

    n_per_cell: float
    power_at_current_n: float
    alpha: float
    n_needed: int | None
    more_episodes_per_cell: int | None
    effect: float
    m_bar: float
    rho: float
    rho_estimated: bool
    deff: float


@dataclass(frozen=True)
class WelchTest:
    """Welch's t-test on per-episode completion between the two policies of
    a pair: the statistic, its Welch–Satterthwaite degrees of freedom, the
    two-sided p-value and that p-value Bonferroni-adjusted over the pairs."""

    t: float
    df: float
    p: float
    p_bonferroni: float


@dataclass(frozen=True)
class PairResult:
    a: str
    b: str
    objects: tuple[str, ...]
    # the studentized macro-KS (docs/methods.md §5), with the unstudentized
    # statistic and p on the same relabellings for comparison
    macro_ks: StudentizedKS
    ks_p_bonferroni: float
    # the episode-clustered log-rank (its permutation p); the operation-level
    # one (valid only for independent operations) kept for comparison
    logrank: ClusteredLogRank
    logrank_p_bonferroni: float
    logrank_operations: LogRank
    rmst_diff: Interval  # macro RMST_a − RMST_b (negative: a faster)
    # the same at the Bonferroni level α/pairs: the verdict's direction reads it
    rmst_diff_bonferroni: Interval
    auc: Interval  # P(T_a < T_b) + ½ P(T_a = T_b), macro over objects
    completion_welch: WelchTest | None  # None: fewer than two episodes on a side
    significant: bool
    verdict: str
    winner: str | None
    power: PowerPrediction | None
    # the pre-registered factors' tests of this pair's effect
    interactions: tuple[InteractionResult, ...] = ()
    # Barnard's exact test on per-episode success, and the pair's tests on
    # each shared object alone (proctor.analysis.claims)
    success_barnard: SuccessTest | None = None
    per_object_tests: tuple[ObjectPairTest, ...] = ()


@dataclass(frozen=True)
class Leaderboard:
    protocol: AnalysisProtocol
    reference: str | None
    objects: tuple[str, ...]
    object_tags: dict[str, tuple[str, ...]]
    policies: tuple[PolicyResult, ...]
    pairs: tuple[PairResult, ...]
    letters: dict[str, str]
    letters_completion: dict[str, str]
    excluded: tuple[Exclusion, ...]
    notes: tuple[str, ...] = field(default=())
    configurations: tuple[str, ...] = ()
    # the sites and stations the scored episodes ran at (those that declared one)
    sites: tuple[str, ...] = ()
    stations: tuple[str, ...] = ()
    # object → policy → letters from that object's own pair tests, and the
    # ranking under each aggregation rule (proctor.analysis.claims)
    letters_per_object: dict[str, dict[str, str]] = field(default_factory=dict)
    rankings: tuple[MetricRanking, ...] = ()
