"""Scoring the detector against the simulated cell's ground truth.

Detected placements (success candidates) are matched one-to-one to true
placement times: pairs are taken closest first, and a pair further apart
than ``tolerance_s`` is no match. Recall = matched / true placements,
precision = matched / detected placements, and the timestamp errors are
|detected − true| over the matched pairs. An episode goes to review when
the detector's count differs from the operator's ``placed``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

DEFAULT_TOLERANCE_S = 1.0


def match_times(
    true_s: Sequence[float], detected_s: Sequence[float], tolerance_s: float = DEFAULT_TOLERANCE_S
) -> list[tuple[int, int]]:
    """One-to-one (true index, detected index) pairs, closest first."""
    pairs = sorted(
        (abs(d - t), i, j)
        for i, t in enumerate(true_s)
        for j, d in enumerate(detected_s)
        if abs(d - t) <= tolerance_s
    )
    used_t: set[int] = set()
    used_d: set[int] = set()
    out = []
    for _, i, j in pairs:
        if i in used_t or j in used_d:
            continue
        used_t.add(i)
        used_d.add(j)
        out.append((i, j))
    return sorted(out)


@dataclass(frozen=True)
class EpisodeScore:
    uid: str
    group: str  # e.g. the demo profile
    object: str
    true_s: tuple[float, ...]
    detected_s: tuple[float, ...]
    placed: int  # the operator's count
    pairs: tuple[tuple[int, int], ...]

    @property
    def errors_s(self) -> list[float]:
        return [self.detected_s[j] - self.true_s[i] for i, j in self.pairs]

    @property
    def to_review(self) -> bool:
        return len(self.detected_s) != self.placed


def score_episode(
    *,
    uid: str,
    true_s: Sequence[float],
    detected_s: Sequence[float],
    placed: int,
    group: str = "",
    object: str = "",
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> EpisodeScore:
    return EpisodeScore(
        uid=uid,
        group=group,
        object=object,
        true_s=tuple(float(t) for t in true_s),
        detected_s=tuple(float(d) for d in detected_s),
        placed=int(placed),
        pairs=tuple(match_times(true_s, detected_s, tolerance_s)),
    )


@dataclass(frozen=True)
class DetectorScore:
    episodes: int
    true_placements: int
    detected: int
    matched: int
    recall: float
    precision: float
    median_abs_error_s: float
    p95_abs_error_s: float
    max_abs_error_s: float
    review_share: float  # episodes whose detector count ≠ operator count
    per_group: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    # group → (recall, precision, review share)

    def lines(self) -> list[str]:
        out = [
            f"episodes {self.episodes}, true placements {self.true_placements}, "
            f"detected {self.detected}, matched {self.matched}",
            f"recall {self.recall:.2%}  precision {self.precision:.2%}  "
            f"|Δt| median {self.median_abs_error_s:.3f} s  p95 {self.p95_abs_error_s:.3f} s  "
            f"max {self.max_abs_error_s:.3f} s",
            f"sent to review (detector count ≠ operator's): {self.review_share:.1%} of episodes",
        ]
        for g, (r, p, s) in sorted(self.per_group.items()):
            out.append(f"  {g:<12} recall {r:.2%}  precision {p:.2%}  to review {s:.1%}")
        return out


def summarize(scores: Iterable[EpisodeScore]) -> DetectorScore:
    scores = list(scores)
    if not scores:
        raise ValueError("no episodes to score")
    n_true = sum(len(s.true_s) for s in scores)
    n_det = sum(len(s.detected_s) for s in scores)
    n_match = sum(len(s.pairs) for s in scores)
    errors = np.abs([e for s in scores for e in s.errors_s]) if n_match else np.array([np.nan])
    groups: dict[str, list[EpisodeScore]] = defaultdict(list)
    for s in scores:
        groups[s.group].append(s)
    per_group = {}
    for g, ss in groups.items():
        t = sum(len(s.true_s) for s in ss)
        d = sum(len(s.detected_s) for s in ss)
        m = sum(len(s.pairs) for s in ss)
        per_group[g] = (
            m / t if t else 1.0,
            m / d if d else 1.0,
            sum(s.to_review for s in ss) / len(ss),
        )
    return DetectorScore(
        episodes=len(scores),
        true_placements=n_true,
        detected=n_det,
        matched=n_match,
        recall=n_match / n_true if n_true else 1.0,
        precision=n_match / n_det if n_det else 1.0,
        median_abs_error_s=float(np.median(errors)),
        p95_abs_error_s=float(np.percentile(errors, 95)),
        max_abs_error_s=float(np.max(errors)),
        review_share=sum(s.to_review for s in scores) / len(scores),
        per_group=per_group,
    )
