"""The policy protocol: how the station talks to policy servers.

WebSocket + msgpack with numpy arrays (the openpi wire format), the server's
metadata message on connect, then request/response ``infer(observation) →
{"actions": (H, D)}``. Two dialects: plain openpi (DROID observation keys),
and RoboArena (metadata declares cameras, image size, action space; requests
carry ``endpoint`` and a session id). No pickle anywhere.
"""
