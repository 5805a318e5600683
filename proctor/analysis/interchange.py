"""The interchange file (docs/methods.md §8): CSV or JSON Lines, one episode a row.

Required columns: ``episode_id, policy, object, items, duration_s,
placements_s, lost, dropped, outcome``; optional: ``budget_s,
tote_placement, external_camera, station, site, started_at, reference`` and,
three extensions of §8, ``object_tags``, ``envelope_interventions`` (empty:
not counted) and ``policy_fault`` (the fault class of the policy's own doing
behind a system or charged ending, ``proctor.analysis.policy_faults``; empty:
none). Format 2 (``FORMAT``) adds ``block`` and ``sequence``, the
allocation's block and slot sequence of each episode, which pair episodes
by design (§10); a format-1 file (without them) still reads, and its
sequential verdicts pair in start order (the documented fallback). A
reader that predates a column ignores it with a note, so files with
``site`` (where the station stands) still read everywhere. In CSV,
``placements_s`` and ``object_tags`` are space-separated lists; in JSON
Lines they may be arrays.

Reading validates everything first and reports the problems, one line each
naming the line, the episode and the field (the first ``MAX_REPORTED``, then
a count of the rest); nothing is returned (or written) from a file with
problems. An empty file, a header in another separator and a folder are one
line each. The file is streamed, so a huge bad file costs little memory.
"""

from __future__ import annotations

import csv
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from proctor.analysis.episodes import Episode, EpisodeTable, resolve_reference, validate_episode
from proctor.core.errors import UsageError

REQUIRED = (
    "episode_id",
    "policy",
    "object",
    "items",
    "duration_s",
    "placements_s",
    "lost",
    "dropped",
    "outcome",
)
OPTIONAL = (
    "budget_s",
    "tote_placement",
    "external_camera",
    "station",
    "site",
    "started_at",
    "reference",
    "object_tags",
    "envelope_interventions",
    "policy_fault",
    "block",
    "sequence",
)
COLUMNS = REQUIRED + OPTIONAL
# format 2: block and sequence (docs/methods.md §8); format 1 lacks them
FORMAT = 2
MAX_REPORTED = 100
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


@dataclass(frozen=True)
class FileProblem:
    """One problem with one row: where, which episode, which field, why."""

    line: int
    episode_id: str | None
    field: str
    reason: str

    def format(self, path: str) -> str:
        who = f" (episode {self.episode_id})" if self.episode_id else ""
        return f"{path} line {self.line}{who}: {self.field}: {self.reason}"


class InvalidFile(UsageError):
    """A file with problems. ``lines`` holds one message per reported problem
    (at most ``MAX_REPORTED``, then one line counting the rest); ``total``
    counts them all."""

    def __init__(
        self, path: str, problems: Sequence[FileProblem], total: int | None = None
    ) -> None:
        self.path = path
        self.problems = list(problems[:MAX_REPORTED])
        self.total = len(problems) if total is None else total
        shown = [p.format(path) for p in self.problems]
        if self.total > len(shown):
            shown.append(f"{path}: … and {self.total - len(shown)} more problems")
        self.lines = shown
        super().__init__(f"{path}: {self.total} problem(s); first: {shown[0] if shown else ''}")


class _Problems:
    """The problems of one file: the first ``MAX_REPORTED`` kept, the rest
    only counted — a file of a million bad rows would otherwise hold a
    million objects to print a hundred lines (50 MB took 27 s and 485 MB)."""

    def __init__(self) -> None:
        self.kept: list[FileProblem] = []
        self.total = 0

    def append(self, problem: FileProblem) -> None:
        self.total += 1
        if len(self.kept) < MAX_REPORTED:
            self.kept.append(problem)

    def extend(self, problems: Iterator[FileProblem] | Sequence[FileProblem]) -> None:
        for p in problems:
            self.append(p)

    def __len__(self) -> int:
        return self.total

    def error(self, path: str) -> InvalidFile:
        return InvalidFile(path, self.kept, self.total)


# a header in one of these, read as comma-separated, is one long column name
_OTHER_SEPARATORS = {";": "';'", "\t": "tab", "|": "'|'"}


def _header_problem(raw: str, header: list[str]) -> str | None:
    """One reason for a header that cannot be the interchange header, or None
    (then each missing column is reported)."""
    if any(c in header for c in REQUIRED):
        return None
    for sep, name in _OTHER_SEPARATORS.items():
        if any(c.strip() in REQUIRED for c in raw.split(sep)):
            return (
                f"the header looks {name}-separated; the interchange CSV is "
                "comma-separated (docs/methods.md §8)"
            )
    return (
        f"no required column in the header (expected {', '.join(REQUIRED)}): "
        "is this an interchange file?"
    )


def _rows(
    fh: TextIO, suffix: str
) -> tuple[str, Iterator[tuple[int, dict[str, Any] | str]], list[str] | None, str]:
    """(format, iterator of (line, row-or-error), CSV header or None, the
    header's raw text), streaming ``fh`` (the whole text is never held)."""
    first = fh.readline()
    while first and not first.strip():
        first = fh.readline()
    if not first:
        raise _Empty
    fmt = (
        "csv"
        if suffix == ".csv"
        else "jsonl"
        if suffix in (".jsonl", ".ndjson", ".json")
        else ("jsonl" if first.lstrip().startswith("{") else "csv")
    )
    fh.seek(0)
    if fmt == "jsonl":

        def gen_jsonl() -> Iterator[tuple[int, dict[str, Any] | str]]:
            for k, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield k, f"not valid JSON ({exc.msg} at column {exc.colno})"
                    continue
                if not isinstance(row, dict):
                    yield k, "a JSON Lines row must be an object"
                    continue
                yield k, row

        return fmt, gen_jsonl(), None, first

    reader = csv.DictReader(fh)
    header = [h.strip() for h in (reader.fieldnames or [])]
    reader.fieldnames = header

    def gen_csv() -> Iterator[tuple[int, dict[str, Any] | str]]:
        for row in reader:
            if None in row:
                yield reader.line_num, f"more fields than the header's {len(header)}"
                continue
            yield reader.line_num, row

    return fmt, gen_csv(), header, first


class _Empty(Exception):
    """The file holds nothing but blank lines."""


def _text(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v).strip()
    return s or None


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer, got a boolean")
    if isinstance(v, int):
        return v
    s = str(v).strip()
    if not s:
        raise ValueError("is empty")
    try:
        return int(s)
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        raise ValueError(f"expected an integer, got {s!r}") from None
    if not math.isfinite(f) or f != int(f):
        raise ValueError(f"expected an integer, got {s!r}")
    return int(f)


def _float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(v, int | float):
        return float(v)
    s = str(v).strip()
    if not s:
        raise ValueError("is empty")
    try:
        f = float(s)
    except ValueError:
        raise ValueError(f"expected a number, got {s!r}") from None
    if not math.isfinite(f):
        raise ValueError(f"expected a finite number, got {s!r}")
    return f


def _floats(v: Any) -> tuple[float, ...]:
    if v is None:
        return ()
    items = v if isinstance(v, list) else str(v).replace(",", " ").split()
    out = []
    for k, x in enumerate(items, start=1):
        try:
            out.append(_float(x))
        except ValueError as exc:
            raise ValueError(f"item {k}: {exc}") from None
    return tuple(out)


def _words(v: Any) -> tuple[str, ...]:
    if v is None:
        return ()
    items = v if isinstance(v, list) else str(v).replace(",", " ").split()
    return tuple(sorted({str(x).strip() for x in items if str(x).strip()}))


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = "" if v is None else str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {v!r}")


def _episode(line: int, row: dict[str, Any], problems: _Problems) -> Episode | None:
    eid = _text(row.get("episode_id"))
    start = len(problems)

    def get(name: str, parse: Any, default: Any = None, required: bool = True) -> Any:
        raw = row.get(name)
        if raw is None or (isinstance(raw, str) and not raw.strip() and name != "placements_s"):
            if required:
                problems.append(FileProblem(line, eid, name, "missing"))
            return default
        try:
            return parse(raw)
        except ValueError as exc:
            problems.append(FileProblem(line, eid, name, str(exc)))
            return default

    values = {
        "episode_id": get("episode_id", lambda v: str(v).strip()),
        "policy": get("policy", lambda v: str(v).strip()),
        "object": get("object", lambda v: str(v).strip()),
        "items": get("items", _int),
        "duration_s": get("duration_s", _float),
        "placements_s": get("placements_s", _floats, ()),
        "lost": get("lost", _int),
        "dropped": get("dropped", _int),
        "outcome": get("outcome", lambda v: str(v).strip()),
        "budget_s": get("budget_s", _float, required=False),
        "tote_placement": get("tote_placement", _text, required=False),
        "external_camera": get("external_camera", _text, required=False),
        "station": get("station", _text, required=False),
        "started_at": get("started_at", _text, required=False),
        "reference": get("reference", _bool, False, required=False),
        "object_tags": get("object_tags", _words, (), required=False),
        "envelope_interventions": get("envelope_interventions", _int, required=False),
        "site": get("site", _text, required=False),
        "policy_fault": get("policy_fault", _text, required=False),
        "block": get("block", _int, required=False),
        "sequence": get("sequence", _int, required=False),
    }
    if len(problems) > start:
        return None
    ep = Episode(**values)
    problems.extend(FileProblem(line, eid, p.field, p.reason) for p in validate_episode(ep))
    return ep if len(problems) == start else None


def read_interchange(path: str | Path, *, reference: str | None = None) -> EpisodeTable:
    """Read and validate an interchange file; raises :class:`InvalidFile`
    listing the problems (the first ``MAX_REPORTED``, then a count), or
    UsageError for an unreadable, empty or misshapen file (one line)."""
    p = Path(path)
    shown = str(path)
    if p.is_dir():
        raise UsageError(f"{shown}: is a directory, not an interchange file")
    if not p.exists():
        raise UsageError(f"{shown}: no such file")
    if not p.is_file():
        raise UsageError(f"{shown}: not a regular file")
    try:
        # newline="": the csv module handles line ends (and quoted newlines)
        with p.open(encoding="utf-8-sig", newline="") as fh:
            return _read(fh, p.suffix.lower(), shown, reference)
    except _Empty:
        raise UsageError(f"{shown}: empty file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{shown}: not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise UsageError(f"{shown}: cannot read ({exc.strerror or exc})") from None


def _read(fh: TextIO, suffix: str, shown: str, reference: str | None) -> EpisodeTable:
    fmt, rows, header, raw_header = _rows(fh, suffix)
    problems = _Problems()
    notes: list[str] = []
    if header is not None:
        reason = _header_problem(raw_header, header)
        if reason is not None:
            raise UsageError(f"{shown} line 1: {reason}")
        missing = [c for c in REQUIRED if c not in header]
        for c in missing:
            problems.append(FileProblem(1, None, c, "required column missing from the header"))
        unknown = [c for c in header if c and c not in COLUMNS]
        if unknown:
            notes.append(f"ignored unknown columns: {', '.join(unknown)}")
        if missing:
            raise problems.error(shown)
    episodes: list[Episode] = []
    first_line: dict[str, int] = {}
    unknown_keys: set[str] = set()
    for line, row in rows:
        if isinstance(row, str):
            problems.append(FileProblem(line, None, "row", row))
            continue
        if header is None:
            unknown_keys.update(k for k in row if k not in COLUMNS)
        eid = _text(row.get("episode_id"))
        if eid is not None and eid in first_line:
            problems.append(
                FileProblem(line, eid, "episode_id", f"duplicate (first on line {first_line[eid]})")
            )
            continue
        if eid is not None:
            first_line[eid] = line
        ep = _episode(line, row, problems)
        # once the file has a problem nothing is returned: stop keeping rows
        if ep is not None and not problems:
            episodes.append(ep)
    if unknown_keys:
        notes.append(f"ignored unknown fields: {', '.join(sorted(unknown_keys))}")
    if not problems and not episodes:
        problems.append(FileProblem(1, None, "file", f"no episodes in this {fmt.upper()} file"))
    if not problems:
        try:
            ref = resolve_reference(episodes, reference)
        except ValueError as exc:
            field, _, reason = str(exc).partition(": ")
            problems.append(FileProblem(1, None, field, reason))
    if problems:
        raise problems.error(shown)
    return EpisodeTable(episodes=tuple(episodes), reference=ref, notes=tuple(notes))


def _row(ep: Episode) -> dict[str, Any]:
    return {
        "episode_id": ep.episode_id,
        "policy": ep.policy,
        "object": ep.object,
        "items": ep.items,
        "duration_s": ep.duration_s,
        "placements_s": list(ep.placements_s),
        "lost": ep.lost,
        "dropped": ep.dropped,
        "outcome": ep.outcome,
        "budget_s": ep.budget_s,
        "tote_placement": ep.tote_placement,
        "external_camera": ep.external_camera,
        "station": ep.station,
        "started_at": ep.started_at,
        "reference": ep.reference,
        "object_tags": list(ep.object_tags),
        "envelope_interventions": ep.envelope_interventions,
        "site": ep.site,
        "policy_fault": ep.policy_fault,
        "block": ep.block,
        "sequence": ep.sequence,
    }


def _umask() -> int:
    """The process umask, without changing it where the kernel tells (Linux):
    setting it to read it back would, for a moment, let another thread
    create a world-writable file."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | Path, write: Callable[[TextIO], None]) -> None:
    """Create ``path`` through ``write(fh)`` into a temporary file beside it,
    then rename it in: readers see the old file or the whole new one.

    The file gets the mode a plain ``open`` would give (0666 minus the
    umask); ``mkstemp`` alone makes it 0600 whatever the user asked for."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent or ".")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            write(fh)
        Path(tmp).replace(p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_interchange(episodes: Sequence[Episode], path: str | Path) -> None:
    """Write episodes as CSV (``.csv``) or JSON Lines (anything else),
    atomically (a temporary file renamed into place)."""
    p = Path(path)
    fmt = "csv" if p.suffix.lower() == ".csv" else "jsonl"

    def write(fh: TextIO) -> None:
        if fmt == "jsonl":
            for ep in episodes:
                fh.write(json.dumps(_row(ep)) + "\n")
            return
        w = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        w.writeheader()
        for ep in episodes:
            r = _row(ep)
            r["placements_s"] = " ".join(repr(float(x)) for x in ep.placements_s)
            r["object_tags"] = " ".join(ep.object_tags)
            r["reference"] = "true" if ep.reference else "false"
            w.writerow({k: "" if v is None else v for k, v in r.items()})

    write_text_atomic(p, write)
