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
  through the named column slices of ``proctor.core.recording.keys``;
- ``attribution``: whose doing an arm fault is — a contact during the
  policy's motion (``safety``) or the station's command, limits, realtime
  link or set-up (``system``) — from the controller's error flags, read
  through the arm's own table (``Arm.fault_flag_causes``);
- ``commands``: an action row → the arm's and the gripper's commands (the
  action space → arm command kind mapping), and ``observe``: the arm's and
  the gripper's states → the plain-data ``Proprio`` the wire encodes;
- ``finishing``: what the end of an episode leaves in the database and the
  artifact store (events — one ``envelope`` event per run of changed steps —,
  manifest with its ``envelope`` counts, summary).

- ``stop_latch.StopLatch``: the stop event, stopping the arm and the ending
  a stop requests; the runner owns it (stops come in on other threads) and
  hands it to the loop.

Homing belongs to the runner (the operator's ``EpisodeRunner.home``);
stopping the arm to the ``StopLatch``: one place each.
"""
