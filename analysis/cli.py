"""``proctor analyze`` and ``proctor power``.

NOT YET BUILT: arrives with issue #3 (the analysis engine).
"""

from __future__ import annotations

from proctor.errors import NotAvailableYet


def analyze() -> None:
    """Score policies from an interchange file (METHODS.md §8)."""
    raise NotAvailableYet("proctor analyze is not available yet (issue #3)")


def power() -> None:
    """How many episodes per cell a pair needs."""
    raise NotAvailableYet("proctor power is not available yet (issue #3)")
