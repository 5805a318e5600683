"""Detector + classifier on one episode's telemetry (no database)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from annotator.classifier import Verdict, classify
from annotator.config import Bin, CellLayout, Thresholds
from annotator.detector import Candidate, Signals, detect
from proctor.domain import CandidateVerdict
from proctor.errors import UsageError


@dataclass(frozen=True)
class Classified:
    candidate: Candidate
    verdict: Verdict

    @property
    def is_success(self) -> bool:
        return self.verdict.verdict == CandidateVerdict.success


def layout_for(
    thresholds: Thresholds, *, tote_side: str, manifest: dict[str, Any] | None
) -> CellLayout:
    """The bins of this episode: the manifest's recorded ``layout`` when the
    station wrote one, else the thresholds file's cell geometry for its tote side."""
    layout = (manifest or {}).get("layout")
    if isinstance(layout, dict) and "source_bin" in layout and "target_bin" in layout:
        try:
            src = [float(v) for v in layout["source_bin"]]
            tgt = [float(v) for v in layout["target_bin"]]
            rim = float(layout.get("bin_height", thresholds.cell.rim_height))
            return CellLayout(Bin(*src[:4]), Bin(*tgt[:4]), rim)
        except (TypeError, ValueError):
            raise UsageError(
                "manifest.layout: expected source_bin/target_bin as [cx, cy, hx, hy]"
            ) from None
    return thresholds.cell.layout(tote_side)


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
