"""The LeRobot server (proctor/runner/servers/lerobot_server.py), started as
``Lerobot.launch`` says with the runner's own LeRobot environment, serving
real checkpoints saved by LeRobot: the station's policy client and
openpi_client 0.1.2 (from the package index, its own environment) both get
action chunks over a real socket."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from proctor.policywire.client import PolicyClient, PolicyError
from proctor.policywire.wire.spec import ActionSpace
from tests.runner.conftest import Started, lerobot_manifest
from tests.runner.openpi_support import openpi_observation
from tests.station.conftest import ROOT

OPENPI_PYTHON = ROOT / ".venv-openpi" / "bin" / "python"
ACTION_MEAN = 100.0  # make_checkpoints.ACTION_MEAN: the ACT checkpoint's action stats


@pytest.mark.parametrize(
    ("kind", "space", "chunk"),
    [("act", "joint_position", 6), ("diffusion", "joint_velocity", 5)],
)
def test_the_station_client_gets_action_chunks_from_a_lerobot_checkpoint(
    lerobot_server: Callable[..., Started], kind: str, space: str, chunk: int
) -> None:
    server = lerobot_server(lerobot_manifest(kind, space, chunk))
    client = PolicyClient(server.url, connect_timeout_s=30.0)
    try:
        info = client.connect()
        assert info.action_space == ActionSpace(space)
        replies = [client.infer(openpi_observation(seed), timeout_s=120.0) for seed in range(3)]
    finally:
        client.close()
    for reply in replies:
        assert reply.actions.shape == (chunk, 8)
        assert np.all(np.isfinite(reply.actions))
    log = server.log_text()
    if kind == "act":
        # its saved post-processor unnormalised the actions around the stats' mean
        assert "processors: saved" in log
        assert np.all(np.abs(replies[0].actions - ACTION_MEAN) < 50), replies[0].actions
    else:
        assert "identity normalisation" in log
        assert np.all(np.abs(replies[0].actions) < 50)


def test_a_bad_observation_is_answered_with_an_error_text_then_1011(
    lerobot_server: Callable[..., Started],
) -> None:
    server = lerobot_server(lerobot_manifest("act"))
    client = PolicyClient(server.url, connect_timeout_s=30.0)
    try:
        client.connect()
        bad = openpi_observation()
        del bad["observation/wrist_image_left"]
        with pytest.raises(PolicyError) as caught:
            client.infer(bad, timeout_s=60.0)
    finally:
        client.close()
    assert "error message" in str(caught.value)
    assert "observation/wrist_image_left" in server.log_text()


CLIENT = r"""
import json, sys
import numpy as np
from openpi_client import websocket_client_policy

client = websocket_client_policy.WebsocketClientPolicy(host=sys.argv[1])
meta = client.get_server_metadata()
rng = np.random.default_rng(0)
obs = {
    "observation/exterior_image_1_left": rng.integers(0, 255, (180, 320, 3), dtype=np.uint8),
    "observation/wrist_image_left": rng.integers(0, 255, (180, 320, 3), dtype=np.uint8),
    "observation/joint_position": np.zeros(7),
    "observation/gripper_position": np.zeros(1),
    "prompt": "put the items into the target bin",
}
result = client.infer(obs)
out = {
    "metadata": meta,
    "shape": list(result["actions"].shape),
    "dtype": str(result["actions"].dtype),
    "timing": sorted(result["server_timing"]),
}
del obs["observation/joint_position"]
try:
    client.infer(obs)
    out["error"] = None
except Exception as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def test_openpi_client_from_the_index_gets_actions(
    lerobot_server: Callable[..., Started], tmp_path: Path
) -> None:
    if not OPENPI_PYTHON.exists():
        pytest.fail(
            f"{OPENPI_PYTHON} is missing: `./run test` creates it "
            "(python3 -m venv .venv-openpi && .venv-openpi/bin/pip install openpi-client==0.1.2)",
            pytrace=False,
        )
    server = lerobot_server(lerobot_manifest("diffusion", "joint_velocity", 4))
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    done = subprocess.run(
        [str(OPENPI_PYTHON), str(script), server.url],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["metadata"] == {"action_space": "joint_velocity", "action_horizon": 4}
    assert out["shape"] == [4, 8] and out["dtype"] == "float32"
    assert out["timing"] == ["infer_ms"]
    # a failing request reaches openpi's client as openpi's own servers send it
    assert out["error"] is not None and "observation/joint_position" in out["error"]
