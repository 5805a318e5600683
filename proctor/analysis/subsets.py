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

# a filter's name -> the levels an episode has of it (an episode meets
# ``name = value`` when value is one of them)
LEVELS: dict[str, Callable[[Episode], tuple[str, ...]]] = {
    "tote_side": lambda e: (e.tote_placement,) if e.tote_placement else (),
    "camera_side": lambda e: (e.external_camera,) if e.external_camera else (),
    "station": lambda e: (e.station,) if e.station else (),
    "object_tag": lambda e: e.object_tags,
}
FILTERS = tuple(LEVELS)
# the single-factor filters the leaderboard page offers everyone (its filter
# form, docs/methods.md §14): each of their levels is scored with every
# snapshot (proctor.analysis.store), so an anonymous caller's filtered board
# is read, never computed on request
DOCUMENTED = ("tote_side", "camera_side", "object_tag")
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
        return all(value in LEVELS[name](e) for name, value in self.conditions)

    @property
    def documented_level(self) -> tuple[str, str] | None:
        """(factor, level) when this is one condition on a documented factor."""
        if len(self.conditions) == 1 and self.conditions[0][0] in DOCUMENTED:
            return self.conditions[0]
        return None

    def describe(self) -> str:
        return ", ".join(f"{name} = {value}" for name, value in self.conditions)


def levels(table: EpisodeTable, factors: tuple[str, ...] = FILTERS) -> dict[str, list[str]]:
    """Each factor's levels among the table's episodes, sorted."""
    return {name: sorted({v for e in table.episodes for v in LEVELS[name](e)}) for name in factors}


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
