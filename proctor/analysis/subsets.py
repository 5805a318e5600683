"""A leaderboard on a subset of the episodes: those under one level of a
scene factor (docs/methods.md, "Where a policy is weak").

A subset is a set of ``factor = value`` conditions, all of which an episode
must meet: ``tote_side``, ``camera_side`` and ``station`` compare the
episode's recorded value; ``object_tag`` keeps the episodes whose object
carries the tag. The filtered table is then scored by the same analysis with
the same protocol — every interval recomputed on the kept episodes, not cut
out of the full run's (a subset's bootstrap resamples its own episodes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from proctor.analysis.episodes import Episode, EpisodeTable

# a filter's name -> whether an episode meets ``name = value``
FILTERS: dict[str, Callable[[Episode, str], bool]] = {
    "tote_side": lambda e, v: e.tote_placement == v,
    "camera_side": lambda e, v: e.external_camera == v,
    "station": lambda e, v: e.station == v,
    "object_tag": lambda e, v: v in e.object_tags,
}
MAX_VALUE = 200


@dataclass(frozen=True)
class Subset:
    conditions: tuple[tuple[str, str], ...]  # sorted (factor, value) pairs

    @classmethod
    def of(cls, given: Mapping[str, str | None]) -> Subset:
        """From ``{factor: value}`` (None values are no condition); an unknown
        factor or an empty or over-long value is refused, naming it."""
        conditions = []
        for name, value in given.items():
            if value is None:
                continue
            if name not in FILTERS:
                raise ValueError(f"{name}: not a factor to filter by ({', '.join(FILTERS)})")
            if not value.strip() or len(value) > MAX_VALUE:
                raise ValueError(f"{name}: give a value of 1 to {MAX_VALUE} characters")
            conditions.append((name, value.strip()))
        return cls(tuple(sorted(conditions)))

    def __bool__(self) -> bool:
        return bool(self.conditions)

    def matches(self, e: Episode) -> bool:
        return all(FILTERS[name](e, value) for name, value in self.conditions)

    def describe(self) -> str:
        return ", ".join(f"{name} = {value}" for name, value in self.conditions)


def filter_table(table: EpisodeTable, subset: Subset) -> EpisodeTable:
    """The table's episodes that meet every condition (exclusions and notes
    kept, with one note saying what was filtered)."""
    kept = tuple(e for e in table.episodes if subset.matches(e))
    if not subset:
        return table
    note = (
        f"filtered to {subset.describe()}: {len(kept)} of {len(table.episodes)} episodes; "
        "every number recomputed on these"
    )
    return replace(table, episodes=kept, notes=(*table.notes, note))
