"""The candidate classifier: a verdict per candidate, with the rule that gave it.

Rules, in order (first match wins); the *zone* is where the item comes down
(the ballistic landing point of a fall from the tool's height and velocity
at the release, or the point under the tool when ``use_landing`` is off):

1. ``unknown`` — it comes down within ``rim_margin`` of the target bin's
   rim: it may tip either way.
2. ``unknown`` — the target zone has already received as many items as were
   set out: a further one cannot be a placement.
3. ``success`` — it comes down inside the target bin (a release, or a slip
   over the bin).
4. ``neutral`` — it comes down in the source bin (a regrasp, a put-back or
   a slip back into the pile): nothing was lost or placed.
5. ``failure`` — it comes down outside both bins: dropped or lost.

The score is the signed distance from the landing point to the target
bin's rim (m, positive inside): how sure a success is.
"""

from __future__ import annotations

from dataclasses import dataclass

from proctor.annotator.config import ClassifierThresholds
from proctor.annotator.detector import Candidate, Zone
from proctor.core.domain import CandidateVerdict


@dataclass(frozen=True)
class Verdict:
    verdict: CandidateVerdict
    rule: str
    score: float


def classify_one(c: Candidate, *, items: int, th: ClassifierThresholds) -> Verdict:
    d_target = float(c.features.get("target_rim_distance", float("nan")))
    what = "slip" if c.kind == "slump" else "release"
    if abs(d_target) < th.rim_margin:
        return Verdict(
            CandidateVerdict.unknown,
            f"{what} lands within {th.rim_margin * 100:g} cm of the target bin's rim",
            d_target,
        )
    if c.zone == Zone.target:
        if int(c.features.get("target_ledger", 0)) > items:
            return Verdict(
                CandidateVerdict.unknown,
                f"target zone already received all {items} items",
                d_target,
            )
        return Verdict(CandidateVerdict.success, f"{what} over the target bin", d_target)
    if c.zone == Zone.source:
        return Verdict(
            CandidateVerdict.neutral, f"{what} over the source bin (regrasp or put-back)", d_target
        )
    return Verdict(CandidateVerdict.failure, f"{what} outside both bins (drop or loss)", d_target)


def classify(candidates: list[Candidate], *, items: int, th: ClassifierThresholds) -> list[Verdict]:
    return [classify_one(c, items=items, th=th) for c in candidates]
