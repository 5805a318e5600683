"""Coverage of the 95 % HRT and macro-RMST intervals at small cells
(``./run bench coverage``; docs/methods.md §4, "Interval coverage", has the
table it feeds and proctor.analysis.throughput.MEASURED_HRT_COVERAGE the
board's warning reads).

Model: the PhAIL-like ``human`` reference and the ``alpha`` and ``delta``
policies (proctor.analysis.synthetic) on the four PhAIL objects, 5–10 items
an episode, 30 s an item, τ = 300 s (the largest budget), as in the
statistical review's own check.

Truth: what the estimator converges to — the KM limit of each cell's
RMST(τ), not E[min(T, τ)] (the shared budget makes censoring informative,
review §1(a), so the two differ). It is the estimate from ``--truth-episodes``
(default 4000) episodes a cell under a seed of its own; its Monte Carlo SE
is the spread of four disjoint quarters of those episodes over 2 (= √4).
Against the intervals' widths (several HRT points at 40 episodes a cell)
that error is negligible.

Each trial simulates a fresh cohort of n episodes a cell (every cell of
both arms), builds the cells exactly as the leaderboard does (the same
``build_cell``, B replicates) and asks every interval method of
``INTERVAL_METHODS`` whether its interval covers the truth. Reported:
coverage with its Monte Carlo SE √(c(1 − c)/trials), and how often the
truth fell below / above the interval.

Cost: after the coverage table, the run time of the board's path (cells
with B = 2000 replicates, then the HRT and macro-RMST intervals) with the
percentile interval against the board's methods (HRT_INTERVAL,
RMST_INTERVAL: the expanded percentile adds one KM pass with E columns per
cell, the jackknife), in this process, on the same cohorts.

The default (500 trials a size, B = 500, 5 sizes, 2 policies: the table in
docs/methods.md) took about 15 minutes of CPU, most of it at 40 episodes a
cell; ``--policies alpha`` halves it. Run it under ``nice`` on a shared
machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from proctor.analysis.cells import CellWork, build_cell
from proctor.analysis.episodes import SYSTEM, Episode
from proctor.analysis.intervals import HRT_INTERVAL, INTERVAL_METHODS, RMST_INTERVAL
from proctor.analysis.km import risk_set, rmst, survival
from proctor.analysis.operations import extract_operations
from proctor.analysis.synthetic import PHAIL_OBJECTS, PolicyModel, cohort, phail_like_models
from proctor.analysis.throughput import (
    hrt_interval,
    interval,
    macro_hrt,
    macro_rmst,
    rmst_interval,
)

TAU = 300.0  # 10 items × 30 s: the largest budget
SIZES = (3, 5, 10, 20, 40)
ALPHA = 0.05


@dataclass(frozen=True)
class Truth:
    hrt: float
    hrt_se: float
    rmst: float
    rmst_se: float


def _cell_rmst(episodes: Sequence[Episode]) -> float:
    rs = risk_set(extract_operations(list(episodes)))
    return float(rmst(rs.grid, survival(rs), TAU)[0])


def _by_object(episodes: Sequence[Episode], policy: str) -> dict[str, list[Episode]]:
    out: dict[str, list[Episode]] = {o: [] for o in PHAIL_OBJECTS}
    for e in episodes:
        # system faults are not scored (docs/methods.md §2), as on the board
        if e.policy == policy and e.outcome != SYSTEM:
            out[e.object].append(e)
    return out


def truth(ref: PolicyModel, model: PolicyModel, n: int, seed: int) -> Truth:
    """Macro HRT and RMST of the KM limit, from ``n`` episodes a cell."""
    rng = np.random.default_rng([seed, 7919])
    eps = cohort([ref, model], PHAIL_OBJECTS, episodes_per_cell=n, rng=rng)
    r_eps, m_eps = _by_object(eps, ref.name), _by_object(eps, model.name)

    def macro(part: slice) -> tuple[float, float]:
        r = {o: _cell_rmst(r_eps[o][part]) for o in PHAIL_OBJECTS}
        m = {o: _cell_rmst(m_eps[o][part]) for o in PHAIL_OBJECTS}
        return (
            float(np.mean([100.0 * r[o] / m[o] for o in PHAIL_OBJECTS])),
            float(np.mean(list(m.values()))),
        )

    hrt, rm = macro(slice(None))
    q = n // 4
    quarters = np.array([macro(slice(k * q, (k + 1) * q)) for k in range(4)])
    se = quarters.std(axis=0, ddof=1) / 2.0
    return Truth(hrt, float(se[0]), rm, float(se[1]))


def trial_cells(
    ref: PolicyModel, model: PolicyModel, n: int, replicates: int, rng: np.random.Generator
) -> list[tuple[CellWork, CellWork]]:
    """(reference cell, policy cell) per object of one fresh cohort."""
    eps = cohort([ref, model], PHAIL_OBJECTS, episodes_per_cell=n, rng=rng)
    seed = int(rng.integers(2**31))
    cells = {}
    for name, by_obj in (
        (ref.name, _by_object(eps, ref.name)),
        (model.name, _by_object(eps, model.name)),
    ):
        for o, cell_eps in by_obj.items():
            cells[(name, o)] = build_cell(
                name, o, cell_eps, tau=TAU, replicates=replicates, seed=seed
            )
    return [(cells[(ref.name, o)], cells[(model.name, o)]) for o in PHAIL_OBJECTS]


@dataclass
class Tally:
    hit: int = 0
    below: int = 0  # the truth below the interval
    above: int = 0

    def add(self, lo: float | None, hi: float | None, true: float) -> None:
        if lo is not None and true < lo:
            self.below += 1
        elif hi is not None and true > hi:
            self.above += 1
        else:
            self.hit += 1

    def row(self, trials: int) -> str:
        c = self.hit / trials
        se = np.sqrt(c * (1 - c) / trials)
        return f"{c:.3f} ({se:.3f})  {self.below:>4} / {self.above:<4}"


def run_coverage(
    ref: PolicyModel, model: PolicyModel, t: Truth, sizes: Sequence[int], args: argparse.Namespace
) -> None:
    methods = sorted(INTERVAL_METHODS)
    print(
        f"\n{model.name}: true HRT {t.hrt:.3f} % (SE {t.hrt_se:.3f}), "
        f"true macro RMST {t.rmst:.2f} s (SE {t.rmst_se:.2f}); {args.trials} trials a size, "
        f"B = {args.replicates}"
    )
    print(
        f"{'n/cell':>6}  {'statistic':<9}  "
        + "  ".join(f"{m + ' cov (SE) below/above':<32}" for m in methods)
    )
    for n in sizes:
        rng = np.random.default_rng([args.seed, n, sum(map(ord, model.name))])
        tallies = {(s, m): Tally() for s in ("HRT", "RMST") for m in methods}
        for _ in range(args.trials):
            pairs = trial_cells(ref, model, n, args.replicates, rng)
            stats = {
                "HRT": (macro_hrt(pairs), t.hrt),
                "RMST": (macro_rmst([c for _, c in pairs]), t.rmst),
            }
            for s, (x, true) in stats.items():
                for m in methods:
                    iv = interval(x, ALPHA, m)
                    tallies[(s, m)].add(iv.lo, iv.hi, true)
        for s in ("HRT", "RMST"):
            cols = "  ".join(f"{tallies[(s, m)].row(args.trials):<32}" for m in methods)
            print(f"{n:>6}  {s:<9}  {cols}", flush=True)


def run_cost(ref: PolicyModel, model: PolicyModel, args: argparse.Namespace) -> None:
    """Wall time of the board's path (cells, then the HRT and macro-RMST
    intervals), the percentile interval against the board's methods, on the
    same cohorts in this process."""
    print(
        f"\ncost: cells and the HRT + RMST intervals, B = {args.cost_replicates}, 4 objects, "
        f"both arms, {args.cost_repeats} cohorts a size"
    )
    board = (HRT_INTERVAL, RMST_INTERVAL)
    plain = ("percentile", "percentile")
    for n in (5, 20, 40):
        rng = np.random.default_rng([args.seed, n, 99])
        cohorts = [
            cohort([ref, model], PHAIL_OBJECTS, episodes_per_cell=n, rng=rng)
            for _ in range(args.cost_repeats + 1)
        ]
        # CPU time, the two paths alternating cohort by cohort (a shared
        # machine's load then hits both alike); the first cohort warms up
        cpu = {plain: 0.0, board: 0.0}
        for k, eps in enumerate(cohorts):
            for methods in (plain, board) if k % 2 else (board, plain):
                start = time.process_time()
                cells = {
                    (p, o): build_cell(p, o, v, tau=TAU, replicates=args.cost_replicates, seed=k)
                    for p in (ref.name, model.name)
                    for o, v in _by_object(eps, p).items()
                }
                pairs = [(cells[(ref.name, o)], cells[(model.name, o)]) for o in PHAIL_OBJECTS]
                hrt_interval(pairs, ALPHA, methods[0])
                rmst_interval([c for _, c in pairs], ALPHA, methods[1])
                if k:
                    cpu[methods] += 1000 * (time.process_time() - start) / args.cost_repeats
        base, new = cpu[plain], cpu[board]
        print(
            f"  {n:>3} episodes/cell: percentile {base:.1f} ms, board ({board[0]} HRT, "
            f"{board[1]} RMST) {new:.1f} ms of CPU a cohort: ratio {new / base:.2f}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=500)
    ap.add_argument("--replicates", type=int, default=500, help="bootstrap B (coverage)")
    ap.add_argument("--cost-replicates", type=int, default=2000, help="bootstrap B (cost)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--policies", default="alpha,delta")
    ap.add_argument("--truth-episodes", type=int, default=4000)
    ap.add_argument("--cost-repeats", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--no-cost", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    models = {m.name: m for m in phail_like_models()}
    ref = models["human"]
    start = time.perf_counter()
    for name in args.policies.split(","):
        model = models[name]
        t = truth(ref, model, args.truth_episodes, args.seed)
        run_coverage(ref, model, t, sizes, args)
    if not args.no_cost:
        run_cost(ref, models[args.policies.split(",")[0]], args)
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
