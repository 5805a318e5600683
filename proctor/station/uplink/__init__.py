"""The station host's link to the server: the station API's client, the
ledger that holds every episode until the server confirms it, and the
forwarder that sends it (``README`` in ``proctor/station/README.md``)."""
