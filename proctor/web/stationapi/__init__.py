"""The station API (``/api/station/v1``): what a station host calls, with its
own token, to register, claim runs, report episodes and upload artifacts.
The wire is ``proctor.core.station_api_wire``."""
