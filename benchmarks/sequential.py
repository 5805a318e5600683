"""The anytime-valid e-process on PhAIL-like cohorts (``./run bench
sequential``; docs/methods.md §10 has the table it feeds).

* Type-I error under monitoring after every episode: null pairs (both arms
  drawn from one pool of a policy's episodes per object, so exactly
  exchangeable), ``--null-pairs`` streams per policy model, each watched
  for ``--null-horizon`` matched pairs per object; rejection rate with its
  Wilson 95 % interval.
* The naive contrast: the stratified log-rank p < α recomputed after every
  episode of ``--naive-pairs`` null streams.
* For each alternative (pairs of the PhAIL-like models, and arm B 1.3× /
  1.6× slower, as in §5): the fixed design's n per cell for 80 % power
  (macro-KS; the bridge model, and with ``--empirical`` the detection
  machinery's permutation test by bisection), the e-process's power at that
  n, the horizon giving it the same power, and the mean and 90th
  percentile of episodes to a verdict (min(crossing, horizon)).

Heavy with ``--empirical`` (minutes); run it under ``nice``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence

import numpy as np

from proctor.analysis.cells import build_cell
from proctor.analysis.detection import detection_rates, make_pool
from proctor.analysis.episodes import Episode, scored
from proctor.analysis.leaderboard import pair_effects
from proctor.analysis.operations import Operations, extract_operations
from proctor.analysis.planning import BridgeModel, wilson_interval
from proctor.analysis.seqdesign import crossings, design, naive_pair_peeking, naive_peeking
from proctor.analysis.sequential import pad_operations, pair_z, threshold
from proctor.analysis.synthetic import PHAIL_OBJECTS, PolicyModel, cohort, phail_like_models

OBJECTS = list(PHAIL_OBJECTS)


def pools_of(model: PolicyModel, size: int, rng: np.random.Generator) -> dict[str, list[Episode]]:
    eps, _ = scored(
        cohort([model], PHAIL_OBJECTS, episodes_per_cell=size, rng=rng, configurations=False)
    )
    return {o: [e for e in eps if e.object == o] for o in OBJECTS}


def ops_of(pool: dict[str, list[Episode]]) -> dict[str, Operations]:
    return {o: extract_operations(v) for o, v in pool.items()}


def null_type_one(
    model: PolicyModel, args: argparse.Namespace, rng: np.random.Generator
) -> tuple[int, int]:
    """(rejections, streams) of null pairs drawn from fresh pools of ``model``."""
    hits = 0
    per_pool = 250
    done = 0
    while done < args.null_pairs:
        n = min(per_pool, args.null_pairs - done)
        ops = ops_of(pools_of(model, args.pool, rng))
        z = [pair_z(pad_operations(ops[o]), pad_operations(ops[o])) for o in OBJECTS]
        cross = crossings(
            z, streams=n, pairs_per_object=args.null_horizon, bar=threshold(args.alpha, 1), rng=rng
        )
        hits += int(np.isfinite(cross).sum())
        done += n
    return hits, done


def naive_type_one(
    model: PolicyModel, args: argparse.Namespace, rng: np.random.Generator
) -> tuple[int, int, int]:
    ops = ops_of(pools_of(model, args.pool, rng))
    ever, last = naive_peeking(
        [(ops[o], ops[o]) for o in OBJECTS],
        streams=args.naive_pairs,
        pairs_per_object=args.naive_horizon,
        alpha=args.alpha,
        rng=rng,
    )
    return int(ever.sum()), int(last.sum()), args.naive_pairs


def naive_pair_type_one(
    model: PolicyModel, args: argparse.Namespace, rng: np.random.Generator
) -> tuple[int, int, int]:
    ops = ops_of(pools_of(model, args.pool, rng))
    z = [pair_z(pad_operations(ops[o]), pad_operations(ops[o])) for o in OBJECTS]
    ever, last = naive_pair_peeking(
        z, streams=args.null_pairs, pairs_per_object=args.null_horizon, alpha=args.alpha, rng=rng
    )
    return int(ever.sum()), int(last.sum()), args.null_pairs


def bridge_n(a: dict[str, list[Episode]], b: dict[str, list[Episode]], tau: float) -> int | None:
    cells_a = {o: build_cell("a", o, a[o], tau=tau, replicates=1, seed=0) for o in OBJECTS}
    cells_b = {o: build_cell("b", o, b[o], tau=tau, replicates=1, seed=0) for o in OBJECTS}
    effects, _, _ = pair_effects(cells_a, cells_b, tau=tau, rho=None)
    model = BridgeModel(effects, sims=2000, rng=np.random.default_rng(0))
    return model.n_needed(alpha=0.05, target=0.8)


def empirical_n(
    a: dict[str, Operations],
    b: dict[str, Operations],
    args: argparse.Namespace,
    start: int,
    rng: np.random.Generator,
) -> tuple[int | None, float]:
    """Smallest n per cell at which the macro-KS permutation test (the
    detection machinery) rejects in ≥ 80 % of ``--outer`` trials, by
    doubling then bisection from ``start``; with the rate reached there."""
    pools = [make_pool(o, a[o], b[o]) for o in OBJECTS]
    seen: dict[int, float] = {}

    def rate(n: int) -> float:
        if n not in seen:
            curve = detection_rates(
                pools, n_values=[n], outer=args.outer, inner=args.inner, tau=args.tau,
                thresholds=(), alpha=args.alpha, rng=rng,
            )  # fmt: skip
            seen[n] = float(curve.rate["macro_ks"][0])
        return seen[n]

    if start > args.empirical_max:
        return None, float("nan")
    lo, hi = max(1, start // 2), max(2, start)
    while rate(hi) < 0.8:
        lo, hi = hi, hi * 2
        if hi > args.empirical_max:
            return None, rate(lo)
    while rate(lo) >= 0.8 and lo > 1:
        lo, hi = max(1, lo // 2), lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rate(mid) >= 0.8:
            hi = mid
        else:
            lo = mid
    return hi, rate(hi)


def alternatives(models: dict[str, PolicyModel]) -> list[tuple[str, PolicyModel, PolicyModel]]:
    pairs = [("alpha", "beta"), ("alpha", "gamma"), ("beta", "gamma"), ("gamma", "delta"),
             ("alpha", "delta")]  # fmt: skip
    out = [(f"{x} vs {y}", models[x], models[y]) for x, y in pairs]
    base = models["alpha"]
    for f in (1.3, 1.6):
        slow = dataclasses.replace(base, name="alpha-slow", scale_s=base.scale_s * f)
        out.append((f"alpha vs alpha {f:g}× slower", base, slow))
    return out


def fmt_rate(hits: int, n: int) -> str:
    lo, hi = wilson_interval(hits, n)
    return f"{hits / n:.4f} [{lo:.4f}, {hi:.4f}] ({hits}/{n})"


def run_alternative(
    label: str, ma: PolicyModel, mb: PolicyModel, args: argparse.Namespace,
    rng: np.random.Generator,
) -> Sequence[str]:  # fmt: skip
    pa, pb = pools_of(ma, args.pool, rng), pools_of(mb, args.pool, rng)
    oa, ob = ops_of(pa), ops_of(pb)
    z = [pair_z(pad_operations(oa[o]), pad_operations(ob[o])) for o in OBJECTS]
    n_bridge = bridge_n(pa, pb, args.tau)
    rows = []
    fixed = [("bridge", n_bridge, None)]
    if args.empirical and n_bridge is not None:
        n_emp, r = empirical_n(oa, ob, args, n_bridge, rng)
        fixed.append(("empirical", n_emp, r))
    for source, n, r in fixed:
        if n is None:
            reach = "above --empirical-max" if source == "empirical" else "none within 5000"
            rows.append(f"| {label} | {source}: {reach} | | | | | | |")
            continue
        d = design(
            z, n_fixed=n, target=0.8, bar=threshold(args.alpha, 1), streams=args.streams, rng=rng
        )
        note = "" if r is None else f" (rate {r:.2f})"
        cap = "—" if d.max_episodes is None else str(d.max_episodes)
        mean = "—" if d.expected_episodes is None else f"{d.expected_episodes:.1f}"
        p90 = "—" if d.p90_episodes is None else f"{d.p90_episodes:.0f}"
        frac = "—" if d.fraction is None else f"{100 * d.fraction:.0f} %"
        rows.append(
            f"| {label} | {source} {n}{note} | {d.fixed_episodes} | {d.power_at_fixed_n:.3f} "
            f"| {cap} | {mean} | {p90} | {frac} |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--null-pairs", type=int, default=2000, help="null streams per model")
    ap.add_argument("--null-horizon", type=int, default=100, help="pairs per object watched")
    ap.add_argument("--naive-pairs", type=int, default=1000)
    ap.add_argument("--naive-horizon", type=int, default=25, help="pairs per object watched")
    ap.add_argument("--streams", type=int, default=2000, help="campaigns per alternative")
    ap.add_argument("--pool", type=int, default=300, help="episodes per cell in a pool")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--tau", type=float, default=300.0)
    ap.add_argument("--empirical", action="store_true", help="also the empirical fixed n")
    ap.add_argument("--empirical-max", type=int, default=80, help="largest empirical n tried")
    ap.add_argument("--alternatives-only", action="store_true", help="skip the Type-I part")
    ap.add_argument("--outer", type=int, default=400)
    ap.add_argument("--inner", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--null-only", action="store_true", help="only the Type-I error part")
    args = ap.parse_args()
    for name in ("null_pairs", "null_horizon", "naive_pairs", "naive_horizon", "streams", "pool"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: must be at least 1")
    if not 0 < args.alpha < 1:
        ap.error("--alpha: must be in (0, 1)")
    rng = np.random.default_rng(args.seed)
    models = {m.name: m for m in phail_like_models() if not m.reference}
    t0 = time.perf_counter()
    if not args.alternatives_only:
        type_one(models, args, rng)
    if args.null_only:
        return
    print("| pair | fixed n per cell (80 %) | fixed episodes | e-process power at fixed n "
          "| horizon for 80 % | mean episodes | 90th pct | mean / fixed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for label, ma, mb in alternatives(models):
        for row in run_alternative(label, ma, mb, args, rng):
            print(row, flush=True)
    print(f"({time.perf_counter() - t0:.0f} s)")


def type_one(models: dict[str, PolicyModel], args: argparse.Namespace,
             rng: np.random.Generator) -> None:  # fmt: skip
    t0 = time.perf_counter()
    print(f"Type-I error under monitoring after every episode, α = {args.alpha:g}")
    print("| null model | test | looks per stream | rejection rate [Wilson 95 %] |")
    print("|---|---|---|---|")
    total = [0, 0]
    for name, model in models.items():
        hits, n = null_type_one(model, args, rng)
        total[0] += hits
        total[1] += n
        looks = 8 * args.null_horizon
        print(f"| {name} | e-process | {looks} | {fmt_rate(hits, n)} |")
    print(f"| all | e-process | | {fmt_rate(total[0], total[1])} |")
    for name in ("alpha", "gamma"):
        hits, last, n = naive_type_one(models[name], args, rng)
        looks = 8 * args.naive_horizon
        print(f"| {name} | naive log-rank p < α, every episode | {looks} | {fmt_rate(hits, n)} |")
        print(f"| {name} | the same log-rank, one look at the end | 1 | {fmt_rate(last, n)} |")
    for name in ("alpha", "gamma"):
        hits, last, n = naive_pair_type_one(models[name], args, rng)
        looks = 4 * args.null_horizon
        print(f"| {name} | naive pair z test p < α, every pair | {looks} | {fmt_rate(hits, n)} |")
        print(f"| {name} | the same z test, one look at the end | 1 | {fmt_rate(last, n)} |")
    print(f"({time.perf_counter() - t0:.0f} s)", flush=True)
    print()


if __name__ == "__main__":
    main()
