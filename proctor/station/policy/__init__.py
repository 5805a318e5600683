"""The policy protocol: how the station talks to policy servers.

WebSocket + msgpack with numpy arrays (the openpi wire format), the server's
metadata message on connect, then request/response ``infer(observation) →
{"actions": (H, D)}``. Two dialects of it: plain openpi (DROID observation
keys), and RoboArena (metadata declares cameras, image size, action space;
requests carry ``endpoint`` and a session id). And a third wire,
Positronic's v1 (``positronic.py``): status frames then ``ready`` on
connect, its own observation keys, replies as timed waypoints of robot
commands. No pickle anywhere.

Each wire is one module in ``dialects/`` behind a registry keyed by name:
nothing outside it compares dialect names (``proctor/station/README.md``,
"Wire dialects").
"""
