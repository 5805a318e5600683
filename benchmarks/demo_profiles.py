"""The demo policies' character on the simulated cell, measured.

    ./run bench demo_profiles [--episodes-per-cell 6] [--items 8] [--per-item-cap 30]

Runs a campaign shaped like ``proctor demo``'s (the demo's arms × the four
objects × ``--episodes-per-cell`` episodes of ``--items`` items, the time
budget items × cap, every spatial configuration drawn at random) through the
station's real runner on the simulated cell, telemetry only
(``proctor.demo.simulated_episodes``), and scores it from the cell's ground truth with
the analysis the leaderboard uses, at τ = the episode budget (the demo's
integration cap). It prints, per profile, the pooled Kaplan–Meier median
time to success, the raw median time between placements, the plateau
F(τ), completion, safety stops per episode and drops/losses per operation,
with ratios against the reference agent run in the same process; then the
pair verdicts the demo relies on: reference resolved against the others,
swift vs steady crossing, balanced vs dawdler unresolved.

A measurement of behaviour, not of speed: its figures depend on the seed
(``--seed``) and the number of episodes, never on the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sqlalchemy as sa

ARMS = ("reference", "swift", "steady", "balanced", "dawdler")
OBJECTS = ("spoons", "towels", "scissors", "batteries")
PAIRS = (("swift", "steady"), ("balanced", "dawdler"), ("reference", "steady"))


def _simulate(folder: Path, args: argparse.Namespace) -> list:
    from rich.progress import Progress

    from proctor.core.artifacts import LocalArtifactStore
    from proctor.core.db import migrate
    from proctor.core.db.engine import make_engine, make_session_factory
    from proctor.demo.simulated_episodes import corpus_plan, simulate

    url = f"sqlite:///{folder / 'campaign.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    plan = corpus_plan(
        len(args.profiles) * len(OBJECTS) * args.episodes_per_cell,
        seed=args.seed,
        items=(args.items,),
        profiles=args.profiles,
        per_item_cap_s=args.per_item_cap,
    )
    try:
        with Progress() as progress:
            task = progress.add_task("simulating episodes", total=len(plan))
            done = simulate(
                plan,
                sessions=make_session_factory(engine),
                store=LocalArtifactStore(folder / "artifacts"),
                spool_root=folder / "spool",
                progress=lambda _e: progress.update(task, advance=1),
            )
        from proctor.core.db.models import Episode as Row

        with make_session_factory(engine)() as s:
            rows = {r.uid: r for r in s.scalars(sa.select(Row))}
            return [(e, rows[e.uid].clock_end_s - rows[e.uid].clock_start_s) for e in done]
    finally:
        engine.dispose()


def _episodes(done: list, budget: float) -> list:
    from proctor.analysis.episodes import Episode

    out = []
    for sim, duration in done:
        truth = sim.ground_truth
        final = truth["final"]
        outcome = sim.proposed.value
        placed = len(truth["placements_s"])
        if outcome == "success" and placed + final["lost"] + final["dropped"] != sim.spec.items:
            outcome = "operator_stop"  # what the ground-truth log writes (proctor.station.demo_log)
        out.append(
            Episode(
                episode_id=sim.uid,
                policy=sim.spec.profile,
                object=sim.spec.object_name,
                items=sim.spec.items,
                duration_s=float(duration),
                placements_s=tuple(float(t) for t in truth["placements_s"]),
                lost=int(final["lost"]),
                dropped=int(final["dropped"]),
                outcome=outcome,
                budget_s=budget,
                tote_placement=sim.spec.tote_side.value,
                external_camera=sim.spec.camera_side.value,
                reference=sim.spec.profile == "reference",
            )
        )
    return out


def _row(name: str, eps: list, tau: float) -> dict[str, float]:
    from proctor.analysis.km import kaplan_meier, quantile_time, survival_at
    from proctor.analysis.operations import DROPPED_OP, LOST_OP, extract_operations

    scored = [e for e in eps if e.outcome != "system"]
    ops = extract_operations(scored)
    km = kaplan_meier(ops)
    s = km.survival[:, None]
    gaps = [g for e in scored for g in np.diff((0.0, *e.placements_s))]
    n_ops = len(ops)
    return {
        "episodes": len(eps),
        "system": len(eps) - len(scored),
        "operations": n_ops,
        "km_median_s": float(quantile_time(km.t, s, 0.5)[0]),
        "gap_median_s": float(np.median(gaps)) if gaps else float("nan"),
        "plateau": float(1.0 - survival_at(km.t, s, tau)[0]),
        "completion": sum(len(e.placements_s) for e in scored) / sum(e.items for e in scored),
        "safety_per_episode": sum(e.outcome == "safety" for e in scored) / len(scored),
        "dropped_per_op": int((ops.kind == DROPPED_OP).sum()) / n_ops,
        "lost_per_op": int((ops.kind == LOST_OP).sum()) / n_ops,
        "ghost_per_op": float(ops.ghost.sum()) / n_ops,
        "timeouts": sum(e.outcome == "ran_out_of_time" for e in scored),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.demo_profiles", description=__doc__)
    parser.add_argument("--episodes-per-cell", type=int, default=6)
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--per-item-cap", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bootstrap", type=int, default=500)
    parser.add_argument("--profiles", nargs="+", default=list(ARMS))
    args = parser.parse_args(argv)
    if "reference" not in args.profiles:
        parser.error("--profiles: the reference agent is the baseline; include it")

    from proctor.analysis.episodes import EpisodeTable
    from proctor.analysis.leaderboard import analyze
    from proctor.analysis.results import AnalysisProtocol

    budget = args.items * args.per_item_cap
    load = os.getloadavg()[0]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="proctor-demo-profiles-") as tmp:
        done = _simulate(Path(tmp), args)
    wall = time.monotonic() - started
    eps = _episodes(done, budget)
    print(
        f"{len(eps)} episodes ({len(args.profiles)} profiles × {len(OBJECTS)} objects × "
        f"{args.episodes_per_cell}), {args.items} items, budget τ = {budget:g} s, "
        f"seed {args.seed}; simulated in {wall:.0f} s wall (load average {load:.1f})"
    )
    rows = {p: _row(p, [e for e in eps if e.policy == p], budget) for p in args.profiles}
    ref = rows["reference"]
    print(
        f"{'profile':<10} {'KM median':>10} {'×ref':>5} {'gap median':>11} {'plateau':>8} "
        f"{'complete':>9} {'safety/ep':>9} {'drop/op':>8} {'lost/op':>8} {'ghost/op':>8} "
        f"{'timeouts':>8}"
    )
    for p, r in rows.items():
        print(
            f"{p:<10} {r['km_median_s']:>9.2f}s {r['km_median_s'] / ref['km_median_s']:>5.2f} "
            f"{r['gap_median_s']:>10.2f}s {r['plateau']:>8.1%} {r['completion']:>9.1%} "
            f"{r['safety_per_episode']:>9.1%} {r['dropped_per_op']:>8.1%} "
            f"{r['lost_per_op']:>8.1%} {r['ghost_per_op']:>8.1%} {r['timeouts']:>8d}"
        )
    protocol = AnalysisProtocol(
        tau=budget, bootstrap=args.bootstrap, power_sims=100, seed=args.seed
    )
    board = analyze(EpisodeTable(tuple(eps), reference="reference"), protocol)
    print(f"pairs at τ = {budget:g} s (macro-KS, Bonferroni over {len(board.pairs)} pairs):")
    wanted = {frozenset(p) for p in PAIRS}
    for pair in board.pairs:
        if frozenset((pair.a, pair.b)) not in wanted and "reference" not in (pair.a, pair.b):
            continue
        print(
            f"  {pair.a:>9} vs {pair.b:<9} {pair.verdict:<18} winner {pair.winner or '—':<9} "
            f"p_KS(Bonf.) {pair.ks_p_bonferroni:.3f}  RMST {pair.a}−{pair.b} "
            f"{pair.rmst_diff.estimate:+.1f} s  AUC {pair.auc.estimate:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
