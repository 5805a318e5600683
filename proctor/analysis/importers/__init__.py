"""Importers: other benchmarks' released episodes → the interchange file
(docs/methods.md §8), so that ``proctor analyze`` scores them.

*Impure* (they read folders and files): one module a source
(``phail.py``), each with its command ``proctor import NAME …``
(``proctor/analysis/importers/cli.py``). An importer validates everything
first and raises :class:`InvalidRelease` listing every problem, each naming
the file and the field; nothing is written from a release with problems.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proctor.core.errors import UsageError

MAX_REPORTED = 100


@dataclass(frozen=True)
class ReleaseProblem:
    """One problem: the file it is in, the field, why."""

    path: str
    field: str
    reason: str

    def format(self) -> str:
        return f"{self.path}: {self.field}: {self.reason}"


class InvalidRelease(UsageError):
    """A release folder with problems. ``lines`` holds one message per
    problem (the first ``MAX_REPORTED``, then one line counting the rest)."""

    def __init__(self, root: str, problems: Sequence[ReleaseProblem]) -> None:
        self.problems = list(problems)
        shown = [p.format() for p in self.problems[:MAX_REPORTED]]
        if len(self.problems) > len(shown):
            shown.append(f"{root}: … and {len(self.problems) - len(shown)} more problems")
        self.lines = shown
        super().__init__(f"{root}: {len(self.problems)} problem(s); first: {shown[0]}")
