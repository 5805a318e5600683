"""Where the station's work comes from.

The episode runner takes each rollout's work (``proctor.core.work.Work``)
from a ``WorkSource``. This module provides the ad-hoc source behind
``proctor station episode`` (and a daemon run with ``[work] source =
"adhoc"``) and the loader that plugs in any other by a config string (the
scheduler's campaign allocation, the station API's remote source).
"""

from __future__ import annotations

import importlib
import logging
import secrets
from dataclasses import replace
from typing import Any

from proctor.core.domain import Outcome
from proctor.core.errors import ConfigError, FieldError
from proctor.core.work import Work, WorkSource

log = logging.getLogger(__name__)


def new_run_code() -> str:
    """An ad-hoc run code: ``X-`` and six random characters (no meaning)."""
    alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no look-alikes (0/O, 1/I)
    return "X-" + "".join(secrets.choice(alphabet) for _ in range(6))


class AdHocWorkSource:
    """The same work ``repeat`` times (seeds ``seed``, ``seed + 1``, …), then nothing.

    Used by ``proctor station episode`` and by a daemon configured with
    ``[work] source = "adhoc"``; each claim gets a fresh ad-hoc run code.
    """

    def __init__(self, template: Work, repeat: int = 1) -> None:
        if repeat < 1:
            raise FieldError("repeat", f"must be at least 1, got {repeat}")
        self._template = template
        self._left = repeat
        self._seed = template.sim_seed
        self.completed_runs: list[tuple[str, Outcome]] = []
        self.abandoned_runs: list[str] = []

    def claim(self) -> Work | None:
        if self._left <= 0:
            return None
        self._left -= 1
        work = replace(self._template, run_code=new_run_code(), sim_seed=self._seed)
        if self._seed is not None:
            self._seed += 1
        return work

    def completed(self, work: Work, *, episode_uid: str, outcome: Outcome) -> None:
        self.completed_runs.append((episode_uid, outcome))

    def abandoned(self, work: Work, *, reason: str) -> None:
        self.abandoned_runs.append(reason)


# modules that provided a work source under another name: a station config
# written before the rename names the old one
RENAMED_SOURCES = {"proctor.scheduler.work_source": "proctor.scheduler.campaign_work_source"}


def load_work_source(spec: str, options: dict[str, Any]) -> WorkSource:
    """Build a work source from ``module:factory`` (called with ``**options``).

    The daemon's config names its source this way, so the scheduler's
    campaign-backed source plugs in without the station importing it.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"work.source: '{spec}' must look like 'package.module:factory'")
    if module_name in RENAMED_SOURCES:
        # a config written before the rename still starts its station, and says so
        new = RENAMED_SOURCES[module_name]
        log.warning("work.source: %s is now %s; update the station's config", module_name, new)
        module_name = new
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"work.source: cannot import {module_name}: {exc}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise ConfigError(f"work.source: {module_name} has no '{attr}'")
    source = factory(**options)
    if not isinstance(source, WorkSource):
        raise ConfigError(f"work.source: {spec} did not return a WorkSource")
    return source
