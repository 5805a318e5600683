"""The episode's control loop, in parts that each own one job.

``loop.ControlLoop`` reads as pace → stop check → action step → deadline →
sample; the state each step needs lives with the part that owns it:

- ``schedule.Schedule``: the two tick grids (telemetry, action steps) on the
  cell's clock, and how a late loop resumes on a real-time clock;
- ``policy_calls.PolicyCalls``: the request in flight, its deadline on the
  wall clock, waiting for it on a virtual clock, lookahead, and when a
  velocity command must be halted;
- ``playback.ChunkPlayer``: the action chunk being played, the row it starts
  at, and the commands sent to the arm (each through the episode's
  ``proctor.station.envelope.Envelope``, which the loop builds for the cell) and the
  gripper;
- ``sampling.TelemetrySampler``: one telemetry row per sample, written
  through the named column slices of ``proctor.station.keys``;
- ``attribution``: whose doing an arm fault is — a contact during the
  policy's motion (``safety``) or the station's command, limits, realtime
  link or set-up (``system``) — from libfranka's error flags;
- ``finishing``: what the end of an episode leaves in the database and the
  artifact store (events — one ``envelope`` event per run of changed steps —,
  manifest with its ``envelope`` counts, summary).

Stopping the arm and homing belong to the runner (``EpisodeRunner._stop_arm_now``
and the operator's ``EpisodeRunner.home``): one place each.
"""
