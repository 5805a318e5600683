"""``proctor annotate``.

NOT YET BUILT: arrives with issue #7 (the annotator).
"""

from __future__ import annotations

from proctor.errors import NotAvailableYet


def annotate() -> None:
    """Run the release detector over recorded episodes."""
    raise NotAvailableYet("proctor annotate is not available yet (issue #7)")
