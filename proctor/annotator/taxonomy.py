"""The behavioural failure-mode taxonomy: one small TOML file.

``proctor/annotator/failure_modes.toml`` lists the modes a reviewer can tag a
failed or slow operation with (a key, a label, a one-line description and,
where telemetry makes the mode evident, the proposal rule that suggests it).
The file is meant to be edited; the loader refuses anything ambiguous (a
duplicate or malformed key, a missing label) and names the field.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proctor.core.errors import ConfigError

DEFAULT_PATH = Path(__file__).with_name("failure_modes.toml")
FORMAT = "proctor.annotator.failure_modes/1"
_KEY = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class FailureMode:
    key: str
    label: str
    description: str = ""
    proposed_from: str = ""  # a proposal rule's name, or "" (reviewers only)


@dataclass(frozen=True)
class Taxonomy:
    modes: tuple[FailureMode, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(m.key for m in self.modes)

    def get(self, key: str) -> FailureMode | None:
        return next((m for m in self.modes if m.key == key), None)

    def label(self, key: str) -> str:
        mode = self.get(key)
        return mode.label if mode is not None else f"{key} (retired)"

    def for_rule(self, rule: str) -> FailureMode | None:
        return next((m for m in self.modes if m.proposed_from == rule), None)


def _text(entry: dict[str, Any], name: str, where: str, *, required: bool) -> str:
    value = entry.get(name, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise ConfigError(f"{where}.{name}: expected {'non-empty ' if required else ''}text")
    return value.strip()


def parse_taxonomy(data: dict[str, Any], *, where: str = "taxonomy") -> Taxonomy:
    if data.get("format", FORMAT) != FORMAT:
        raise ConfigError(f"{where}.format: expected {FORMAT!r}, got {data.get('format')!r}")
    entries = data.get("mode")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}.mode: expected a non-empty array of tables")
    modes: list[FailureMode] = []
    for i, entry in enumerate(entries):
        at = f"{where}.mode[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: expected a table")
        unknown = set(entry) - {"key", "label", "description", "proposed_from"}
        if unknown:
            raise ConfigError(f"{at}: unknown field(s) {', '.join(sorted(unknown))}")
        key = _text(entry, "key", at, required=True)
        if not _KEY.match(key):
            raise ConfigError(f"{at}.key: {key!r} is not a lower-case identifier (≤ 32 chars)")
        if any(m.key == key for m in modes):
            raise ConfigError(f"{at}.key: {key!r} is listed twice")
        modes.append(
            FailureMode(
                key=key,
                label=_text(entry, "label", at, required=True),
                description=_text(entry, "description", at, required=False),
                proposed_from=_text(entry, "proposed_from", at, required=False),
            )
        )
    return Taxonomy(tuple(modes))


def load_taxonomy(path: Path | None = None) -> Taxonomy:
    """The taxonomy file (default: the one shipped with the code)."""
    path = Path(path) if path is not None else DEFAULT_PATH
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"failure-mode taxonomy {path}: not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"failure-mode taxonomy {path}: invalid TOML: {exc}") from None
    return parse_taxonomy(data, where=str(path))
