"""The twin cell: the real drivers against simulators that speak the real
protocols (franky-sim, a simulated 2F-85 over a pty, RealSense playback).

Orchestration only — child processes and socat; the peers themselves live
under ``proctor/station/drivers/`` because they import hardware libraries.
"""
