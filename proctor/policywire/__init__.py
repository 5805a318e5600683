"""The policy wire: how a station talks to policy servers, as a layer of its own.

WebSocket + msgpack with numpy arrays (the openpi wire format), the server's
metadata message on connect, then request/response ``infer(observation) →
{"actions": (H, D)}``. Two dialects of it: plain openpi (DROID observation
keys), and RoboArena (metadata declares cameras, image size, action space;
requests carry ``endpoint`` and a session id). And a third wire,
Positronic's v1 (``dialects/positronic_v1.py``, its frames in
``dialects/positronic_frames.py``): status frames then ``ready`` on
connect, its own observation keys, replies as timed waypoints of robot
commands. No pickle anywhere.

Each wire has up to three faces, each behind a registry keyed by the wire's
name: the client face in ``dialects/``, the checks in
``conformance/dialects/``, the server in ``serving/dialects.py``
(``Dialect.faces`` names those it has): nothing outside them compares
dialect names (``proctor/station/README.md``,
"Wire dialects").

The layer sits between the kernel and the station (``docs/architecture.md``,
"Layers"): it imports only the kernel, so a runner host and the web's
conformance worker learn the protocol without importing the robot's package.
``wire/`` is the vocabulary (codec, keys, spec, units), ``dialects/`` the
registry of wires, ``handshake.py`` a server read through its dialect (so
the vocabulary never imports the dialects), ``client.py`` and
``observation.py`` what the station calls; ``serving/`` (servers for demos
and tests) and ``conformance/`` (the checks a submission's endpoint must
pass) sit on top, and nothing in the wire, the dialects or the client
imports them.
"""
