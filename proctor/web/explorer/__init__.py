"""The run explorer: one episode's exterior and wrist video in sync, its
telemetry under them with a shared cursor, placement events and detector
candidates as markers (click to seek, frame-accurate), the operator log and
review history, and a ``.rrd`` for the Rerun viewer built from the
recording (``proctor.web.explorer.rrd``)."""
