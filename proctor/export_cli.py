"""``proctor export``: the released dataset.

NOT YET BUILT: arrives with issue #8.
"""

from __future__ import annotations

from proctor.errors import NotAvailableYet


def export() -> None:
    """Write the interchange file plus per-episode video, telemetry and annotations."""
    raise NotAvailableYet("proctor export is not available yet (issue #8)")
