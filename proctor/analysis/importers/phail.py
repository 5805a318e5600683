"""PhAIL's released episodes → the interchange file (docs/methods.md §8).

PhAIL (seeds/002: the paper) publishes its rollouts, its human baseline and
its teleoperation set as *Positronic datasets*, the on-disk format of
Positronic's own dataset library. This module reads that format and writes
one interchange row an episode, so ``proctor analyze`` scores PhAIL's cohort
with Proctor's methods (docs/methods.md, "Importing PhAIL's release").

What the layout rests on (read, not copied), in
Positronic-Robotics/positronic at commit ``a060cbeab9cdb73b75d757996cd8bf1606b3b4b7``
(2026-08-22) unless another commit is named:

* ``positronic/dataset/local_dataset.py`` (``LocalDataset``,
  ``DiskEpisode``, ``load_all_datasets``): a dataset is a folder of blocks
  ``{block:012d}/`` holding episode folders ``{episode:012d}/``; an episode
  folder holding ``.unfinished`` is skipped; its static items are one JSON
  object in ``static.json``, its system metadata ``meta.json`` (``uid``,
  ``created_ts_ns``, and ``duration_ns`` once the writer closed it); a
  folder's other (non-numeric) subfolders are datasets too, read
  recursively, and each folder's ``edits.jsonl`` applies to its whole
  subtree. An episode without a ``uid`` is ``ts-<created_ts_ns>``.
* ``positronic/dataset/edits.py``: ``edits.jsonl`` records
  ``{"op": "set_static"|"drop"|"undrop", "v": 1, "ep": uid, "data": {...}}``,
  applied in log order (last write per key wins, last drop/undrop wins); an
  unknown record is an error.
* ``positronic/dataset/episode.py``: static values are JSON, ``bytes``
  written as ``{"__bytes_b64__": ...}``.
* ``utilities/release_phail.py``: the public release is
  ``phail/v1.0/dataset/{rollouts,human,teleoperation}/``, written by
  ``migrate_dataset`` (static items materialized into ``static.json``);
  every rollout must carry ``model, eval.object, eval.successful_items,
  eval.total_items``; ``Success`` means all items; ``eval.total_items`` is
  never 0; an episode's duration is ``eval.duration``, else its
  ``duration_ns``.
* ``positronic/cfg/analysis.py``: ``phail_inference_release`` sets
  ``model`` to the policy server's type (``openpi``, ``groot``, ``act``,
  ``smolvla``) and ``variant`` to ``experiment:checkpoint``;
  ``phail_human_release`` sets ``model = "human"``, ``eval.outcome =
  "Success"``, 8 of 8 items; ``phail_teleop_release`` sets ``model =
  "teleop"`` and its item count from a grip heuristic.
* ``positronic/gui/eval.py`` at ``89e4e733c26c2bd9a6cf87674f2dcec09bb1ea33``
  (2026-03-31, during PhAIL's collection) and
  ``179f457775418aa847b77bef50a8096194df9e03`` (its last version, before it
  left the library): the operator console records ``eval.outcome`` (one of
  ``Success, Fail, Ran out of time, Safety, System``), ``eval.total_items``,
  ``eval.successful_items``, ``eval.duration`` (seconds from the operator's
  start to stop), ``eval.cap_per_item`` (30 s), ``eval.tote_placement``,
  ``eval.external_camera``, ``eval.notes``.

Second-hand corroboration only (not read here): a third-party research
note in the code index quotes the Hugging Face copy of the release
(``phail-anon/phail-v1.0`` at ``5bc590213c5d2615eefeb47bc23a700f8c57022a``)
with an episode at ``sample/inference/000000000000/000000000000/static.json``
holding ``model, variant, eval.object, eval.total_items,
eval.successful_items, eval.outcome, eval.duration, eval.cap_per_item``: the
layout and fields above, under a folder named ``inference/`` (the importer
does not depend on the folder names). The same note says that copy carries
JSON "annotation sidecars" and that the paper's table code counts Table 2's
intervention rate as ``Safety`` or ``Stalled`` episodes.

What could **not** be verified, and what this module assumes instead:

* **Placement times and lost/dropped counts.** No Positronic code defines
  where PhAIL's per-item annotations (App. E: "both label streams are
  released alongside the data") live in the release, nor a field for the
  items lost outside both bins that §4.2 says the operator records. They
  come from an *annotation source* (:class:`AnnotationSource`): a JSON Lines
  file in Proctor's own format (:class:`FileAnnotations`), or static items
  ``proctor.placements_s``, ``proctor.lost``, ``proctor.dropped`` that the
  holder adds through Positronic's own edit log (:class:`StaticAnnotations`).
  Converting the release's annotation files into either is left to the
  holder until their format is known.
* **Outcomes the console never offered.** The paper names
  ``Ran_out_of_time``; the paper's table code reportedly counts ``Stalled``
  episodes. Both are read (``OUTCOMES``); ``Fail`` and ``Stalled`` are the
  operator ending a working policy, so ``operator_stop`` (censored, §2).
* **The reference.** Table 2's "Human reference (teleop)" is read as the
  ``teleop`` set (default ``reference="teleop"``); the cohort counts (396
  in the paper, 449 teleoperation episodes in the release's own config, 40
  ``human`` episodes) do not reconcile, so which episodes the paper used is
  the holder's choice.
"""

from __future__ import annotations

import base64
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from proctor.analysis.episodes import (
    OPERATOR_STOP,
    RAN_OUT_OF_TIME,
    SAFETY,
    SUCCESS,
    SYSTEM,
    Episode,
    validate_episode,
)
from proctor.analysis.importers import InvalidRelease, ReleaseProblem
from proctor.core.errors import UsageError

SOURCE_REPO = "Positronic-Robotics/positronic"
SOURCE_COMMIT = "a060cbeab9cdb73b75d757996cd8bf1606b3b4b7"

STATIC_FILE = "static.json"
META_FILE = "meta.json"
EDITS_FILE = "edits.jsonl"
UNFINISHED = ".unfinished"
_BYTES_TAG = "__bytes_b64__"

# the operator's outcome label → Proctor's (docs/methods.md §1); the last two
# are spellings the paper and its table code use, not the console's
OUTCOMES: dict[str, str] = {
    "Success": SUCCESS,
    "Ran out of time": RAN_OUT_OF_TIME,
    "Fail": OPERATOR_STOP,
    "Safety": SAFETY,
    "System": SYSTEM,
    "Ran_out_of_time": RAN_OUT_OF_TIME,
    "Stalled": OPERATOR_STOP,
}
# the objects PhAIL's analysis keeps (positronic/cfg/analysis.py, TRAINED_OBJECTS):
# the release's teleoperation set also holds episodes of other tasks
TRAINED_OBJECTS = ("Towels", "Wooden spoons", "Scissors", "Batteries")
# the console's "not recorded" for the spatial configuration
_NOT_RECORDED = {"NA", "N/A", ""}
# the static items :class:`StaticAnnotations` reads
PLACEMENTS_KEY = "proctor.placements_s"
LOST_KEY = "proctor.lost"
DROPPED_KEY = "proctor.dropped"


@dataclass(frozen=True)
class RawEpisode:
    """One episode folder as the release holds it, its edits applied."""

    path: Path
    uid: str
    static: dict[str, Any]
    meta: dict[str, Any]

    @property
    def static_path(self) -> str:
        return str(self.path / STATIC_FILE)


@dataclass(frozen=True)
class Annotation:
    """What the release's counts and duration do not say: when each item
    was placed (seconds from the episode's start), and how many items were
    lost outside both bins or dropped in the workspace and left there."""

    placements_s: tuple[float, ...]
    lost: int
    dropped: int
    where: str


class AnnotationSource(Protocol):
    """Where the annotations come from: ``annotation(raw)`` is the
    episode's, or None with the problem recorded in ``problems``."""

    # the source's own problems (a malformed annotation file), found on reading
    problems: list[ReleaseProblem]

    def annotation(self, raw: RawEpisode, problems: list[ReleaseProblem]) -> Annotation | None: ...

    def notes(self, imported: set[str]) -> list[str]: ...


@dataclass(frozen=True)
class ImportResult:
    episodes: tuple[Episode, ...]
    notes: tuple[str, ...]


# -- the Positronic layout -------------------------------------------------------------------


def _is_numeric(p: Path) -> bool:
    return p.is_dir() and len(p.name) == 12 and p.name.isdigit()


def _decode(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and _BYTES_TAG in obj:
        return base64.b64decode(obj[_BYTES_TAG])
    return obj


def _json_object(path: Path, problems: list[ReleaseProblem]) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"), object_hook=_decode)
    except FileNotFoundError:
        problems.append(ReleaseProblem(str(path), "file", "missing"))
        return None
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(ReleaseProblem(str(path), "file", f"cannot read ({exc})"))
        return None
    except json.JSONDecodeError as exc:
        problems.append(
            ReleaseProblem(str(path), "file", f"not valid JSON ({exc.msg} at line {exc.lineno})")
        )
        return None
    if not isinstance(data, dict):
        problems.append(ReleaseProblem(str(path), "file", "must hold a JSON object"))
        return None
    return data


def _episode_folder(path: Path, problems: list[ReleaseProblem]) -> RawEpisode | None:
    static = _json_object(path / STATIC_FILE, problems)
    meta = _json_object(path / META_FILE, problems)
    if static is None or meta is None:
        return None
    uid = meta.get("uid")
    if uid is None and isinstance(meta.get("created_ts_ns"), int):
        # Positronic's rule for episodes recorded before uids were stamped
        uid = f"ts-{meta['created_ts_ns']}"
    if not isinstance(uid, str) or not uid:
        problems.append(
            ReleaseProblem(str(path / META_FILE), "uid", "missing (and no created_ts_ns)")
        )
        return None
    return RawEpisode(path=path, uid=uid, static=static, meta=meta)


def _own_episodes(directory: Path, problems: list[ReleaseProblem]) -> list[RawEpisode]:
    out: list[RawEpisode] = []
    for block in sorted((p for p in directory.iterdir() if _is_numeric(p)), key=lambda p: p.name):
        for folder in sorted((p for p in block.iterdir() if _is_numeric(p)), key=lambda p: p.name):
            if (folder / UNFINISHED).exists():
                continue
            ep = _episode_folder(folder, problems)
            if ep is not None:
                out.append(ep)
    return out


def _edit_log(
    directory: Path, problems: list[ReleaseProblem]
) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """The folder's ``edits.jsonl``: static items to merge per uid, and the
    uids dropped (log order; last write per key, last drop/undrop wins)."""
    path = directory / EDITS_FILE
    statics: dict[str, dict[str, Any]] = {}
    dropped: set[str] = set()
    if not path.exists():
        return statics, dropped
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(ReleaseProblem(str(path), "file", f"cannot read ({exc})"))
        return statics, dropped
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {n}"
        try:
            record = json.loads(line, object_hook=_decode)
        except json.JSONDecodeError as exc:
            problems.append(ReleaseProblem(where, "record", f"not valid JSON ({exc.msg})"))
            continue
        match record:
            case {"op": "set_static", "v": 1, "ep": str(uid), "data": dict(data)}:
                statics.setdefault(uid, {}).update(data)
            case {"op": "drop", "v": 1, "ep": str(uid)}:
                dropped.add(uid)
            case {"op": "undrop", "v": 1, "ep": str(uid)}:
                dropped.discard(uid)
            case _:
                problems.append(
                    ReleaseProblem(
                        where, "op", "not a set_static, drop or undrop record of version 1"
                    )
                )
    return statics, dropped


def _subtree(directory: Path, problems: list[ReleaseProblem]) -> list[RawEpisode]:
    """The folder's own episodes, then each nested dataset's, with the
    folder's edit log applied over all of them (as ``load_all_datasets``)."""
    members = _own_episodes(directory, problems)
    for sub in sorted(p for p in directory.iterdir() if p.is_dir() and not _is_numeric(p)):
        members += _subtree(sub, problems)
    statics, dropped = _edit_log(directory, problems)
    return [
        replace(ep, static={**ep.static, **statics[ep.uid]}) if ep.uid in statics else ep
        for ep in members
        if ep.uid not in dropped
    ]


def read_release(root: Path, problems: list[ReleaseProblem]) -> list[RawEpisode]:
    """Every finished episode under ``root`` (a dataset, or a folder of
    datasets such as the release's ``dataset/``), edits applied."""
    if not root.exists():
        raise UsageError(f"{root}: no such folder")
    if not root.is_dir():
        raise UsageError(f"{root}: not a folder (a PhAIL release is a folder of episode folders)")
    return _subtree(root, problems)


# -- the annotations -------------------------------------------------------------------------


def _count(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"expected a whole number ≥ 0, got {v!r}")
    return v


def _times(v: Any) -> tuple[float, ...]:
    if not isinstance(v, list):
        raise ValueError(f"expected a list of seconds, got {v!r}")
    out = []
    for k, x in enumerate(v, start=1):
        if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
            raise ValueError(f"item {k}: expected a finite number of seconds, got {x!r}")
        out.append(float(x))
    return tuple(out)


def _annotation(
    get: Callable[[str], Any],
    keys: tuple[str, str, str],
    where: str,
    problems: list[ReleaseProblem],
) -> Annotation | None:
    values: list[Any] = []
    for key, parse in zip(keys, (_times, _count, _count), strict=True):
        raw = get(key)
        if raw is None:
            problems.append(ReleaseProblem(where, key, "missing"))
            continue
        try:
            values.append(parse(raw))
        except ValueError as exc:
            problems.append(ReleaseProblem(where, key, str(exc)))
    if len(values) < 3:
        return None
    return Annotation(placements_s=values[0], lost=values[1], dropped=values[2], where=where)


class FileAnnotations:
    """Annotations from a JSON Lines file of Proctor's format, one object an
    episode: ``{"uid": ..., "placements_s": [s, ...], "lost": n,
    "dropped": n}``, times in seconds from the episode's start."""

    KEYS = ("placements_s", "lost", "dropped")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.by_uid: dict[str, Annotation] = {}
        self.problems: list[ReleaseProblem] = []
        self._read(self.problems)

    def _read(self, problems: list[ReleaseProblem]) -> None:
        if not self.path.is_file():
            raise UsageError(f"{self.path}: no such annotation file")
        first: dict[str, int] = {}
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"{self.path}: cannot read ({exc})") from None
        for n, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            where = f"{self.path} line {n}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(ReleaseProblem(where, "row", f"not valid JSON ({exc.msg})"))
                continue
            if not isinstance(row, dict):
                problems.append(ReleaseProblem(where, "row", "must be a JSON object"))
                continue
            uid = row.get("uid")
            if not isinstance(uid, str) or not uid:
                problems.append(ReleaseProblem(where, "uid", "missing"))
                continue
            if uid in first:
                problems.append(
                    ReleaseProblem(where, "uid", f"duplicate (first on line {first[uid]})")
                )
                continue
            first[uid] = n
            ann = _annotation(row.get, self.KEYS, where, problems)
            if ann is not None:
                self.by_uid[uid] = ann

    def annotation(self, raw: RawEpisode, problems: list[ReleaseProblem]) -> Annotation | None:
        found = self.by_uid.get(raw.uid)
        if found is None:
            problems.append(
                ReleaseProblem(
                    raw.static_path, "annotation", f"no row for uid {raw.uid!r} in {self.path}"
                )
            )
        return found

    def notes(self, imported: set[str]) -> list[str]:
        extra = sorted(set(self.by_uid) - imported)
        if not extra:
            return []
        return [
            f"{len(extra)} annotation(s) in {self.path} name no imported episode "
            f"(first: {extra[0]})"
        ]


class StaticAnnotations:
    """Annotations from each episode's own static items
    (``proctor.placements_s``, ``proctor.lost``, ``proctor.dropped``),
    which a holder adds with Positronic's edit log (``set_static``)."""

    KEYS = (PLACEMENTS_KEY, LOST_KEY, DROPPED_KEY)

    def __init__(self) -> None:
        self.problems: list[ReleaseProblem] = []

    def annotation(self, raw: RawEpisode, problems: list[ReleaseProblem]) -> Annotation | None:
        return _annotation(raw.static.get, self.KEYS, raw.static_path, problems)

    def notes(self, imported: set[str]) -> list[str]:
        return []


# -- one episode -----------------------------------------------------------------------------


def _str_field(raw: RawEpisode, key: str, problems: list[ReleaseProblem]) -> str | None:
    v = raw.static.get(key)
    if v is None:
        problems.append(ReleaseProblem(raw.static_path, key, "missing"))
        return None
    if not isinstance(v, str) or not v.strip():
        problems.append(ReleaseProblem(raw.static_path, key, f"expected a name, got {v!r}"))
        return None
    return v.strip()


def _int_field(raw: RawEpisode, key: str, least: int, problems: list[ReleaseProblem]) -> int | None:
    v = raw.static.get(key)
    if v is None:
        problems.append(ReleaseProblem(raw.static_path, key, "missing"))
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        problems.append(
            ReleaseProblem(raw.static_path, key, f"expected a whole number ≥ {least}, got {v!r}")
        )
        return None
    return v


def _positive(v: Any) -> float | None:
    """``v`` as a finite number > 0, or None."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        return None
    return float(v)


def _duration(raw: RawEpisode, problems: list[ReleaseProblem]) -> float | None:
    """``eval.duration`` (the operator's start to stop), else the recording's
    ``duration_ns`` (release_phail.py's rule)."""
    v = raw.static.get("eval.duration")
    if v is not None:
        seconds = _positive(v)
        if seconds is not None:
            return seconds
        problems.append(
            ReleaseProblem(raw.static_path, "eval.duration", f"expected seconds > 0, got {v!r}")
        )
        return None
    ns = _positive(raw.meta.get("duration_ns"))
    if ns is not None:
        return ns / 1e9
    problems.append(
        ReleaseProblem(
            raw.static_path,
            "eval.duration",
            f"missing, and {META_FILE} has no duration_ns > 0 to fall back on",
        )
    )
    return None


def _optional_name(raw: RawEpisode, key: str) -> str | None:
    v = raw.static.get(key)
    if not isinstance(v, str) or v.strip() in _NOT_RECORDED:
        return None
    return v.strip()


def _started_at(raw: RawEpisode) -> str | None:
    ns = raw.meta.get("created_ts_ns")
    if isinstance(ns, bool) or not isinstance(ns, int) or ns <= 0:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat()


def _budget(raw: RawEpisode, items: int, problems: list[ReleaseProblem]) -> float | None:
    cap = raw.static.get("eval.cap_per_item")
    if cap is None:
        return None
    seconds = _positive(cap)
    if seconds is None:
        problems.append(
            ReleaseProblem(
                raw.static_path, "eval.cap_per_item", f"expected seconds > 0, got {cap!r}"
            )
        )
        return None
    return seconds * items


def _outcome(raw: RawEpisode, problems: list[ReleaseProblem]) -> str | None:
    label = raw.static.get("eval.outcome")
    if label is None:
        problems.append(ReleaseProblem(raw.static_path, "eval.outcome", "missing"))
        return None
    found = OUTCOMES.get(label) if isinstance(label, str) else None
    if found is None:
        problems.append(
            ReleaseProblem(
                raw.static_path,
                "eval.outcome",
                f"unknown outcome {label!r} (expected one of {', '.join(OUTCOMES)})",
            )
        )
    return found


def convert(
    raw: RawEpisode, source: AnnotationSource, problems: list[ReleaseProblem]
) -> Episode | None:
    """One release episode as an interchange :class:`Episode` (policy = the
    release's ``model``; :func:`import_release` names variants apart), or
    None with its problems recorded."""
    start = len(problems)
    model = _str_field(raw, "model", problems)
    obj = _str_field(raw, "eval.object", problems)
    items = _int_field(raw, "eval.total_items", 1, problems)
    successes = _int_field(raw, "eval.successful_items", 0, problems)
    outcome = _outcome(raw, problems)
    duration = _duration(raw, problems)
    budget = _budget(raw, items or 0, problems)
    ann = source.annotation(raw, problems)
    if (
        len(problems) > start
        or model is None
        or obj is None
        or items is None
        or successes is None
        or outcome is None
        or duration is None
        or ann is None
    ):
        return None
    if outcome == SUCCESS and successes != items:
        problems.append(
            ReleaseProblem(
                raw.static_path,
                "eval.successful_items",
                f"outcome Success but {successes} of {items} items",
            )
        )
    if len(ann.placements_s) != successes:
        # the operator's count is the source of truth; the annotation only times it
        problems.append(
            ReleaseProblem(
                ann.where,
                "placements_s",
                f"{len(ann.placements_s)} placement time(s) but eval.successful_items is "
                f"{successes} ({raw.static_path})",
            )
        )
    ep = Episode(
        episode_id=raw.uid,
        policy=model,
        object=obj,
        items=items,
        duration_s=duration,
        placements_s=ann.placements_s,
        lost=ann.lost,
        dropped=ann.dropped,
        outcome=outcome,
        budget_s=budget,
        tote_placement=_optional_name(raw, "eval.tote_placement"),
        external_camera=_optional_name(raw, "eval.external_camera"),
        started_at=_started_at(raw),
    )
    problems.extend(
        ReleaseProblem(raw.static_path, p.field, p.reason) for p in validate_episode(ep)
    )
    return ep if len(problems) == start else None


# -- the whole release -----------------------------------------------------------------------


def _duplicates(raws: Iterable[RawEpisode]) -> Iterator[ReleaseProblem]:
    first: dict[str, Path] = {}
    for raw in raws:
        if raw.uid in first:
            yield ReleaseProblem(
                str(raw.path / META_FILE), "uid", f"{raw.uid!r} also names {first[raw.uid]}"
            )
        else:
            first[raw.uid] = raw.path


def _variant_names(
    raws: list[RawEpisode], episodes: list[Episode]
) -> tuple[list[Episode], list[str]]:
    """A model released with more than one ``variant`` (checkpoint) is
    several policies: name each ``model:variant`` rather than pool them."""
    variants: dict[str, set[str]] = defaultdict(set)
    for raw in raws:
        variants[str(raw.static.get("model"))].add(str(raw.static.get("variant") or ""))
    split = {m for m, vs in variants.items() if len(vs) > 1}
    if not split:
        return episodes, []
    renamed = [
        replace(ep, policy=f"{ep.policy}:{raw.static.get('variant') or '?'}")
        if ep.policy in split
        else ep
        for raw, ep in zip(raws, episodes, strict=True)
    ]
    notes = [
        f"model {m!r} has {len(variants[m])} variants; each is scored as its own policy "
        f"({', '.join(sorted(m + ':' + (v or '?') for v in variants[m]))})"
        for m in sorted(split)
    ]
    return renamed, notes


def _object_filter(
    raws: list[RawEpisode], objects: tuple[str, ...] | None
) -> tuple[list[RawEpisode], list[str]]:
    """The episodes of ``objects`` (None: all), and a note counting the rest
    by their ``eval.object``, as PhAIL's analysis keeps its trained objects."""
    if objects is None:
        return raws, []
    kept = [raw for raw in raws if raw.static.get("eval.object") in objects]
    left = Counter(str(raw.static.get("eval.object") or "(none)") for raw in raws)
    left.subtract(Counter(str(raw.static["eval.object"]) for raw in kept))
    others = sorted((o, n) for o, n in left.items() if n > 0)
    if not others:
        return kept, []
    return kept, [
        f"left out {sum(n for _, n in others)} episode(s) of other objects "
        f"({', '.join(f'{o} {n}' for o, n in others)}); --all-objects keeps them"
    ]


def import_release(
    root: Path,
    source: AnnotationSource,
    *,
    reference: str | None = "teleop",
    objects: tuple[str, ...] | None = TRAINED_OBJECTS,
) -> ImportResult:
    """Every episode under ``root`` of one of ``objects`` (None: every
    object) as interchange episodes; the episodes of policy ``reference`` are
    marked as the reference. Raises :class:`InvalidRelease` naming every
    problem (file and field)."""
    problems: list[ReleaseProblem] = list(source.problems)
    raws = read_release(root, problems)
    problems.extend(_duplicates(raws))
    if not raws and not problems:
        raise UsageError(
            f"{root}: no Positronic episodes (expected <dataset>/<12-digit block>/"
            f"<12-digit episode>/{STATIC_FILE}, in this folder or its subfolders)"
        )
    raws, notes = _object_filter(raws, objects)
    if not raws and not problems:
        raise UsageError(f"{root}: {notes[0]}")
    pairs = [(raw, convert(raw, source, problems)) for raw in raws]
    if problems:
        raise InvalidRelease(str(root), problems)
    episodes = [ep for _, ep in pairs if ep is not None]
    episodes, variant_notes = _variant_names(raws, episodes)
    notes += variant_notes
    notes += source.notes({raw.uid for raw in raws})
    if reference is not None:
        if any(ep.policy == reference for ep in episodes):
            episodes = [replace(ep, reference=ep.policy == reference) for ep in episodes]
        else:
            notes.append(
                f"no episodes of the reference {reference!r}: HRT needs one "
                "(import the teleoperation set too, or name another with --reference)"
            )
    counts = Counter(ep.policy for ep in episodes)
    notes.insert(
        0,
        f"{len(episodes)} episodes: " + ", ".join(f"{p} {n}" for p, n in sorted(counts.items())),
    )
    return ImportResult(episodes=tuple(episodes), notes=tuple(notes))
