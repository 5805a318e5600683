"""``proctor analyze`` and the ``proctor power`` group.

``analyze`` scores an interchange file (docs/methods.md §8). ``power`` has one
subcommand per job, each with only its own options: ``pair`` answers "how
many episodes per cell does this pair need" (bridge model), ``detection``
runs the empirical detection-rate experiment, ``calibrate`` the null
calibration of App. J, ``wilson`` and ``connor`` the planning formulas.

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
from typer.core import TyperGroup

from proctor.core.errors import UsageError

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
    from proctor.analysis.interchange import InvalidFile, read_interchange

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
    from proctor.analysis.interchange import write_text_atomic

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


# AnalysisProtocol reports a bad value by its field name; the user typed an option
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
        Path, typer.Argument(help="Interchange file: CSV or JSON Lines (docs/methods.md §8).")
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
        typer.Option(help="Label permutations per macro-KS p-value (default: --bootstrap)."),
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
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential",
            help="Also give anytime-valid verdicts: the e-process of each pair over its "
            "episodes paired within block by (block, sequence), or in started_at order "
            "when the file has no block and sequence (docs/methods.md §10).",
        ),
    ] = False,
) -> None:
    """Score policies from an interchange file: time-to-success CDFs, HRT,
    RMST, macro-KS verdicts (docs/methods.md)."""
    from proctor.analysis.leaderboard import analyze as run_analysis
    from proctor.analysis.leaderboard import budget_overrun_note, default_tau
    from proctor.analysis.report import data_version, to_json
    from proctor.analysis.results import AnalysisProtocol
    from proctor.analysis.store import code_version

    success_at = _floats_option("--at", at)
    _check_json_target(json_out)
    _check_plots_target(plots)
    table = _read(file, reference)
    starts = _sequential_starts(table) if sequential else None
    tau_source = "--tau"
    if tau is None:
        tau, tau_source = default_tau(table)
        note = budget_overrun_note(table, tau) if tau_source == "largest budget_s" else None
        if note is not None:
            table = dataclasses.replace(table, notes=(*table.notes, note))
    try:
        protocol = AnalysisProtocol(
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
    runs = _sequential_runs(table, lb, starts) if starts is not None else []
    if runs:
        for entry, run in zip(result["pairs"], runs, strict=True):
            entry["sequential"] = run.to_json()
    _print_leaderboard(lb, tau_source)
    if runs:
        _print_sequential(runs)
    if json_out is not None:
        write_json_atomic(json_out, result)
        typer.echo(f"wrote {json_out}")
    if plots is not None:
        from proctor.analysis.plots import leaderboard_figures, sequential_figure

        written = leaderboard_figures(lb, plots)
        for run in runs:
            written += sequential_figure(run, plots)
        typer.echo(f"wrote {len(written)} figures to {plots}")


def _sequential_starts(table: Any) -> dict[str, Any]:
    """Every scored episode's start, or exit 2 naming what is missing; empty
    when the file pairs by design (every scored episode has block and
    sequence: start times are then not read). A policy left with no scored
    episode leaves its pairs with none."""
    from proctor.analysis.episodes import scored
    from proctor.analysis.pairing import has_design
    from proctor.analysis.sequential import start_times

    kept, _ = scored(table.episodes)
    empty = sorted({e.policy for e in table.episodes} - {e.policy for e in kept})
    if empty:
        raise UsageError(
            f"--sequential: policy {empty[0]} has no scored episodes (all system faults), "
            "so its pairs have no episodes to order"
        )
    if has_design(kept):
        return {}
    try:
        return start_times(kept)
    except ValueError as exc:
        raise UsageError(f"--sequential: {exc}") from None


def _sequential_runs(table: Any, lb: Any, starts: dict[str, Any]) -> list[Any]:
    from proctor.analysis.sequential import sequential_pair

    runs = []
    for pr in lb.pairs:
        try:
            runs.append(
                sequential_pair(
                    pr.a,
                    pr.b,
                    table.episodes,
                    starts,
                    alpha=lb.protocol.alpha,
                    comparisons=len(lb.pairs),
                    tau=lb.protocol.tau,
                )
            )
        except ValueError as exc:
            raise UsageError(f"--sequential: {exc}") from None
    return runs


def _sparkline(path: Any, bar: float, width: int = 24) -> str:
    """The e-process path as one line of blocks on a log scale from 1/bar to
    bar (a full block: at or above the threshold)."""
    import numpy as np

    blocks = " ▁▂▃▄▅▆▇█"
    idx = np.linspace(0, len(path) - 1, num=min(width, len(path))).round().astype(int)
    level = np.clip(np.log(path[idx]) / math.log(bar), -1.0, 1.0)
    return "".join(blocks[round((x + 1) / 2 * (len(blocks) - 1))] for x in level)


def _sequential_verdict(r: Any) -> str:
    """The e-process says whether; the confidence sequence says which way."""
    if r.favours is not None:
        return f"{r.favours} better"
    return "different, direction unclear" if r.rejected else "—"


def _print_sequential(runs: list[Any]) -> None:
    order = "block and sequence" if runs[0].pairing == "block" else "start order"
    t = Table(
        title=f"Anytime-valid verdicts (e-process over episodes paired by {order}, "
        f"threshold {runs[0].threshold:g} = pairs/α; direction from the confidence "
        f"sequence of δ, A's time per item truncated at τ saved against B's)"
    )
    for col in (
        "pair",
        "episodes",
        "matched pairs",
        "E",
        "stopped at",
        "δ (s/item)",
        "verdict",
        "path (log scale)",
    ):
        t.add_column(col, overflow="fold")
    for r in runs:
        stop = "—" if r.stopped_at is None else f"episode {r.stopped_at}"
        cs = "—" if r.delta_s is None else f"[{r.delta_s[0]:+.3g}, {r.delta_s[1]:+.3g}]"
        t.add_row(
            f"{r.a} vs {r.b}",
            str(r.episodes_total),
            str(r.matched_pairs),
            f"{r.e_value:.3g}",
            stop,
            cs,
            _sequential_verdict(r),
            _sparkline(r.path, r.threshold),
        )
    _stdout().print(t)
    if runs[0].note:
        _stdout().print(f"note: {runs[0].note}")


def _fmt_success(x: Any) -> str:
    if x is None:
        return "—"
    return (
        f"{x.successes_a}/{x.episodes_a} vs {x.successes_b}/{x.episodes_b}: "
        f"{x.p:.3g} ({x.p_bonferroni:.3g})"
    )


def _print_claims(lb: Any) -> None:
    """Per-object letters and the rankings side by side (proctor.analysis.claims)."""
    con = _stdout()
    if lb.letters_per_object:
        t = Table(title="Letters per object (studentized KS on each object, Bonferroni over pairs)")
        t.add_column("policy")
        for o in lb.letters_per_object:
            t.add_column(o)
        for p in lb.policies:
            t.add_row(p.policy, *(v.get(p.policy, "—") for v in lb.letters_per_object.values()))
        con.print(t)
    if lb.rankings:
        t = Table(title="Rankings by rule (share of bootstrap replicates ranked first)")
        t.add_column("#")
        for r in lb.rankings:
            t.add_column(r.metric)
        depth = max(len(r.order) for r in lb.rankings)
        for k in range(depth):
            t.add_row(
                str(k + 1),
                *(
                    f"{r.order[k]} ({r.top1_share[r.order[k]]:.0%})" if k < len(r.order) else ""
                    for r in lb.rankings
                ),
            )
        con.print(t)


def _hrt_text(p: Any) -> str:
    hrt = "—"
    if p.hrt is not None:
        hrt = _fmt_iv(p.hrt) if not p.is_reference else "100 (reference)"
    if p.hrt_coverage_warning is not None:
        # the interval covers less than it says: flagged in the cell, said below the table
        hrt += " ⚠"
    return hrt


def _metric_text(m: Any, p: Any) -> str:
    if m.name == "hrt":
        return _hrt_text(p)  # the reference's own and a coverage warning are spelled out
    return _fmt_iv(m.read(p), m.digits, pct=m.percent)


def _print_leaderboard(lb: Any, tau_source: str) -> None:
    con = _stdout()
    pr = lb.protocol
    con.print(
        f"τ = {pr.tau:g} s ({tau_source}), {pr.bootstrap} bootstrap replicates, "
        f"{pr.resamples} KS resamples, seed {pr.seed}, α = {pr.alpha:g} "
        f"(Bonferroni over {len(lb.pairs)} pairs)"
    )
    t = Table(title=f"Leaderboard ({1 - pr.alpha:.0%} episode-clustered bootstrap intervals)")
    from proctor.analysis.metrics import cli_metrics

    shown = cli_metrics()
    for col in ("#", "policy", "episodes", *(m.cli_label or m.label for m in shown), "group"):
        t.add_column(col, overflow="fold")
    for p in lb.policies:
        t.add_row(
            "ref" if p.is_reference else str(p.rank),
            p.policy,
            str(p.episodes),
            *(_metric_text(m, p) for m in shown),
            p.letters,
        )
    con.print(t)
    for p in lb.policies:
        if p.hrt_coverage_warning is not None:
            con.print(f"⚠ {p.policy}: {p.hrt_coverage_warning.text}")
    from proctor.analysis.significance import UNCLEAR

    v = Table(title="Pairwise verdicts (studentized macro-KS, episode permutation)")
    cols = (
        *("pair", "macro Z", "p (Bonf.)", "clustered log-rank χ² (p Bonf.)", "ΔRMST s [CI]"),
        "success, Barnard p (Bonf.)",
    )
    for col in (*cols, "verdict"):
        v.add_column(col, overflow="fold")
    for pr_ in lb.pairs:
        verdict = pr_.verdict
        if verdict == UNCLEAR:
            verdict = "different, direction unclear"
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
            _fmt_success(pr_.success_barnard),
            verdict,
        )
    con.print(v)
    _print_claims(lb)
    for note in lb.notes:
        con.print(f"note: {note}")
    if lb.excluded:
        con.print(
            f"excluded: {len(lb.excluded)} episodes ("
            + ", ".join(sorted({x.reason for x in lb.excluded}))
            + ")"
        )


class _PowerGroup(TyperGroup):
    """``proctor power``: one subcommand per job. The flat form (``proctor
    power FILE --detection``, ``--wilson 0.05`` …) gets one line naming the
    subcommand that now does it, not click's "no such option"."""

    # typer >= 0.29 carries its own copy of click, whose Context is not the
    # click package's: the context is only passed through, so Any
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            raise UsageError(_flat_form_hint(args))
        return super().parse_args(ctx, args)


# an option of the old flat form → the subcommand that took it over
_FLAT_OPTIONS = {
    "--wilson": "wilson --halfwidth H",
    "--connor-delta": "connor --delta D",
    "--detection": "detection FILE",
    "--calibrate": "calibrate FILE",
}


def _flat_form_hint(args: list[str]) -> str:
    wanted = [_FLAT_OPTIONS[a] for a in args if a in _FLAT_OPTIONS] or ["pair FILE"]
    uses = " and ".join(f"`proctor power {w}`" for w in wanted)
    return (
        f"proctor power: {args[0]!r} is not a subcommand; use {uses} "
        "(subcommands: pair, sequential, detection, calibrate, wilson, connor, step; "
        "see `proctor power --help`)"
    )


power_app = typer.Typer(
    rich_markup_mode=None,
    cls=_PowerGroup,
    help="How many episodes per cell a pair needs (bridge model), the empirical detection "
    "rate vs n, null calibration, and the Wilson / Connor formulas.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# options several subcommands share, declared once
EpisodesArg = Annotated[
    Path, typer.Argument(help="Interchange file of episodes (CSV or JSON Lines).")
]
PairOpt = Annotated[
    list[str] | None, typer.Option(help="A pair as 'A,B' (repeatable; default: every pair).")
]
ReferenceOpt = Annotated[str | None, typer.Option(help="The reference policy.")]
TauOpt = Annotated[
    float | None,
    typer.Option(
        help="τ in seconds (default as in analyze; PhAIL's detection runs used a "
        "shorter cap, e.g. --tau 60, to limit censoring at small n)."
    ),
]
AlphaOpt = Annotated[float, typer.Option(help="Significance level of one pair's test.")]
TargetOpt = Annotated[float, typer.Option("--power", help="Target power.")]
SeedOpt = Annotated[int, typer.Option(help="Seed.")]
OuterOpt = Annotated[int, typer.Option(help="Outer subsampling trials.")]
InnerOpt = Annotated[int, typer.Option(help="Inner bootstrap resamples per trial.")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")]
PlotsOpt = Annotated[Path | None, typer.Option("--plots", help="Write figures here.")]


def _check_alpha(alpha: float) -> None:
    if not 0 < alpha < 1:
        raise UsageError(f"--alpha: must be in (0, 1), got {alpha}")


def _check_target(target: float) -> None:
    if not 0 < target < 1:
        raise UsageError(f"--power: must be in (0, 1), got {target}")


def _check_seed(seed: int) -> None:
    if seed < 0:
        raise UsageError(f"--seed: must be a non-negative integer, got {seed}")


def _check_trials(outer: int, inner: int) -> None:
    if outer < 1 or inner < 1:
        raise UsageError("--outer and --inner must be positive")


def _write_power_json(json_out: Path | None, out: dict[str, Any]) -> None:
    if json_out is not None:
        write_json_atomic(json_out, out)
        typer.echo(f"wrote {json_out}")


@power_app.command("pair")
def power_pair(
    file: Annotated[
        Path,
        typer.Argument(help="Interchange file of episodes, or a `proctor analyze --json` result."),
    ],
    pair: PairOpt = None,
    reference: ReferenceOpt = None,
    tau: TauOpt = None,
    alpha: AlphaOpt = 0.05,
    target: TargetOpt = 0.8,
    rho: Annotated[
        float | None,
        typer.Option(help="Intra-episode correlation (default: estimated from the data)."),
    ] = None,
    sims: Annotated[int, typer.Option(help="Bridge simulations for the power model.")] = 2000,
    seed: SeedOpt = 0,
    json_out: JsonOpt = None,
    plots: PlotsOpt = None,
) -> None:
    """Episodes per cell each pair needs (bridge model), and its power now.

    For the macro-KS test; from an interchange file, or from the pairs of a
    ``proctor analyze --json`` result."""
    _check_json_target(json_out)
    _check_plots_target(plots)
    _finite_option("--tau", tau, positive=True)
    _check_seed(seed)
    _check_alpha(alpha)
    _check_target(target)
    if rho is not None and not 0 <= rho <= 1:
        raise UsageError(f"--rho: must be in [0, 1], got {rho}")
    if sims < 10:
        raise UsageError(f"--sims: must be at least 10, got {sims}")
    result = _analysis_result(file)
    if result is not None:
        out = _power_from_result(result, pair)
    else:
        episodes = _power_episodes(file, reference, tau, pair)
        out = _bridge_model(
            episodes, alpha=alpha, target=target, rho=rho, sims=sims, seed=seed, plots=plots
        )
    _write_power_json(json_out, out)


@power_app.command("sequential")
def power_sequential(
    file: EpisodesArg,
    pair: PairOpt = None,
    reference: ReferenceOpt = None,
    tau: TauOpt = None,
    alpha: AlphaOpt = 0.05,
    target: TargetOpt = 0.8,
    streams: Annotated[
        int, typer.Option(help="Simulated campaigns per pair (resampling its episodes).")
    ] = 2000,
    sims: Annotated[int, typer.Option(help="Bridge simulations for the fixed design.")] = 2000,
    seed: SeedOpt = 0,
    json_out: JsonOpt = None,
) -> None:
    """The sequential design against the fixed one: episodes to a verdict.

    For each pair: the fixed design's n per cell for the target power
    (macro-KS, bridge model, as `power pair`), and, by resampling the pair's
    episodes into simulated interleaved campaigns, the e-process's power at
    that n and the expected and 90th-percentile episodes to a verdict when
    it is given the horizon that reaches the same power
    (docs/methods.md §10)."""
    _check_json_target(json_out)
    _finite_option("--tau", tau, positive=True)
    _check_seed(seed)
    _check_alpha(alpha)
    _check_target(target)
    if streams < 100:
        raise UsageError(f"--streams: must be at least 100, got {streams}")
    if sims < 10:
        raise UsageError(f"--sims: must be at least 10, got {sims}")
    episodes = _power_episodes(file, reference, tau, pair)
    out = _sequential_design(
        episodes, alpha=alpha, target=target, streams=streams, sims=sims, seed=seed
    )
    _write_power_json(json_out, out)


def _sequential_design(
    episodes: _PowerEpisodes, *, alpha: float, target: float, streams: int, sims: int, seed: int
) -> dict[str, Any]:
    from proctor.analysis.bootstrap import child_rng
    from proctor.analysis.cells import build_cell
    from proctor.analysis.leaderboard import pair_effects
    from proctor.analysis.operations import extract_operations
    from proctor.analysis.planning import BridgeModel
    from proctor.analysis.seqdesign import design
    from proctor.analysis.sequential import pad_operations, pair_z, threshold

    tau = episodes.tau
    work = {
        k: build_cell(k[0], k[1], v, tau=tau, replicates=1, seed=seed)
        for k, v in episodes.cells.items()
    }
    padded = {k: pad_operations(extract_operations(v)) for k, v in episodes.cells.items()}
    bar = threshold(alpha, 1)
    result: dict[str, Any] = {**episodes.header(), "alpha": alpha, "power": target, "pairs": []}
    t = Table(
        title=f"Sequential vs fixed design (α = {alpha:g}, power {target:g}, episodes of the pair)"
    )
    for col in ("pair", "fixed n/cell", "fixed episodes", "seq. power at fixed n",
                "horizon", "mean episodes", "90th pct", "fraction"):  # fmt: skip
        t.add_column(col)
    for a, b in episodes.pairs:
        objs = episodes.objects(a, b)
        effects, _, _ = pair_effects(
            {o: work[(a, o)] for o in objs}, {o: work[(b, o)] for o in objs}, tau=tau, rho=None
        )
        first, second = sorted((a, b))
        model = BridgeModel(effects, sims=sims, rng=child_rng(seed, "power", first, second))
        n_fixed = model.n_needed(alpha=alpha, target=target)
        entry: dict[str, Any] = {"a": a, "b": b, "n_fixed_per_cell": n_fixed, "sequential": None}
        if n_fixed is None:
            t.add_row(f"{a} vs {b}", "—", "—", "—", "—", "—", "—", "no realistic n")
        else:
            z = [pair_z(padded[(a, o)], padded[(b, o)]) for o in objs]
            d = design(
                z, n_fixed=n_fixed, target=target, bar=bar, streams=streams,
                rng=child_rng(seed, "sequential", first, second),
            )  # fmt: skip
            entry["sequential"] = dataclasses.asdict(d)
            t.add_row(
                f"{a} vs {b}",
                str(n_fixed),
                str(d.fixed_episodes),
                f"{d.power_at_fixed_n:.2f}",
                _fmt(d.max_episodes, 0),
                _fmt(d.expected_episodes, 1),
                _fmt(d.p90_episodes, 0),
                _fmt(d.fraction, 0, pct=True),
            )
        result["pairs"].append(entry)
    _stdout().print(t)
    return result


@power_app.command("detection")
def power_detection(
    file: EpisodesArg,
    pair: PairOpt = None,
    reference: ReferenceOpt = None,
    tau: TauOpt = None,
    alpha: AlphaOpt = 0.05,
    seed: SeedOpt = 0,
    n_values: Annotated[
        str, typer.Option("--n", help="Episodes per cell to try: 5,10,20 or 5:50:5.")
    ] = DEFAULT_N_VALUES,
    outer: OuterOpt = 300,
    inner: InnerOpt = 200,
    at: Annotated[
        str, typer.Option("--at", help="Thresholds t (s) of the binary tests, comma-separated.")
    ] = "30,60",
    json_out: JsonOpt = None,
    plots: PlotsOpt = None,
    target: TargetOpt = 0.8,
    calibrate_rho: Annotated[
        bool,
        typer.Option(
            "--calibrate-rho",
            help="Fit the bridge model's ρ to the macro-KS detection rates (PhAIL App. H).",
        ),
    ] = False,
    sims: Annotated[
        int, typer.Option("--bridge-sims", help="Bridge simulations for --calibrate-rho.")
    ] = 2000,
) -> None:
    """The empirical detection rate of each test vs episodes per cell.

    Subsamples each pair's episodes and counts how often each test resolves
    the pair; then, per pair and test, the first n tried whose rate reaches
    --power (PhAIL Table 4)."""
    _check_json_target(json_out)
    _check_plots_target(plots)
    _finite_option("--tau", tau, positive=True)
    _check_seed(seed)
    _check_alpha(alpha)
    _check_trials(outer, inner)
    _check_target(target)
    n = _ints_option("--n", n_values)
    thresholds = _floats_option("--at", at)
    episodes = _power_episodes(file, reference, tau, pair)
    detection = _run_detection(
        episodes.kept,
        episodes.pairs,
        tau=episodes.tau,
        alpha=alpha,
        seed=seed,
        n_values=n,
        outer=outer,
        inner=inner,
        thresholds=thresholds,
        plots=plots,
    )
    _print_first_n(detection, target)
    out: dict[str, Any] = {
        **episodes.header(),
        "alpha": alpha,
        "power": target,
        "detection": detection,
    }
    if calibrate_rho:
        if sims < 10:
            raise UsageError(f"--bridge-sims: must be at least 10, got {sims}")
        out["rho_calibration"] = _calibrate_rho(
            episodes, detection, alpha=alpha, target=target, sims=sims, seed=seed
        )
    _write_power_json(json_out, out)


def _calibrate_rho(
    episodes: _PowerEpisodes,
    detection: list[dict[str, Any]],
    *,
    alpha: float,
    target: float,
    sims: int,
    seed: int,
) -> dict[str, Any]:
    """PhAIL App. H: one ρ for every pair, fitted to the macro-KS detection
    rates just measured; the model's n for ``target`` under it, beside the
    n under the indicator-ICC ρ the board uses."""
    from proctor.analysis.bootstrap import child_rng
    from proctor.analysis.cells import build_cell
    from proctor.analysis.leaderboard import pair_effects
    from proctor.analysis.planning import BridgeModel, calibrate_rho

    tau = episodes.tau
    work = {
        k: build_cell(k[0], k[1], v, tau=tau, replicates=1, seed=seed)
        for k, v in episodes.cells.items()
    }
    models, curves, estimated = [], [], []
    for entry in detection:
        a, b = entry["a"], entry["b"]
        objs = episodes.objects(a, b)
        effects, rho_est, _ = pair_effects(
            {o: work[(a, o)] for o in objs}, {o: work[(b, o)] for o in objs}, tau=tau, rho=None
        )
        first, second = sorted((a, b))
        model = BridgeModel(effects, sims=sims, rng=child_rng(seed, "power", first, second))
        models.append(model)
        estimated.append(rho_est)
        curves.append((model, entry["n"], entry["rate"]["macro_ks"]))
    fit = calibrate_rho(curves, alpha=alpha)
    t = Table(
        title=f"Bridge model ρ calibrated to the macro-KS detection rates: ρ = {fit.rho:.2f} "
        f"(largest gap {fit.max_gap:.3f}, rms {fit.rms_gap:.3f})"
    )
    for col in ("pair", "ρ (indicator ICC)", "n needed (ICC ρ)", "n needed (calibrated ρ)"):
        t.add_column(col)
    pairs = []
    for entry, model, rho_est in zip(detection, models, estimated, strict=True):
        n_icc = model.with_rho(rho_est).n_needed(alpha=alpha, target=target)
        n_cal = model.with_rho(fit.rho).n_needed(alpha=alpha, target=target)
        t.add_row(
            f"{entry['a']} vs {entry['b']}",
            f"{rho_est:.3f}",
            "—" if n_icc is None else str(n_icc),
            "—" if n_cal is None else str(n_cal),
        )
        pairs.append(
            {
                "a": entry["a"],
                "b": entry["b"],
                "rho_estimated": rho_est,
                "n_needed_estimated_rho": n_icc,
                "n_needed_calibrated_rho": n_cal,
            }
        )
    _stdout().print(t)
    return {
        "rho": fit.rho,
        "max_gap": fit.max_gap,
        "rms_gap": fit.rms_gap,
        "points": [
            {"pair": i, "n": n, "observed": obs, "predicted": pred}
            for i, n, obs, pred in fit.points
        ],
        "pairs": pairs,
    }


def _print_first_n(detection: list[dict[str, Any]], target: float) -> None:
    """PhAIL Table 4 from the curves just run: adds ``first_n`` to each entry."""
    import numpy as np

    from proctor.analysis.detection import DetectionCurve, first_n_reaching

    if not detection:
        return
    t = Table(title=f"First n per cell reaching {target:.0%} detection (PhAIL Table 4)")
    t.add_column("pair")
    keys = list(detection[0]["rate"])
    for key in keys:
        t.add_column(key)
    for entry in detection:
        curve = DetectionCurve(
            n=np.asarray(entry["n"]),
            rate={k: np.asarray(v) for k, v in entry["rate"].items()},
            lo={},
            hi={},
            outer=entry["outer"],
            inner=entry["inner"],
            alpha=0.0,
        )
        first = first_n_reaching(curve, target)
        entry["first_n"] = first
        top = max(entry["n"])
        t.add_row(
            f"{entry['a']} vs {entry['b']}",
            *(str(first[k]) if first.get(k) is not None else f"> {top}" for k in keys),
        )
    _stdout().print(t)


@power_app.command("calibrate")
def power_calibrate(
    file: EpisodesArg,
    pair: PairOpt = None,
    reference: ReferenceOpt = None,
    tau: TauOpt = None,
    seed: SeedOpt = 0,
    outer: OuterOpt = 300,
    inner: InnerOpt = 200,
    json_out: JsonOpt = None,
) -> None:
    """Null calibration of the macro-KS test (PhAIL App. J).

    Its p-values where there is no difference: each policy split in two, and
    each pair's episodes permuted."""
    _check_json_target(json_out)
    _finite_option("--tau", tau, positive=True)
    _check_seed(seed)
    _check_trials(outer, inner)
    episodes = _power_episodes(file, reference, tau, pair)
    calibration = _run_calibration(
        episodes.kept,
        episodes.pairs,
        tau=episodes.tau,
        seed=seed,
        outer=outer,
        inner=inner,
        reference=episodes.reference,
    )
    _write_power_json(json_out, {**episodes.header(), "null_calibration": calibration})


@power_app.command("wilson")
def power_wilson(
    halfwidth: Annotated[
        float, typer.Option(help="Wilson half-width wanted, e.g. 0.05.", show_default=False)
    ],
    p: Annotated[float, typer.Option("--p", help="Success rate expected.")] = 0.5,
    alpha: Annotated[float, typer.Option(help="1 − the interval's level.")] = 0.05,
    json_out: JsonOpt = None,
) -> None:
    """Trials for a Wilson interval of a given half-width at success rate p."""
    from proctor.analysis.planning import wilson_n

    _check_json_target(json_out)
    _finite_option("--halfwidth", halfwidth)
    if not 0 <= p <= 1:
        raise UsageError(f"--p: must be in [0, 1], got {p:g}")
    _check_alpha(alpha)
    try:
        plan = wilson_n(halfwidth, p, alpha)
    except ValueError as exc:
        raise UsageError(f"--halfwidth: {exc}") from None
    _stdout().print(
        f"Wilson ±{halfwidth:g} at p = {p:g}: n ≈ {plan.approximate} "
        f"(large-sample z²p(1−p)/h²); exact Wilson half-width reached at n = {plan.exact}"
    )
    out = {"halfwidth": halfwidth, "p": p, "n": plan.approximate, "n_exact": plan.exact}
    _write_power_json(json_out, {"wilson": out})


@power_app.command("step")
def power_step(
    n_max: Annotated[
        int, typer.Option("--n-max", help="Most pairs of episodes (one of each policy per step).")
    ] = 50,
    alpha: AlphaOpt = 0.05,
    rates: Annotated[
        str | None,
        typer.Option(
            "--rates", help="Success rates p_A,p_B to report the design's power and steps at."
        ),
    ] = None,
    json_out: JsonOpt = None,
) -> None:
    """A sequential test on binary success (STEP family) fixed before the
    first episode: its boundary, exact worst-case size, and at --rates its
    exact power and expected pairs (docs/methods.md §7)."""
    from proctor.analysis.binary_tests import step_design, step_operating

    _check_json_target(json_out)
    _check_alpha(alpha)
    if not 1 <= n_max <= 400:
        raise UsageError(f"--n-max: must be in 1..400, got {n_max}")
    at = _floats_option("--rates", rates) if rates else ()
    if at and (len(at) != 2 or not all(0 <= x <= 1 for x in at)):
        raise UsageError("--rates: two success rates in [0, 1], e.g. 0.5,0.7")
    d = step_design(n_max, alpha)
    con = _stdout()
    con.print(
        f"Run the pair one episode each per step, at most {n_max} steps; stop at the first "
        f"step whose running table has |pooled z| ≥ {d.boundary:.4f}. Exact worst-case "
        f"type-I error under p_A = p_B: {d.size:.4f} (at rate {d.worst_rate:.3f}) ≤ α = {alpha:g}"
    )
    out: dict[str, Any] = {
        "n_max": n_max,
        "alpha": alpha,
        "boundary": d.boundary,
        "size": d.size,
        "worst_rate": d.worst_rate,
    }
    if at:
        op = step_operating(d, at[0], at[1])
        con.print(
            f"at p_A = {at[0]:g}, p_B = {at[1]:g}: rejects with probability {op.reject:.4f} "
            f"(saying A is better: {op.reject_a_better:.4f}); expected pairs run "
            f"{op.expected_steps:.1f} of {n_max}"
        )
        out["at"] = {
            "p_a": at[0],
            "p_b": at[1],
            "reject": op.reject,
            "reject_a_better": op.reject_a_better,
            "expected_steps": op.expected_steps,
        }
    _write_power_json(json_out, {"step": out})


@power_app.command("connor")
def power_connor(
    delta: Annotated[
        float, typer.Option(help="Paired difference Δ to detect.", show_default=False)
    ],
    psi: Annotated[str, typer.Option(help="Discordance rates ψ, comma-separated.")] = "0.2,0.5",
    alpha: AlphaOpt = 0.05,
    target: TargetOpt = 0.8,
    json_out: JsonOpt = None,
) -> None:
    """Pairs per cell McNemar's test needs for a paired difference (Connor).

    Connor (1987), for each discordance rate ψ given."""
    from proctor.analysis.planning import connor_n

    _check_json_target(json_out)
    _finite_option("--delta", delta)
    _check_alpha(alpha)
    _check_target(target)
    con = _stdout()
    rows = []
    for ps in _floats_option("--psi", psi):
        try:
            n = connor_n(delta, ps, alpha, target)
        except ValueError as exc:
            raise UsageError(f"--delta/--psi: {exc}") from None
        con.print(
            f"McNemar (Connor 1987): Δ = {delta:g}, ψ = {ps:g}, α = {alpha:g}, "
            f"power {target:g}: n = {n} pairs per cell"
        )
        rows.append({"delta": delta, "psi": ps, "n": n})
    _write_power_json(json_out, {"connor": rows})


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


def _analysis_result(file: Path) -> dict[str, Any] | None:
    """The file as a ``proctor analyze --json`` result, or None if it is an
    interchange file."""
    if not (file.is_file() and file.suffix.lower() == ".json"):
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{file}: not a JSON result file ({exc})") from None
    if isinstance(data, dict) and "pairs" in data and "protocol" in data:
        return data
    return None


@dataclasses.dataclass(frozen=True)
class _PowerEpisodes:
    """The scored episodes of an interchange file, the τ they are capped at,
    and the pairs to study (those asked for, or every pair sharing an object)."""

    kept: list[Any]
    reference: str | None
    tau: float
    cells: dict[tuple[str, str], list[Any]]
    pairs: list[tuple[str, str]]
    notes: tuple[str, ...]

    def objects(self, a: str, b: str) -> list[str]:
        return sorted(
            {o for (p, o) in self.cells if p == a} & {o for (p, o) in self.cells if p == b}
        )

    def header(self) -> dict[str, Any]:
        return {"tau": self.tau, **({"notes": list(self.notes)} if self.notes else {})}


def _power_episodes(
    file: Path, reference: str | None, tau: float | None, pair: list[str] | None
) -> _PowerEpisodes:
    from proctor.analysis.episodes import scored
    from proctor.analysis.leaderboard import budget_overrun_note, default_tau

    con = _stdout()
    if _analysis_result(file) is not None:
        raise UsageError(f"{file}: an analysis result has no episodes; give the interchange file")
    table = _read(file, reference)
    kept, _ = scored(table.episodes)
    if tau is None:
        tau, src = default_tau(table)
        note = budget_overrun_note(table, tau) if src == "largest budget_s" else None
        if note is not None:
            con.print(f"note: {note}")
    policies = sorted({e.policy for e in kept})
    wanted = _pairs_wanted(pair, policies)
    cells: dict[tuple[str, str], list[Any]] = {}
    for e in kept:
        cells.setdefault((e.policy, e.object), []).append(e)
    candidates = wanted or [(a, b) for i, a in enumerate(policies) for b in policies[i + 1 :]]
    pairs, notes = [], []
    for a, b in candidates:
        objs = {o for (p, o) in cells if p == a} & {o for (p, o) in cells if p == b}
        if objs:
            pairs.append((a, b))
        elif wanted:
            raise UsageError(f"--pair {a},{b}: the two policies share no object")
        else:
            # as on the leaderboard: a note, not an error for the whole file
            note = f"{a} and {b} were run on no common object: not compared"
            con.print(f"note: {note}")
            notes.append(note)
    return _PowerEpisodes(kept, table.reference, tau, cells, pairs, tuple(notes))


def _bridge_model(
    episodes: _PowerEpisodes,
    *,
    alpha: float,
    target: float,
    rho: float | None,
    sims: int,
    seed: int,
    plots: Path | None,
) -> dict[str, Any]:
    from proctor.analysis.bootstrap import child_rng
    from proctor.analysis.cells import build_cell
    from proctor.analysis.leaderboard import pair_effects
    from proctor.analysis.planning import BridgeModel

    tau = episodes.tau
    work = {
        k: build_cell(k[0], k[1], v, tau=tau, replicates=1, seed=seed)
        for k, v in episodes.cells.items()
    }
    result: dict[str, Any] = {"tau": tau, "alpha": alpha, "power": target, "pairs": []}
    if episodes.notes:
        result["notes"] = list(episodes.notes)
    t = Table(title=f"Macro-KS power (Brownian-bridge model, α = {alpha:g}, target {target:g})")
    for col in ("pair", "macro D", "m̄", "ρ", "DEFF", "n now", "power now", "n needed", "more"):
        t.add_column(col)
    curves = {}
    for a, b in episodes.pairs:
        objs = episodes.objects(a, b)
        effects, rho_used, estimated = pair_effects(
            {o: work[(a, o)] for o in objs}, {o: work[(b, o)] for o in objs}, tau=tau, rho=rho
        )
        first, second = sorted((a, b))
        model = BridgeModel(effects, sims=sims, rng=child_rng(seed, "power", first, second))
        n_now = sum(work[(x, o)].n_episodes for x in (a, b) for o in objs) / (2 * len(objs))
        curve = model.curve(list(range(5, 205, 5)), alpha=alpha, target=target)
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
    _stdout().print(t)
    if plots is not None:
        from proctor.analysis.plots import power_figure

        for (a, b), curve in curves.items():
            power_figure(curve, plots, f"power_{a}_vs_{b}", f"{a} vs {b}: predicted power")
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

    from proctor.analysis.detection import ObjectPool, make_pool
    from proctor.analysis.operations import extract_operations

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

    from proctor.analysis.bootstrap import child_rng
    from proctor.analysis.detection import detection_rates

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
            from proctor.analysis.plots import detection_figure

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

    from proctor.analysis.bootstrap import child_rng
    from proctor.analysis.detection import null_calibration

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
