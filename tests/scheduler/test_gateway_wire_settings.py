"""Through the blinded gateway to an openpi server behind a URL path
(vLLM-Omni's ``/v1/realtime/robot/openpi``, written in
``tests/policywire/field_servers.py``): the gateway dials the path the
submission stored, and the claim's exterior numbering decides the key the
station's client sends."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from proctor.core.domain import EndpointDialect
from proctor.core.recording import keys
from proctor.policywire.client import PolicyClient
from proctor.policywire.observation import build_observation
from proctor.policywire.wire.proprio import Proprio
from proctor.scheduler import claims, service
from proctor.scheduler.gateway import gateway_url, station_headers
from proctor.scheduler.service import Actor
from tests.policywire.field_servers import EXT0, VLLM_PATH, FieldServer, vllm_handler
from tests.policywire.field_servers import field_server as field_server  # the fixture
from tests.scheduler import builders
from tests.scheduler.conftest import Gateway


def test_an_endpoint_behind_a_path_is_reached_through_the_gateway_with_its_numbering(
    gateway: Gateway, field_server: Callable[..., FieldServer]
) -> None:
    server = field_server(vllm_handler, path=VLLM_PATH)
    with gateway.db.session() as s:
        w = builders.world(s, 1, objects=("spoons",))
        for sub in w.submissions.values():
            sub.endpoint_url = server.url
            sub.endpoint_dialect = EndpointDialect.openpi
            sub.manifest = {**(sub.manifest or {}), "wire": {"exterior_numbering": 0}}
        c = service.create_campaign(
            s, protocol=builders.protocol(w, episodes_per_cell=1), actor=Actor(label="t")
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="t"))
        station, token = builders.enrolled_station(s)
        claim = claims.claim_next(s, campaign_id=c.id, station_id=station.id)
        assert claim is not None
    assert claim.exterior_numbering == 0
    assert VLLM_PATH not in repr(claim)  # the claim names a handle, not the endpoint
    client = PolicyClient(
        gateway_url(gateway.base, claim.endpoint_handle),
        dialect=claim.dialect,
        exterior_numbering=claim.exterior_numbering,
        headers=station_headers(token),
    )
    info = client.connect()
    try:
        frame = np.full((120, 160, 3), 200, np.uint8)
        obs = build_observation(
            info,
            proprio=Proprio(
                q=np.zeros(7), dq=np.zeros(7), ee_pose=np.r_[0.4, 0, 0.3, 1, 0, 0, 0], gripper=0.0
            ),
            images={keys.CAMERA_EXTERIOR: frame, keys.CAMERA_WRIST: frame},
            prompt="put the spoons in the bin",
        )
        reply = client.infer(obs, 5.0)
    finally:
        client.close()
    assert reply.actions.shape == (8, 8)
    assert server.seen and server.seen[-1]["shape"] == (180, 320, 3)
    assert EXT0 in server.seen[-1]["keys"]
