"""Figures of a leaderboard and of a detection experiment, as PNG and SVG.

The only module of proctor/analysis/ that imports matplotlib. Figures are built with
the object API (``matplotlib.figure.Figure``), so nothing touches pyplot's
global state or needs a display.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from proctor.analysis.detection import DetectionCurve
from proctor.analysis.planning import PowerCurve
from proctor.analysis.results import Leaderboard
from proctor.analysis.sequential import SequentialResult

FORMATS = ("png", "svg")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "x"


def _save(fig: Figure, out: Path, name: str) -> list[Path]:
    paths = []
    for fmt in FORMATS:
        p = out / f"{name}.{fmt}"
        fig.savefig(p, format=fmt, dpi=110, bbox_inches="tight")
        paths.append(p)
    return paths


def _colors(names: Sequence[str]) -> dict[str, object]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {n: cmap(k % 10) for k, n in enumerate(names)}


def leaderboard_figures(lb: Leaderboard, out: Path) -> list[Path]:
    """CDFs with bands per object, P-P and Q-Q vs the reference per object,
    the per-cell RMST grid, and the (UPH, MTBF/A) τ-sweep."""
    out.mkdir(parents=True, exist_ok=True)
    names = [p.policy for p in lb.policies]
    color = _colors(names)
    tau = lb.protocol.tau
    written: list[Path] = []
    for obj in lb.objects:
        rows = [(p, o) for p in lb.policies for o in p.per_object if o.object == obj]
        fig = Figure(figsize=(7, 4.5))
        ax = fig.add_subplot()
        for p, o in rows:
            c = color[p.policy]
            ax.step(o.km.t, o.km.cdf, where="post", color=c, label=f"{p.policy} (n={o.episodes})")
            ax.fill_between(o.km.t, o.km.lo, o.km.hi, step="post", color=c, alpha=0.18, lw=0)
        ax.axvline(tau, color="grey", ls=":", lw=1)
        ax.text(tau, 0.02, " τ", color="grey")
        ax.set_xlim(0, tau * 1.05)
        ax.set_ylim(0, 1)
        ax.set_xlabel("time to success of one operation (s)")
        ax.set_ylabel("F(t) = P(T ≤ t)")
        ax.set_title(f"{obj}: time-to-success CDF, 95% pointwise bands")
        ax.legend(fontsize=8, loc="lower right")
        written += _save(fig, out, f"cdf_{_slug(obj)}")

        if lb.reference is None:
            continue
        fig = Figure(figsize=(5, 5))
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1)
        for p, o in rows:
            if o.pp is None or p.is_reference:
                continue
            auc = o.auc_vs_reference.estimate if o.auc_vs_reference else None
            label = f"{p.policy}" + (f" (AUC {auc:.2f})" if auc is not None else "")
            ax.plot(o.pp.ref, o.pp.model, color=color[p.policy], label=label)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel(f"F_ref(t)  ({lb.reference})")
        ax.set_ylabel("F_model(t)")
        ax.set_title(f"{obj}: P-P vs the reference")
        ax.legend(fontsize=8)
        written += _save(fig, out, f"pp_{_slug(obj)}")

        fig = Figure(figsize=(5, 5))
        ax = fig.add_subplot()
        top = 0.0
        for p, o in rows:
            if o.qq is None or p.is_reference:
                continue
            ok = np.isfinite(o.qq.ref) & np.isfinite(o.qq.model)
            if not ok.any():
                continue
            c = color[p.policy]
            ax.plot(o.qq.ref[ok], o.qq.model[ok], color=c, label=p.policy)
            last = np.nonzero(ok)[0][-1]
            ax.plot(o.qq.ref[last], o.qq.model[last], "o", mfc="none", color=c)
            top = max(top, float(np.nanmax(o.qq.model[ok])), float(np.nanmax(o.qq.ref[ok])))
        if top > 0:
            ax.plot([0.05, top], [0.05, top], color="grey", ls="--", lw=1)
            # log axes: a human reference is often an order of magnitude faster
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel(f"reference quantile (s)  ({lb.reference})")
        ax.set_ylabel("model quantile (s)")
        ax.set_title(f"{obj}: Q-Q vs the reference (○ = last reachable quantile)")
        ax.legend(fontsize=8)
        written += _save(fig, out, f"qq_{_slug(obj)}")

    # per-cell RMST grid
    grid = np.full((len(lb.policies), len(lb.objects)), np.nan)
    for i, p in enumerate(lb.policies):
        for o in p.per_object:
            if o.rmst.estimate is not None:
                grid[i, lb.objects.index(o.object)] = o.rmst.estimate
    fig = Figure(figsize=(1.6 + 1.4 * len(lb.objects), 1.2 + 0.5 * len(lb.policies)))
    ax = fig.add_subplot()
    im = ax.imshow(grid, cmap="viridis_r", aspect="auto")
    finite = grid[np.isfinite(grid)]
    middle = float(np.mean([finite.min(), finite.max()])) if finite.size else 0.0
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            if np.isfinite(grid[i, j]):
                # dark text on the light (fast) end of the reversed colormap
                ink = "black" if grid[i, j] < middle else "white"
                ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", color=ink)
    ax.set_xticks(range(len(lb.objects)), lb.objects)
    ax.set_yticks(range(len(lb.policies)), names)
    ax.set_title(f"RMST(τ = {tau:g} s) per cell (s)")
    fig.colorbar(im, ax=ax)
    written += _save(fig, out, "rmst_grid")

    # (UPH, MTBF/A) as τ sweeps, macro over objects
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    for p in lb.policies:
        ok = np.isfinite(p.sweep.mtbfa)
        if ok.sum() < 1:
            continue
        c = color[p.policy]
        ax.plot(p.sweep.uph[ok], p.sweep.mtbfa[ok], "-o", ms=3, color=c, label=p.policy)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("UPH = 3600 / RMST(τ')")
    ax.set_ylabel("MTBF/A = RMST(τ') / (1 − F(τ')) (s)")
    ax.set_title(f"UPH vs MTBF/A as τ' sweeps {p.sweep.tau[0]:g}…{p.sweep.tau[-1]:g} s")
    ax.legend(fontsize=8)
    written += _save(fig, out, "tau_sweep")
    return written


def detection_figure(curve: DetectionCurve, out: Path, name: str, title: str) -> list[Path]:
    """Detection rate vs n for each test, with Wilson bands over outer trials."""
    out.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    for key in curve.rate:
        ax.plot(curve.n, curve.rate[key], "-o", ms=3, label=key)
        ax.fill_between(curve.n, curve.lo[key], curve.hi[key], alpha=0.15, lw=0)
    ax.axhline(0.8, color="grey", ls=":", lw=1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("episodes per (policy, object) cell")
    ax.set_ylabel(f"detection rate (p < {curve.alpha:g})")
    ax.set_title(f"{title}\n{curve.outer} outer × {curve.inner} inner")
    ax.legend(fontsize=8)
    return _save(fig, out, name)


def power_figure(curve: PowerCurve, out: Path, name: str, title: str) -> list[Path]:
    """Predicted macro-KS power vs n from the Brownian-bridge model."""
    out.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    ax.plot(curve.n, curve.power, "-o", ms=3)
    ax.axhline(curve.target, color="grey", ls=":", lw=1)
    if curve.n_needed is not None:
        ax.axvline(curve.n_needed, color="grey", ls="--", lw=1)
        ax.text(curve.n_needed, 0.05, f" n ≈ {curve.n_needed}", color="grey")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("episodes per (policy, object) cell")
    ax.set_ylabel("predicted power (macro-KS)")
    ax.set_title(title)
    return _save(fig, out, name)


def sequential_figure(run: SequentialResult, out: Path) -> list[Path]:
    """The e-process of one pair over its episodes in start order, on a log
    scale, with the rejection threshold and the episode where it was crossed."""
    out.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    x = np.arange(1, run.path.size + 1)
    ax.step(x, run.path, where="post", color="C0", label="E (e-process)")
    ax.axhline(run.threshold, color="C3", ls="--", lw=1, label=f"threshold {run.threshold:g}")
    ax.axhline(1.0, color="grey", ls=":", lw=1)
    if run.stopped_at is not None:
        ax.axvline(run.stopped_at, color="C3", ls=":", lw=1)
        ax.text(run.stopped_at, run.threshold, f" stopped at {run.stopped_at}", color="C3")
    ax.set_yscale("log")
    ax.set_xlabel("episodes of the pair (both policies, in start order)")
    ax.set_ylabel("E")
    ax.set_title(f"{run.a} vs {run.b}: anytime-valid e-process")
    ax.legend(fontsize=8)
    return _save(fig, out, f"sequential_{_slug(run.a)}_vs_{_slug(run.b)}")
