"""One (policy, object) cell: its operations, its observed KM curve and the
bootstrap replicates every scalar's interval is read from (docs/methods.md §3–4).

A cell draws its replicate weights once, from a generator derived from the
protocol seed and the cell's name; every scalar of the cell (RMST, F(t),
median, completion, failure rates) is computed on the same replicates, so
ratios and differences between cells can pair replicate b with replicate b
(independent across cells, which is what resampling both arms means).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from proctor.analysis.bootstrap import child_rng, cluster_bootstrap
from proctor.analysis.episodes import OPERATOR_STOP, RAN_OUT_OF_TIME, SAFETY, Episode
from proctor.analysis.km import RiskSet, quantile_time, risk_set, rmst, survival, survival_at
from proctor.analysis.operations import DROPPED_OP, LOST_OP, Operations, extract_operations
from proctor.analysis.rmst_variance import rmst_variance


@dataclass
class CellWork:
    """Arrays of one cell; column 0 of every replicate array is the observed
    data, columns 1..B the bootstrap replicates."""

    policy: str
    object: str
    episodes: list[Episode]
    ops: Operations
    rs: RiskSet
    weights: np.ndarray  # (E, 1 + B)
    s: np.ndarray  # (J, 1 + B)
    tau: float
    _cache: dict[object, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def n_episodes(self) -> int:
        return len(self.episodes)

    @property
    def n_operations(self) -> int:
        return len(self.ops)

    def rmst(self, tau: float | None = None) -> np.ndarray:
        t = self.tau if tau is None else tau
        key = ("rmst", t)
        if key not in self._cache:
            self._cache[key] = rmst(self.rs.grid, self.s, t)
        return self._cache[key]

    def jackknife_rmst(self, tau: float | None = None) -> np.ndarray:
        """RMST(τ) with each episode left out in turn, shape (E,): the
        jackknife the expanded percentile and BCa read (proctor.analysis.intervals). One
        more KM pass with E columns, beside the 1 + B of the replicates."""
        t = self.tau if tau is None else tau
        key = ("rmst_jackknife", t)
        if key not in self._cache:
            n = self.n_episodes
            s = survival(self.rs, 1.0 - np.eye(n)) if n else np.ones((self.rs.n_grid, 0))
            self._cache[key] = rmst(self.rs.grid, s, t)
        return self._cache[key]

    def rmst_variance(self, tau: float | None = None) -> np.ndarray:
        """Episode-clustered variance of RMST(τ) for the data and every
        replicate, shape (1 + B,) (proctor.analysis.rmst_variance)."""
        t = self.tau if tau is None else tau
        key = ("rmst_var", t)
        if key not in self._cache:
            self._cache[key] = rmst_variance(self.rs, self.weights, self.s, t)
        return self._cache[key]

    def survival_at(self, t: float) -> np.ndarray:
        key = ("s_at", t)
        if key not in self._cache:
            self._cache[key] = survival_at(self.rs.grid, self.s, t)
        return self._cache[key]

    def quantile(self, p: float) -> np.ndarray:
        return quantile_time(self.rs.grid, self.s, p)

    def plateau(self) -> np.ndarray:
        """F at the last success time, per replicate (0 without successes)."""
        if self.rs.n_grid == 0:
            return np.zeros(self.s.shape[1])
        return 1.0 - self.s[-1]

    def per_episode(self, values: np.ndarray) -> np.ndarray:
        """Σ over episodes of ``values`` (E,) weighted by each replicate."""
        return np.einsum("e,er->r", np.asarray(values, dtype=float), self.weights)

    def episode_counts(self) -> dict[str, np.ndarray]:
        """Per-episode counts the rates are built from, shape (E,) each."""
        if "counts" not in self._cache:
            self._cache["counts"] = self._episode_counts()  # type: ignore[assignment]
        return self._cache["counts"]  # type: ignore[return-value]

    def _episode_counts(self) -> dict[str, np.ndarray]:
        eps = self.episodes
        ops_per = self.ops.per_episode().astype(float)
        ghost = np.bincount(self.ops.episode[self.ops.ghost], minlength=self.n_episodes).astype(
            float
        )
        return {
            "items": np.array([e.items for e in eps], dtype=float),
            "placed": np.array([e.placed for e in eps], dtype=float),
            "lost": np.array([e.lost for e in eps], dtype=float),
            "dropped": np.array([e.dropped for e in eps], dtype=float),
            "safety": np.array([e.outcome == SAFETY for e in eps], dtype=float),
            "timeout": np.array([e.outcome == RAN_OUT_OF_TIME for e in eps], dtype=float),
            "operator_stop": np.array([e.outcome == OPERATOR_STOP for e in eps], dtype=float),
            # an uncounted episode adds to neither side of interventions per episode
            "envelope": np.array([e.envelope_interventions or 0 for e in eps], dtype=float),
            "envelope_counted": np.array(
                [e.envelope_interventions is not None for e in eps], dtype=float
            ),
            "episodes": np.ones(len(eps)),
            "operations": ops_per,
            "ghosts": ghost,
            "lost_ops": np.bincount(
                self.ops.episode[self.ops.kind == LOST_OP], minlength=self.n_episodes
            ).astype(float),
            "dropped_ops": np.bincount(
                self.ops.episode[self.ops.kind == DROPPED_OP], minlength=self.n_episodes
            ).astype(float),
        }


def build_cell(
    policy: str,
    obj: str,
    episodes: Sequence[Episode],
    *,
    tau: float,
    replicates: int,
    seed: int,
    label: str = "cell",
) -> CellWork:
    """Operations, risk set and bootstrap replicates of one cell.
    ``label`` separates the random streams of cells and sub-cells."""
    eps = list(episodes)
    ops = extract_operations(eps)
    rs = risk_set(ops)
    rng = child_rng(seed, label, policy, obj)
    boot = cluster_bootstrap(len(eps), replicates, rng)
    weights = np.hstack([np.ones((len(eps), 1)), boot])
    return CellWork(
        policy=policy,
        object=obj,
        episodes=eps,
        ops=ops,
        rs=rs,
        weights=weights,
        s=survival(rs, weights),
        tau=tau,
    )
