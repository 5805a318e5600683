"""Station tools run by hand, not by the daemon (``record_conformance``)."""
