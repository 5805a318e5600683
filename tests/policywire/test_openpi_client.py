"""Wire compatibility with the policy client field users already have:
``openpi-client`` 0.1.2 from PyPI, in its own environment (it pins numpy<2),
talking to ``proctor policy serve-demo`` over a real socket."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.policy_servers import ROOT

OPENPI_PYTHON = ROOT / ".venv-openpi" / "bin" / "python"

CLIENT = r"""
import json, sys
import numpy as np
from openpi_client import websocket_client_policy

url = sys.argv[1]
client = websocket_client_policy.WebsocketClientPolicy(host=url)
meta = client.get_server_metadata()
obs = {
    "observation/exterior_image_1_left": np.zeros((224, 224, 3), dtype=np.uint8),
    "observation/wrist_image_left": np.zeros((224, 224, 3), dtype=np.uint8),
    "observation/joint_position": np.zeros(7),
    "observation/cartesian_position": np.array([0.31, 0.0, 0.43, np.pi, 0.0, 0.0]),
    "observation/gripper_position": np.zeros(1),
    "prompt": "put the towels into the target bin",
    # the simulated cell's privileged keys, which the demo policies read
    "sim/items": np.array([[0.5, -0.23, 0.015, 0.0]]),
    "sim/source_bin": np.array([0.5, -0.23, 0.15, 0.12]),
    "sim/target_bin": np.array([0.5, 0.23, 0.15, 0.12]),
    "sim/bin_height": np.array([0.08]),
    "sim/seed": np.array([1]),
    "sim/t": np.array([0.0]),
}
out = {"metadata": {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in meta.items()}}
result = client.infer(obs)
actions = result["actions"]
out["shape"] = list(actions.shape)
out["dtype"] = str(actions.dtype)
out["first"] = actions[0].tolist()
del obs["sim/items"]
try:
    client.infer(obs)
    out["error"] = None
except RuntimeError as exc:
    out["error"] = str(exc)
print(json.dumps(out))
"""


def test_openpi_client_from_pypi_talks_to_the_demo_server(serve_demo, tmp_path: Path) -> None:
    if not OPENPI_PYTHON.exists():
        pytest.fail(
            f"{OPENPI_PYTHON} is missing: `./run test` creates it "
            "(python3 -m venv .venv-openpi && .venv-openpi/bin/pip install openpi-client==0.1.2)",
            pytrace=False,
        )
    url = serve_demo("reference")
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    done = subprocess.run(
        [str(OPENPI_PYTHON), str(script), url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["metadata"]["action_space"] == "cartesian_position"
    assert out["metadata"]["needs_session_id"] is True
    # the reference agent answers with 4 Cartesian targets + gripper, pointing down
    assert out["shape"] == [4, 7] and out["dtype"] == "float64"
    x, y, z, roll, pitch, yaw, grip = out["first"]
    assert yaw == 0.0
    assert abs(roll - 3.14159) < 1e-3 and pitch == 0.0 and grip == 0.0
    assert 0.3 <= x <= 0.6 and -0.3 <= y <= 0.05 and 0.0 < z < 0.5
    # a server-side error reaches the openpi client the way openpi servers send it
    assert out["error"] is not None and "privileged observation keys" in out["error"]
