"""Release detector, candidate classifier, reconciliation, review queue."""
