"""Speed of the analysis engine (``./run bench analysis``).

Builds a PhAIL-scale synthetic cohort (5 policies including the human
reference, 4 objects, 50 episodes per cell ≈ 1000 episodes, 5–10 items each)
and times, in this process:

1. the full leaderboard: every cell's B = 2000 episode-clustered bootstrap,
   all 10 pairs with 2000 KS label permutations per object, log-rank, AUC,
   breakdowns, power for unresolved pairs;
2. a paper-scale detection-rate run: one pair, n = 5, 10, …, 50 episodes per
   cell, 300 outer trials × 200 inner relabellings, three tests;
3. the straightforward baseline on the same work: one lifelines
   ``KaplanMeierFitter`` fit per bootstrap replicate (RMST from
   ``restricted_mean_survival_time`` for a cell, the KS sup from two fits
   for a pair). At ≈ 40 ms a fit the full baseline (200 000 fits) takes
   hours, so it is timed on a sample of replicates of one cell and one pair,
   and scaled by the number of fits the leaderboard needs; the same sample
   is also timed with the vectorised code, for a like-for-like ratio;
4. the same leaderboard as a user runs it: ``proctor analyze`` on the
   cohort's interchange file in a new process (start-up, reading, the
   analysis, printing, the JSON), beside the in-process figure, and
   ``proctor version`` alone (the start-up every command pays).

Targets on the 2-core reference machine: leaderboard < 5 s, >= 50× the
lifelines loop, detection run < 2 min.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from proctor.analysis.bootstrap import child_rng, cluster_bootstrap
from proctor.analysis.cells import build_cell
from proctor.analysis.detection import detection_rates as run_detection
from proctor.analysis.detection import make_pool
from proctor.analysis.episodes import EpisodeTable, scored
from proctor.analysis.interchange import write_interchange
from proctor.analysis.leaderboard import analyze
from proctor.analysis.operations import extract_operations
from proctor.analysis.results import AnalysisProtocol
from proctor.analysis.significance import macro_ks_test
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models

TAU = 300.0
B = 2000


class Clock:
    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def done(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def build_cohort(seed: int) -> EpisodeTable:
    eps = cohort(
        phail_like_models(), PHAIL_OBJECTS, episodes_per_cell=50, rng=np.random.default_rng(seed)
    )
    return EpisodeTable(tuple(eps))


def lifelines_cell(episodes, replicates: int, rng: np.random.Generator) -> float:
    """Baseline for one cell: per replicate, resample episodes, fit KM, RMST."""
    from lifelines import KaplanMeierFitter
    from lifelines.utils import restricted_mean_survival_time

    ops = extract_operations(episodes)
    durations = np.where(np.isfinite(ops.time), ops.time, 1e9)
    w = cluster_bootstrap(ops.n_episodes, replicates, rng).astype(int)
    total = 0.0
    for r in range(replicates):
        take = np.repeat(np.arange(ops.n_episodes), w[:, r])
        idx = np.concatenate([np.nonzero(ops.episode == e)[0] for e in take])
        kmf = KaplanMeierFitter().fit(durations[idx], ops.event[idx])
        total += float(restricted_mean_survival_time(kmf, t=TAU))
    return total


def lifelines_pair(ep_a, ep_b, replicates: int, rng: np.random.Generator) -> float:
    """Baseline for one pair and object: per relabelling of the pooled
    episodes, two KM fits and the sup of their difference on the union grid
    up to τ."""
    from lifelines import KaplanMeierFitter

    ops = [extract_operations(ep_a), extract_operations(ep_b)]
    pooled = [(o, e) for o in ops for e in range(o.n_episodes)]
    sizes = [o.n_episodes for o in ops]
    total = 0.0
    for _ in range(replicates):
        curves = []
        order = rng.permutation(len(pooled))
        for pick in (order[: sizes[0]], order[sizes[0] :]):
            parts = [pooled[k] for k in pick]
            t = np.concatenate([o.time[o.episode == e] for o, e in parts])
            d = np.concatenate([o.event[o.episode == e] for o, e in parts])
            curves.append(KaplanMeierFitter().fit(np.where(np.isfinite(t), t, 1e9), d))
        grid = np.union1d(curves[0].timeline, curves[1].timeline)
        grid = grid[grid <= TAU]
        diff = (
            curves[0].survival_function_at_times(grid).values
            - curves[1].survival_function_at_times(grid).values
        )
        total += float(np.max(np.abs(diff)))
    return total


def _proctor(*args: str) -> float:
    """Wall seconds of ``proctor ARGS`` in a new interpreter, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "proctor", *args],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    return time.perf_counter() - start


def whole_process(table: EpisodeTable, in_process: float, seed: int) -> None:
    """``proctor analyze`` end to end beside ``analyze()`` in this process:
    the difference is start-up, reading the file, printing and the JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cohort.csv"
        write_interchange(table.episodes, path)
        startup = min(_proctor("version") for _ in range(3))
        common = (str(path), "--reference", "human", "--tau", f"{TAU:g}", "--seed", str(seed))
        whole = _proctor("analyze", *common, "--bootstrap", str(B), "--json", f"{tmp}/r.json")
        small = _proctor("analyze", *common, "--bootstrap", "200", "--json", f"{tmp}/s.json")
    print(
        f"whole process: proctor version {startup:.2f} s; proctor analyze (B = {B}, --json) "
        f"{whole:.2f} s vs {in_process:.2f} s in process ({whole / in_process:.2f}×, "
        f"{whole - in_process:.2f} s outside analyze()); with B = 200 {small:.2f} s "
        f"(target < 5 s: {'met' if whole < 5 else 'MISSED'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline-replicates", type=int, default=100)
    parser.add_argument("--outer", type=int, default=300)
    parser.add_argument("--inner", type=int, default=200)
    parser.add_argument("--skip-detection", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    table = build_cohort(args.seed)
    kept, system = scored(table.episodes)
    cells = {(e.policy, e.object) for e in kept}
    n_items = [e.items for e in kept]
    print(
        f"cohort: {len(table)} episodes ({len(system)} system), {len(cells)} cells, "
        f"items {min(n_items)}–{max(n_items)}, τ = {TAU:g} s"
    )

    protocol = AnalysisProtocol(tau=TAU, bootstrap=B, ks_resamples=B, seed=args.seed)
    analyze(EpisodeTable(table.episodes[:60]), AnalysisProtocol(tau=TAU, bootstrap=20))  # warm-up
    clock = Clock()
    lb = analyze(table, protocol)
    lb_wall, lb_cpu = clock.done()
    n_pairs = len(lb.pairs)
    pair_objects = sum(len(p.objects) for p in lb.pairs)
    print(
        f"leaderboard: {len(lb.policies)} policies, {n_pairs} pairs, B = {B}, "
        f"{B} KS resamples: {lb_wall:.2f} s wall, {lb_cpu:.2f} s CPU "
        f"(target < 5 s: {'met' if lb_wall < 5 else 'MISSED'})"
    )

    whole_process(table, lb_wall, args.seed)

    # --- the lifelines baseline, on a sample of the same work ---
    ref, other = "human", "alpha"
    obj = "spoons"
    ep_cell = [e for e in kept if e.policy == other and e.object == obj]
    ep_ref = [e for e in kept if e.policy == ref and e.object == obj]
    k = args.baseline_replicates
    clock = Clock()
    lifelines_cell(ep_cell, k, np.random.default_rng(1))
    cell_fit = clock.done()[0] / k
    clock = Clock()
    lifelines_pair(ep_cell, ep_ref, k, np.random.default_rng(2))
    pair_rep = clock.done()[0] / k
    n_cell_fits = len(cells) * B
    n_pair_reps = pair_objects * B
    baseline_full = n_cell_fits * cell_fit + n_pair_reps * pair_rep
    print(
        f"lifelines baseline: {1000 * cell_fit:.1f} ms per cell replicate (1 fit), "
        f"{1000 * pair_rep:.1f} ms per KS resample (2 fits), timed on {k} replicates; "
        f"the leaderboard's {n_cell_fits} cell replicates + {n_pair_reps} KS resamples "
        f"≈ {baseline_full:.0f} s"
    )
    ratio = baseline_full / lb_wall
    print(
        f"speed-up, whole leaderboard vs the lifelines loop on its KM work alone: "
        f"{ratio:.0f}× (target >= 50×: {'met' if ratio >= 50 else 'MISSED'})"
    )
    # like for like: the same cell and pair-object with the vectorised code
    clock = Clock()
    build_cell(other, obj, ep_cell, tau=TAU, replicates=B, seed=1).rmst()
    ours_cell = clock.done()[0] / B
    clock = Clock()
    macro_ks_test(
        {obj: (extract_operations(ep_cell), extract_operations(ep_ref))},
        tau=TAU,
        replicates=B,
        rngs={obj: child_rng(0, "bench")},
    )
    ours_pair = clock.done()[0] / B
    print(
        f"like for like: {1e6 * ours_cell:.0f} µs vs {1e3 * cell_fit:.1f} ms per cell replicate "
        f"({cell_fit / ours_cell:.0f}×), {1e6 * ours_pair:.0f} µs vs {1e3 * pair_rep:.1f} ms "
        f"per KS resample ({pair_rep / ours_pair:.0f}×)"
    )

    if args.skip_detection:
        return
    a, b = "alpha", "beta"
    pools = [
        make_pool(
            o,
            extract_operations([e for e in kept if e.policy == a and e.object == o]),
            extract_operations([e for e in kept if e.policy == b and e.object == o]),
        )
        for o in PHAIL_OBJECTS
    ]
    n_values = list(range(5, 51, 5))
    clock = Clock()
    curve = run_detection(
        pools,
        n_values=n_values,
        outer=args.outer,
        inner=args.inner,
        tau=60.0,
        thresholds=(30.0, 60.0),
        rng=np.random.default_rng(args.seed),
    )
    det_wall, det_cpu = clock.done()
    print(
        f"detection ({a} vs {b}, n = 5…50, {args.outer} outer × {args.inner} inner, "
        f"τ = 60 s, 4 tests): {det_wall:.1f} s wall, {det_cpu:.1f} s CPU "
        f"(target < 120 s: {'met' if det_wall < 120 else 'MISSED'})"
    )
    print("  n:        " + " ".join(f"{n:5d}" for n in n_values))
    for key, rate in curve.rate.items():
        print(f"  {key:9s} " + " ".join(f"{r:5.2f}" for r in rate))


if __name__ == "__main__":
    main()
