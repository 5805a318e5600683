"""What a server says a call cost it, read per call beside the station's own
round trip: openpi's ``server_timing`` and the validation every dialect's
timing goes through. (Positronic protocol 3's ``timing``:
``test_positronic_v3_field.py`` and ``test_positronic_interop.py``.)

The openpi server here is written from openpi's
``src/openpi/serving/websocket_policy_server.py``: metadata first, then per
request the policy's action map plus ``server_timing`` — ``infer_ms`` always,
``prev_total_ms`` (the previous cycle's receive-to-sent time) from the second
reply on. Its msgpack-numpy frames are packed here by hand, as
``openpi_client.msgpack_numpy`` writes them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

from proctor.core.domain import EndpointDialect
from proctor.policywire.client import PolicyClient
from proctor.policywire.dialects.base import MAX_SERVER_TIMING_MS, read_server_timing
from tests.station.conftest import posed_observation


def _pack_ndarray(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": obj.tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": list(obj.shape),
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    return obj


def _pack(message: Any) -> bytes:
    return msgpack.packb(message, default=_pack_ndarray, use_bin_type=True)


def _unpack_ndarray(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        return np.ndarray(buffer=obj[b"data"], dtype=np.dtype(obj[b"dtype"]), shape=obj[b"shape"])
    return obj


def _unpack(raw: bytes) -> Any:
    return msgpack.unpackb(raw, object_hook=_unpack_ndarray, strict_map_key=False)


class OpenpiTimingServer:
    """openpi's server loop, timing included; ``timing`` replaces what it reports."""

    def __init__(self) -> None:
        self.timing: Any = None  # None: openpi's own numbers
        self.requests = 0

    def handler(self, ws: ServerConnection) -> None:
        ws.send(_pack({"action_space": "joint_position"}))
        prev_total_ms: float | None = None
        while True:
            try:
                raw = ws.recv()
            except ConnectionClosed:
                return
            start = time.monotonic()
            obs = _unpack(raw)
            self.requests += 1
            t0 = time.monotonic()
            q = np.asarray(obs["observation/joint_position"], dtype=np.float64)
            actions = np.tile(np.concatenate([q, [0.0]]), (4, 1))
            infer_ms = (time.monotonic() - t0) * 1000
            reply: dict[str, Any] = {"actions": actions, "server_timing": {"infer_ms": infer_ms}}
            if prev_total_ms is not None:
                reply["server_timing"]["prev_total_ms"] = prev_total_ms
            if self.timing is not None:
                reply["server_timing"] = self.timing
            ws.send(_pack(reply))
            prev_total_ms = (time.monotonic() - start) * 1000


@pytest.fixture
def openpi_server() -> Iterator[tuple[str, OpenpiTimingServer]]:
    import threading

    policy = OpenpiTimingServer()
    with serve(policy.handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}", policy
        server.shutdown()
    thread.join(5)


def test_openpi_server_timing_is_read_per_call_beside_the_round_trip(
    openpi_server: tuple[str, OpenpiTimingServer],
) -> None:
    url, server = openpi_server
    client = PolicyClient(url, dialect=EndpointDialect.openpi)
    info = client.connect()
    first = client.infer(posed_observation(info), timeout_s=5)
    assert first.actions.shape == (4, 8)
    # the first reply has no previous cycle to report
    assert first.server_timing is not None and set(first.server_timing) == {"infer_ms"}
    assert 0 <= first.server_timing["infer_ms"] <= first.latency_s * 1000
    second = client.infer(posed_observation(info), timeout_s=5)
    assert second.server_timing is not None
    assert set(second.server_timing) == {"infer_ms", "prev_total_ms"}
    assert client.last_server_timing == second.server_timing
    # a timing map the server got wrong is no timing, never a refused reply
    server.timing = {"infer_ms": "fast", "prev_total_ms": -3.0, "gpu_ms": 5.0}
    third = client.infer(posed_observation(info), timeout_s=5)
    assert third.actions.shape == (4, 8) and third.server_timing is None
    assert client.last_server_timing is None
    server.timing = None
    fourth = client.infer(posed_observation(info), timeout_s=5)
    assert fourth.server_timing is not None and "infer_ms" in fourth.server_timing
    client.close()
    assert server.requests == 4


KNOWN = frozenset({"infer_ms", "served_ms"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"infer_ms": 12.5, "served_ms": 14}, {"infer_ms": 12.5, "served_ms": 14.0}),
        ({b"infer_ms": np.float32(3.0)}, {"infer_ms": 3.0}),  # msgpack bin keys, numpy scalars
        ({"infer_ms": 1.0, "gpu_ms": 2.0, "note": "x"}, {"infer_ms": 1.0}),  # unknown keys dropped
        ({"infer_ms": math.nan, "served_ms": 1.0}, {"served_ms": 1.0}),
        ({"infer_ms": math.inf}, None),
        ({"infer_ms": -0.5}, None),
        ({"infer_ms": MAX_SERVER_TIMING_MS + 1}, None),
        ({"infer_ms": True}, None),  # a bool is not a duration
        ({"infer_ms": "12"}, None),
        ({"infer_ms": [1.0]}, None),
        ({"infer_ms": 1 + 2j}, None),
        ([1.0, 2.0], None),
        ("infer_ms=3", None),
        (None, None),
        ({}, None),
    ],
)
def test_server_timing_is_validated_before_it_is_kept(value: Any, expected: Any) -> None:
    assert read_server_timing(value, KNOWN) == expected
