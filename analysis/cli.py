"""``proctor analyze`` and ``proctor power``.

``analyze`` scores an interchange file (METHODS.md §8); ``power`` answers
"how many episodes per cell does this pair need" (bridge model), runs the
empirical detection-rate experiment, the null calibration of App. J, and the
Wilson / Connor planning formulas.

Bad input: one ``error:`` line per problem on stderr, exit code 2, nothing
written. Outputs are written only after the whole computation succeeded,
each atomically.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from proctor.errors import UsageError

DEFAULT_N_VALUES = "5,10,15,20,25,30,35,40,45,50"


def _stdout() -> Console:
    # a pipe or a file gets wide tables rather than rich's 80-column default
    return Console(highlight=False, width=None if sys.stdout.isatty() else 140)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _fail_lines(lines: list[str]) -> None:
    for line in lines:
        typer.echo(f"error: {line}", err=True)
    raise typer.Exit(code=2)


def _read(path: Path, reference: str | None):  # type: ignore[no-untyped-def]
    from analysis.interchange import InvalidFile, read_interchange

    try:
        return read_interchange(path, reference=reference)
    except InvalidFile as exc:
        _fail_lines(exc.lines)


def _check_json_target(path: Path | None) -> None:
    if path is None:
        return
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"--json {path}: directory {parent} does not exist")
    if path.is_dir():
        raise UsageError(f"--json {path}: is a directory")


def _check_plots_target(path: Path | None) -> None:
    if path is not None and path.exists() and not path.is_dir():
        raise UsageError(f"--plots {path}: exists and is not a directory")


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to a temporary file beside ``path``, then rename it in
    (with the mode the umask gives, as any other file the user creates)."""
    from analysis.interchange import write_text_atomic

    # serialised first: a value JSON cannot hold fails before any file exists
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"
    write_text_atomic(path, lambda fh: fh.write(text))


def _floats_option(name: str, text: str) -> tuple[float, ...]:
    """Comma-separated thresholds or rates: finite and positive (``float``
    accepts "nan" and "inf", which would pass a ``<= 0`` check, be computed
    with, and fail only when the JSON is written)."""
    try:
        values = tuple(float(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise UsageError(f"{name}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise UsageError(f"{name}: no values given")
    bad = [v for v in values if not (math.isfinite(v) and v > 0)]
    if bad:
        raise UsageError(f"{name}: values must be finite and positive, got {bad[0]:g}")
    return values


def _finite_option(name: str, value: float | None, *, positive: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or (positive and value <= 0):
        need = "a finite positive number" if positive else "a finite number"
        raise UsageError(f"{name}: must be {need}, got {value:g}")


# Protocol reports a bad value by its field name; the user typed an option
_PROTOCOL_OPTIONS = {
    "tau": "--tau",
    "bootstrap": "--bootstrap",
    "ks_resamples": "--ks-resamples",
    "alpha": "--alpha",
    "seed": "--seed",
    "success_at": "--at",
}


def _protocol_error(exc: ValueError) -> UsageError:
    field, _, rest = str(exc).partition(":")
    option = _PROTOCOL_OPTIONS.get(field.strip())
    if option is None or not rest:
        return UsageError(str(exc))
    return UsageError(f"{option}:{rest}")


def _ints_option(name: str, text: str) -> list[int]:
    out = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if ":" in part:  # start:stop:step, inclusive of stop
                a, b, *c = (int(x) for x in part.split(":"))
                out.extend(range(a, b + 1, c[0] if c else 1))
            else:
                out.append(int(part))
        except ValueError:
            raise UsageError(
                f"{name}: expected integers like 5,10,20 or 5:50:5, got {text!r}"
            ) from None
    if not out or any(v < 1 for v in out):
        raise UsageError(f"{name}: need positive integers, got {text!r}")
    return sorted(set(out))


def _fmt(x: float | None, digits: int = 1, pct: bool = False) -> str:
    if x is None:
        return "—"
    return f"{100 * x:.{digits}f}%" if pct else f"{x:.{digits}f}"


def _fmt_iv(iv: Any, digits: int = 1, pct: bool = False) -> str:
    if iv is None or iv.estimate is None:
        return "—"
    s = _fmt(iv.estimate, digits, pct)
    if iv.lo is None and iv.hi is None:
        return s
    return f"{s} [{_fmt(iv.lo, digits, pct)}, {_fmt(iv.hi, digits, pct)}]"


def analyze(
    file: Annotated[
        Path, typer.Argument(help="Interchange file: CSV or JSON Lines (METHODS.md §8).")
    ],
    reference: Annotated[
        str | None,
        typer.Option(help="The human-reference policy (or mark its rows reference=true)."),
    ] = None,
    tau: Annotated[
        float | None,
        typer.Option(
            help="RMST cap τ in seconds (default: the largest budget_s in the file, "
            "else the longest episode)."
        ),
    ] = None,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap replicates for every interval.")] = 2000,
    ks_resamples: Annotated[
        int | None,
        typer.Option(help="Pooled resamples per macro-KS p-value (default: --bootstrap)."),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of every resample (recorded).")] = 0,
    alpha: Annotated[
        float, typer.Option(help="Significance level (Bonferroni over pairs).")
    ] = 0.05,
    at: Annotated[
        str, typer.Option("--at", help="Thresholds t (s) for success-at-t, comma-separated.")
    ] = "10,30,60",
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the full result as JSON here.")
    ] = None,
    plots: Annotated[
        Path | None, typer.Option("--plots", help="Write PNG and SVG figures into this folder.")
    ] = None,
) -> None:
    """Score policies from an interchange file: time-to-success CDFs, HRT,
    RMST, macro-KS verdicts (METHODS.md)."""
    from analysis.leaderboard import analyze as run_analysis
    from analysis.leaderboard import budget_overrun_note, default_tau
    from analysis.report import data_version, to_json
    from analysis.results import Protocol
    from analysis.store import code_version

    success_at = _floats_option("--at", at)
    _check_json_target(json_out)
    _check_plots_target(plots)
    table = _read(file, reference)
    tau_source = "--tau"
    if tau is None:
        tau, tau_source = default_tau(table)
        note = budget_overrun_note(table, tau) if tau_source == "largest budget_s" else None
        if note is not None:
            table = dataclasses.replace(table, notes=(*table.notes, note))
    try:
        protocol = Protocol(
            tau=tau,
            bootstrap=bootstrap,
            ks_resamples=ks_resamples,
            seed=seed,
            alpha=alpha,
            reference=reference,
            success_at=success_at,
        )
    except ValueError as exc:
        raise _protocol_error(exc) from None
    with _stderr().status(
        f"scoring {len(table)} episodes: {bootstrap} bootstrap replicates, "
        f"{protocol.resamples} KS resamples per pair"
    ):
        try:
            lb = run_analysis(table, protocol)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    result = to_json(
        lb,
        code_version=code_version(),
        data_version=data_version(table),
        extra_protocol={"tau_source": tau_source, "source": str(file)},
    )
    _print_leaderboard(lb, tau_source)
    if json_out is not None:
        write_json_atomic(json_out, result)
        typer.echo(f"wrote {json_out}")
    if plots is not None:
        from analysis.plots import leaderboard_figures

        written = leaderboard_figures(lb, plots)
        typer.echo(f"wrote {len(written)} figures to {plots}")


def _print_leaderboard(lb: Any, tau_source: str) -> None:
    con = _stdout()
    pr = lb.protocol
    con.print(
        f"τ = {pr.tau:g} s ({tau_source}), {pr.bootstrap} bootstrap replicates, "
        f"{pr.resamples} KS resamples, seed {pr.seed}, α = {pr.alpha:g} "
        f"(Bonferroni over {len(lb.pairs)} pairs)"
    )
    t = Table(title="Leaderboard (95% episode-clustered bootstrap intervals)")
    columns = ("#", "policy", "episodes", "HRT %", "RMST s", "completion", "hard failures", "group")
    for col in columns:
        t.add_column(col, overflow="fold")
    for p in lb.policies:
        hrt = "—"
        if p.hrt is not None:
            hrt = _fmt_iv(p.hrt) if not p.is_reference else "100 (reference)"
        t.add_row(
            "ref" if p.is_reference else str(p.rank),
            p.policy,
            str(p.episodes),
            hrt,
            _fmt_iv(p.rmst),
            _fmt_iv(p.completion, 1, pct=True),
            _fmt_iv(p.hard_failure_rate, 1, pct=True),
            p.letters,
        )
    con.print(t)
    v = Table(title="Pairwise verdicts (macro-KS, pooled-resample bootstrap)")
    for col in ("pair", "macro D", "p (Bonf.)", "log-rank χ² (p Bonf.)", "ΔRMST s [CI]", "verdict"):
        v.add_column(col, overflow="fold")
    for pr_ in lb.pairs:
        verdict = pr_.verdict
        if pr_.winner:
            verdict = f"{pr_.winner} better"
        elif pr_.power is not None and pr_.power.more_episodes_per_cell:
            verdict += f" (≈ {pr_.power.more_episodes_per_cell} more episodes per cell)"
        elif pr_.power is not None and pr_.power.n_needed is not None:
            verdict += f" (model: power {pr_.power.power_at_current_n:.2f} at this n)"
        elif pr_.power is not None:
            verdict += " (no realistic n resolves it)"
        v.add_row(
            f"{pr_.a} vs {pr_.b}",
            f"{pr_.macro_ks.statistic:.3f}",
            f"{pr_.macro_ks.p:.4f} ({pr_.ks_p_bonferroni:.4f})",
            f"{pr_.logrank.chi2:.1f} ({pr_.logrank_p_bonferroni:.2g})",
            _fmt_iv(pr_.rmst_diff),
            verdict,
        )
    con.print(v)
    for note in lb.notes:
        con.print(f"note: {note}")
    if lb.excluded:
        con.print(
            f"excluded: {len(lb.excluded)} episodes ("
            + ", ".join(sorted({r for *_, r in lb.excluded}))
            + ")"
        )


def power(
    file: Annotated[
        Path | None,
        typer.Argument(help="Interchange file of episodes, or a `proctor analyze --json` result."),
    ] = None,
    pair: Annotated[
        list[str] | None,
        typer.Option(help="A pair as 'A,B' (repeatable; default: every pair)."),
    ] = None,
    reference: Annotated[str | None, typer.Option(help="The reference policy.")] = None,
    tau: Annotated[
        float | None,
        typer.Option(
            help="τ in seconds (default as in analyze; PhAIL's detection runs used a "
            "shorter cap, e.g. --tau 60, to limit censoring at small n)."
        ),
    ] = None,
    alpha: Annotated[float, typer.Option(help="Significance level of one pair's test.")] = 0.05,
    target: Annotated[float, typer.Option("--power", help="Target power.")] = 0.8,
    rho: Annotated[
        float | None,
        typer.Option(help="Intra-episode correlation (default: estimated from the data)."),
    ] = None,
    sims: Annotated[int, typer.Option(help="Bridge simulations for the power model.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed.")] = 0,
    detection: Annotated[
        bool, typer.Option("--detection", help="Run the empirical detection-rate experiment.")
    ] = False,
    calibrate: Annotated[
        bool, typer.Option("--calibrate", help="Run the null calibration of PhAIL App. J.")
    ] = False,
    n_values: Annotated[
        str, typer.Option("--n", help="Episodes per cell to try: 5,10,20 or 5:50:5.")
    ] = DEFAULT_N_VALUES,
    outer: Annotated[int, typer.Option(help="Outer subsampling trials.")] = 300,
    inner: Annotated[int, typer.Option(help="Inner bootstrap resamples per trial.")] = 200,
    at: Annotated[
        str, typer.Option("--at", help="Thresholds t (s) of the binary tests, comma-separated.")
    ] = "30,60",
    wilson: Annotated[
        float | None,
        typer.Option(help="Trials for this Wilson half-width (e.g. 0.05) at --p."),
    ] = None,
    p: Annotated[float, typer.Option("--p", help="Success rate for --wilson.")] = 0.5,
    connor_delta: Annotated[
        float | None, typer.Option(help="Paired difference Δ for Connor's McNemar n.")
    ] = None,
    psi: Annotated[
        str, typer.Option(help="Discordance rates ψ for --connor-delta, comma-separated.")
    ] = "0.2,0.5",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
    plots: Annotated[Path | None, typer.Option("--plots", help="Write figures here.")] = None,
) -> None:
    """How many episodes per cell a pair needs (bridge model), the empirical
    detection rate vs n, null calibration, and the Wilson / Connor formulas."""
    _check_json_target(json_out)
    _check_plots_target(plots)
    _finite_option("--tau", tau, positive=True)
    _finite_option("--wilson", wilson)
    _finite_option("--connor-delta", connor_delta)
    if not 0 <= p <= 1:
        raise UsageError(f"--p: must be in [0, 1], got {p:g}")
    if seed < 0:
        raise UsageError(f"--seed: must be a non-negative integer, got {seed}")
    if not 0 < alpha < 1:
        raise UsageError(f"--alpha: must be in (0, 1), got {alpha}")
    if not 0 < target < 1:
        raise UsageError(f"--power: must be in (0, 1), got {target}")
    if rho is not None and not 0 <= rho <= 1:
        raise UsageError(f"--rho: must be in [0, 1], got {rho}")
    if outer < 1 or inner < 1 or sims < 10:
        raise UsageError("--outer and --inner must be positive and --sims at least 10")
    out: dict[str, Any] = {}
    con = _stdout()
    did_something = False
    if wilson is not None:
        from analysis.planning import wilson_n

        try:
            plan = wilson_n(wilson, p, alpha)
        except ValueError as exc:
            raise UsageError(f"--wilson: {exc}") from None
        con.print(
            f"Wilson ±{wilson:g} at p = {p:g}: n ≈ {plan.approximate} "
            f"(large-sample z²p(1−p)/h²); exact Wilson half-width reached at n = {plan.exact}"
        )
        out["wilson"] = {"halfwidth": wilson, "p": p, "n": plan.approximate, "n_exact": plan.exact}
        did_something = True
    if connor_delta is not None:
        from analysis.planning import connor_n

        rows = []
        for ps in _floats_option("--psi", psi):
            try:
                n = connor_n(connor_delta, ps, alpha, target)
            except ValueError as exc:
                raise UsageError(f"--connor-delta/--psi: {exc}") from None
            con.print(
                f"McNemar (Connor 1987): Δ = {connor_delta:g}, ψ = {ps:g}, α = {alpha:g}, "
                f"power {target:g}: n = {n} pairs per cell"
            )
            rows.append({"delta": connor_delta, "psi": ps, "n": n})
        out["connor"] = rows
        did_something = True
    if file is None:
        if not did_something:
            raise UsageError("give a FILE, or --wilson / --connor-delta for the planning formulas")
    else:
        out.update(
            _power_from_file(
                file,
                pair=pair,
                reference=reference,
                tau=tau,
                alpha=alpha,
                target=target,
                rho=rho,
                sims=sims,
                seed=seed,
                detection=detection,
                calibrate=calibrate,
                n_values=_ints_option("--n", n_values),
                outer=outer,
                inner=inner,
                thresholds=_floats_option("--at", at),
                plots=plots,
            )
        )
    if json_out is not None:
        write_json_atomic(json_out, out)
        typer.echo(f"wrote {json_out}")


def _pairs_wanted(pair: list[str] | None, policies: list[str]) -> list[tuple[str, str]] | None:
    if not pair:
        return None
    out = []
    for text in pair:
        names = [x.strip() for x in text.split(",")]
        if len(names) != 2 or not all(names) or names[0] == names[1]:
            raise UsageError(f"--pair: expected two different names as 'A,B', got {text!r}")
        for n in names:
            if n not in policies:
                raise UsageError(f"--pair: no policy {n!r} (known: {', '.join(policies)})")
        out.append((names[0], names[1]))
    return out


def _power_from_file(
    file: Path,
    *,
    pair: list[str] | None,
    reference: str | None,
    tau: float | None,
    alpha: float,
    target: float,
    rho: float | None,
    sims: int,
    seed: int,
    detection: bool,
    calibrate: bool,
    n_values: list[int],
    outer: int,
    inner: int,
    thresholds: tuple[float, ...],
    plots: Path | None,
) -> dict[str, Any]:
    con = _stdout()
    if file.is_file() and file.suffix.lower() == ".json":
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UsageError(f"{file}: not a JSON result file ({exc})") from None
        if isinstance(data, dict) and "pairs" in data and "protocol" in data:
            if detection or calibrate:
                raise UsageError(
                    f"{file}: --detection and --calibrate need the episodes (an interchange file)"
                )
            return _power_from_result(data, pair)
    from analysis.bootstrap import child_rng
    from analysis.cells import build_cell
    from analysis.episodes import scored
    from analysis.leaderboard import budget_overrun_note, default_tau, pair_effects
    from analysis.planning import BridgeModel

    table = _read(file, reference)
    kept, _ = scored(table.episodes)
    if tau is None:
        tau, src = default_tau(table)
        note = budget_overrun_note(table, tau) if src == "largest budget_s" else None
        if note is not None:
            con.print(f"note: {note}")
    policies = sorted({e.policy for e in kept})
    wanted = _pairs_wanted(pair, policies)
    cells: dict[tuple[str, str], Any] = {}
    for e in kept:
        cells.setdefault((e.policy, e.object), []).append(e)
    work = {
        k: build_cell(k[0], k[1], v, tau=tau, replicates=1, seed=seed) for k, v in cells.items()
    }
    pairs = wanted or [(a, b) for i, a in enumerate(policies) for b in policies[i + 1 :]]
    result: dict[str, Any] = {"tau": tau, "alpha": alpha, "power": target, "pairs": []}
    t = Table(title=f"Macro-KS power (Brownian-bridge model, α = {alpha:g}, target {target:g})")
    for col in ("pair", "macro D", "m̄", "ρ", "DEFF", "n now", "power now", "n needed", "more"):
        t.add_column(col)
    curves = {}
    for a, b in pairs:
        objs = sorted({o for (pp, o) in work if pp == a} & {o for (pp, o) in work if pp == b})
        if not objs:
            if wanted:
                raise UsageError(f"--pair {a},{b}: the two policies share no object")
            # as on the leaderboard: a note, not an error for the whole file
            note = f"{a} and {b} were run on no common object: not compared"
            con.print(f"note: {note}")
            result.setdefault("notes", []).append(note)
            continue
        effects, rho_used, estimated = pair_effects(
            {o: work[(a, o)] for o in objs}, {o: work[(b, o)] for o in objs}, tau=tau, rho=rho
        )
        first, second = sorted((a, b))
        model = BridgeModel(effects, sims=sims, rng=child_rng(seed, "power", first, second))
        n_now = sum(work[(x, o)].n_episodes for x in (a, b) for o in objs) / (2 * len(objs))
        grid_n = sorted({*n_values, *range(5, 205, 5)})
        curve = model.curve(grid_n, alpha=alpha, target=target)
        curves[(a, b)] = curve
        m_bar = sum(e.m_bar for e in effects) / len(effects)
        more = None if curve.n_needed is None else max(0, curve.n_needed - round(n_now))
        t.add_row(
            f"{a} vs {b}",
            f"{model.effect:.3f}",
            f"{m_bar:.1f}",
            f"{rho_used:.3f}" + ("" if estimated else " (given)"),
            f"{1 + (m_bar - 1) * rho_used:.2f}",
            f"{n_now:.1f}",
            f"{model.power(n_now, alpha):.2f}",
            "—" if curve.n_needed is None else str(curve.n_needed),
            "—" if more is None else str(more),
        )
        result["pairs"].append(
            {
                "a": a,
                "b": b,
                "effect": model.effect,
                "m_bar": m_bar,
                "rho": rho_used,
                "rho_estimated": estimated,
                "n_per_cell": n_now,
                "power_at_current_n": model.power(n_now, alpha),
                "n_needed_per_cell": curve.n_needed,
                "more_episodes_per_cell": more,
                "curve": {"n": curve.n.tolist(), "power": curve.power.tolist()},
            }
        )
    con.print(t)
    pairs = [ab for ab in pairs if ab in curves]  # those sharing an object
    if plots is not None:
        from analysis.plots import power_figure

        for (a, b), curve in curves.items():
            power_figure(curve, plots, f"power_{a}_vs_{b}", f"{a} vs {b}: predicted power")
    if detection:
        result["detection"] = _run_detection(
            kept,
            pairs,
            tau=tau,
            alpha=alpha,
            seed=seed,
            n_values=n_values,
            outer=outer,
            inner=inner,
            thresholds=thresholds,
            plots=plots,
        )
    if calibrate:
        result["null_calibration"] = _run_calibration(
            kept, pairs, tau=tau, seed=seed, outer=outer, inner=inner, reference=table.reference
        )
    return result


def _power_from_result(data: dict[str, Any], pair: list[str] | None) -> dict[str, Any]:
    con = _stdout()
    names = [p.get("policy") for p in data.get("policies", [])]
    wanted = _pairs_wanted(pair, [str(n) for n in names])
    t = Table(title="Power of unresolved pairs (from the analysis result)")
    for col in ("pair", "verdict", "power now", "n needed", "more episodes per cell"):
        t.add_column(col)
    rows = []
    for pr in data["pairs"]:
        key = (pr["a"], pr["b"])
        if wanted and key not in wanted and key[::-1] not in wanted:
            continue
        pw = pr.get("power")
        t.add_row(
            f"{pr['a']} vs {pr['b']}",
            str(pr.get("verdict")),
            "—" if not pw else f"{pw['power_at_current_n']:.2f}",
            "—" if not pw or pw["n_needed_per_cell"] is None else str(pw["n_needed_per_cell"]),
            "resolved" if not pw else str(pw["more_episodes_per_cell"]),
        )
        rows.append({"a": pr["a"], "b": pr["b"], "verdict": pr.get("verdict"), "power": pw})
    con.print(t)
    return {"pairs": rows}


def _pools(kept: list[Any], a: str, b: str | None) -> list[Any]:
    import numpy as np

    from analysis.detection import ObjectPool, make_pool
    from analysis.operations import extract_operations

    pools = []
    objs = sorted({e.object for e in kept if e.policy == a})
    for o in objs:
        ea = [e for e in kept if e.policy == a and e.object == o]
        if b is None:
            ops = extract_operations(ea)
            pools.append(ObjectPool(o, ops, ops.n_episodes, np.array([""] * len(ea))))
            continue
        eb = [e for e in kept if e.policy == b and e.object == o]
        if not eb:
            continue
        strata = [e.configuration or "" for e in (*ea, *eb)]
        pools.append(make_pool(o, extract_operations(ea), extract_operations(eb), strata))
    return pools


def _run_detection(
    kept: list[Any],
    pairs: list[tuple[str, str]],
    *,
    tau: float,
    alpha: float,
    seed: int,
    n_values: list[int],
    outer: int,
    inner: int,
    thresholds: tuple[float, ...],
    plots: Path | None,
) -> list[dict[str, Any]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from analysis.bootstrap import child_rng
    from analysis.detection import detection_rates

    con = _stdout()
    results = []
    total = outer * len(n_values) * len(pairs)
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=_stderr(),
    ) as bar:
        task = bar.add_task("detection trials", total=total)
        for a, b in pairs:
            pools = _pools(kept, a, b)
            try:
                curve = detection_rates(
                    pools,
                    n_values=n_values,
                    outer=outer,
                    inner=inner,
                    tau=tau,
                    thresholds=thresholds,
                    alpha=alpha,
                    rng=child_rng(seed, "detection", a, b),
                    progress=lambda k: bar.advance(task, k),
                )
            except ValueError as exc:
                raise UsageError(f"--detection {a},{b}: {exc}") from None
            results.append((a, b, curve))
    out = []
    for a, b, curve in results:
        t = Table(title=f"{a} vs {b}: detection rate (p < {alpha:g}), {outer} × {inner}")
        t.add_column("n per cell")
        for key in curve.rate:
            t.add_column(key)
        for k, n in enumerate(curve.n):
            t.add_row(str(n), *(f"{curve.rate[key][k]:.2f}" for key in curve.rate))
        con.print(t)
        out.append(
            {
                "a": a,
                "b": b,
                "n": curve.n.tolist(),
                "outer": outer,
                "inner": inner,
                "rate": {k: v.tolist() for k, v in curve.rate.items()},
                "lo": {k: v.tolist() for k, v in curve.lo.items()},
                "hi": {k: v.tolist() for k, v in curve.hi.items()},
            }
        )
        if plots is not None:
            from analysis.plots import detection_figure

            detection_figure(curve, plots, f"detection_{a}_vs_{b}", f"{a} vs {b}")
    return out


def _run_calibration(
    kept: list[Any],
    pairs: list[tuple[str, str]],
    *,
    tau: float,
    seed: int,
    outer: int,
    inner: int,
    reference: str | None,
) -> list[dict[str, Any]]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    from analysis.bootstrap import child_rng
    from analysis.detection import null_calibration

    policies = sorted({e.policy for e in kept})
    jobs: list[tuple[str, str, str | None]] = [("split", p, None) for p in policies]
    jobs += [("permute", a, b) for a, b in pairs if reference not in (a, b)]
    rows = []
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=_stderr(),
    ) as bar:
        task = bar.add_task("null calibration trials", total=outer * len(jobs))
        for setup, a, b in jobs:
            try:
                cal = null_calibration(
                    _pools(kept, a, b),
                    setup=setup,
                    outer=outer,
                    inner=inner,
                    tau=tau,
                    rng=child_rng(seed, "null", setup, a, b or ""),
                    progress=lambda k: bar.advance(task, k),
                )
            except ValueError as exc:
                arms = a if b is None else f"{a},{b}"
                raise UsageError(f"--calibrate ({setup} {arms}): {exc}") from None
            rows.append((setup, a, b, cal))
    t = Table(title=f"Null calibration of macro-KS ({outer} trials × {inner} resamples)")
    for col in ("setup", "arms", "mean p", "α=0.01", "α=0.05", "α=0.10"):
        t.add_column(col)
    out = []
    for setup, a, b, cal in rows:
        label = "reference split" if (setup == "split" and a == reference) else setup
        t.add_row(
            label,
            a if b is None else f"{a} / {b}",
            f"{cal.mean_p:.3f}",
            *(f"{r:.3f}" for r in cal.rejection),
        )
        out.append(
            {
                "setup": label,
                "a": a,
                "b": b,
                "mean_p": cal.mean_p,
                "alphas": list(cal.alphas),
                "rejection": list(cal.rejection),
            }
        )
    _stdout().print(t)
    return out
