"""The recording format, below the station and the server alike: the column
and event names (``keys``) and reading a recording back (``reader``)."""
