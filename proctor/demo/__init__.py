"""``proctor demo``: the whole pipeline on the embedded defaults.

What a newcomer runs first, and the project's end-to-end proof: a SQLite
database and a local artifact folder, scripted demo policies and a reference
agent served over the real policy wire on loopback, a blinded campaign
on the simulated cell reached through the policy gateway, two simulated
stations claiming runs in parallel, the annotator, a clearly labelled
automatic reviewer, the leaderboard snapshots, and the site.

Two stand-ins are labelled wherever they leave a trace: the operator's log
is filled from the simulator's ground truth (``proctor.station.demo_log``) and
review decisions come from the same ground truth
(``proctor.annotator.autoreview``). Everything else is the production code path.

Modules: ``world`` (accounts, objects, policies, endpoint submissions with
their conformance checks), ``servers`` (policy servers, the web server),
``stations`` (the station worker processes), ``pipeline`` (annotate,
review, close, release, snapshots), ``report`` (the printed leaderboard),
``run`` (the orchestration); and ``simulated_episodes``, the annotator's
simulated corpus (``proctor calibrate`` and its acceptance tests): episodes
through the station's runner, linked to a campaign of their own, which the
station, blind to policies, may not make.
"""
