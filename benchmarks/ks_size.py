"""Size (and power) of the macro-KS test on fresh synthetic cohorts
(``./run bench ks_size``; docs/methods.md §5 has the table it feeds).

Every trial simulates a new cohort: arm A and arm B are two policies with
the same model (under H0) on the four PhAIL objects, ``--n-a`` / ``--n-b``
episodes a cell; with ``--slower F`` arm B's attempts take F× longer (a clear
alternative, for power). Each trial's p-value comes from the detection
machinery's permutation test (``proctor.analysis.detection.trial_pvalues``), so a
few thousand trials run in minutes: a chunk of trials shares one KM pass.
Prints the rejection rate at α = 0.01 / 0.05 / 0.10 with Wilson 95 %
intervals, and the mean p (a test of size α has ⌊(B + 1)α⌋/(B + 1) and
(B + 2) / (2B + 2)).

Heavy: run it under ``nice`` on a shared machine (about 25 ms of CPU a
trial at 15 episodes a cell, 3000 trials ≈ 75 s of CPU).
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from proctor.analysis.detection import ObjectPool, trial_pvalues
from proctor.analysis.operations import extract_operations
from proctor.analysis.planning import wilson_interval
from proctor.analysis.synthetic import PHAIL_OBJECTS, PolicyModel, cohort, phail_like_models

ALPHAS = (0.01, 0.05, 0.10)
CHUNK = 5  # trials whose episodes share one pool (and one KM pass)


def fresh_pools(
    arm_a: PolicyModel, arm_b: PolicyModel, n_a: int, n_b: int, rng: np.random.Generator
) -> tuple[list[ObjectPool], list[np.ndarray]]:
    """CHUNK new cohorts as one pool per object; trial c's slots are its own
    n_a + n_b episodes (arm A first)."""
    by_object: dict[str, list] = {o: [] for o in PHAIL_OBJECTS}
    for _ in range(CHUNK):
        for model, n in ((arm_a, n_a), (arm_b, n_b)):
            eps = cohort([model], PHAIL_OBJECTS, episodes_per_cell=n, rng=rng, configurations=False)
            for o in PHAIL_OBJECTS:
                by_object[o].extend(e for e in eps if e.object == o)
    m = n_a + n_b
    pools, slots = [], []
    for o, eps in by_object.items():
        ops = extract_operations(eps)
        pools.append(ObjectPool(o, ops, n_a, np.array([""] * len(eps))))
        slots.append(np.arange(CHUNK * m).reshape(CHUNK, m))
    return pools, slots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3000)
    ap.add_argument("--n-a", type=int, default=15, help="episodes a cell, arm A")
    ap.add_argument("--n-b", type=int, default=15, help="episodes a cell, arm B")
    ap.add_argument("--inner", type=int, default=200, help="relabellings per p-value (B)")
    ap.add_argument("--tau", type=float, default=60.0)
    ap.add_argument("--slower", type=float, default=1.0, help="arm B's time factor (1: H0)")
    ap.add_argument("--no-ghosts", action="store_true", help="no drops, losses, safety stops")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for name in ("trials", "n_a", "n_b", "inner"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: must be at least 1")
    if not (np.isfinite(args.tau) and args.tau > 0):
        ap.error("--tau: must be finite and positive")
    if not (np.isfinite(args.slower) and args.slower > 0):
        ap.error("--slower: must be finite and positive")

    model = phail_like_models()[1]  # "alpha": drops, losses, safety stops, frailty
    if args.no_ghosts:
        model = dataclasses.replace(model, p_drop=0.0, p_lost=0.0, p_safety=0.0)
    arm_a = dataclasses.replace(model, name="a")
    arm_b = dataclasses.replace(model, name="b", scale_s=model.scale_s * args.slower)
    rng = np.random.default_rng(args.seed)
    chunks = -(-args.trials // CHUNK)
    p = []
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(chunks):
        pools, slots = fresh_pools(arm_a, arm_b, args.n_a, args.n_b, rng)
        res = trial_pvalues(
            pools,
            slots,
            [args.n_a] * len(pools),
            inner=args.inner,
            tau=args.tau,
            thresholds=(),
            rng=rng,
        )
        p.append(res.p["macro_ks"])
    pv = np.concatenate(p)
    n = pv.shape[0]
    what = "H0" if args.slower == 1.0 else f"arm B {args.slower:g}× slower"
    print(
        f"macro-KS, {what}, {args.n_a} / {args.n_b} episodes a cell, 4 objects, "
        f"τ = {args.tau:g} s, B = {args.inner}, {n} trials"
        f"{', no ghosts' if args.no_ghosts else ''}"
    )
    for a in ALPHAS:
        hits = int(np.sum(pv < a))
        lo, hi = wilson_interval(hits, n)
        exact = np.floor((args.inner + 1) * a) / (args.inner + 1)
        print(f"  α = {a:.2f}: {hits / n:.4f} [{lo:.4f}, {hi:.4f}]  (size-α test: {exact:.4f})")
    print(f"  mean p {pv.mean():.4f} (uniform: {(args.inner + 2) / (2 * args.inner + 2):.4f})")
    print(
        f"  {time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU "
        f"({1000 * (time.process_time() - cpu) / n:.0f} ms CPU a trial)"
    )


if __name__ == "__main__":
    main()
