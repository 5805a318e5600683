"""Recorded data of episodes, served with the blinding rules: artifact bytes
by sha256 (with HTTP Range, for video seeking), per-camera frame tables and
downsampled telemetry for plotting. Used by the run explorer and the review
UI alike."""
