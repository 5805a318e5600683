"""``proctor demo``: the whole pipeline on the embedded defaults.

NOT YET BUILT: arrives with issue #8 (leaderboard, run explorer, demo).
"""

from __future__ import annotations

from proctor.errors import NotAvailableYet


def demo() -> None:
    """Run a blinded campaign on the simulated cell and serve the results."""
    raise NotAvailableYet("proctor demo is not available yet (issue #8)")
