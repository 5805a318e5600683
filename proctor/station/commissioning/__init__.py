"""Commissioning a real cell: the measuring procedure (``procedure``) and the
measured-cell file it writes and the station reads at start (``cell_file``)."""
