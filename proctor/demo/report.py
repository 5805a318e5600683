"""The leaderboard as the terminal shows it, read from a stored snapshot's
result JSON (the same document the web pages render; schema in
proctor/analysis/README.md)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table

# the widest a piped leaderboard may grow before rich wraps or clips it
_MAX_PIPED_WIDTH = 400


def _num(x: float | None, digits: int = 1, suffix: str = "") -> str:
    return "—" if x is None else f"{x:.{digits}f}{suffix}"


def _interval(iv: dict[str, Any] | None, digits: int = 1, suffix: str = "") -> str:
    if not iv or iv.get("estimate") is None:
        return "—"
    lo, hi = iv.get("ci") or (None, None)
    if lo is None and hi is None:
        return _num(iv["estimate"], digits, suffix)
    return f"{_num(iv['estimate'], digits, suffix)} ({_num(lo, digits)}–{_num(hi, digits)})"


def _pct(iv: dict[str, Any] | None) -> str:
    if not iv or iv.get("estimate") is None:
        return "—"
    return f"{100 * iv['estimate']:.0f}%"


def verdict_counts(result: dict[str, Any]) -> Counter[str]:
    return Counter(p["verdict"] for p in result.get("pairs", []))


def _natural_width(console: Console, renderable: RenderableType) -> int:
    options = console.options.update_width(_MAX_PIPED_WIDTH)
    return Measurement.get(console, options, renderable).maximum


def _for_tables(console: Console, *tables: RenderableType) -> Console:
    """The console to print ``tables`` on. A terminal keeps its own width (the
    user sees it and can widen it). A file or a pipe has none: rich assumes 80
    columns and cut every number of the leaderboard to "…", so it gets a
    console as wide as the widest table."""
    if console.is_terminal:
        return console
    width = max([console.width, *(_natural_width(console, t) for t in tables)])
    if width <= console.width:
        return console
    return Console(file=console.file, width=width, highlight=False, color_system=None)


def print_leaderboard(console: Console, result: dict[str, Any], *, title: str) -> None:
    proto = result["protocol"]
    header = (
        f"[bold]{title}[/bold]\n"
        f"τ = {proto['tau']:g} s · bootstrap B = {proto['bootstrap']} · KS resamples "
        f"{proto['ks_resamples']} · seed {proto['seed']} · α = {proto['alpha']} · "
        f"reference: {proto.get('reference') or 'none'} · {result['code_version']}"
    )
    table = Table(
        show_lines=False,
        caption="intervals: 95% episode-clustered bootstrap · env/ep: commands the safety "
        "envelope clamped or stopped, per counted episode",
    )
    for col, justify in (
        ("#", "right"),
        ("policy", "left"),
        ("grp", "left"),
        ("eps", "right"),
        ("HRT %", "right"),
        ("RMST s", "right"),
        ("done", "right"),
        ("drop/op", "right"),
        ("stop/ep", "right"),
        ("env/ep", "right"),  # envelope interventions; — where no station counted them
    ):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for p in result["policies"]:
        modes = p.get("failure_modes") or {}
        table.add_row(
            "ref" if p["reference"] else str(p["rank"]),
            p["policy"],
            p.get("letters") or "",
            str(p["episodes"]),
            _interval(p.get("hrt")),
            _interval(p.get("rmst")),
            _pct(p.get("completion")),
            _num((modes.get("drops_per_operation") or {}).get("estimate"), 3),
            _num((modes.get("safety_stops_per_episode") or {}).get("estimate"), 3),
            _num((modes.get("envelope_interventions_per_episode") or {}).get("estimate"), 2),
        )

    pairs = Table(
        title="pairs: macro-averaged KS, Bonferroni-adjusted p; direction from RMST and AUC",
        caption="ΔRMST < 0: the first is faster · to resolve: the power model's estimate",
    )
    for col in ("pair", "verdict", "KS p", "LR p", "ΔRMST s", "to resolve"):
        pairs.add_column(col, no_wrap=col != "to resolve")
    for pair in result.get("pairs", []):
        verdict = {"indistinguishable": "≈ same", "unclear": "different, direction unclear"}.get(
            pair["verdict"], pair["verdict"]
        )
        if pair["verdict"] == "better" and pair.get("winner"):
            verdict = f"{pair['winner']} better"
        power = pair.get("power") or {}
        more = power.get("more_episodes_per_cell")
        need = (
            f"≈ {more} more eps/cell"
            if pair["verdict"] == "indistinguishable" and more is not None
            else ""
        )
        ks = pair.get("macro_ks") or {}
        lr = pair.get("logrank") or {}
        pairs.add_row(
            f"{pair['a']} · {pair['b']}",
            verdict,
            _num(ks.get("p_bonferroni"), 4),
            _num(lr.get("p_bonferroni"), 4),
            _interval(pair.get("rmst_diff")),
            need,
        )
    out = _for_tables(console, table, pairs)
    out.print(header)
    out.print(table)
    out.print(pairs)
    counts = verdict_counts(result)
    console.print(
        f"pairs: {counts.get('better', 0)} resolved, {counts.get('crossing', 0)} crossing, "
        f"{counts.get('unclear', 0)} different with the direction unclear, "
        f"{counts.get('indistinguishable', 0)} indistinguishable at this n"
    )
