"""The real thing: a LeRobot checkpoint served by the runner's LeRobot server
in the sandbox (torch with no network, no /sys, a read-only root), reached
by the station's policy client through the relay."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from proctor.policywire.client import PolicyClient
from proctor.runner import readiness
from proctor.runner.envs import BuiltEnv
from proctor.runner.frameworks.lerobot import Lerobot
from proctor.runner.sandbox import start
from proctor.runner.sandbox.base import Limits, SandboxSpec
from proctor.runner.sandbox.relay import Relay
from tests.runner.conftest import lerobot_manifest
from tests.runner.openpi_support import openpi_observation
from tests.runner.sandbox.conftest import wait_for


def test_a_lerobot_checkpoint_answers_from_inside_the_sandbox(
    lerobot_env: BuiltEnv, checkpoints: Path, short_dir: Path
) -> None:
    launch = Lerobot().launch(lerobot_manifest("act"), 8000).fill(lerobot_env.path)
    spec = SandboxSpec(
        launch=launch,
        env_dir=lerobot_env.path,
        checkpoint_dir=checkpoints,
        work_dir=short_dir / "w",
        limits=Limits(memory_bytes=6 * 2**30, max_processes=256, cpu_seconds=600),
        env=dict(launch.env),
    )
    sandbox = start(spec)
    try:
        wait_for(
            lambda: readiness.is_ready("openpi", sandbox.wire_socket) or not sandbox.running(),
            timeout_s=300,
        )
        assert sandbox.running(), sandbox.diagnostics().output_tail
        with Relay(
            "127.0.0.1",
            0,
            sandbox.wire_socket,
            latency_budget_s=60,
            on_latency_exceeded=lambda s: None,
        ) as relay:
            client = PolicyClient(f"ws://127.0.0.1:{relay.port}", connect_timeout_s=30.0)
            try:
                client.connect()
                replies = [
                    client.infer(openpi_observation(seed), timeout_s=120.0) for seed in range(2)
                ]
            finally:
                client.close()
            assert relay.latencies and max(relay.latencies) < 60
    finally:
        diag = sandbox.stop()
    for reply in replies:
        assert reply.actions.shape == (6, 8) and np.all(np.isfinite(reply.actions))
    assert diag.memory_peak_bytes is not None and diag.memory_peak_bytes > 100 * 2**20
    assert diag.attempts == ()  # LeRobot offline tried no port of ours
    assert any("loaded a act policy" in line for line in diag.output_tail)
