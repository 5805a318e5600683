"""Detector + classifier on one episode's telemetry (no database)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from proctor.annotator.classifier import Verdict, classify
from proctor.annotator.config import Bin, CellLayout, Thresholds
from proctor.annotator.detector import Candidate, Signals, detect
from proctor.core.domain import CandidateVerdict
from proctor.core.errors import UsageError


@dataclass(frozen=True)
class Classified:
    candidate: Candidate
    verdict: Verdict

    @property
    def is_success(self) -> bool:
        return self.verdict.verdict == CandidateVerdict.success


LAYOUT_FORMAT = "proctor.cell_layout/1"


def layout_for(
    thresholds: Thresholds, *, tote_side: str, manifest: dict[str, Any] | None
) -> CellLayout:
    """The bins of this episode: the ``layout`` the station recorded in the
    episode's manifest; for a recording without one (older recordings, cells
    that describe no layout) the thresholds file's ``[cell]`` geometry for
    the episode's tote side."""
    layout = (manifest or {}).get("layout")
    if layout is None:
        return thresholds.cell.layout(tote_side)
    return parse_layout(layout, tote_side=tote_side)


def parse_layout(layout: Any, *, tote_side: str | None = None) -> CellLayout:
    """A manifest's ``layout`` (``proctor.cell_layout/1``): ``source_bin`` and
    ``target_bin`` as [cx, cy, half_x, half_y] in the robot base frame (m),
    ``bin_height``; a ``tote_side`` that contradicts the episode's is refused."""
    if not isinstance(layout, dict):
        raise UsageError(f"manifest.layout: expected a table, got {type(layout).__name__}")
    fmt = layout.get("format", LAYOUT_FORMAT)
    if fmt != LAYOUT_FORMAT:
        raise UsageError(f"manifest.layout.format: expected {LAYOUT_FORMAT!r}, got {fmt!r}")
    side = layout.get("tote_side")
    if tote_side is not None and side is not None and side != tote_side:
        raise UsageError(
            f"manifest.layout.tote_side: {side!r} contradicts the episode's tote side {tote_side!r}"
        )

    def box(name: str) -> Bin:
        value = layout.get(name)
        try:
            numbers = [float(v) for v in value]  # type: ignore[union-attr]
        except (TypeError, ValueError):
            numbers = []
        if len(numbers) != 4 or not all(math.isfinite(v) for v in numbers):
            raise UsageError(
                f"manifest.layout.{name}: expected [cx, cy, half_x, half_y] in metres, "
                f"got {value!r}"
            )
        if numbers[2] <= 0 or numbers[3] <= 0:
            raise UsageError(f"manifest.layout.{name}: half sizes must be positive, got {value!r}")
        return Bin(*numbers)

    height = layout.get("bin_height")
    if isinstance(height, bool) or not isinstance(height, int | float) or not height > 0:
        raise UsageError(f"manifest.layout.bin_height: expected metres > 0, got {height!r}")
    return CellLayout(box("source_bin"), box("target_bin"), float(height))


def analyze_signals(
    signals: Signals, *, items: int, layout: CellLayout, thresholds: Thresholds
) -> list[Classified]:
    candidates = detect(signals, layout, thresholds.detector, thresholds.classifier)
    verdicts = classify(candidates, items=items, th=thresholds.classifier)
    return [Classified(c, v) for c, v in zip(candidates, verdicts, strict=True)]


def analyze_table(
    table: pa.Table,
    *,
    t0: float,
    items: int,
    tote_side: str,
    thresholds: Thresholds,
    manifest: dict[str, Any] | None = None,
) -> list[Classified]:
    layout = layout_for(thresholds, tote_side=tote_side, manifest=manifest)
    return analyze_signals(
        Signals.from_table(table, t0=t0), items=items, layout=layout, thresholds=thresholds
    )
