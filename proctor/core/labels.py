"""Site and cell-profile labels: the rule a station's config, the campaign
protocol and the server's station API all check (one rule, below all three)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

# a site or cell profile: a short slug, so it reads the same in a URL, a file
# name, a TOML key and the leaderboard, and cannot smuggle markup or spaces
_LABEL = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def label_problem(value: object) -> str | None:
    """Why ``value`` is not a site or cell-profile label, or None if it is one."""
    if not isinstance(value, str) or not _LABEL.fullmatch(value):
        return (
            f"{value!r} must be 1-64 characters of lowercase letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return None


def _label(value: str) -> str:
    problem = label_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


CellLabel = Annotated[str, AfterValidator(_label)]
