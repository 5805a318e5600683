"""Size of the board's tests on nulls that are *not* their permutation
distribution, and their power (``./run bench robustness``; docs/methods.md
§5 has the table it feeds; the statistical review's hidden nulls, its §3–§4).

The hidden null: on every object both policies have the *same*
per-operation time-to-success law and ghost share, but one is "streaky"
(one slowness z ~ Gamma(k, 1/k) an episode, the PhAIL-like model's
frailty) and the other "steady" (z drawn anew after every success:
``PolicyModel.frailty_per_operation``). Their episodes are not
exchangeable, so a permutation test of exchangeability may reject although
F_A = F_B; a test of F_A = F_B must not (much). No budget censoring (a
shared budget censors the streaky policy's slow episodes early, which
makes the KM limits differ: not a null). Safety stops and system faults
off for the same reason; drops and losses (ghosts) on.

Six p-values per trial, all on the same data:
  old macro-KS    — mean over objects of sup |F̂_A − F̂_B|, episode permutation
  stud. KS, perm  — the studentized macro-KS, studentized permutation p alone
                    (the board's p before the wild bootstrap was added)
  new macro-KS    — the board's: max of that and the wild bootstrap p
                    (``studentized_macro_ks_test``)
  old log-rank    — stratified, operations as independent (χ², ``logrank``)
  clust. LR, perm — episode-clustered score, studentized permutation p alone
  new log-rank    — the board's: max of that and the wild bootstrap p
                    (``clustered_logrank``)
Rejection rate at α = 0.05 with its Monte Carlo SE √(r(1 − r)/trials),
and the mean p. Power: the PhAIL-like ``alpha`` model (its budget on)
against itself with arm B ``--slower`` × slower, both streaky.

About 0.2–0.4 s a trial at B = 200 on a shared two-core machine; the
table in docs/methods.md §5 ("After") is ``--inner 100``: 400 trials a null
row and 200 a power row (``--power-trials``), about 7 minutes a null row
there. ``--only`` runs the rows whose label contains one of its comma-separated
strings (to split the table across processes; each row's seed is fixed).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from proctor.analysis.operations import extract_operations
from proctor.analysis.significance import clustered_logrank, logrank, studentized_macro_ks_test
from proctor.analysis.synthetic import PHAIL_OBJECTS, PolicyModel, cohort, phail_like_models

TESTS = (
    "old macro-KS",
    "stud. KS, perm",
    "new macro-KS",
    "old log-rank",
    "clust. LR, perm",
    "new log-rank",
)
NO_BUDGET = 1e6  # s an item: never reached


@dataclass(frozen=True)
class Setting:
    label: str
    arm_a: PolicyModel
    arm_b: PolicyModel
    n_a: int
    n_b: int
    budget_per_item: float
    null: bool


def null_models(shape: float, sigma: float) -> tuple[PolicyModel, PolicyModel]:
    """(streaky, steady) with identical per-operation laws."""
    base = dataclasses.replace(
        phail_like_models()[1], frailty_shape=shape, sigma=sigma, p_safety=0.0, p_system=0.0
    )
    return (
        dataclasses.replace(base, name="streaky"),
        dataclasses.replace(base, name="steady", frailty_per_operation=True),
    )


def settings(slower: float) -> list[Setting]:
    streaky, steady = null_models(4.0, 0.6)  # the PhAIL-like frailty
    heavy_streaky, heavy_steady = null_models(1.0, 0.3)  # the review's strongest
    alpha = phail_like_models()[1]
    out = [
        Setting("PhAIL-like, streaky 6 vs steady 30", streaky, steady, 6, 30, NO_BUDGET, True),
        Setting("PhAIL-like, streaky 10 vs steady 20", streaky, steady, 10, 20, NO_BUDGET, True),
        Setting("PhAIL-like, streaky 15 vs steady 15", streaky, steady, 15, 15, NO_BUDGET, True),
        Setting(
            "Gamma(1), σ 0.3, streaky 6 vs steady 30",
            heavy_streaky,
            heavy_steady,
            6,
            30,
            NO_BUDGET,
            True,
        ),
        Setting(
            "control: streaky 6 vs streaky 30 (exchangeable)",
            streaky,
            dataclasses.replace(streaky, name="streaky-b"),
            6,
            30,
            NO_BUDGET,
            True,
        ),
    ]
    b = dataclasses.replace(alpha, name="slower", scale_s=alpha.scale_s * slower)
    for n_a, n_b in ((15, 15), (10, 20)):
        out.append(
            Setting(
                f"power: alpha vs {slower:g}× slower, {n_a} vs {n_b}",
                alpha,
                b,
                n_a,
                n_b,
                30.0,
                False,
            )
        )
    return out


def trial(s: Setting, *, tau: float, inner: int, rng: np.random.Generator) -> tuple[float, ...]:
    """The six p-values (``TESTS``) on one fresh cohort."""
    strata = {}
    for o, tags in PHAIL_OBJECTS.items():
        arms = []
        for model, n in ((s.arm_a, s.n_a), (s.arm_b, s.n_b)):
            eps = cohort(
                [model],
                {o: tags},
                episodes_per_cell=n,
                rng=rng,
                configurations=False,
                budget_per_item=s.budget_per_item,
            )
            arms.append(extract_operations([e for e in eps if e.outcome != "system"]))
        strata[o] = (arms[0], arms[1])
    ks = studentized_macro_ks_test(strata, tau=tau, replicates=inner, rngs={o: rng for o in strata})
    lr = clustered_logrank(list(strata.values()), replicates=inner, rngs=[rng] * len(strata))
    old_lr = logrank(list(strata.values()))
    return ks.raw_p, ks.p_permutation, ks.p, old_lr.p, lr.p_permutation, lr.p


def run(
    s: Setting, *, trials: int, tau: float, inner: int, alpha: float, seed: int
) -> dict[str, tuple[float, float, float]]:
    """Per test: (rejection rate at α, its Monte Carlo SE, mean p)."""
    rng = np.random.default_rng(seed)
    p = np.array([trial(s, tau=tau, inner=inner, rng=rng) for _ in range(trials)])
    out = {}
    for i, name in enumerate(TESTS):
        r = float(np.mean(p[:, i] < alpha))
        out[name] = (r, float(np.sqrt(r * (1 - r) / trials)), float(p[:, i].mean()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400, help="trials a null row")
    ap.add_argument("--power-trials", type=int, default=200, help="trials a power row")
    ap.add_argument("--inner", type=int, default=200, help="relabellings per p-value (B)")
    ap.add_argument("--tau", type=float, default=60.0)
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--slower", type=float, default=1.3, help="arm B's time factor (power rows)")
    ap.add_argument(
        "--only",
        default="",
        help="run only the rows whose label contains one of these (comma-separated)",
    )
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for name in ("trials", "power_trials", "inner"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: must be at least 1")
    if not (np.isfinite(args.tau) and args.tau > 0):
        ap.error("--tau: must be finite and positive")
    if not 0 < args.alpha < 1:
        ap.error("--alpha: must be in (0, 1)")
    if not (np.isfinite(args.slower) and args.slower > 0):
        ap.error("--slower: must be finite and positive")
    print(
        f"rejection rate at α = {args.alpha:g} (Monte Carlo SE) [mean p]; "
        f"{args.trials} trials a null row, {args.power_trials} a power row, "
        f"B = {args.inner}, τ = {args.tau:g} s, 4 objects"
    )
    print(f"| setting | {' | '.join(TESTS)} |")
    print(f"|---|{'---|' * len(TESTS)}")
    wall = time.perf_counter()
    for k, s in enumerate(settings(args.slower)):
        if args.only and not any(x and x in s.label for x in args.only.split(",")):
            continue
        res = run(
            s,
            trials=args.trials if s.null else args.power_trials,
            tau=args.tau,
            inner=args.inner,
            alpha=args.alpha,
            seed=args.seed + k,
        )
        cells = [f"{r:.3f} ({se:.3f}) [{mp:.2f}]" for r, se, mp in res.values()]
        print(f"| {s.label} | {' | '.join(cells)} |", flush=True)
    print(f"{time.perf_counter() - wall:.0f} s wall")


if __name__ == "__main__":
    main()
