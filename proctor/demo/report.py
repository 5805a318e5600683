"""The leaderboard as the terminal shows it, read from a stored snapshot's
result JSON through the typed snapshot (``proctor.analysis.snapshot``, the
same contract the web pages read; schema in proctor/analysis/README.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table

from proctor.analysis.snapshot import IntervalSnapshot, LeaderboardSnapshot, read_snapshot

# the widest a piped leaderboard may grow before rich wraps or clips it
_MAX_PIPED_WIDTH = 400


def _num(x: float | None, digits: int = 1, suffix: str = "") -> str:
    return "—" if x is None else f"{x:.{digits}f}{suffix}"


def _interval(iv: IntervalSnapshot | None, digits: int = 1, suffix: str = "") -> str:
    if iv is None or iv.estimate is None:
        return "—"
    if iv.lo is None and iv.hi is None:
        return _num(iv.estimate, digits, suffix)
    return f"{_num(iv.estimate, digits, suffix)} ({_num(iv.lo, digits)}–{_num(iv.hi, digits)})"


def _pct(iv: IntervalSnapshot | None) -> str:
    if iv is None or iv.estimate is None:
        return "—"
    return f"{100 * iv.estimate:.0f}%"


def _estimate(digits: int) -> Callable[[IntervalSnapshot | None], str]:
    return lambda iv: _num(None if iv is None else iv.estimate, digits)


# the demo's compact columns: header, the metric (proctor.analysis.metrics), its text
_COLUMNS: tuple[tuple[str, str, Callable[[IntervalSnapshot | None], str]], ...] = (
    ("HRT %", "hrt", _interval),
    ("RMST s", "rmst", _interval),
    ("done", "completion", _pct),
    ("drop/op", "drops_per_operation", _estimate(3)),
    ("stop/ep", "safety_stops_per_episode", _estimate(3)),
    # — where no station counted them
    ("env/ep", "envelope_interventions_per_episode", _estimate(2)),
)


def verdict_counts(result: Mapping[str, Any] | LeaderboardSnapshot) -> Counter[str]:
    snap = result if isinstance(result, LeaderboardSnapshot) else read_snapshot(result)
    return Counter(p.verdict for p in snap.pairs)


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


def print_leaderboard(console: Console, result: Mapping[str, Any], *, title: str) -> None:
    snap = read_snapshot(result)
    proto = snap.protocol
    header = (
        f"[bold]{title}[/bold]\n"
        f"τ = {proto.tau:g} s · bootstrap B = {proto.bootstrap} · KS resamples "
        f"{proto.ks_resamples} · seed {proto.seed} · α = {proto.alpha} · "
        f"reference: {proto.reference or 'none'} · {snap.code_version}"
    )
    table = Table(
        show_lines=False,
        caption="intervals: 95% episode-clustered bootstrap · env/ep: commands the safety "
        "envelope clamped or stopped, per counted episode",
    )
    for col, justify in (("#", "right"), ("policy", "left"), ("grp", "left"), ("eps", "right")):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for col, _, _ in _COLUMNS:
        table.add_column(col, justify="right", no_wrap=True)
    for p in snap.policies:
        table.add_row(
            "ref" if p.reference else str(p.rank),
            p.policy,
            p.letters,
            str(p.episodes),
            *(text(p.metric(name)) for _, name, text in _COLUMNS),
        )

    pairs = Table(
        title="pairs: macro-averaged KS, Bonferroni-adjusted p; direction from RMST and AUC",
        caption="ΔRMST < 0: the first is faster · to resolve: the power model's estimate",
    )
    for col in ("pair", "verdict", "KS p", "LR p", "ΔRMST s", "to resolve"):
        pairs.add_column(col, no_wrap=col != "to resolve")
    for pair in snap.pairs:
        verdict = {"indistinguishable": "≈ same", "unclear": "different, direction unclear"}.get(
            pair.verdict, pair.verdict
        )
        if pair.verdict == "better" and pair.winner:
            verdict = f"{pair.winner} better"
        more = None if pair.power is None else pair.power.more_episodes_per_cell
        need = (
            f"≈ {more} more eps/cell"
            if pair.verdict == "indistinguishable" and more is not None
            else ""
        )
        pairs.add_row(
            f"{pair.a} · {pair.b}",
            verdict,
            _num(pair.macro_ks.p_bonferroni, 4),
            _num(pair.logrank.p_bonferroni, 4),
            _interval(pair.rmst_diff),
            need,
        )
    out = _for_tables(console, table, pairs)
    out.print(header)
    out.print(table)
    out.print(pairs)
    counts = verdict_counts(snap)
    console.print(
        f"pairs: {counts.get('better', 0)} resolved, {counts.get('crossing', 0)} crossing, "
        f"{counts.get('unclear', 0)} different with the direction unclear, "
        f"{counts.get('indistinguishable', 0)} indistinguishable at this n"
    )
